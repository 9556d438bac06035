//! LEDBAT++ end to end: `ccp-agent` runs the algorithm, `ccp-testdp` runs its datapath program
//! in the real libccp against the deterministic bottleneck model (virtual time, lock-step).
//! Claims from docs/algorithms/ledbat-pp.md §8 (E5, E6, E7) and the priority hand-off of §6.
//!
//! Each test prints its numbers; `cargo test --test ledbat_behaviour -- --nocapture` shows
//! them.

mod common;

use algs_core::metrics::jain;
use common::{Agent, start_agent, unique};
use serde_json::Value;
use std::path::PathBuf;
use std::process::Command;

/// A scenario file in the temporary directory, removed on drop.
struct ScenarioFile(PathBuf);

impl ScenarioFile {
    fn new(tag: &str, toml: &str) -> Self {
        let path = std::env::temp_dir().join(format!("{}.toml", unique(tag)));
        std::fs::write(&path, toml).expect("write scenario");
        ScenarioFile(path)
    }
}

impl Drop for ScenarioFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Runs `ccp-testdp sim` on the scenario against the agent; returns its JSON summary.
fn sim(agent: &str, scenario: &ScenarioFile, extra: &[&str]) -> Value {
    let out = Command::new(common::testdp_bin())
        .arg("sim")
        .arg(&scenario.0)
        .args(["--agent", agent])
        .args(extra)
        .output()
        .expect("run ccp-testdp");
    assert!(
        out.status.success(),
        "ccp-testdp failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).expect("JSON summary");
    for f in v["ccp"].as_array().expect("ccp flows") {
        assert_eq!(f["invoke_errors"], 0, "libccp refused an ACK: {f}");
        assert!(
            f["reports"].as_u64().expect("reports") > 0,
            "no reports: {f}"
        );
    }
    v
}

/// Mean throughput of `flow` in report window `w`, Mbit/s.
fn window_mbps(v: &Value, w: usize, flow: &str) -> f64 {
    v["windows"][w]["flows"]
        .as_array()
        .expect("flows")
        .iter()
        .find(|f| f["name"] == flow)
        .and_then(|f| f["mean_mbps"].as_f64())
        .unwrap_or_else(|| panic!("no flow {flow} in window {w}"))
}

/// The flow trace's JSON lines; the file is removed.
fn take_trace(path: &std::path::Path) -> Vec<Value> {
    let lines = std::fs::read_to_string(path)
        .expect("trace")
        .lines()
        .map(|l| serde_json::from_str(l).expect("trace line"))
        .collect();
    let _ = std::fs::remove_file(path);
    lines
}

/// Mean time between slowdown entries from `from_us` on, s.
fn slowdown_period_s(lines: &[Value], from_us: f64) -> f64 {
    let mut entries = Vec::new();
    let mut was_slowed = false;
    for l in lines.iter().filter(|l| l["event"] == "report") {
        let (Some(t), Some(s)) = (l["datapath_time_us"].as_f64(), l["state"].as_str()) else {
            continue;
        };
        let slowed = s.starts_with("slowdown");
        if slowed && !was_slowed && t >= from_us {
            entries.push(t);
        }
        was_slowed = slowed;
    }
    assert!(entries.len() >= 3, "{} slowdowns", entries.len());
    (entries[entries.len() - 1] - entries[0]) / 1e6 / (entries.len() - 1) as f64
}

/// Share of datapath time from `from_us` on that LEDBAT++ reports spent in a slowdown
/// (freeze or ramp), weighting each report by the time to the next one.
fn slowdown_share(lines: &[Value], from_us: f64) -> f64 {
    let reports: Vec<(f64, bool)> = lines
        .iter()
        .filter(|l| l["event"] == "report")
        .filter_map(|l| {
            let t = l["datapath_time_us"].as_f64()?;
            let s = l["state"].as_str()?;
            (t >= from_us).then_some((t, s.starts_with("slowdown")))
        })
        .collect();
    let (mut slowed, mut total) = (0.0, 0.0);
    for w in reports.windows(2) {
        let dt = w[1].0 - w[0].0;
        total += dt;
        if w[0].1 {
            slowed += dt;
        }
    }
    slowed / total
}

/// Stops the agent with SIGTERM (it removes its socket) and checks it exits cleanly;
/// returns its standard error.
fn stop(agent: Agent) -> String {
    let (ok, stderr) = agent.stop();
    assert!(ok, "agent did not exit cleanly:\n{stderr}");
    stderr
}

fn agent_with_trace(tag: &str) -> (Agent, PathBuf) {
    let name = unique(tag);
    let trace = std::env::temp_dir().join(format!("{name}.jsonl"));
    let agent = start_agent(
        &name,
        &[
            "--default",
            "cubic",
            "--trace-flows",
            trace.to_str().expect("utf-8 path"),
        ],
    );
    (agent, trace)
}

/// E6/E7: alone on 48 Mbit/s, 30 ms, 5 BDP the queueing delay settles at the 60 ms target
/// (median within ±10 ms) and slowdowns take about 10 % of the time.
#[test]
fn alone_queue_settles_at_target_and_slowdowns_take_a_tenth() {
    let (agent, trace_path) = agent_with_trace("lb-alone");
    let scenario = ScenarioFile::new(
        "lb-alone",
        r#"
name = "LEDBAT++ alone, 48 Mbit/s, 30 ms, 5 BDP"
[link]
rate_mbps = 48.0
rtt_ms = 30.0
buffer_bdp = 5.0
duration_s = 90.0
[[flow]]
name = "ledbat"
alg = "ledbat++"
[[report]]
from_s = 30.0
to_s = 90.0
"#,
    );
    let v = sim(&agent.name, &scenario, &[]);
    stop(agent);
    let w = &v["windows"][0];
    let p50 = w["queue_delay"]["p50_ms"].as_f64().expect("p50");
    let util = w["utilization"].as_f64().expect("utilization");
    let lines: Vec<Value> = take_trace(&trace_path)
        .into_iter()
        .filter(|l| l["algorithm"] == "ledbat++")
        .collect();
    let share = slowdown_share(&lines, 30e6);
    let period = slowdown_period_s(&lines, 30e6);
    println!(
        "median queueing delay {p50:.1} ms, utilization {util:.3}, slowdown share {share:.3}, \
         period {period:.2} s"
    );
    assert!(
        (50.0..=70.0).contains(&p50),
        "median queueing delay {p50} ms"
    );
    assert!((0.05..=0.15).contains(&share), "slowdown share {share}");
    // E7 expects dips every ≈10 s (10·D; D a little above its 1 s estimate here).
    assert!((8.0..=15.0).contains(&period), "slowdown period {period} s");
    assert!(util > 0.85, "utilization {util}");
}

/// E6: with a buffer below the target (0.5 BDP = 15 ms) q never reaches T; the flow is
/// loss-driven and still uses more than 80 % of the link.
#[test]
fn buffer_below_target_keeps_utilization_above_80_percent() {
    let agent = start_agent(&unique("lb-small"), &["--default", "cubic"]);
    let scenario = ScenarioFile::new(
        "lb-small",
        r#"
name = "LEDBAT++ alone, 48 Mbit/s, 30 ms, 0.5 BDP"
[link]
rate_mbps = 48.0
rtt_ms = 30.0
buffer_bdp = 0.5
duration_s = 90.0
[[flow]]
name = "ledbat"
alg = "ledbat++"
[[report]]
from_s = 30.0
to_s = 90.0
"#,
    );
    let v = sim(&agent.name, &scenario, &[]);
    stop(agent);
    let util = v["windows"][0]["utilization"]
        .as_f64()
        .expect("utilization");
    let p95 = v["windows"][0]["queue_delay"]["p95_ms"]
        .as_f64()
        .expect("p95");
    println!("utilization {util:.3}, p95 queueing delay {p95:.1} ms");
    assert!(util > 0.80, "utilization {util}");
}

/// An AIMD (Reno-like) primary that joins a running LEDBAT++ flow, and the same primary
/// alone: the primary's throughput from 30 s to 90 s in both runs, and LEDBAT++'s.
fn primary_with_and_without(tag: &str, buffer_bdp: f64) -> (f64, f64, f64) {
    let agent = start_agent(&unique(tag), &["--default", "cubic"]);
    let scenario = ScenarioFile::new(
        tag,
        &format!(
            r#"
name = "AIMD primary vs LEDBAT++, 48 Mbit/s, 30 ms, {buffer_bdp} BDP"
[link]
rate_mbps = 48.0
rtt_ms = 30.0
buffer_bdp = {buffer_bdp}
duration_s = 90.0
[[flow]]
name = "ledbat"
alg = "ledbat++"
[[cross]]
kind = "aimd"
name = "reno"
start_s = 10.0
[[report]]
from_s = 30.0
to_s = 90.0
"#
        ),
    );
    let with = sim(&agent.name, &scenario, &[]);
    let alone = sim(&agent.name, &scenario, &["--without", "ledbat"]);
    stop(agent);
    (
        window_mbps(&alone, 0, "reno"),
        window_mbps(&with, 0, "reno"),
        window_mbps(&with, 0, "ledbat"),
    )
}

/// E5/E6: with a buffer deeper than the 60 ms target (5 BDP = 150 ms) the AIMD flow keeps
/// the queue above T and LEDBAT++ yields: the primary keeps at least 90 % of its alone
/// throughput.
#[test]
fn deep_buffer_aimd_primary_keeps_ninety_percent() {
    let (alone, with, ledbat) = primary_with_and_without("lb-deep", 5.0);
    let ratio = with / alone;
    println!(
        "reno alone {alone:.2} Mbit/s, with LEDBAT++ {with:.2} (ratio {ratio:.3}), LEDBAT++ {ledbat:.2}"
    );
    assert!(ratio >= 0.9, "primary throughput ratio {ratio}");
}

/// E5: with a buffer shallower than the target (1 BDP = 30 ms) q never reaches T and
/// LEDBAT++ is loss-driven with gain G: it fails to yield fully (expected, not a bug: the
/// draft's sqrt(G)·Reno at equal loss rate). Records the ratio; asserts only that LEDBAT++
/// still takes less than the primary.
#[test]
fn shallow_buffer_records_partial_yield() {
    let (alone, with, ledbat) = primary_with_and_without("lb-shallow", 1.0);
    let ratio = with / alone;
    println!(
        "shallow buffer: reno alone {alone:.2} Mbit/s, with LEDBAT++ {with:.2} (ratio {ratio:.3}), LEDBAT++ {ledbat:.2}"
    );
    assert!(ledbat < with, "LEDBAT++ {ledbat} vs primary {with}");
}

/// docs/architecture.md §8, docs/algorithms/ledbat-pp.md §6: a PRIORITY switch to primary hands the flow
/// to CUBIC with its window (trace: a hand-off carrying the last LEDBAT++ window, or the
/// saved one during a slowdown), and the flow's share against an AIMD primary rises.
#[test]
fn priority_switch_to_primary_hands_off_to_cubic_and_share_rises() {
    let (agent, trace_path) = agent_with_trace("lb-switch");
    let scenario = ScenarioFile::new(
        "lb-switch",
        r#"
name = "LEDBAT++ switched to primary at 40 s against AIMD, 48 Mbit/s, 30 ms, 5 BDP"
[link]
rate_mbps = 48.0
rtt_ms = 30.0
buffer_bdp = 5.0
duration_s = 90.0
[[flow]]
name = "app"
alg = "ledbat++"
priority = [{ at_s = 40.0, class = "primary" }]
[[cross]]
kind = "aimd"
name = "reno"
start_s = 5.0
[[report]]
name = "scavenger"
from_s = 20.0
to_s = 40.0
[[report]]
name = "primary"
from_s = 60.0
to_s = 90.0
"#,
    );
    let v = sim(&agent.name, &scenario, &[]);
    let stderr = stop(agent);
    let lines = take_trace(&trace_path);
    let last_ledbat = lines
        .iter()
        .rev()
        .find(|l| l["algorithm"] == "ledbat++" && l["event"] == "report")
        .expect("LEDBAT++ reports");
    let handoff = lines
        .iter()
        .find(|l| l["event"] == "handoff")
        .unwrap_or_else(|| panic!("no hand-off in the trace:\n{stderr}"));
    assert_eq!(handoff["algorithm"], "cubic");
    assert_eq!(handoff["from"], "ledbat++");
    let carried = handoff["carried"]["cwnd"].as_u64().expect("carried cwnd");
    let last_cwnd = last_ledbat["cwnd"].as_u64().expect("cwnd");
    let in_slowdown = last_ledbat["state"]
        .as_str()
        .is_some_and(|s| s.starts_with("slowdown"));
    if in_slowdown {
        assert!(
            carried >= last_cwnd,
            "carried {carried} < window {last_cwnd}"
        );
    } else {
        assert_eq!(carried, last_cwnd);
    }
    assert_eq!(
        handoff["cwnd"].as_u64(),
        Some(carried),
        "CUBIC starts from the carried window"
    );
    assert!(
        lines
            .iter()
            .filter(|l| l["event"] == "report" && l["algorithm"] == "ledbat++")
            .all(|l| l["datapath_time_us"]
                .as_f64()
                .is_some_and(|t| t <= 40.0e6 + 1.0)),
        "LEDBAT++ decided after the hand-off"
    );
    let before = window_mbps(&v, 0, "app");
    let after = window_mbps(&v, 1, "app");
    println!(
        "share before {before:.2} Mbit/s, after the switch {after:.2} Mbit/s, carried {carried} B"
    );
    assert!(
        after > 5.0 * before.max(0.1),
        "before {before}, after {after}"
    );
}

/// Spec §6 (primary → LEDBAT++): switched to primary and back to scavenger, the flow returns
/// to LEDBAT++ in avoidance with CUBIC's window (no new initial slow start), and yields to
/// the AIMD primary again.
#[test]
fn back_to_scavenger_returns_to_ledbat_with_cubic_window_and_yields() {
    let (agent, trace_path) = agent_with_trace("lb-back");
    let scenario = ScenarioFile::new(
        "lb-back",
        r#"
name = "LEDBAT++ to primary at 30 s and back at 60 s, against AIMD, 48 Mbit/s, 30 ms, 5 BDP"
[link]
rate_mbps = 48.0
rtt_ms = 30.0
buffer_bdp = 5.0
duration_s = 100.0
[[flow]]
name = "app"
alg = "ledbat++"
priority = [{ at_s = 30.0, class = "primary" }, { at_s = 60.0, class = "scavenger" }]
[[cross]]
kind = "aimd"
name = "reno"
start_s = 5.0
[[report]]
name = "primary"
from_s = 45.0
to_s = 60.0
[[report]]
name = "scavenger again"
from_s = 80.0
to_s = 100.0
"#,
    );
    let v = sim(&agent.name, &scenario, &[]);
    let stderr = stop(agent);
    let lines = take_trace(&trace_path);
    let handoffs: Vec<&Value> = lines.iter().filter(|l| l["event"] == "handoff").collect();
    assert_eq!(handoffs.len(), 2, "to CUBIC and back:\n{stderr}");
    let back = handoffs[1];
    assert_eq!(back["from"], "cubic");
    assert_eq!(back["algorithm"], "ledbat++");
    assert_eq!(back["state"], "avoidance", "no new initial slow start");
    let carried = back["carried"]["cwnd"].as_u64().expect("carried cwnd");
    assert_eq!(back["cwnd"].as_u64(), Some(carried));
    let primary = window_mbps(&v, 0, "app");
    let scavenger = window_mbps(&v, 1, "app");
    println!(
        "as primary {primary:.2} Mbit/s, scavenger again {scavenger:.2} Mbit/s, carried {carried} B"
    );
    assert!(
        scavenger < 0.2 * primary,
        "primary {primary}, scavenger {scavenger}"
    );
}

/// E11: two LEDBAT++ flows started 30 s apart (50 Mbit/s, 30 ms, 4 BDP) share fairly once
/// slowdowns have shown both the true base delay: Jain's index ≥ 0.9 over 100 s.
#[test]
fn two_flows_started_apart_share_fairly() {
    let agent = start_agent(&unique("lb-fair"), &["--default", "cubic"]);
    let scenario = ScenarioFile::new(
        "lb-fair",
        r#"
name = "two LEDBAT++ flows 30 s apart, 50 Mbit/s, 30 ms, 4 BDP"
[link]
rate_mbps = 50.0
rtt_ms = 30.0
buffer_bdp = 4.0
duration_s = 200.0
[[flow]]
name = "first"
alg = "ledbat++"
[[flow]]
name = "late"
alg = "ledbat++"
start_s = 30.0
[[report]]
from_s = 100.0
to_s = 200.0
"#,
    );
    let v = sim(&agent.name, &scenario, &[]);
    stop(agent);
    let x = [window_mbps(&v, 0, "first"), window_mbps(&v, 0, "late")];
    let jain = jain(&x).expect("the flows moved data");
    println!(
        "first {:.2} Mbit/s, late {:.2} Mbit/s, Jain {jain:.3}",
        x[0], x[1]
    );
    assert!(jain >= 0.9, "Jain index {jain}");
}
