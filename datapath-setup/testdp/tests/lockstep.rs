//! The datapath side of the lock-step, against a fake agent: libccp runs real
//! portus-compiled programs on virtual time, and every agent decision is in force at the
//! next ACK.

mod common;

use algs_core::register::INFINITY_REGISTER;
use algs_core::{AckPrimitives, BytesPerSec, Priority};
use ccp_sim::{AckSample, CcpFlowSpec, LinkSpec, ReportWindow, Scenario};
use ccp_testdp::datapath::{DpError, DpOptions, FlowSpec, TestDatapath};
use ccp_testdp::link::LinkError;
use common::{Behaviour, FakeAgent, serial, unique};
use std::net::SocketAddrV4;
use std::time::Duration;

const MS: u64 = 1_000_000;

fn opts(agent: &str) -> DpOptions {
    let mut o = DpOptions::new(agent);
    o.bind = unique("testdp-dp");
    o.agent_wait = Duration::from_millis(2_000);
    o
}

fn spec(name: &str) -> FlowSpec {
    FlowSpec {
        name: name.into(),
        alg: "fake".into(),
        init_cwnd: 14_480,
        mss: 1448,
        src: SocketAddrV4::new([10, 0, 0, 1].into(), 40_000),
        dst: SocketAddrV4::new([10, 0, 0, 2].into(), 5_201),
    }
}

/// One ACK of one packet; like any datapath, it loads the window in force as `snd_cwnd`
/// (libccp re-applies that register after every program run).
fn ack(dp: &TestDatapath, f: usize, rtt_us: u64) -> AckSample {
    AckSample {
        prims: AckPrimitives {
            bytes_acked: 1448,
            packets_acked: 1,
            rtt_sample_us: rtt_us,
            snd_cwnd: dp.status(f).cwnd,
            ..AckPrimitives::default()
        },
        ..AckSample::default()
    }
}

#[test]
fn agent_decisions_apply_at_the_next_ack_on_virtual_time() {
    let _g = serial();
    let agent = FakeAgent::start(Behaviour::default());
    let mut dp = TestDatapath::connect(&opts(&agent.name)).expect("connects");
    let f = dp.create(&spec("a")).expect("creates");
    assert_eq!(dp.status(f).sid, Some(1));
    // The ChangeProg is staged in libccp, not applied before an ACK.
    assert_eq!(dp.status(f).cwnd, 14_480);
    let t0 = dp.now_ns();
    let mut first_report_at = None;
    for k in 1..=30u64 {
        dp.set_time(t0 + k * MS);
        let before = dp.status(f).reports;
        dp.ack(f, &ack(&dp, f, 30_000)).expect("acks");
        let st = dp.status(f);
        if k == 1 {
            assert_eq!(
                st.cwnd, 20_000,
                "ChangeProg's Cwnd in force at the first ACK"
            );
        }
        if st.reports > before && first_report_at.is_none() {
            first_report_at = Some(k);
            // The report's UpdateFields is staged by the SYNC barrier, applied next ACK.
            assert_eq!(st.cwnd, 20_000);
            let r = st.last_report.as_ref().expect("report");
            // Fields in definition order: acked, now, rtt, lost. Micros restarts at the
            // first ACK (program switch), so the report comes at the ACK with Micros = 11 ms.
            assert_eq!(r.fields[0], k * 1448, "every ACK since the program started");
            assert_eq!(
                r.fields[1],
                (t0 + k * MS) / 1_000,
                "Ack.now is virtual time"
            );
            assert_eq!(r.fields[2], 30_000);
        }
        if first_report_at.is_some_and(|r| k == r + 1) {
            assert_eq!(
                dp.status(f).cwnd,
                30_001,
                "UpdateFields in force at the next ACK"
            );
        }
    }
    assert_eq!(first_report_at, Some(12));
    assert_eq!(dp.status(f).invoke_errors, 0);
    dp.close(f).expect("closes");
    let got = agent.finish();
    let types: Vec<u16> = got.iter().filter(|m| m.0 != 0x21).map(|m| m.0).collect();
    // Ready, Create, two reports (11 ms apart: at 12 and 23 ms), close.
    assert_eq!(types, vec![5, 0, 1, 1, 1]);
    let close = got.iter().rev().find(|m| m.0 == 1).expect("close");
    assert_eq!(
        close.2[4..8],
        [0, 0, 0, 0],
        "a Measure with no fields closes the flow"
    );
}

#[test]
fn rtt_sample_zero_reads_as_no_sample() {
    let _g = serial();
    let agent = FakeAgent::start(Behaviour::default());
    let mut dp = TestDatapath::connect(&opts(&agent.name)).expect("connects");
    let f = dp.create(&spec("a")).expect("creates");
    let t0 = dp.now_ns();
    for k in 1..=12u64 {
        dp.set_time(t0 + k * MS);
        dp.ack(f, &ack(&dp, f, 0)).expect("acks");
    }
    let r = dp.status(f).last_report.clone().expect("report");
    assert_eq!(r.fields[2], INFINITY_REGISTER, "libccp's 'no sample'");
    drop(dp);
    agent.finish();
}

#[test]
fn a_create_libccp_delays_is_attributed_when_it_goes_out() {
    // libccp holds back a Create on a slot whose previous Create is less than 100 ms old
    // (docs/datapaths.md §5.4): the flow runs without a sid until an ACK sends it.
    let _g = serial();
    let agent = FakeAgent::start(Behaviour::default());
    let mut dp = TestDatapath::connect(&opts(&agent.name)).expect("connects");
    let a = dp.create(&spec("a")).expect("creates");
    dp.close(a).expect("closes");
    let b = dp.create(&spec("b")).expect("creates");
    assert_eq!(dp.status(b).sid, None, "Create held back");
    dp.priority(b, Priority::Scavenger).expect("kept for later");
    let t0 = dp.now_ns();
    dp.set_time(t0 + 50 * MS);
    dp.ack(b, &ack(&dp, b, 30_000)).expect("acks");
    assert_eq!(dp.status(b).sid, None);
    dp.set_time(t0 + 101 * MS);
    dp.ack(b, &ack(&dp, b, 30_000)).expect("acks");
    assert_eq!(dp.status(b).sid, Some(1), "the slot of the closed flow");
    // The agent answered that Create; its ChangeProg is in force at the next ACK.
    dp.set_time(t0 + 102 * MS);
    dp.ack(b, &ack(&dp, b, 30_000)).expect("acks");
    assert_eq!(dp.status(b).cwnd, 20_000);
    drop(dp);
    let got: Vec<(u16, u32)> = agent
        .finish()
        .iter()
        .filter(|m| m.0 != 0x21)
        .map(|m| (m.0, m.1))
        .collect();
    // Ready; a: Create, close; b: Create, then the priority asked for before it, and the
    // close when the datapath goes away.
    assert_eq!(got, vec![(5, 0), (0, 1), (1, 1), (0, 1), (0x20, 1), (1, 1)]);
}

#[test]
fn priority_reaches_the_agent_with_its_sid_and_threshold() {
    let _g = serial();
    let agent = FakeAgent::start(Behaviour::default());
    let mut dp = TestDatapath::connect(&opts(&agent.name)).expect("connects");
    let _a = dp.create(&spec("a")).expect("creates");
    let b = dp.create(&spec("b")).expect("creates");
    dp.priority(
        b,
        Priority::Hybrid {
            threshold: Some(BytesPerSec::from_mbps(8.0)),
        },
    )
    .expect("sends");
    let got = agent.finish();
    let p = got.iter().find(|m| m.0 == 0x20).expect("PRIORITY");
    assert_eq!(p.1, 2);
    assert_eq!(p.2[0..4], 2u32.to_le_bytes(), "hybrid");
    assert_eq!(p.2[8..16], 1_000_000u64.to_le_bytes());
}

#[test]
fn missing_agent_is_reported_by_name() {
    let _g = serial();
    let mut o = opts(&unique("testdp-nobody"));
    o.agent_wait = Duration::from_millis(300);
    let e = TestDatapath::connect(&o).expect_err("no agent");
    let msg = e.to_string();
    assert!(
        matches!(e, DpError::Link(LinkError::NoAgent { .. })),
        "{msg}"
    );
    assert!(
        msg.contains("did not answer") && msg.contains("testdp-nobody"),
        "{msg}"
    );
}

#[test]
fn a_silent_agent_times_out_with_a_clear_error() {
    let _g = serial();
    // Echoes: start-up probe, Ready barrier, Create barrier; then silence.
    let agent = FakeAgent::start(Behaviour {
        echo_limit: Some(3),
        ..Behaviour::default()
    });
    let mut o = opts(&agent.name);
    o.sync_timeout = Duration::from_millis(300);
    let mut dp = TestDatapath::connect(&o).expect("connects");
    let f = dp.create(&spec("a")).expect("creates");
    let e = dp.close(f).expect_err("no echo");
    assert!(
        e.to_string()
            .contains(&format!("agent at /tmp/ccp/{} did not answer", agent.name)),
        "{e}"
    );
    agent.finish();
}

#[test]
fn scripts_print_one_line_per_flow_and_repeat_identically() {
    let _g = serial();
    let script: ccp_testdp::script::Script = toml::from_str(
        r#"
        [[step]]
        op = "create"
        flow = "a"
        alg = "fake"
        [[step]]
        op = "create"
        flow = "b"
        [[step]]
        op = "ack"
        flow = "a"
        bytes_acked = 1448
        packets_acked = 1
        rtt_sample_us = 25000
        repeat = 20
        every_us = 1000
        [[step]]
        op = "close"
        flow = "b"
        [[step]]
        op = "advance"
        ms = 5
        "#,
    )
    .expect("parses");
    let run = || {
        let agent = FakeAgent::start(Behaviour::default());
        let mut dp = TestDatapath::connect(&opts(&agent.name)).expect("connects");
        let mut out = Vec::new();
        ccp_testdp::script::run(&script, &mut dp, &mut out).expect("runs");
        drop(dp);
        agent.finish();
        String::from_utf8(out).expect("utf8")
    };
    let first = run();
    assert_eq!(first, run(), "same script, same output");
    let lines: Vec<serde_json::Value> = first
        .lines()
        .map(|l| serde_json::from_str(l).expect("json"))
        .collect();
    // Steps: create a (1 line), create b (2), ack (2), close b (2), advance (a only: 1).
    assert_eq!(lines.len(), 8);
    let ack_a = &lines[3];
    assert_eq!(ack_a["flow"], "a");
    assert_eq!(ack_a["op"], "ack");
    assert_eq!(ack_a["invokes"], 20);
    assert_eq!(ack_a["reports"], 1);
    assert_eq!(ack_a["cwnd"], 30_001);
    assert_eq!(ack_a["last_error"], serde_json::Value::Null);
    assert_eq!(lines[6]["flow"], "b");
    assert_eq!(lines[6]["closed"], true);
    assert_eq!(
        lines[7]["now_us"].as_u64().expect("now") - ack_a["now_us"].as_u64().expect("now"),
        5_000
    );
}

fn one_flow(duration_s: f64) -> Scenario {
    Scenario {
        name: Some("one fixed-window flow".into()),
        link: LinkSpec::with_bdp_buffer(50.0, 30.0, 1.0, duration_s),
        flows: vec![CcpFlowSpec::new("x", "fake", 0.0)],
        cross: vec![],
        reports: vec![ReportWindow {
            name: None,
            from_s: 1.0,
            to_s: duration_s,
        }],
        bin_ms: 100,
    }
}

/// A window of one BDP plus two packets, set by the agent at the start.
const BDP_CWND: u64 = 187_500 + 2 * 1448;

#[test]
fn sim_runs_ccp_flows_through_libccp_and_the_agent() {
    let _g = serial();
    let agent = FakeAgent::start(Behaviour {
        start_cwnd: BDP_CWND,
        report_cwnd: 0,
        ..Behaviour::default()
    });
    let out = ccp_testdp::sim::run(&one_flow(5.0), Some(&opts(&agent.name)), vec![]).expect("runs");
    agent.finish();
    let w = &out.summary.windows[0];
    assert!(w.utilization > 0.99, "{}", w.utilization);
    let x = out.summary.flow("x").expect("x");
    assert_eq!(
        x.cwnd_bytes[20], BDP_CWND,
        "the agent's window, through libccp"
    );
    let ccp = &out.ccp[0];
    assert_eq!(ccp.invoke_errors, 0);
    assert_eq!(ccp.invokes, x.acks);
    // One report per 10+ ms of ACKs over 5 s.
    assert!((400..=500).contains(&ccp.reports), "{}", ccp.reports);
    let agent_stats = out.agent.expect("agent stats");
    assert_eq!(agent_stats.refused, 0);
}

#[test]
fn sim_through_libccp_is_deterministic_and_sends_priorities_on_time() {
    let _g = serial();
    let mut scenario = one_flow(3.0);
    scenario.flows[0].priority = vec![ccp_sim::PriorityChange {
        at_s: 1.0,
        class: ccp_sim::PriorityClassName::Scavenger,
        threshold_mbps: None,
    }];
    scenario.cross.push(ccp_sim::CrossSpec::Aimd {
        name: "reno".into(),
        start_s: 0.5,
        stop_s: None,
        init_cwnd_pkts: None,
    });
    let run = || {
        // The agent's window grows by one byte per report: every report feeds back.
        let agent = FakeAgent::start(Behaviour {
            start_cwnd: 60_000,
            report_cwnd: 60_000,
            ..Behaviour::default()
        });
        let out = ccp_testdp::sim::run(&scenario, Some(&opts(&agent.name)), vec![]).expect("runs");
        (serde_json::to_string(&out).expect("json"), agent.finish())
    };
    let (a, got) = run();
    let (b, _) = run();
    assert_eq!(
        a, b,
        "same scenario through libccp and the agent, same JSON"
    );
    // The PRIORITY at 1 s goes out between the reports of ACKs before and after 1 s: every
    // report carries Ack.now (its second field, bytes 16..24 of the payload).
    let report_now = |m: &(u16, u32, Vec<u8>)| {
        let mut b = [0u8; 8];
        b.copy_from_slice(&m.2[16..24]);
        u64::from_le_bytes(b)
    };
    let p = got.iter().position(|m| m.0 == 0x20).expect("PRIORITY sent");
    let is_report = |m: &&(u16, u32, Vec<u8>)| m.0 == 1 && m.2.len() > 8;
    let before: Vec<u64> = got[..p].iter().filter(is_report).map(report_now).collect();
    let after: Vec<u64> = got[p..].iter().filter(is_report).map(report_now).collect();
    assert!(
        before.len() > 20 && before.iter().all(|&t| t < 1_000_000),
        "{before:?}"
    );
    assert!(
        !after.is_empty() && after.iter().all(|&t| t >= 1_000_000),
        "{after:?}"
    );
}

/// The CPU cost of a simulated minute of one 50 Mbit/s flow, fake agent included (run with
/// `--ignored --nocapture` to see it).
#[test]
#[ignore = "measurement, not a check"]
fn cpu_cost_of_a_simulated_minute() {
    let _g = serial();
    let agent = FakeAgent::start(Behaviour {
        start_cwnd: BDP_CWND,
        report_cwnd: 0,
        ..Behaviour::default()
    });
    let cpu = || {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: valid timespec; the process CPU clock is not virtualized.
        unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
        ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9
    };
    let c0 = cpu();
    let out =
        ccp_testdp::sim::run(&one_flow(60.0), Some(&opts(&agent.name)), vec![]).expect("runs");
    let used = cpu() - c0;
    agent.finish();
    println!(
        "simulated 60 s, {} ACKs, {} reports: {used:.3} s CPU",
        out.ccp[0].invokes, out.ccp[0].reports
    );
}
