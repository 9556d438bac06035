//! The example scenarios and scripts shipped with the crate stay valid.

use ccp_sim::Scenario;
use std::path::Path;

fn files(dir: &str) -> Vec<std::path::PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
    let mut v: Vec<_> = std::fs::read_dir(&dir)
        .expect("example directory")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    v.sort();
    v
}

#[test]
fn every_example_scenario_parses_and_validates() {
    let all = files("scenarios");
    assert!(all.len() >= 5);
    for p in all {
        let s: Scenario = toml::from_str(&std::fs::read_to_string(&p).expect("read"))
            .unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        s.validate()
            .unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    }
}

#[test]
fn every_example_script_parses() {
    for p in files("scripts") {
        let _: ccp_testdp::script::Script =
            toml::from_str(&std::fs::read_to_string(&p).expect("read"))
                .unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    }
}

#[test]
fn a_scenario_without_ccp_flows_runs_without_an_agent() {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/model-only-aimd-cbr.toml");
    let s: Scenario = toml::from_str(&std::fs::read_to_string(p).expect("read")).expect("parses");
    let out = ccp_testdp::sim::run(&s, None, vec![]).expect("runs");
    assert!(out.agent.is_none() && out.ccp.is_empty());
    assert!(
        out.summary.utilization > 0.98,
        "{}",
        out.summary.utilization
    );
    let csv = ccp_testdp::sim::series_csv(&out.summary);
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines.len(), 1 + 300, "a header and one row per 100 ms bin");
    assert!(lines[0].starts_with("t_s,queue_delay_ms,queue_delay_max_ms,reno_mbps,"));
    assert!(lines[300].starts_with("30.000,"));
}

#[test]
fn removing_the_scavenger_leaves_a_run_that_needs_no_agent() {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/aimd-vs-proteus-s.toml");
    let s: Scenario = toml::from_str(&std::fs::read_to_string(p).expect("read")).expect("parses");
    assert!(matches!(
        ccp_testdp::sim::run(&s, None, vec![]),
        Err(ccp_testdp::sim::SimError::NoAgent(_))
    ));
    let alone = s.without(&["scavenger"]).expect("known flow");
    let out = ccp_testdp::sim::run(&alone, None, vec!["scavenger".into()]).expect("runs");
    let reno = out.summary.windows[0].mbps("reno").expect("reno");
    assert!(reno > 47.0, "{reno}");
}
