//! The runner end to end on the emulator: raw results, summary, re-run script and charts are
//! written; a finished run is not repeated; a `ccp:` flow is skipped with a clear reason while
//! the eBPF datapath is absent; `run.sh` alone repeats the run; runs go at once on one shared
//! datapath with their own slices of the flow trace; an interrupted invocation leaves nothing
//! registered and goes on where it stopped; what a killed one left is removed by the next.
//! Needs root and iperf3.

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
duration_s = 8
warmup_s = 2
algorithms = ["cubic", "ccp:proteus-s"]
[full]
"#;

/// One invocation at a time: the kernel has one `ccp` registration.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn ccp_registered() -> bool {
    std::fs::read_to_string("/proc/sys/net/ipv4/tcp_available_congestion_control")
        .is_ok_and(|a| a.split_whitespace().any(|c| c == "ccp"))
}

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
    let _lock = ONE_AT_A_TIME.lock();
    let scratch = Scratch::new("runner", PLAN);
    let (plan_arg, out) = (scratch.plan.as_str(), &scratch.out);
    let (ok, log) = exp(&["run", plan_arg, "--quick"], out);
    assert!(ok, "first run failed: {log}");
    let dir = out.join("runner-test");
    let cubic = dir.join("bw12-rtt20-buf30000-d8-cubic");
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
        &dir.join("bw12-rtt20-buf30000-d8-ccp_proteus-s")
            .join("summary.json"),
    );
    // The scavenger run needs ccp-agent and ccp-ebpf beside ccp-exp and a free `ccp`
    // registration; with them it runs, without them it is skipped and says why.
    match ccp["status"].as_str() {
        Some("ok") => {
            let util = ccp["link"]["utilization"].as_f64().expect("utilization");
            assert!(
                util > 0.5,
                "Proteus-S alone on 12 Mbit/s: utilization {util}"
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

    // Resumable: the finished run is not repeated. What a killed run left (named after a
    // shell that is gone) is removed first; what a live shell's run holds is not.
    let dead = Command::new("true")
        .spawn()
        .and_then(|mut c| c.wait().map(|_| c.id()))
        .expect("true runs");
    let stale_ns = format!("emuh-r{dead}-snd");
    let live_ns = format!("emuh-r{}-snd", std::process::id());
    for ns in [&stale_ns, &live_ns] {
        let st = Command::new("ip").args(["netns", "add", ns]).status();
        assert!(st.is_ok_and(|s| s.success()), "ip netns add {ns}");
    }
    let stale_sock = ccp_rundir::socket_path(&format!("ccp-exp-{dead}"));
    std::os::unix::fs::DirBuilderExt::mode(std::fs::DirBuilder::new().recursive(true), 0o755)
        .create(ccp_rundir::SOCKET_DIR)
        .expect("socket directory");
    std::fs::write(&stale_sock, "").expect("stale socket stand-in");
    let (ok, log) = exp(&["run", plan_arg, "--quick"], out);
    let netns = Command::new("ip").args(["netns", "list"]).output();
    let netns = String::from_utf8_lossy(&netns.expect("ip netns list").stdout).into_owned();
    let _ = Command::new("ip").args(["netns", "del", &live_ns]).status();
    assert!(ok, "second run failed: {log}");
    assert!(log.contains("(done before)"), "log: {log}");
    assert!(!netns.contains(&stale_ns), "{stale_ns} kept: {netns}");
    assert!(netns.contains(&live_ns), "{live_ns} removed: {log}");
    assert!(!stale_sock.exists(), "{} kept: {log}", stale_sock.display());
    assert!(log.contains("removed what killed runs left"), "log: {log}");

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
}

/// The algorithm of the parallel plan's `ccp:` runs. Proteus-P, not Proteus-S: what the
/// shared datapath must give each run (its flow driven, its slice of the trace) is the same,
/// and a primary's throughput does not move with the RTT noise that runs beside it add on a
/// small host. On a 2-core CI host a Proteus-S run at 12 Mbit/s, 20 ms beside the others
/// kept 1.4 Mbit/s: their load lifted its MIs' mean RTT over its standing-queue line
/// (docs/results.md, "Runs beside a scavenger").
const PARALLEL_ALG: &str = "proteus-p";

/// Two runs of `PARALLEL_ALG` and a CUBIC run, at once under `--jobs`.
fn parallel_plan() -> String {
    format!(
        r#"
name = "runner-jobs"
description = "two {PARALLEL_ALG} runs and a CUBIC run at once"
kind = "single-flow"
[quick]
bandwidth_mbps = [12, 24]
rtt_ms = [20]
buffer_bdp = [1.0]
duration_s = 8
warmup_s = 2
algorithms = ["ccp:{PARALLEL_ALG}", "cubic"]
"#
    )
}

/// The id of the parallel plan's `ccp:` run at `mbps` (1 BDP of 20 ms: 2500 bytes per Mbit/s).
fn parallel_run_id(mbps: u32) -> String {
    format!("bw{mbps}-rtt20-buf{}-d8-ccp_{PARALLEL_ALG}", mbps * 2500)
}

/// The eBPF datapath and agent beside ccp-exp, free to register `ccp`.
fn datapath_ready() -> bool {
    let dir = Path::new(env!("CARGO_BIN_EXE_ccp-exp"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default();
    dir.join("ccp-agent").is_file() && dir.join("ccp-ebpf").is_file() && !ccp_registered()
}

/// A scratch directory with a plan in it, removed when dropped (also when the test fails).
struct Scratch {
    root: PathBuf,
    plan: String,
    out: PathBuf,
}

impl Scratch {
    fn new(tag: &str, plan_text: &str) -> Self {
        let root = std::env::temp_dir().join(format!("emuh-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&root).expect("temp dir");
        let plan = root.join("plan.toml");
        std::fs::write(&plan, plan_text).expect("plan");
        Scratch {
            plan: plan.to_str().expect("utf-8").to_string(),
            out: root.join("results"),
            root,
        }
    }

    /// With `parallel_plan()`; `None` (and the reason printed) when this machine cannot run
    /// `ccp:` flows.
    fn parallel(tag: &str) -> Option<Self> {
        let why = missing_prerequisite().or_else(|| {
            (!datapath_ready()).then_some("needs ccp-agent and ccp-ebpf built and `ccp` free")
        });
        if let Some(why) = why {
            eprintln!("SKIPPED: {why}");
            return None;
        }
        Some(Scratch::new(tag, &parallel_plan()))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

#[test]
fn runs_go_at_once_on_one_shared_datapath_each_with_its_slice_of_the_trace() {
    let _lock = ONE_AT_A_TIME.lock();
    let Some(scratch) = Scratch::parallel("jobs") else {
        return;
    };
    let out = &scratch.out;
    let (ok, log) = exp(&["run", &scratch.plan, "--quick", "--jobs", "3"], out);
    assert!(ok, "ccp-exp --jobs 3 failed: {log}");
    assert!(!ccp_registered(), "the shared datapath is taken down");
    let dir = out.join("runner-jobs");
    // The shared datapath's policy covers every slot of the plan's class.
    let policy = std::fs::read_to_string(dir.join("shared/policy.toml")).expect("policy");
    assert!(
        policy.contains(&format!("algorithm = \"{PARALLEL_ALG}\"")),
        "{policy}"
    );
    for mbps in [12, 24] {
        let run = dir.join(parallel_run_id(mbps));
        let s = json(&run.join("summary.json"));
        assert_eq!(s["status"], "ok", "{s}");
        let tput = s["flows"][0]["throughput_bps"]
            .as_f64()
            .expect("throughput");
        assert!(tput > 0.3 * f64::from(mbps) * 1e6, "{mbps} Mbit/s: {tput}");
        // The shared datapath's ACK counters over the run hold at least this run's ACKs.
        let acks = s["datapath"]["acks"].as_u64().expect("datapath counters");
        assert!(
            acks > 1000,
            "{mbps} Mbit/s: {acks} ACKs read during the run"
        );
        let late = s["datapath"]["late_acks"].as_u64().expect("late ACKs");
        assert!(late <= acks, "{late} of {acks}");
        // The run's slice of the shared trace holds its own flow: a create line on one of its
        // server ports, and the flow's reports.
        // `flow 0 <start> <duration> <cc> <server port> <client port> &`
        let ports: Vec<String> = std::fs::read_to_string(run.join("inner.sh"))
            .expect("inner.sh")
            .lines()
            .find(|l| l.starts_with("flow 0 "))
            .map(|l| {
                l.split_whitespace()
                    .skip(5)
                    .take(2)
                    .map(String::from)
                    .collect()
            })
            .expect("flow line");
        let server_port = &ports[0];
        let trace = std::fs::read_to_string(run.join("agent-trace.jsonl")).expect("trace slice");
        let lines: Vec<Value> = trace
            .lines()
            .map(|l| serde_json::from_str(l).expect("json"))
            .collect();
        let create = lines
            .iter()
            .find(|l| {
                l["event"] == "create"
                    && l["remote"]
                        .as_str()
                        .is_some_and(|r| r.ends_with(&format!(":{server_port}")))
            })
            .unwrap_or_else(|| panic!("no create line for port {server_port} in {trace}"));
        assert_eq!(create["algorithm"], PARALLEL_ALG);
        let sid = create["sid"].as_u64().expect("sid");
        let reports = lines
            .iter()
            .filter(|l| l["event"] == "report" && l["sid"] == sid && l["algorithm"] == PARALLEL_ALG)
            .count();
        assert!(
            reports > 10,
            "{mbps} Mbit/s: {reports} reports in the slice"
        );
        // Nothing of the other runs: every flow in the slice is on one of this run's ports
        // (the receiver's side of the flow has the client port as its remote).
        for l in lines
            .iter()
            .filter(|l| l["event"] == "create" && l["remote"].is_string())
        {
            let remote = l["remote"].as_str().unwrap_or_default();
            assert!(
                ports.iter().any(|p| remote.ends_with(&format!(":{p}"))),
                "{mbps} Mbit/s: a foreign flow in the slice: {l}"
            );
        }
    }
}

#[test]
fn an_interrupted_invocation_takes_the_datapath_down_and_resumes_later() {
    let _lock = ONE_AT_A_TIME.lock();
    let Some(scratch) = Scratch::parallel("int") else {
        return;
    };
    let out = &scratch.out;
    let child = Command::new(env!("CARGO_BIN_EXE_ccp-exp"))
        .args(["run", &scratch.plan, "--quick", "--backend", "emulator"])
        .arg("--out")
        .arg(out)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("ccp-exp starts");
    // Interrupt the first run (`PARALLEL_ALG` at 12 Mbit/s) half-way, as Ctrl-C would.
    let started = std::time::Instant::now();
    while !ccp_registered() && started.elapsed() < std::time::Duration::from_secs(30) {
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    std::thread::sleep(std::time::Duration::from_secs(5));
    // SAFETY: kill() has no memory effects; the pid is our child's.
    unsafe {
        libc::kill(child.id() as libc::pid_t, libc::SIGINT);
    }
    let o = child.wait_with_output().expect("ccp-exp ends");
    let log = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success(),
        "an interrupted invocation is not a success: {log}"
    );
    assert!(log.contains("interrupted"), "{log}");
    assert!(!ccp_registered(), "the datapath is taken down: {log}");
    let dir = out.join("runner-jobs");
    let first = dir.join(parallel_run_id(12));
    assert!(
        !first.join("summary.json").exists(),
        "an interrupted run leaves no summary"
    );
    // The same command goes on: every run finishes.
    let (ok, log) = exp(&["run", &scratch.plan, "--quick"], out);
    assert!(ok, "resumed: {log}");
    assert_eq!(json(&first.join("summary.json"))["status"], "ok");
}

#[test]
fn only_keeps_the_runs_with_a_flow_of_that_congestion_control() {
    let out = std::env::temp_dir().join(format!("ccp-exp-only-{}", std::process::id()));
    let dry = |extra: &[&str]| {
        let o = Command::new(env!("CARGO_BIN_EXE_ccp-exp"))
            .args(["run", "regression", "--full", "--dry-run", "--out"])
            .arg(&out)
            .args(extra)
            .output()
            .expect("ccp-exp runs");
        let ids: Vec<String> = String::from_utf8_lossy(&o.stdout)
            .lines()
            .map(|l| l.split_whitespace().next().unwrap_or_default().to_string())
            .collect();
        (
            o.status.success(),
            ids,
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    let (ok, all, _) = dry(&[]);
    assert!(ok && all.len() == 216, "{} runs", all.len());
    let (ok, only, _) = dry(&["--only", "ccp:proteus-s"]);
    assert!(ok);
    // Every competing run of Proteus-S, twice per bottleneck and primary, and nothing else.
    assert_eq!(only.len(), 72);
    assert!(
        only.iter().all(|id| id.contains("ccp_proteus-s")),
        "{only:?}"
    );
    assert_eq!(
        all.iter().filter(|id| id.contains("ccp_proteus-s")).count(),
        only.len()
    );
    let (ok, _, err) = dry(&["--only", "ccp:nosuch"]);
    assert!(
        !ok && err.contains("its flows: bbr, ccp:ledbat++, ccp:proteus-s, cubic"),
        "{err}"
    );
}
