//! The agent driven by the test datapath process, i.e. by the real libccp: programs
//! installed on Ready, algorithm selection, reports whose decisions libccp applies,
//! PRIORITY reaching the flow, close, and two datapaths at once.

mod common;

use common::*;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Runs a test-datapath script against the agent; returns the JSON lines.
fn run_script(agent: &str, script: &str, tag: &str) -> Vec<Value> {
    let path = std::env::temp_dir()
        .join(unique(tag))
        .with_extension("toml");
    std::fs::write(&path, script).expect("write script");
    let out = Command::new(common::testdp_bin())
        .args(["script"])
        .arg(&path)
        .args(["--agent", agent, "--bind", &unique(tag)])
        .output()
        .expect("run ccp-testdp");
    let _ = std::fs::remove_file(&path);
    assert!(
        out.status.success(),
        "ccp-testdp failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("json line"))
        .collect()
}

fn trace(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).expect("trace line"))
        .collect()
}

fn last_line<'a>(lines: &'a [Value], flow: &str) -> &'a Value {
    lines
        .iter()
        .rev()
        .find(|l| l["flow"] == flow)
        .unwrap_or_else(|| panic!("no line for {flow}"))
}

const ACKS: &str = r#"
[[step]]
op = "ack"
flow = "a"
bytes_acked = 1448
packets_acked = 1
rtt_sample_us = 30000
bytes_in_flight = 14480
packets_in_flight = 10
repeat = 400
every_us = 300
"#;

fn create(alg: &str, dst_port: u16) -> String {
    format!(
        "[[step]]\nop = \"create\"\nflow = \"a\"\nalg = \"{alg}\"\ninit_cwnd = 14480\nmss = 1448\n\
         src = \"10.0.0.1:40000\"\ndst = \"10.0.0.2:{dst_port}\"\n"
    )
}

#[test]
fn cubic_decisions_reach_libccp_and_priority_and_close_reach_the_agent() {
    let name = unique("cubic");
    let trace_path: PathBuf = std::env::temp_dir().join(unique("trace"));
    let agent = start_agent(
        &name,
        &["--trace-flows", trace_path.to_str().expect("utf-8")],
    );
    let script = format!(
        "{}{ACKS}\n[[step]]\nop = \"priority\"\nflow = \"a\"\nclass = \"scavenger\"\n\n[[step]]\nop = \"close\"\nflow = \"a\"\n",
        create("cubic", 5201)
    );
    let lines = run_script(&name, &script, "cubic");
    let after_acks = &lines[1];
    assert_eq!(after_acks["invoke_errors"], 0, "{after_acks}");
    assert!(
        after_acks["reports"].as_u64().expect("n") >= 3,
        "one report per RTT over 120 ms: {after_acks}"
    );
    // Slow start in the datapath program grows the window from the initial 10 packets.
    assert!(
        after_acks["cwnd"].as_u64().expect("cwnd") > 14480,
        "{after_acks}"
    );
    assert!(after_acks["cwnd_updates"].as_u64().expect("n") > 0);
    assert_eq!(last_line(&lines, "a")["closed"], true);

    let (ok, stderr) = agent.stop();
    assert!(ok, "{stderr}");
    let c = counters(&stderr);
    assert_eq!(
        (
            c["ready"].as_u64(),
            c["creates"].as_u64(),
            c["closes"].as_u64()
        ),
        (Some(1), Some(1), Some(1)),
        "{c}"
    );
    assert!(
        c["installs_sent"].as_u64().expect("n") >= 2,
        "every program installed on Ready: {c}"
    );
    let t = trace(&trace_path);
    let _ = std::fs::remove_file(&trace_path);
    let events: Vec<&str> = t
        .iter()
        .map(|l| l["event"].as_str().expect("event"))
        .collect();
    assert_eq!(events.first(), Some(&"create"));
    assert!(events.contains(&"report"));
    assert_eq!(
        &events[events.len() - 2..],
        ["priority", "close"],
        "{events:?}"
    );
    // CUBIC has no scavenger mode and this flow started on it: the request is recorded and
    // the flow stays as it was.
    assert_eq!(t[t.len() - 2]["requested"], "scavenger");
    assert_eq!(t[t.len() - 2]["kept"], true);
    assert!(t.iter().all(|l| l["algorithm"] == "cubic"));
}

#[test]
fn selection_by_name_then_policy_then_default() {
    let name = unique("select");
    let policy = std::env::temp_dir()
        .join(unique("policy"))
        .with_extension("toml");
    std::fs::write(
        &policy,
        "[[rule]]\nremote_port = \"6000-6010\"\nalgorithm = \"fixed\"\npriority = \"scavenger\"\n",
    )
    .expect("policy");
    let trace_path = std::env::temp_dir().join(unique("trace"));
    let agent = start_agent(
        &name,
        &[
            "--policy",
            policy.to_str().expect("utf-8"),
            "--trace-flows",
            trace_path.to_str().expect("utf-8"),
        ],
    );
    // ccp-kernel-style "reno" is no preference: policy decides by port, else the default.
    for (alg, port) in [
        ("fixed", 80),
        ("reno", 6005),
        ("", 80),
        ("no-such-alg", 6001),
    ] {
        run_script(
            &name,
            &format!(
                "{}\n[[step]]\nop = \"close\"\nflow = \"a\"\n",
                create(alg, port)
            ),
            "select",
        );
    }
    let (ok, stderr) = agent.stop();
    assert!(ok);
    let _ = std::fs::remove_file(&policy);
    let creates: Vec<(String, String)> = trace(&trace_path)
        .iter()
        .filter(|l| l["event"] == "create")
        .map(|l| {
            (
                l["algorithm"].as_str().expect("alg").to_owned(),
                l["priority"].as_str().expect("p").to_owned(),
            )
        })
        .collect();
    let _ = std::fs::remove_file(&trace_path);
    let expect = |a: &str, p: &str| (a.to_owned(), p.to_owned());
    assert_eq!(
        creates,
        vec![
            expect("fixed", "primary"),
            expect("fixed", "scavenger"),
            expect("cubic", "primary"),
            expect("fixed", "scavenger")
        ]
    );
    assert_eq!(counters(&stderr)["unknown_algorithm"], 1);
}

#[test]
fn a_fixed_rate_decision_is_applied_by_libccp() {
    let name = unique("rate");
    let agent = start_agent(
        &name,
        &[
            "--default",
            "fixed",
            "--fixed-cwnd",
            "90000",
            "--fixed-rate-mbps",
            "12",
        ],
    );
    let lines = run_script(&name, &format!("{}{ACKS}", create("", 80)), "rate");
    let a = last_line(&lines, "a");
    assert_eq!(a["cwnd"], 90_000, "{a}");
    assert_eq!(a["rate"], 1_500_000, "{a}");
    drop(agent);
}

#[test]
fn two_test_datapaths_at_once() {
    let name = unique("twodp");
    let agent = start_agent(&name, &[]);
    let script = format!(
        "{}{ACKS}\n[[step]]\nop = \"close\"\nflow = \"a\"\n",
        create("cubic", 5201)
    );
    let handles: Vec<_> = (0..2)
        .map(|i| {
            let (name, script) = (name.clone(), script.clone());
            std::thread::spawn(move || run_script(&name, &script, &format!("dp{i}")))
        })
        .collect();
    for h in handles {
        let lines = h.join().expect("datapath thread");
        assert_eq!(lines[1]["invoke_errors"], 0);
        assert!(lines[1]["cwnd"].as_u64().expect("cwnd") > 14480);
    }
    let (ok, stderr) = agent.stop();
    assert!(ok);
    let c = counters(&stderr);
    assert_eq!(
        (
            c["ready"].as_u64(),
            c["creates"].as_u64(),
            c["closes"].as_u64()
        ),
        (Some(2), Some(2), Some(2)),
        "{c}"
    );
}
