//! QUIC transfers on loopback under the real `ccp-agent`, through real libccp.

mod common;

use ccp_test_support::processes::{RawSocket, sock};
use common::*;
use std::os::unix::fs::MetadataExt;
use std::process::Command;
use std::time::Duration;

fn creates(agent: &Agent) -> Vec<serde_json::Value> {
    agent
        .trace_lines()
        .into_iter()
        .filter(|l| l["event"] == "create")
        .collect()
}

#[test]
fn a_transfer_completes_under_the_agent_which_sees_its_create_and_reports() {
    let _one = serial();
    let name = unique("agent");
    let policy = Policy::loopback(&name, "proteus-p");
    let agent = Agent::start(&name, &["--policy", policy.arg()]);
    let server = Server::start();
    let r = report(spawn_send(&server, &["--time", "3", "--agent", &name]));

    let mbps = interval_mbps(&r);
    assert_eq!(mbps.len(), 3, "{r}");
    assert!(mbps.iter().all(|&m| m > 1.0), "{mbps:?}");
    assert!(
        interval_steered(&r)[1..].iter().all(|&s| s),
        "the agent steers after its first answer: {r}"
    );
    assert!(r["end"]["ccp"]["measures"].as_u64() > Some(10), "{r}");

    let c = creates(&agent);
    assert_eq!(c.len(), 1, "{c:?}");
    assert_eq!(c[0]["algorithm"], "proteus-p");
    assert_eq!(c[0]["remote"], server.addr.as_str());
    let local = r["start"]["connected"][0]["local_port"]
        .as_u64()
        .expect("port");
    assert_eq!(c[0]["local"], format!("127.0.0.1:{local}").as_str());
    let reports = agent
        .trace_lines()
        .iter()
        .filter(|l| l["event"] == "report")
        .count();
    assert!(reports > 10, "{reports} reports");
}

#[test]
fn priority_changes_reach_the_agent() {
    let _one = serial();
    let name = unique("prio");
    let policy = Policy::loopback(&name, "proteus-p");
    let agent = Agent::start(&name, &["--policy", policy.arg()]);
    let server = Server::start();
    let r = report(spawn_send(
        &server,
        &[
            "--time",
            "2",
            "--agent",
            &name,
            "--priority-at",
            "1:scavenger",
            "--priority-at",
            "1.5:hybrid=20",
        ],
    ));
    let last = &r["intervals"][1]["streams"][0];
    assert_eq!(last["priority"], "hybrid", "{r}");

    let lines = agent.trace_lines();
    let changes: Vec<_> = lines.iter().filter(|l| l["event"] == "priority").collect();
    assert_eq!(changes.len(), 2, "{lines:?}");
    assert_eq!(changes[0]["priority"], "scavenger");
    assert_eq!(changes[0]["algorithm"], "proteus-p");
    assert_eq!(changes[1]["priority"], "hybrid");
    // Mbit/s for the application, bytes/s on the wire, Mbit/s again in the agent.
    assert_eq!(changes[1]["hybrid_threshold_mbps"], 20.0);
    let before = lines
        .iter()
        .take_while(|l| l["event"] != "priority")
        .filter(|l| l["event"] == "report")
        .last()
        .expect("reports before the change");
    assert_eq!(before["priority"], "primary");
}

#[test]
fn without_an_agent_the_transfer_completes_on_the_fallback() {
    let _one = serial();
    let name = unique("none");
    let server = Server::start();
    let r = report(spawn_send(&server, &["--time", "2", "--agent", &name]));
    let mbps = interval_mbps(&r);
    assert!(mbps.iter().all(|&m| m > 1.0), "{mbps:?}");
    assert!(interval_steered(&r).iter().all(|&s| !s), "{r}");
    assert_eq!(r["end"]["ccp"]["agent_datagrams"], 0);
}

#[test]
fn quinns_own_cubic_runs_without_libccp_and_counts_the_same_udp_bytes() {
    let _one = serial();
    let server = Server::start();
    let r = report(spawn_send(&server, &["--time", "2", "--cc", "quinn-cubic"]));
    let mbps = interval_mbps(&r);
    assert!(mbps.iter().all(|&m| m > 1.0), "{mbps:?}");
    assert!(interval_steered(&r).iter().all(|&s| !s), "{r}");
    assert!(r["end"]["ccp"].is_null(), "no CCP counters: {r}");
    let sent = &r["end"]["sum_sent"];
    let (bytes, udp) = (sent["bytes"].as_u64(), sent["udp_bytes"].as_u64());
    assert!(
        bytes.zip(udp).is_some_and(|(b, u)| b > 0 && u >= b),
        "UDP bytes cover the delivered ones: {sent}"
    );
    let refused = Command::new(quic_bin())
        .args(["send", &server.addr, "--cc", "quinn-cubic"])
        .args(["--priority-at", "1:scavenger", "--time", "1"])
        .output()
        .expect("ccp-quic runs");
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("--priority-at needs --cc ccp"),
        "{refused:?}"
    );
}

#[test]
fn the_agent_takes_over_again_after_it_was_gone() {
    let _one = serial();
    let name = unique("back");
    let policy = Policy::loopback(&name, "proteus-p");
    let mut agent = Agent::start(&name, &["--policy", policy.arg()]);
    let server = Server::start();
    let send = spawn_send(
        &server,
        &["--time", "5", "--interval", "0.5", "--agent", &name],
    );
    std::thread::sleep(Duration::from_millis(1500));
    agent.kill();
    std::thread::sleep(Duration::from_millis(1500));
    let again = Agent::start(&name, &["--policy", policy.arg()]);
    let r = report(send);

    // Half-second intervals, timed from the end of the handshake: the agent dies before
    // 1.5 s and is back after 2.5 s (the handshake takes well under half a second). A
    // busy machine can delay the agent's answers past the 200 ms silence limit for a
    // moment, so the steered stretches are checked for control, not for every sample.
    let steered = interval_steered(&r);
    assert!(
        steered[..3].iter().any(|&s| s),
        "steered before the loss: {steered:?}"
    );
    assert!(
        steered[3..5].iter().all(|&s| !s),
        "fallback while the agent was gone: {steered:?}"
    );
    assert!(
        steered[8..].iter().any(|&s| s),
        "steered again: {steered:?}"
    );
    assert!(interval_mbps(&r).iter().all(|&m| m > 1.0), "{r}");
    assert!(r["end"]["ccp"]["resyncs"].as_u64() >= Some(1), "{r}");
    assert_eq!(creates(&again).len(), 1, "the new agent learned the flow");
}

#[test]
fn an_agent_that_replaced_the_old_one_without_a_gap_learns_the_running_flow() {
    let _one = serial();
    let name = unique("swap");
    let fixed = |mbps| {
        [
            "--default",
            "fixed",
            "--fixed-rate-mbps",
            mbps,
            "--fixed-cwnd",
            "100000000",
        ]
    };
    let mut old = Agent::start(&name, &fixed("20"));
    let old_inode = std::fs::metadata(sock(&name))
        .expect("the agent's socket")
        .ino();
    let server = Server::start();
    let send = spawn_send(&server, &["--time", "6", "--agent", &name]);
    std::thread::sleep(Duration::from_millis(2500));
    // The new agent takes over the address while the old one still runs, so no send of the
    // datapath ever fails: only the new agent's answer to a probe ("no Ready from you") can
    // tell the datapath. The old agent answers probes too until the new one has bound.
    let new = Agent::start(&name, &fixed("60"));
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while std::fs::metadata(sock(&name)).map(|m| m.ino()).ok() == Some(old_inode) {
        assert!(
            std::time::Instant::now() < deadline,
            "the new agent never bound"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    old.kill();
    let r = report(send);

    let (mbps, steered) = (interval_mbps(&r), interval_steered(&r));
    eprintln!("20 Mbit/s, then 60 Mbit/s from the third second: carried {mbps:?}");
    assert_eq!(mbps.len(), 6, "{r}");
    // One-second intervals from the end of the handshake: the second under the old agent's
    // cap (the first also holds the fallback's moments before the agent's first answer,
    // longer on a busy machine), the new agent's rate steered in one of the last three (not
    // in each: on a busy machine the agent's answers can come late enough for a moment on
    // the fallback).
    assert!(mbps[1] < 26.0, "old agent's 20 Mbit/s: {mbps:?}");
    assert!(
        (3..6).any(|i| steered[i] && (45.0..75.0).contains(&mbps[i])),
        "new agent's 60 Mbit/s: {mbps:?}, steered {steered:?}"
    );
    assert!(r["end"]["ccp"]["resyncs"].as_u64() >= Some(1), "{r}");
    assert!(!creates(&new).is_empty(), "the new agent learned the flow");
}

#[test]
fn malformed_datagrams_do_not_stop_the_transfer() {
    let _one = serial();
    // The test plays the agent: whatever comes from the agent's path reaches libccp's side.
    let name = unique("fake");
    let fake_agent = RawSocket::bind(&name);
    let stranger = RawSocket::bind(&unique("stranger"));
    let server = Server::start();
    let dp_name = unique("dp");
    let send = spawn_send_bound(&server, &dp_name, &["--time", "2", "--agent", &name]);
    let (_, from) = fake_agent
        .recv_timeout(Duration::from_secs(10))
        .expect("the datapath sends Ready");
    assert_eq!(from, Some(sock(&dp_name)));

    let mut garbage: Vec<Vec<u8>> = vec![
        vec![],
        vec![1, 2, 3],
        // A header whose length runs past the datagram.
        vec![4, 0, 200, 0, 1, 0, 0, 0],
        // A header claiming less than a header.
        vec![3, 0, 2, 0, 1, 0, 0, 0],
        // A SYNC too short for its token.
        vec![0x21, 0, 12, 0, 0, 0, 0, 0, 9, 9, 9, 9],
        // A type libccp does not know, and an UpdateFields for a sid that does not exist.
        vec![0x7f, 0, 8, 0, 1, 0, 0, 0],
        vec![3, 0, 12, 0, 99, 0, 0, 0, 0, 0, 0, 0],
    ];
    // Noise: a deterministic pseudo-random walk over lengths and bytes.
    let mut x: u32 = 0x9e37_79b9;
    for len in [9usize, 16, 64, 300, 1500] {
        garbage.push(
            (0..len)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 17;
                    x ^= x << 5;
                    x as u8
                })
                .collect(),
        );
    }
    for g in &garbage {
        let _ = fake_agent.sock.send_to(g, sock(&dp_name));
        let _ = stranger.sock.send_to(g, sock(&dp_name));
    }
    let r = report(send);
    assert!(interval_mbps(&r).iter().all(|&m| m > 1.0), "{r}");
    let ccp = &r["end"]["ccp"];
    assert_eq!(ccp["rejected"].as_u64(), Some(garbage.len() as u64), "{r}");
    assert!(ccp["malformed"].as_u64() >= Some(3), "{r}");
    assert!(!sock(&dp_name).exists(), "the datapath removed its socket");
}
