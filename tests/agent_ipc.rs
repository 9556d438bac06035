//! The agent as a process on its unix socket, driven by raw datapath messages: installs,
//! algorithm selection, reports, priority, close, two datapaths, and every kind of bad input.

mod common;

use ccp_wire::*;
use common::*;

const INSTALL: u8 = 2;
const UPDATE: u8 = 3;
const CHANGE: u8 = 4;

fn create(sid: u32, alg: Option<&str>) -> Vec<u8> {
    encode_create(&CreateMsg {
        sid,
        init_cwnd: 14480,
        mss: 1448,
        src_ip: u32::from_le_bytes([127, 0, 0, 1]),
        src_port: u32::from(u16::from_le_bytes(40000u16.to_be_bytes())),
        dst_ip: u32::from_le_bytes([127, 0, 0, 1]),
        dst_port: u32::from(u16::from_le_bytes(5201u16.to_be_bytes())),
        cong_alg: alg.map(str::to_owned),
    })
}

/// The program uid the agent gave `fixed`: the uid in its ChangeProg.
fn change_prog_uid(msg: &[u8]) -> u32 {
    u32::from_le_bytes([msg[8], msg[9], msg[10], msg[11]])
}

#[test]
fn ready_create_report_priority_close_over_the_socket() {
    let name = unique("flow");
    let agent = start_agent(&name, &["--default", "fixed", "--fixed-cwnd", "50000"]);
    let dp = RawDatapath::bind(&format!("{name}-dp"), &name);
    dp.send(&encode_ready(1));
    let installs = dp.sync(1);
    assert!(
        !installs.is_empty() && types(&installs).iter().all(|&t| t == INSTALL),
        "{:?}",
        types(&installs)
    );

    dp.send(&create(1, None));
    let change = dp.sync(2);
    assert_eq!(types(&change), vec![CHANGE]);
    let uid = change_prog_uid(&change[0]);
    // ChangeProg carries the window as its one field: (reg type 2 implicit, index 4 Cwnd, 50000).
    assert_eq!(&change[0][16..21], &[2, 4, 0, 0, 0]);
    assert_eq!(
        u64::from_le_bytes(change[0][21..29].try_into().expect("8 bytes")),
        50_000
    );

    dp.send(&encode_measure(1, uid, &[1448, 0, 1_000_000]));
    assert_eq!(types(&dp.sync(3)), vec![UPDATE]);

    dp.send(&encode_priority(&PriorityMsg {
        sid: 1,
        class: PriorityClass::Scavenger,
        flags: 0,
        hybrid_threshold_bytes_per_sec: 0,
    }));
    dp.send(&encode_close(1));
    dp.send(&encode_measure(1, uid, &[1448, 0, 1_000_000]));
    assert!(dp.sync(4).is_empty());

    let (ok, stderr) = agent.stop();
    assert!(ok, "clean exit on SIGTERM:\n{stderr}");
    let c = counters(&stderr);
    assert_eq!(c["creates"], 1);
    assert_eq!(c["reports"], 2);
    assert_eq!(c["priorities"], 1);
    assert_eq!(c["closes"], 1);
    assert_eq!(c["unknown_flow"], 1, "the report after close");
    assert!(stderr.contains("priority change"), "{stderr}");
}

#[test]
fn two_datapaths_keep_separate_flow_tables() {
    let name = unique("two");
    let agent = start_agent(&name, &["--default", "fixed"]);
    let a = RawDatapath::bind(&format!("{name}-a"), &name);
    let b = RawDatapath::bind(&format!("{name}-b"), &name);
    a.send(&encode_ready(1));
    b.send(&encode_ready(2));
    a.sync(1);
    b.sync(1);
    a.send(&create(1, Some("fixed")));
    b.send(&create(1, Some("fixed")));
    let uid = change_prog_uid(&a.sync(2)[0]);
    b.sync(2);
    // Closing sid 1 on A leaves sid 1 on B running.
    a.send(&encode_close(1));
    a.sync(3);
    b.send(&encode_measure(1, uid, &[1448, 0, 5]));
    assert_eq!(types(&b.sync(3)), vec![UPDATE]);
    a.send(&encode_measure(1, uid, &[1448, 0, 5]));
    assert!(a.sync(4).is_empty());
    let (ok, stderr) = agent.stop();
    assert!(ok);
    assert_eq!(counters(&stderr)["unknown_flow"], 1);
}

#[test]
fn bad_input_is_counted_and_the_agent_keeps_serving() {
    let name = unique("bad");
    let agent = start_agent(&name, &["--default", "fixed"]);
    let dp = RawDatapath::bind(&format!("{name}-dp"), &name);
    dp.send(&encode_ready(1));
    dp.send(&create(1, Some("fixed")));
    let uid = change_prog_uid(dp.sync(1).last().expect("change prog"));

    let mut non_utf8 = create(2, Some("ab"));
    non_utf8[32] = 0xc3;
    non_utf8[33] = 0x28;
    let mut install = encode_sync(1, 0);
    install[0] = 2;
    let mut update = install.clone();
    update[0] = 3;
    let mut lying_len = encode_measure(1, uid, &[1, 2, 3]);
    lying_len[2] = 0xff;
    let mut garbage = vec![0u8; 512];
    for (i, b) in garbage.iter_mut().enumerate() {
        *b = (i as u8).wrapping_mul(97).wrapping_add(13);
    }
    let bad: Vec<Vec<u8>> = vec![
        garbage,
        vec![1, 2, 3],
        encode_measure(1, uid, &[1, 2, 3])[..20].to_vec(),
        lying_len,
        vec![0x55; 60_000],
        install,
        update,
        non_utf8,
    ];
    for b in &bad {
        dp.send(b);
    }
    dp.send(&encode_measure(99, uid, &[1, 2, 3])); // unknown flow
    assert!(dp.sync(2).is_empty());
    // The good flow is still served.
    dp.send(&encode_measure(1, uid, &[1448, 0, 5]));
    assert_eq!(types(&dp.sync(3)), vec![UPDATE]);

    // A datapath that vanishes between its Ready and the agent's reply (the agent is
    // paused meanwhile so the order is certain).
    agent.signal(19); // SIGSTOP
    {
        let gone = RawDatapath::bind(&format!("{name}-gone"), &name);
        gone.send(&encode_ready(3));
    }
    agent.signal(18); // SIGCONT
    dp.send(&encode_measure(1, uid, &[1448, 0, 5]));
    assert_eq!(types(&dp.sync(4)), vec![UPDATE]);

    let (ok, stderr) = agent.stop();
    assert!(ok, "{stderr}");
    let c = counters(&stderr);
    let bad_total: u64 = c["bad_messages"]
        .as_object()
        .expect("map")
        .values()
        .map(|v| v.as_u64().expect("n"))
        .sum();
    // Garbage can hold several frames; each bad datagram counts at least once.
    assert!(bad_total >= bad.len() as u64, "{c}");
    assert_eq!(c["bad_messages"]["agent_only_type"], 2);
    assert_eq!(c["bad_messages"]["name_not_utf8"], 1);
    assert_eq!(c["unknown_flow"], 1);
    assert_eq!(c["datapaths_lost"], 1, "{c}");
}

#[test]
fn a_bad_policy_is_refused_at_start_with_its_line() {
    let dir = std::env::temp_dir().join(unique("policy"));
    std::fs::write(&dir, "[[rule]]\nalgorithm = \"fixed\"\n\n[[rule]]\nremote_port = \"99-1\"\nalgorithm = \"nosuch\"\n").expect("write");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_ccp-agent"))
        .args(["check-policy"])
        .arg(&dir)
        .output()
        .expect("run");
    assert!(!out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains(":5: port range"), "{text}");
    assert!(text.contains(":6: unknown algorithm \"nosuch\""), "{text}");
    let run = std::process::Command::new(env!("CARGO_BIN_EXE_ccp-agent"))
        .args([
            "--bind",
            &unique("refused"),
            "--default",
            "fixed",
            "--primary",
            "fixed",
            "--policy",
        ])
        .arg(&dir)
        .output()
        .expect("run");
    let _ = std::fs::remove_file(&dir);
    assert!(!run.status.success());
    assert!(String::from_utf8_lossy(&run.stderr).contains("line 6: unknown algorithm"));
}

#[test]
fn an_unknown_default_algorithm_is_refused() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_ccp-agent"))
        .args([
            "--bind",
            &unique("nodefault"),
            "--default",
            "vegas",
            "--primary",
            "fixed",
        ])
        .output()
        .expect("run");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown default algorithm \"vegas\""));
}
