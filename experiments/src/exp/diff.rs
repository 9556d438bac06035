//! `ccp-exp diff`: one scenario's runs before and after a change, side by side, as the
//! table an algorithm change is judged by (docs/results.md, "Regression grid"). Pure: the
//! summaries in, markdown out.

use std::collections::BTreeMap;
use std::fmt::Write;

use super::metrics;
use super::plan::Kind;
use super::report;
use super::runner::{self, RunSummary, Status};

/// The measures of one side, by name, in the order they are first produced.
type Measures = Vec<(String, String)>;

fn ok(runs: &[RunSummary]) -> Vec<&RunSummary> {
    runs.iter().filter(|r| r.status == Status::Ok).collect()
}

fn fmt3(x: f64) -> String {
    format!("{x:.3}")
}

fn mean(xs: &[f64]) -> f64 {
    xs.iter().sum::<f64>() / xs.len().max(1) as f64
}

/// Every value, in repetition order, then their mean: "0.91 0.88 (0.895)".
fn values_and_mean(xs: &[f64]) -> String {
    let each: Vec<String> = xs.iter().map(|x| fmt3(*x)).collect();
    if xs.len() > 1 {
        format!("{} (mean {})", each.join(" "), fmt3(mean(xs)))
    } else {
        each.join(" ")
    }
}

/// Primary-ratio and harm plans: per primary/competitor pair, the ratio's mean, median and
/// minimum, how many runs cut the primary by 20 % or more, and the mean ratio at each RTT.
fn pair_measures(runs: &[RunSummary]) -> Measures {
    let rtt_of: BTreeMap<&str, u64> = runs
        .iter()
        .map(|r| (r.spec.id.as_str(), r.spec.rtt_ms))
        .collect();
    let mut out = Measures::new();
    for (pair, s) in report::pairs(runs) {
        let ratios: Vec<f64> = s.points.iter().map(|p| p.ratio).collect();
        let min = ratios.iter().copied().fold(f64::INFINITY, f64::min);
        out.push((
            format!("{pair}: ratio mean / median / min"),
            format!(
                "{} / {} / {}",
                fmt3(mean(&ratios)),
                s.median_ratio.map(fmt3).unwrap_or_default(),
                fmt3(min)
            ),
        ));
        let cut = ratios.iter().filter(|r| **r <= 0.8).count();
        out.push((
            format!("{pair}: cut by 20 % or more"),
            format!("{cut} of {}", ratios.len()),
        ));
        let mut by_rtt: BTreeMap<u64, Vec<f64>> = BTreeMap::new();
        for p in &s.points {
            if let Some(rtt) = rtt_of.get(p.run.as_str()) {
                by_rtt.entry(*rtt).or_default().push(p.ratio);
            }
        }
        let rtts: Vec<String> = by_rtt.keys().map(|r| r.to_string()).collect();
        let means: Vec<String> = by_rtt.values().map(|v| fmt3(mean(v))).collect();
        out.push((
            format!("{pair}: mean ratio at {} ms", rtts.join(" / ")),
            means.join(" / "),
        ));
    }
    out
}

/// Fairness plans: Jain's index of every run of each algorithm and flow count.
fn fairness_measures(runs: &[RunSummary]) -> Measures {
    let mut by: BTreeMap<(String, usize), Vec<(u32, f64)>> = BTreeMap::new();
    for r in ok(runs) {
        let xs: Vec<f64> = r.flows.iter().map(|f| f.throughput_bps).collect();
        if let (Some(f), Some(j)) = (r.flows.first(), metrics::jain(&xs)) {
            by.entry((f.cc.clone(), xs.len()))
                .or_default()
                .push((r.spec.repeat, j));
        }
    }
    by.into_iter()
        .map(|((cc, n), mut v)| {
            v.sort_by_key(|(rep, _)| *rep);
            let js: Vec<f64> = v.into_iter().map(|(_, j)| j).collect();
            (format!("{cc}: Jain, n = {n}"), values_and_mean(&js))
        })
        .collect()
}

/// Single-flow plans: utilization and p95 inflation ratio of every run of each algorithm at
/// each buffer (or random loss rate, when the plan sweeps it).
fn single_flow_measures(runs: &[RunSummary]) -> Measures {
    let sweeps_loss = {
        let first = runs.first().map(|r| r.spec.uplink_loss);
        runs.iter().any(|r| Some(r.spec.uplink_loss) != first)
    };
    type Key = (String, u64);
    let mut util: BTreeMap<Key, Vec<(u32, f64)>> = BTreeMap::new();
    let mut infl: BTreeMap<Key, Vec<(u32, f64)>> = BTreeMap::new();
    for r in ok(runs) {
        let (Some(f), Some(l)) = (r.flows.first(), r.link.as_ref()) else {
            continue;
        };
        // Loss in units of 0.01 % keeps the key an integer that sorts.
        let x = if sweeps_loss {
            (r.spec.uplink_loss * 1e4).round() as u64
        } else {
            r.spec.buffer_bytes
        };
        let key = (f.cc.clone(), x);
        util.entry(key.clone())
            .or_default()
            .push((r.spec.repeat, l.utilization));
        if let Some(i) = l.inflation_ratio {
            infl.entry(key).or_default().push((r.spec.repeat, i));
        }
    }
    let at = |x: u64| {
        if sweeps_loss {
            format!("{} % loss", x as f64 / 100.0)
        } else {
            format!("{} KB", x as f64 / 1000.0)
        }
    };
    let mut out = Measures::new();
    for (what, table) in [("utilization", util), ("p95 inflation ratio", infl)] {
        for ((cc, x), mut v) in table {
            v.sort_by_key(|(rep, _)| *rep);
            let ys: Vec<f64> = v.into_iter().map(|(_, y)| y).collect();
            out.push((format!("{cc}: {what} at {}", at(x)), values_and_mean(&ys)));
        }
    }
    out
}

/// A run's emulator delivered more than `max_late_share` of its uplink's packets over 1 ms
/// late. Runs without the emulator's statistics (Mahimahi's) are taken as on time.
fn late(run: &RunSummary, max_late_share: f64) -> bool {
    run.emulator
        .as_ref()
        .and_then(runner::late_share)
        .is_some_and(|share| share > max_late_share)
}

/// Takes out of both sides every configuration (run id and repetition) that either side
/// ran late, and returns how many: a delay-based scavenger reads a stall of the test bed as
/// a queue, so a late run says little about the change, and leaving it out of one side only
/// would compare different grids.
pub fn leave_out_late(
    before: &mut Vec<RunSummary>,
    after: &mut Vec<RunSummary>,
    max_late_share: f64,
) -> usize {
    let key = |r: &RunSummary| (r.spec.id.clone(), r.spec.repeat);
    let late_ones: std::collections::BTreeSet<_> = before
        .iter()
        .chain(after.iter())
        .filter(|r| late(r, max_late_share))
        .map(key)
        .collect();
    before.retain(|r| !late_ones.contains(&key(r)));
    after.retain(|r| !late_ones.contains(&key(r)));
    late_ones.len()
}

/// The markdown table of `before` against `after` for a plan of `kind`.
pub fn markdown(kind: Kind, before: &[RunSummary], after: &[RunSummary]) -> Result<String, String> {
    let measures: fn(&[RunSummary]) -> Measures = match kind {
        Kind::PrimaryRatio | Kind::Harm => pair_measures,
        Kind::Fairness => fairness_measures,
        Kind::SingleFlow => single_flow_measures,
        Kind::Timeline => {
            return Err("diff compares primary-ratio, harm, fairness and single-flow plans; a timeline's runs are read from their charts".into());
        }
    };
    let (b, a) = (measures(before), measures(after));
    let mut names: Vec<&String> = b.iter().map(|(n, _)| n).collect();
    for (n, _) in &a {
        if !names.contains(&n) {
            names.push(n);
        }
    }
    let value = |side: &Measures, name: &str| {
        side.iter()
            .find(|(n, _)| n == name)
            .map_or("–".to_string(), |(_, v)| v.clone())
    };
    let mut s = String::from("| measure | before | after |\n| --- | --- | --- |\n");
    let _ = writeln!(
        s,
        "| runs finished | {} of {} | {} of {} |",
        ok(before).len(),
        before.len(),
        ok(after).len(),
        after.len()
    );
    for n in names {
        let _ = writeln!(s, "| {n} | {} | {} |", value(&b, n), value(&a, n));
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exp::plan::Plan;
    use crate::exp::runner::{FlowSummary, LinkMetrics};

    fn summary(spec: &crate::exp::plan::RunSpec, mbps: &[f64]) -> RunSummary {
        RunSummary {
            status: Status::Ok,
            reason: None,
            spec: spec.clone(),
            flows: spec
                .flows
                .iter()
                .zip(mbps)
                .map(|(f, m)| FlowSummary {
                    cc: f.cc.clone(),
                    role: "flow".into(),
                    throughput_bps: m * 1e6,
                    lifetime_bps: m * 1e6,
                    retransmits: 0,
                    rtt_p50_ms: None,
                    rtt_p95_ms: Some(40.0),
                    intervals: vec![],
                    intervals_source: "emulator".into(),
                })
                .collect(),
            link: Some(LinkMetrics {
                max_goodput_bps: spec.bandwidth_mbps * 1e6,
                total_bps: mbps.iter().sum::<f64>() * 1e6,
                utilization: mbps.iter().sum::<f64>() / spec.bandwidth_mbps,
                drops: 0,
                qdelay_p50_ms: None,
                qdelay_p95_ms: None,
                rtt_p95_ms: None,
                inflation_ratio: Some(0.1),
            }),
            emulator: None,
            datapath: None,
            wall_s: 0.0,
            late_repeats: 0,
            host_steal_share: None,
        }
    }

    #[test]
    fn primary_ratio_rows_say_what_the_primary_kept_before_and_after() {
        let plan = Plan::parse(
            r#"
            name = "d"
            description = "t"
            kind = "primary-ratio"
            [full]
            bandwidth_mbps = [10]
            rtt_ms = [10, 200]
            buffer_bdp = [1.0]
            duration_s = 20
            primaries = ["cubic"]
            competitors = ["ccp:proteus-s"]
        "#,
        )
        .expect("valid");
        let specs = plan.runs(true).expect("runs");
        // Alone the primary gets 10; beside the scavenger 9 (10 ms) and 6 (200 ms) before,
        // 9.5 and 8.5 after (the median of two is the lower, by nearest rank).
        let side = |beside: [f64; 2]| -> Vec<RunSummary> {
            specs
                .iter()
                .map(|s| match (s.flows.len(), s.rtt_ms) {
                    (1, _) => summary(s, &[10.0]),
                    (_, 10) => summary(s, &[beside[0], 1.0]),
                    _ => summary(s, &[beside[1], 1.0]),
                })
                .collect()
        };
        let table =
            markdown(Kind::PrimaryRatio, &side([9.0, 6.0]), &side([9.5, 8.5])).expect("table");
        assert!(
            table.contains("| runs finished | 4 of 4 | 4 of 4 |"),
            "{table}"
        );
        assert!(
            table.contains(
                "| cubic vs ccp:proteus-s: ratio mean / median / min | 0.750 / 0.600 / 0.600 | 0.900 / 0.850 / 0.850 |"
            ),
            "{table}"
        );
        assert!(
            table.contains("| cubic vs ccp:proteus-s: cut by 20 % or more | 1 of 2 | 0 of 2 |"),
            "{table}"
        );
        assert!(
            table.contains(
                "| cubic vs ccp:proteus-s: mean ratio at 10 / 200 ms | 0.900 / 0.600 | 0.950 / 0.850 |"
            ),
            "{table}"
        );
    }

    #[test]
    fn a_configuration_late_on_either_side_is_left_out_of_both() {
        let plan = Plan::parse(
            r#"
            name = "s"
            description = "t"
            kind = "single-flow"
            [full]
            bandwidth_mbps = [10]
            rtt_ms = [10, 20, 30]
            buffer_bdp = [1.0]
            duration_s = 20
            algorithms = ["ccp:proteus-s"]
        "#,
        )
        .expect("valid");
        let specs = plan.runs(true).expect("runs");
        // 1000 packets each; late over 1 ms: 5 at 10 ms, 30 at 20 ms before and after,
        // 0 at 30 ms before, unknown (Mahimahi) at 30 ms after.
        let side = |late: [Option<u64>; 3]| -> Vec<RunSummary> {
            specs
                .iter()
                .zip(late)
                .map(|(s, l)| RunSummary {
                    emulator: l.map(|l| {
                        serde_json::json!({"uplink": {"departures": 1000}, "uplink_late_over_1ms": l})
                    }),
                    ..summary(s, &[9.0])
                })
                .collect()
        };
        let before = side([Some(5), Some(30), Some(0)]);
        let after = side([Some(0), Some(5), None]);
        let ids =
            |runs: &[RunSummary]| -> Vec<u64> { runs.iter().map(|r| r.spec.rtt_ms).collect() };
        let left_out = |max_late_share: f64| {
            let (mut b, mut a) = (before.clone(), after.clone());
            let dropped = leave_out_late(&mut b, &mut a, max_late_share);
            (ids(&b), ids(&a), dropped)
        };
        assert_eq!(left_out(0.01), (vec![10, 30], vec![10, 30], 1));
        assert_eq!(left_out(0.004), (vec![30], vec![30], 2));
    }

    #[test]
    fn fairness_rows_list_every_repetition_and_a_measure_only_one_side_has() {
        let plan = Plan::parse(
            r#"
            name = "f"
            description = "t"
            kind = "fairness"
            [full]
            rtt_ms = [30]
            flow_counts = [2]
            per_flow_mbps = 20
            per_flow_buffer_bytes = 300000
            duration_s = 100
            stagger_s = 20
            warmup_s = 0
            algorithms = ["ccp:proteus-s"]
            repeats = 2
        "#,
        )
        .expect("valid");
        let specs = plan.runs(true).expect("runs");
        let before: Vec<RunSummary> = specs
            .iter()
            .map(|s| {
                summary(
                    s,
                    if s.repeat == 1 {
                        &[20.0, 20.0]
                    } else {
                        &[30.0, 10.0]
                    },
                )
            })
            .collect();
        let table = markdown(Kind::Fairness, &before, &[]).expect("table");
        assert!(
            table.contains("| ccp:proteus-s: Jain, n = 2 | 1.000 0.800 (mean 0.900) | – |"),
            "{table}"
        );
        assert!(markdown(Kind::Timeline, &before, &before).is_err());
    }
}
