//! ccp-emu against real Mahimahi: the same plan run on both, repeated, compared
//! configuration by configuration (`ccp-exp compare`).
//!
//! Single runs of competing flows differ a lot from one to the next (who fills the queue
//! first decides a 10 s split), so the comparison is between means over repetitions, with
//! their spread beside them.

use std::collections::BTreeMap;
use std::fmt::Write;

use serde::Serialize;

use super::metrics;
use super::runner::{RunSummary, Status};

/// Same-algorithm pairs share alike when the mean Jain indices differ by at most this.
const JAIN_TOLERANCE: f64 = 0.05;
/// Drops agree when the emulator's mean is within this share of Mahimahi's.
const DROP_TOLERANCE: f64 = 0.2;

/// Mean and sample standard deviation of some repetitions.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Spread {
    pub mean: f64,
    pub sd: f64,
}

impl Spread {
    fn of(xs: &[f64]) -> Option<Self> {
        if xs.is_empty() {
            return None;
        }
        let n = xs.len() as f64;
        let mean = xs.iter().sum::<f64>() / n;
        let var = if xs.len() > 1 {
            xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0)
        } else {
            0.0
        };
        Some(Spread {
            mean,
            sd: var.sqrt(),
        })
    }
}

/// One backend's repetitions of one configuration.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Side {
    /// Finished repetitions.
    pub runs: usize,
    /// Each flow's throughput in the measurement window, Mbit/s.
    pub mbps: Vec<Spread>,
    /// Packets the uplink queue dropped per run.
    pub drops: Option<Spread>,
    /// Jain's index of the flows (runs with more than one flow).
    pub jain: Option<Spread>,
}

/// One configuration on both backends.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Row {
    /// The run id without its repetition suffix.
    pub config: String,
    /// The flows' congestion controls.
    pub flows: Vec<String>,
    pub emulator: Side,
    pub mahimahi: Side,
    /// Same-algorithm pairs: whether the two backends' mean Jain indices agree.
    pub shares_alike: Option<bool>,
    /// Emulator drops over Mahimahi's (means), and whether within the tolerance.
    pub drop_ratio: Option<f64>,
    pub drops_agree: Option<bool>,
}

/// A run's id without the `-repK` its repetition added.
fn config_of(run: &RunSummary) -> String {
    let suffix = format!("-rep{}", run.spec.repeat);
    run.spec
        .id
        .strip_suffix(&suffix)
        .filter(|_| run.spec.repeat > 1)
        .unwrap_or(&run.spec.id)
        .to_string()
}

fn side(runs: &[&RunSummary]) -> Side {
    let ok: Vec<&&RunSummary> = runs.iter().filter(|r| r.status == Status::Ok).collect();
    let flows = ok.first().map_or(0, |r| r.flows.len());
    let mbps = (0..flows)
        .filter_map(|i| {
            let xs: Vec<f64> = ok
                .iter()
                .filter_map(|r| r.flows.get(i).map(|f| f.throughput_bps / 1e6))
                .collect();
            Spread::of(&xs)
        })
        .collect();
    let drops: Vec<f64> = ok
        .iter()
        .filter_map(|r| r.link.as_ref().map(|l| l.drops as f64))
        .collect();
    let jains: Vec<f64> = ok
        .iter()
        .filter(|r| r.flows.len() > 1)
        .filter_map(|r| {
            let xs: Vec<f64> = r.flows.iter().map(|f| f.throughput_bps).collect();
            metrics::jain(&xs)
        })
        .collect();
    Side {
        runs: ok.len(),
        mbps,
        drops: Spread::of(&drops),
        jain: Spread::of(&jains),
    }
}

fn by_config(runs: &[RunSummary]) -> BTreeMap<String, Vec<&RunSummary>> {
    let mut m: BTreeMap<String, Vec<&RunSummary>> = BTreeMap::new();
    for r in runs {
        m.entry(config_of(r)).or_default().push(r);
    }
    m
}

/// Compares the two backends' runs of the same plan, configuration by configuration (in the
/// emulator's order of first appearance).
pub fn compare(emulator: &[RunSummary], mahimahi: &[RunSummary]) -> Vec<Row> {
    let emu = by_config(emulator);
    let mm = by_config(mahimahi);
    let mut seen = std::collections::HashSet::new();
    emulator
        .iter()
        .chain(mahimahi)
        .filter(|r| seen.insert(config_of(r)))
        .map(|first| {
            let config = config_of(first);
            let e = side(emu.get(&config).map_or(&[][..], Vec::as_slice));
            let m = side(mm.get(&config).map_or(&[][..], Vec::as_slice));
            let flows: Vec<String> = first.spec.flows.iter().map(|f| f.cc.clone()).collect();
            let same_algorithm = flows.len() > 1 && flows.iter().all(|c| *c == flows[0]);
            let shares_alike = match (same_algorithm, e.jain, m.jain) {
                (true, Some(a), Some(b)) => Some((a.mean - b.mean).abs() <= JAIN_TOLERANCE),
                _ => None,
            };
            let drop_ratio = match (e.drops, m.drops) {
                (Some(a), Some(b)) if b.mean > 0.0 => Some(a.mean / b.mean),
                _ => None,
            };
            Row {
                config,
                flows,
                drops_agree: drop_ratio.map(|r| (r - 1.0).abs() <= DROP_TOLERANCE),
                drop_ratio,
                shares_alike,
                emulator: e,
                mahimahi: m,
            }
        })
        .collect()
}

fn fmt_spread(s: Option<Spread>, digits: usize) -> String {
    s.map(|s| format!("{:.digits$} ± {:.digits$}", s.mean, s.sd))
        .unwrap_or_else(|| "–".into())
}

fn fmt_flows(side: &Side) -> String {
    if side.mbps.is_empty() {
        return "–".into();
    }
    side.mbps
        .iter()
        .map(|s| fmt_spread(Some(*s), 1))
        .collect::<Vec<_>>()
        .join(" / ")
}

fn verdict(v: Option<bool>) -> &'static str {
    match v {
        Some(true) => "yes",
        Some(false) => "NO",
        None => "",
    }
}

/// The comparison as a Markdown table (means ± sample standard deviations).
pub fn markdown(rows: &[Row]) -> String {
    let mut s = String::from(
        "| flows | runs (emu/mm) | Mbit/s ccp-emu | Mbit/s Mahimahi | Jain ccp-emu | Jain Mahimahi | shares alike | drops ccp-emu | drops Mahimahi | drop ratio | within 20 % |\n\
         | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n",
    );
    for r in rows {
        let _ = writeln!(
            s,
            "| {} | {}/{} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            r.flows.join(" + "),
            r.emulator.runs,
            r.mahimahi.runs,
            fmt_flows(&r.emulator),
            fmt_flows(&r.mahimahi),
            fmt_spread(r.emulator.jain, 2),
            fmt_spread(r.mahimahi.jain, 2),
            verdict(r.shares_alike),
            fmt_spread(r.emulator.drops, 0),
            fmt_spread(r.mahimahi.drops, 0),
            r.drop_ratio.map(|x| format!("{x:.2}")).unwrap_or_default(),
            verdict(r.drops_agree),
        );
    }
    s
}

/// One CSV row per configuration, backend and flow.
pub fn csv(rows: &[Row]) -> String {
    let mut s = String::from(
        "config,backend,runs,flow,cc,mbps_mean,mbps_sd,drops_mean,drops_sd,jain_mean,jain_sd\n",
    );
    let opt = |x: Option<f64>| x.map(|v| format!("{v:.4}")).unwrap_or_default();
    for r in rows {
        for (name, side) in [("emulator", &r.emulator), ("mahimahi", &r.mahimahi)] {
            for (i, m) in side.mbps.iter().enumerate() {
                let _ = writeln!(
                    s,
                    "{},{name},{},{i},{},{:.4},{:.4},{},{},{},{}",
                    r.config,
                    side.runs,
                    r.flows.get(i).map_or("", String::as_str),
                    m.mean,
                    m.sd,
                    opt(side.drops.map(|d| d.mean)),
                    opt(side.drops.map(|d| d.sd)),
                    opt(side.jain.map(|j| j.mean)),
                    opt(side.jain.map(|j| j.sd)),
                );
            }
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exp::plan::{FlowSpec, RunSpec, Testbed};
    use crate::exp::runner::{FlowSummary, LinkMetrics};

    fn run(id: &str, repeat: u32, mbps: &[f64], drops: u64) -> RunSummary {
        let flow = |cc: &str, m: f64| FlowSummary {
            cc: cc.into(),
            role: "flow".into(),
            throughput_bps: m * 1e6,
            lifetime_bps: m * 1e6,
            retransmits: 0,
            rtt_p50_ms: None,
            rtt_p95_ms: None,
            intervals: vec![],
            intervals_source: "emulator".into(),
        };
        RunSummary {
            status: Status::Ok,
            reason: None,
            spec: RunSpec {
                id: if repeat > 1 {
                    format!("{id}-rep{repeat}")
                } else {
                    id.into()
                },
                bandwidth_mbps: 48.0,
                rtt_ms: 30,
                buffer_bytes: 720_000,
                buffer_bdp: 4.0,
                uplink_loss: 0.0,
                testbed: Testbed::Mahimahi,
                duration_s: 10.0,
                flows: mbps
                    .iter()
                    .map(|_| FlowSpec {
                        cc: "cubic".into(),
                        start_s: 0.0,
                        stop_s: 10.0,
                        priority: vec![],
                        primary: None,
                    })
                    .collect(),
                measure_from_s: 0.0,
                measure_to_s: 10.0,
                roles: vec!["flow".into(); mbps.len()],
                repeat,
            },
            flows: mbps.iter().map(|&m| flow("cubic", m)).collect(),
            link: Some(LinkMetrics {
                max_goodput_bps: 46e6,
                total_bps: mbps.iter().sum::<f64>() * 1e6,
                utilization: 1.0,
                drops,
                qdelay_p50_ms: None,
                qdelay_p95_ms: None,
                rtt_p95_ms: None,
                inflation_ratio: None,
            }),
            emulator: None,
            datapath: None,
            wall_s: 10.0,
            late_repeats: 0,
            host_steal_share: None,
        }
    }

    #[test]
    fn repetitions_are_pooled_and_the_backends_judged() {
        let emu = vec![
            run("pair", 1, &[30.0, 15.0], 100),
            run("pair", 2, &[20.0, 25.0], 140),
            run("alone", 1, &[45.0], 50),
        ];
        let mm = vec![
            run("pair", 1, &[23.0, 22.0], 100),
            run("pair", 2, &[22.0, 23.0], 100),
            run("alone", 1, &[45.0], 20),
        ];
        let rows = compare(&emu, &mm);
        assert_eq!(rows.len(), 2);
        let pair = &rows[0];
        assert_eq!(pair.config, "pair");
        assert_eq!((pair.emulator.runs, pair.mahimahi.runs), (2, 2));
        assert_eq!(pair.emulator.mbps[0].mean, 25.0);
        assert!((pair.emulator.mbps[0].sd - 50f64.sqrt()).abs() < 1e-9);
        // Jain: 0.9 and 0.988 on the emulator, 0.999 on Mahimahi.
        assert_eq!(pair.shares_alike, Some(false));
        assert_eq!(pair.drop_ratio, Some(1.2));
        assert_eq!(pair.drops_agree, Some(true));
        let alone = &rows[1];
        assert_eq!(alone.shares_alike, None, "one flow has no share");
        assert_eq!(alone.drops_agree, Some(false), "50 against 20 drops");
        assert!(markdown(&rows).contains("| cubic + cubic | 2/2 | 25.0 ± 7.1 / 20.0 ± 7.1 |"));
        assert_eq!(csv(&rows).lines().count(), 1 + 2 * 2 + 2);
    }
}
