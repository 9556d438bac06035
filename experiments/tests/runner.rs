//! The runner end to end on the emulator: raw results, summary, re-run script and charts are
//! written; a finished run is not repeated; a `ccp:` flow is skipped with a clear reason while
//! the eBPF datapath is absent; and `run.sh` alone repeats the run. Needs root and iperf3.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

fn missing_prerequisite() -> Option<&'static str> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("needs root (network namespaces and TUN devices)");
    }
    if Command::new("iperf3").arg("--version").output().is_err() {
        return Some("needs iperf3");
    }
    None
}

const PLAN: &str = r#"
name = "runner-test"
description = "one short CUBIC flow and one ccp flow"
kind = "single-flow"
[quick]
bandwidth_mbps = [12]
rtt_ms = [20]
buffer_bdp = [1.0]
duration_s = 4
warmup_s = 1
algorithms = ["cubic", "ccp:proteus-s"]
[full]
"#;

fn exp(args: &[&str], out: &Path) -> (bool, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_ccp-exp"))
        .args(args)
        .arg("--out")
        .arg(out)
        .args(["--backend", "emulator"])
        .output()
        .expect("ccp-exp runs");
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn json(p: &Path) -> Value {
    serde_json::from_str(
        &std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display())),
    )
    .expect("valid JSON")
}

#[test]
fn a_scenario_runs_once_and_its_script_repeats_it() {
    if let Some(why) = missing_prerequisite() {
        eprintln!("SKIPPED: {why}");
        return;
    }
    let root = std::env::temp_dir().join(format!("emuh-runner-{}", std::process::id()));
    std::fs::create_dir_all(&root).expect("temp dir");
    let plan = root.join("plan.toml");
    std::fs::write(&plan, PLAN).expect("plan");
    let out = root.join("results");
    let plan_arg = plan.to_str().expect("utf-8");

    let (ok, log) = exp(&["run", plan_arg, "--quick"], &out);
    assert!(ok, "first run failed: {log}");
    let dir = out.join("runner-test");
    let cubic = dir.join("bw12-rtt20-buf30000-d4-cubic");
    for f in [
        "flow-0.json",
        "run.sh",
        "inner.sh",
        "spec.json",
        "summary.json",
        "timeline.png",
        "timeline.svg",
    ] {
        assert!(cubic.join(f).is_file(), "missing {f}");
    }
    for f in [
        "summary-quick.csv",
        "summary-quick.json",
        "utilization-vs-buffer-quick.png",
        "utilization-vs-buffer-quick.svg",
    ] {
        assert!(dir.join(f).is_file(), "missing {f}");
    }
    let s = json(&cubic.join("summary.json"));
    assert_eq!(s["status"], "ok");
    let util = s["link"]["utilization"].as_f64().expect("utilization");
    assert!(
        util > 0.8 && util < 1.05,
        "CUBIC alone on 12 Mbit/s: utilization {util}"
    );
    let ccp = json(
        &dir.join("bw12-rtt20-buf30000-d4-ccp_proteus-s")
            .join("summary.json"),
    );
    // The scavenger run needs ccp-agent and ccp-ebpf beside ccp-exp and a free `ccp`
    // registration; with them it runs, without them it is skipped and says why.
    match ccp["status"].as_str() {
        Some("ok") => {
            let util = ccp["link"]["utilization"].as_f64().expect("utilization");
            assert!(
                util > 0.5,
                "CUBIC + Proteus-S on 12 Mbit/s: utilization {util}"
            );
        }
        Some("skipped") => {
            let reason = ccp["reason"].as_str().unwrap_or_default();
            assert!(
                reason.contains("datapath not available") || reason.contains("datapath busy"),
                "reason: {reason}"
            );
        }
        other => panic!("scavenger run ended as {other:?}: {ccp}"),
    }

    // Resumable: the finished run is not repeated.
    let (ok, log) = exp(&["run", plan_arg, "--quick"], &out);
    assert!(ok, "second run failed: {log}");
    assert!(log.contains("(done before)"), "log: {log}");

    // The script alone repeats the run.
    std::fs::remove_file(cubic.join("flow-0.json")).expect("remove");
    let st = Command::new("bash")
        .arg(cubic.join("run.sh"))
        .env("CCP_EMU", env!("CARGO_BIN_EXE_ccp-emu"))
        .output()
        .expect("bash runs");
    assert!(
        st.status.success(),
        "run.sh: {}",
        String::from_utf8_lossy(&st.stderr)
    );
    let again = json(&cubic.join("flow-0.json"));
    let bps = again["end"]["sum_received"]["bits_per_second"]
        .as_f64()
        .expect("rate");
    assert!(bps > 9e6, "re-run got {bps} bit/s");
    let _ = std::fs::remove_dir_all(PathBuf::from(&root));
}
