//! `ccp-exp check`: the acceptance checks CI applies to finished runs.
//!
//! * Primary-ratio and harm scenarios: a Proteus-S scavenger leaves CUBIC and BBR at least
//!   [`MIN_PRIMARY_RATIO`] of their throughput alone, on every bottleneck of the subset
//!   (the ANRW paper's claim, made a hard bound). Missing or skipped runs fail the check:
//!   it exists to prove the scavenger ran.
//! * Timeline scenarios with priority changes: the switched flow's share of the bottleneck
//!   rises by at least [`MIN_SHARE_RISE`] once it is primary, for flows handed to a primary
//!   (LEDBAT++, or Proteus whose policy names one). A Proteus flow switched in place runs
//!   Proteus-P, a latency-aware primary that yields to a loss-based flow's growing queue:
//!   reported, not checked.
//!
//! Other competitors' ratios (LEDBAT++, CUBIC) are reported, not checked.

use std::fmt;

use super::metrics;
use super::plan::{Kind, RunSpec};
use super::report;
use super::runner::{RunSummary, Status};

/// The fraction of its alone throughput a primary must keep beside Proteus-S.
pub const MIN_PRIMARY_RATIO: f64 = 0.9;
/// How much the switched flow's share must rise after it becomes primary (absolute).
pub const MIN_SHARE_RISE: f64 = 0.1;
/// Time left to the flows after a start or a switch before a share is measured, s (the
/// primary-ratio scenarios' `warmup_s`: Proteus-S needs several seconds to give way).
const SETTLE_S: f64 = 10.0;
/// The scavenger whose primary ratio is checked.
const CHECKED_SCAVENGER: &str = "ccp:proteus-s";
/// Primaries it is checked against.
const CHECKED_PRIMARIES: &[&str] = &["cubic", "bbr"];

/// One line of the check's output.
#[derive(Debug, Clone, PartialEq)]
pub struct Finding {
    /// `None`: information only.
    pub pass: Option<bool>,
    pub text: String,
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let tag = match self.pass {
            Some(true) => "PASS",
            Some(false) => "FAIL",
            None => "info",
        };
        write!(f, "{tag}  {}", self.text)
    }
}

fn finding(pass: Option<bool>, text: String) -> Finding {
    Finding { pass, text }
}

/// Checks one scenario's runs (`runs[i]` is the summary of `specs[i]`, if any).
pub fn scenario(kind: Kind, specs: &[RunSpec], runs: &[Option<RunSummary>]) -> Vec<Finding> {
    match kind {
        Kind::PrimaryRatio | Kind::Harm => primary_ratios(specs, runs),
        Kind::Timeline => specs
            .iter()
            .zip(runs)
            .filter(|(s, _)| s.flows.iter().any(|f| !f.priority.is_empty()))
            .map(|(s, r)| priority_switch(s, r.as_ref()))
            .collect(),
        Kind::SingleFlow | Kind::Fairness => Vec::new(),
    }
}

fn primary_ratios(specs: &[RunSpec], runs: &[Option<RunSummary>]) -> Vec<Finding> {
    let mut out = Vec::new();
    // Every run with the checked scavenger must have finished.
    for (spec, run) in specs.iter().zip(runs) {
        if !spec.flows.iter().any(|f| f.cc == CHECKED_SCAVENGER) {
            continue;
        }
        match run {
            Some(r) if r.status == Status::Ok => {}
            Some(r) => out.push(finding(
                Some(false),
                format!(
                    "{}: {:?}: {}",
                    spec.id,
                    r.status,
                    r.reason.clone().unwrap_or_default()
                ),
            )),
            None => out.push(finding(Some(false), format!("{}: not run", spec.id))),
        }
    }
    let done: Vec<RunSummary> = runs.iter().flatten().cloned().collect();
    let pairs = report::pairs(&done);
    // A finished scavenger run without its primary's alone run would pass unnoticed.
    for spec in specs {
        let finished = runs
            .iter()
            .flatten()
            .any(|r| r.spec.id == spec.id && r.status == Status::Ok);
        let compared = pairs
            .values()
            .any(|s| s.points.iter().any(|p| p.run == spec.id));
        if finished && !compared && spec.flows.iter().any(|f| f.cc == CHECKED_SCAVENGER) {
            out.push(finding(
                Some(false),
                format!("{}: no finished alone run of its primary", spec.id),
            ));
        }
    }
    for (pair, s) in pairs {
        let checked = CHECKED_PRIMARIES
            .iter()
            .any(|p| pair == format!("{p} vs {CHECKED_SCAVENGER}"));
        for p in &s.points {
            let util = p
                .utilization
                .map(|u| format!(", utilization {u:.2}"))
                .unwrap_or_default();
            out.push(finding(
                checked.then_some(p.ratio >= MIN_PRIMARY_RATIO),
                format!(
                    "{pair}: primary keeps {:.3} of its alone throughput{util} ({}{})",
                    p.ratio,
                    p.run,
                    if checked {
                        format!("; needs >= {MIN_PRIMARY_RATIO}")
                    } else {
                        String::new()
                    }
                ),
            ));
        }
    }
    out
}

/// Flow `i`'s share of all flows' throughput in `[from, to)`.
fn share(run: &RunSummary, i: usize, from: f64, to: f64) -> Option<f64> {
    let t: Vec<f64> = run
        .flows
        .iter()
        .map(|f| metrics::throughput_in(&f.intervals, from, to))
        .collect();
    let total: f64 = t.iter().sum();
    (total > 0.0).then(|| t.get(i).copied().unwrap_or(0.0) / total)
}

fn priority_switch(spec: &RunSpec, run: Option<&RunSummary>) -> Finding {
    let Some(run) = run.filter(|r| r.status == Status::Ok) else {
        let why = run
            .map(|r| format!("{:?}: {}", r.status, r.reason.clone().unwrap_or_default()))
            .unwrap_or_else(|| "not run".into());
        return finding(Some(false), format!("{}: {why}", spec.id));
    };
    let Some((i, flow)) = spec
        .flows
        .iter()
        .enumerate()
        .find(|(_, f)| !f.priority.is_empty())
    else {
        return finding(None, format!("{}: no priority change", spec.id));
    };
    let Some(up) = flow.priority.iter().find(|p| p.class == "primary") else {
        return finding(None, format!("{}: no switch to primary", spec.id));
    };
    // Before: the last SETTLE_S before the switch, once every competitor has settled (a
    // scavenger may take many seconds to give way in a deep buffer: its settled share is the
    // baseline); after: once the switch has settled, until the next change (or the flow's end).
    let competitors_in = spec
        .flows
        .iter()
        .enumerate()
        .filter(|(j, _)| *j != i)
        .map(|(_, f)| f.start_s)
        .fold(flow.start_s, f64::max)
        + SETTLE_S;
    let next = flow
        .priority
        .iter()
        .map(|p| p.at_s)
        .filter(|t| *t > up.at_s)
        .fold(flow.stop_s, f64::min);
    let windows = [
        (
            competitors_in.max(up.at_s - SETTLE_S).min(up.at_s - 1.0),
            up.at_s,
        ),
        ((up.at_s + SETTLE_S).min(next - 1.0), next),
    ];
    let (Some(before), Some(after)) = (
        share(run, i, windows[0].0, windows[0].1),
        share(run, i, windows[1].0, windows[1].1),
    ) else {
        return finding(Some(false), format!("{}: no traffic measured", spec.id));
    };
    let back = flow
        .priority
        .iter()
        .find(|p| p.at_s >= next && p.class != "primary")
        .and_then(|p| share(run, i, p.at_s + SETTLE_S, flow.stop_s))
        .map(|s| format!(", back to scavenger {s:.3}"))
        .unwrap_or_default();
    let in_place = flow.primary.is_none() && flow.cc.starts_with("ccp:proteus");
    let (pass, rule) = if in_place {
        (
            None,
            "switched in place to Proteus-P, not checked".to_string(),
        )
    } else {
        (
            Some(after - before >= MIN_SHARE_RISE),
            format!("needs a rise >= {MIN_SHARE_RISE}"),
        )
    };
    finding(
        pass,
        format!(
            "{}: {}'s share {before:.3} as scavenger ({:.0}-{:.0} s), {after:.3} as primary ({:.0}-{:.0} s){back}; {rule}",
            spec.id, flow.cc, windows[0].0, windows[0].1, windows[1].0, windows[1].1
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exp::metrics::Interval;
    use crate::exp::plan::{FlowSpec, PriorityChange, Testbed};
    use crate::exp::runner::FlowSummary;

    fn flow(cc: &str, start_s: f64, priority: Vec<PriorityChange>) -> FlowSpec {
        FlowSpec {
            cc: cc.into(),
            start_s,
            stop_s: 45.0,
            priority,
            primary: None,
        }
    }

    fn spec(id: &str, flows: Vec<FlowSpec>) -> RunSpec {
        RunSpec {
            id: id.into(),
            bandwidth_mbps: 48.0,
            rtt_ms: 30,
            buffer_bytes: 360_000,
            buffer_bdp: 2.0,
            uplink_loss: 0.0,
            testbed: Testbed::Mahimahi,
            duration_s: 45.0,
            measure_from_s: 5.0,
            measure_to_s: 45.0,
            roles: vec![],
            repeat: 1,
            flows,
        }
    }

    /// A finished run whose flow `i` delivers `rate(i, second)` bytes each second.
    fn done(spec: &RunSpec, rate: impl Fn(usize, f64) -> f64, bps: &[f64]) -> RunSummary {
        let flows = spec
            .flows
            .iter()
            .enumerate()
            .map(|(i, f)| FlowSummary {
                cc: f.cc.clone(),
                role: "flow".into(),
                throughput_bps: bps.get(i).copied().unwrap_or(0.0),
                lifetime_bps: 0.0,
                retransmits: 0,
                rtt_p50_ms: None,
                rtt_p95_ms: None,
                intervals: (0..spec.duration_s as u32)
                    .map(|s| Interval {
                        start_s: s as f64,
                        end_s: s as f64 + 1.0,
                        bytes: rate(i, s as f64),
                    })
                    .collect(),
                intervals_source: "emulator".into(),
            })
            .collect();
        RunSummary {
            status: Status::Ok,
            reason: None,
            spec: spec.clone(),
            flows,
            link: None,
            emulator: None,
            datapath: None,
            wall_s: 45.0,
            late_repeats: 0,
            host_steal_share: None,
        }
    }

    fn switch_spec() -> RunSpec {
        let change = |at_s: f64, class: &str| PriorityChange {
            at_s,
            class: class.into(),
        };
        spec(
            "sw",
            vec![
                flow(
                    "ccp:ledbat++",
                    0.0,
                    vec![change(15.0, "primary"), change(30.0, "scavenger")],
                ),
                flow("cubic", 5.0, vec![]),
            ],
        )
    }

    #[test]
    fn a_switched_flow_that_takes_half_after_the_switch_passes() {
        let s = switch_spec();
        let r = done(
            &s,
            |i, t| match (i, (15.0..30.0).contains(&t)) {
                (0, false) => 1.0,
                (0, true) => 50.0,
                _ => 50.0,
            },
            &[],
        );
        let f = scenario(Kind::Timeline, &[s], &[Some(r)]);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].pass, Some(true), "{}", f[0]);
        assert!(
            f[0].text
                .contains("0.020 as scavenger (14-15 s), 0.500 as primary (25-30 s)")
        );
    }

    #[test]
    fn the_share_before_is_the_settled_scavengers_not_its_way_down() {
        let mut s = switch_spec();
        s.flows[0].priority[0].at_s = 40.0;
        s.flows[0].priority[1].at_s = 80.0;
        s.flows[0].stop_s = 100.0;
        s.flows[1].stop_s = 100.0;
        s.duration_s = 100.0;
        // Giving way takes until 30 s (a third of the link until then), then 2 %; 25 % as primary.
        let r = done(
            &s,
            |i, t| match i {
                0 if t < 30.0 => 25.0,
                0 if (40.0..80.0).contains(&t) => 12.5,
                0 => 1.0,
                _ => 49.0 - if (40.0..80.0).contains(&t) { 11.5 } else { 0.0 },
            },
            &[],
        );
        let f = scenario(Kind::Timeline, &[s], &[Some(r)]);
        assert_eq!(f[0].pass, Some(true), "{}", f[0]);
        assert!(
            f[0].text.contains("0.020 as scavenger (30-40 s)"),
            "{}",
            f[0]
        );
    }

    #[test]
    fn a_switch_that_changes_nothing_fails() {
        let s = switch_spec();
        let r = done(&s, |i, _| if i == 0 { 10.0 } else { 40.0 }, &[]);
        let f = scenario(Kind::Timeline, &[s], &[Some(r)]);
        assert_eq!(f[0].pass, Some(false), "{}", f[0]);
    }

    #[test]
    fn proteus_switched_in_place_is_reported_and_one_handed_off_is_checked() {
        let mut s = switch_spec();
        s.flows[0].cc = "ccp:proteus-s".into();
        let r = done(&s, |i, _| if i == 0 { 10.0 } else { 40.0 }, &[]);
        let f = scenario(Kind::Timeline, &[s.clone()], &[Some(r.clone())]);
        assert_eq!(f[0].pass, None, "{}", f[0]);
        assert!(f[0].text.contains("switched in place"), "{}", f[0]);
        s.flows[0].primary = Some("cubic".into());
        let f = scenario(Kind::Timeline, &[s], &[Some(r)]);
        assert_eq!(f[0].pass, Some(false), "{}", f[0]);
    }

    #[test]
    fn a_skipped_switch_run_fails() {
        let s = switch_spec();
        let mut r = done(&s, |_, _| 1.0, &[]);
        r.status = Status::Skipped;
        r.reason = Some("datapath not available".into());
        let f = scenario(Kind::Timeline, &[s], &[Some(r)]);
        assert_eq!(f[0].pass, Some(false));
        assert!(f[0].text.contains("datapath not available"));
    }

    fn ratio_runs(with_bps: f64) -> (Vec<RunSpec>, Vec<Option<RunSummary>>) {
        let alone = spec("cubic-alone", vec![flow("cubic", 0.0, vec![])]);
        let with = spec(
            "cubic-vs-ps",
            vec![
                flow("cubic", 0.0, vec![]),
                flow(CHECKED_SCAVENGER, 5.0, vec![]),
            ],
        );
        let runs = vec![
            Some(done(&alone, |_, _| 1.0, &[40e6])),
            Some(done(&with, |_, _| 1.0, &[with_bps, 1e6])),
        ];
        (vec![alone, with], runs)
    }

    #[test]
    fn proteus_s_must_leave_the_primary_ninety_percent() {
        let (specs, runs) = ratio_runs(37e6);
        let f = scenario(Kind::Harm, &specs, &runs);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].pass, Some(true), "{}", f[0]);
        let (specs, runs) = ratio_runs(35e6);
        let f = scenario(Kind::PrimaryRatio, &specs, &runs);
        assert_eq!(f[0].pass, Some(false), "{}", f[0]);
        assert!(f[0].text.contains("0.875"));
    }

    #[test]
    fn a_missing_scavenger_run_fails_the_ratio_check() {
        let (specs, mut runs) = ratio_runs(40e6);
        runs[1] = None;
        let f = scenario(Kind::Harm, &specs, &runs);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].pass, Some(false));
        assert!(f[0].text.contains("cubic-vs-ps: not run"));
    }

    #[test]
    fn a_scavenger_run_without_the_alone_run_fails() {
        let (specs, mut runs) = ratio_runs(40e6);
        runs[0] = None;
        let f = scenario(Kind::PrimaryRatio, &specs, &runs);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].pass, Some(false));
        assert!(f[0].text.contains("no finished alone run"));
    }

    #[test]
    fn other_competitors_are_reported_not_checked() {
        let (mut specs, mut runs) = ratio_runs(20e6);
        specs[1].flows[1].cc = "ccp:ledbat++".into();
        if let Some(r) = runs[1].as_mut() {
            r.flows[1].cc = "ccp:ledbat++".into();
            r.spec = specs[1].clone();
        }
        let f = scenario(Kind::Harm, &specs, &runs);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].pass, None);
    }
}
