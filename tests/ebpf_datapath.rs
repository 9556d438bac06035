//! End-to-end tests of the eBPF datapath (`datapath-setup/ebpf`, binary `ccp-ebpf`) with a
//! scripted agent that gives every flow a fixed rate: real TCP through the BPF `ccp`
//! congestion control, real libccp in the daemon, over a rate-limited veth between two
//! network namespaces. They need root and skip (saying so) without it.

mod ebpf_support;

use std::time::Duration;

use ebpf_support::*;

/// 40 Mbit/s, the scripted agent's rate, under a 100 Mbit/s bottleneck.
const FIXED_RATE_BYTES_PER_SEC: u64 = 5_000_000;

#[test]
fn flows_reach_the_agent_with_their_four_tuple_and_run_at_its_rate() {
    if skip() {
        return;
    }
    let _g = serial();
    let tag = "rate";
    let net = Net::new(tag, 11, 100);
    let cg = Cgroup::new(tag);
    let agent = ScriptedAgent::start("ebpfh-agent-rate", FIXED_RATE_BYTES_PER_SEC);
    let mut d = Daemon::start(tag, "ebpfh-agent-rate", &cg, &[]);
    let _srv = iperf_server(&net, 5201);
    let r = iperf_result(iperf_client(&net, &cg, 5201, 8, "ccp", ""));

    let log = agent.snapshot();
    let tuple = (
        wire_ip(net.client_ip),
        wire_port(r.local_port),
        wire_ip(net.server_ip),
        wire_port(5201),
    );
    assert!(
        log.creates
            .iter()
            .any(|(_, c)| (c.src_ip, c.src_port, c.dst_ip, c.dst_port) == tuple),
        "no Create with the data flow's 4-tuple {tuple:?}: {:?}",
        log.creates
    );
    assert!(log.measures > 10, "libccp did not report: {log:?}");
    // Skip the first two seconds (slow start under the fallback until the first decision).
    let goal_bps = FIXED_RATE_BYTES_PER_SEC as f64 * 8.0;
    let got = mean_of(&r, 2, 8);
    assert!(
        (got / goal_bps - 1.0).abs() < 0.05,
        "flow ran at {got:.0} bit/s, the agent asked for {goal_bps:.0}: {:?}",
        r.intervals_bps
    );
    d.stop();
    assert_clean(&d, tag);
}

#[test]
fn setsockopt_priority_reaches_the_agent_as_a_priority_message() {
    if skip() {
        return;
    }
    let _g = serial();
    let tag = "prio";
    let net = Net::new(tag, 12, 100);
    let cg = Cgroup::new(tag);
    let agent = ScriptedAgent::start("ebpfh-agent-prio", FIXED_RATE_BYTES_PER_SEC);
    let mut d = Daemon::start(tag, "ebpfh-agent-prio", &cg, &[]);

    let _server = sink_server(&net, 5301);
    // An unmodified application: priority set before connect (scavenger), then changed
    // on the live connection (hybrid, 1.25 MB/s threshold).
    let client = format!(
        "sh -c '{}ip netns exec {} python3 -c \"\nimport socket, struct, time\n\
         s = socket.socket()\n\
         s.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, b\\\"ccp\\\")\n\
         s.setsockopt(0xCC9, 1, struct.pack(\\\"<IIQ\\\", 1, 0, 0))\n\
         s.connect((\\\"{}\\\", 5301))\n\
         s.sendall(b\\\"x\\\" * 1000000)\n\
         time.sleep(0.5)\n\
         s.setsockopt(0xCC9, 1, struct.pack(\\\"<IIQ\\\", 2, 0, 1250000))\n\
         s.sendall(b\\\"x\\\" * 1000000)\n\
         time.sleep(0.5)\n\
         print(s.getsockname()[1])\n\
         s.close()\n\"'",
        cg.enter(),
        net.client,
        net.server_ip
    );
    let out = run(&client);
    let port: u16 = String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .expect("client prints its port");

    wait_for(&agent, 5, "two PRIORITY messages", |l| {
        l.priorities.len() >= 2
    });
    let log = agent.snapshot();
    let (_, create) = log
        .creates
        .iter()
        .find(|(_, c)| c.src_port == wire_port(port))
        .expect("the client's flow was created");
    let prios: Vec<_> = log
        .priorities
        .iter()
        .filter(|(_, p)| p.sid == create.sid)
        .map(|(_, p)| (p.class.code(), p.hybrid_threshold_bytes_per_sec))
        .collect();
    assert_eq!(prios, vec![(1, 0), (2, 1_250_000)], "{log:?}");

    // Outside the cgroup the private level is unknown to the kernel (ENOPROTOOPT).
    let outside = run("python3 -c 'import socket, struct\n\
         s = socket.socket()\n\
         try:\n  s.setsockopt(0xCC9, 1, struct.pack(\"<IIQ\", 1, 0, 0)); print(0)\n\
         except OSError as e:\n  print(e.errno)'");
    assert_eq!(String::from_utf8_lossy(&outside.stdout).trim(), "92");

    // set-priority for applications that cannot call setsockopt: no such flow any more.
    let o = d.set_priority(
        &format!("{}:{port}", net.client_ip),
        &format!("{}:5301", net.server_ip),
        "primary",
    );
    assert!(!o.status.success(), "closed flow accepted a priority");
    d.stop();
    assert_clean(&d, tag);
}

#[test]
fn set_priority_command_reaches_the_agent_for_a_live_flow() {
    if skip() {
        return;
    }
    let _g = serial();
    let tag = "setp";
    let net = Net::new(tag, 13, 100);
    let cg = Cgroup::new(tag);
    let agent = ScriptedAgent::start("ebpfh-agent-setp", FIXED_RATE_BYTES_PER_SEC);
    let mut d = Daemon::start(tag, "ebpfh-agent-setp", &cg, &[]);
    let _srv = iperf_server(&net, 5201);
    let client = iperf_client(&net, &cg, 5201, 4, "ccp", "--cport 40123");
    wait_for(&agent, 5, "the flow's Create", |l| {
        l.creates
            .iter()
            .any(|(_, c)| c.src_port == wire_port(40123))
    });
    let o = d.set_priority(
        &format!("{}:40123", net.client_ip),
        &format!("{}:5201", net.server_ip),
        "scavenger",
    );
    assert!(
        o.status.success(),
        "set-priority failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    wait_for(&agent, 5, "the PRIORITY", |l| !l.priorities.is_empty());
    let log = agent.snapshot();
    let sid = log
        .creates
        .iter()
        .find(|(_, c)| c.src_port == wire_port(40123))
        .map(|(_, c)| c.sid);
    assert_eq!(log.priorities[0].1.sid, sid.expect("created"));
    assert_eq!(log.priorities[0].1.class.code(), 1);
    let _ = iperf_result(client);
    d.stop();
    assert_clean(&d, tag);
}

#[test]
fn flows_survive_a_dead_agent_on_the_fallback_and_a_new_agent_takes_them_over() {
    if skip() {
        return;
    }
    let _g = serial();
    let tag = "rest";
    let net = Net::new(tag, 14, 100);
    let cg = Cgroup::new(tag);
    let agent = ScriptedAgent::start("ebpfh-agent-rest", FIXED_RATE_BYTES_PER_SEC);
    let mut d = Daemon::start(tag, "ebpfh-agent-rest", &cg, &[]);
    let _srv = iperf_server(&net, 5201);
    let client = iperf_client(&net, &cg, 5201, 16, "ccp", "--cport 40200");

    std::thread::sleep(Duration::from_secs(4));
    let first = agent.kill();
    assert!(
        first
            .creates
            .iter()
            .any(|(_, c)| c.src_port == wire_port(40200))
    );
    // The flow now runs the BPF fallback (Reno): it must keep going, and faster than the
    // dead agent's 40 Mbit/s, since nothing limits it but the 100 Mbit/s bottleneck.
    std::thread::sleep(Duration::from_secs(5));
    let doubled = 2 * FIXED_RATE_BYTES_PER_SEC;
    let agent2 = ScriptedAgent::start("ebpfh-agent-rest", doubled);
    wait_for(&agent2, 5, "the live flow's Create re-sent", |l| {
        l.creates
            .iter()
            .any(|(_, c)| c.src_port == wire_port(40200))
            && !l.readies.is_empty()
    });
    // A new flow after the restart is taken over as well.
    let _srv2 = iperf_server(&net, 5202);
    let c2 = iperf_client(&net, &cg, 5202, 2, "ccp", "--cport 40201");
    let r = iperf_result(client);
    let _ = iperf_result(c2);
    let log = agent2.snapshot();
    assert!(
        log.creates
            .iter()
            .any(|(_, c)| c.src_port == wire_port(40201)),
        "new flow not seen by the restarted agent: {log:?}"
    );

    let under_first = mean_of(&r, 1, 4);
    let on_fallback = mean_of(&r, 5, 9);
    let under_second = mean_of(&r, 14, 16);
    let goal1 = FIXED_RATE_BYTES_PER_SEC as f64 * 8.0;
    assert!(
        (under_first / goal1 - 1.0).abs() < 0.05,
        "first agent's rate not applied: {:?}",
        r.intervals_bps
    );
    assert!(
        on_fallback > 1.3 * goal1,
        "flow did not run on the fallback after the agent died: {:?}",
        r.intervals_bps
    );
    // Cross traffic from the second flow ends at about t = 12 s.
    let goal2 = doubled as f64 * 8.0;
    assert!(
        (under_second / goal2 - 1.0).abs() < 0.05,
        "restarted agent's rate not applied: {:?}",
        r.intervals_bps
    );
    d.stop();
    assert_clean(&d, tag);
}

#[test]
fn more_flows_than_a_shard_holds_spread_over_several_libccp_datapaths() {
    if skip() {
        return;
    }
    let _g = serial();
    let tag = "shrd";
    let net = Net::new(tag, 15, 100);
    let cg = Cgroup::new(tag);
    let agent = ScriptedAgent::start("ebpfh-agent-shrd", 1_000_000);
    let mut d = Daemon::start(tag, "ebpfh-agent-shrd", &cg, &["--flows-per-shard", "2"]);
    let _srv = iperf_server(&net, 5201);
    let r = iperf_result(iperf_client(&net, &cg, 5201, 3, "ccp", "-P 5"));
    assert!(r.mean_bps > 0.0);
    let log = agent.snapshot();
    let mut dps: Vec<_> = log.creates.iter().map(|(p, _)| p.clone()).collect();
    dps.sort();
    dps.dedup();
    // 5 data flows + iperf3's control connection + the server's sockets: >= 3 shards.
    assert!(dps.len() >= 3, "creates came from {dps:?}");
    d.stop();
    assert_clean(&d, tag);
}

#[test]
fn without_an_agent_flows_run_on_the_bpf_fallback_and_fill_the_bottleneck() {
    if skip() {
        return;
    }
    let _g = serial();
    let tag = "noag";
    let net = Net::new(tag, 16, 100);
    let cg = Cgroup::new(tag);
    let mut d = Daemon::start(tag, "ebpfh-agent-none", &cg, &[]);
    let _srv = iperf_server(&net, 5201);
    let client = iperf_client(&net, &cg, 5201, 5, "ccp", "");
    std::thread::sleep(Duration::from_secs(3));
    let status = d.status();
    let r = iperf_result(client);
    assert!(status.contains("lost"), "agent should be lost: {status}");
    let counter = |name: &str| -> u64 {
        status
            .split_whitespace()
            .skip_while(|w| *w != name)
            .nth(1)
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    let (acks, fallback) = (counter("acks"), counter("fallback_acks"));
    assert!(acks > 100, "the daemon saw no ACKs: {status}");
    assert!(
        fallback + 1 >= acks,
        "ACKs without an agent must all run the fallback: {status}"
    );
    let got = mean_of(&r, 1, 5);
    assert!(
        got > 85e6,
        "fallback ran at {got:.0} bit/s on a 100 Mbit/s path: {:?}",
        r.intervals_bps
    );
    d.stop();
    assert_clean(&d, tag);
}

#[test]
fn a_killed_daemon_keeps_ccp_and_its_flows_only_when_pinned() {
    if skip() {
        return;
    }
    let _g = serial();
    let tag = "kill";
    let net = Net::new(tag, 17, 100);
    let cg = Cgroup::new(tag);
    let registered = || available_ccs().split_whitespace().any(|c| c == "ccp");

    // Unpinned, SIGKILL ends the registration with the process: nothing is left to clean.
    let mut d = Daemon::start(tag, "ebpfh-agent-none", &cg, &[]);
    d.kill_hard();
    let t0 = std::time::Instant::now();
    while registered() && t0.elapsed() < Duration::from_secs(2) {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(!registered(), "\"ccp\" outlived an unpinned daemon");
    d.stop();
    assert_clean(&d, tag);

    // Pinned, it outlives the daemon: a running flow goes on under the BPF fallback, and
    // `stop` removes the registration.
    let mut d = Daemon::start_pinned(tag, "ebpfh-agent-none", &cg);
    let _srv = iperf_server(&net, 5201);
    let client = iperf_client(&net, &cg, 5201, 4, "ccp", "");
    std::thread::sleep(Duration::from_secs(1));
    d.kill_hard();
    std::thread::sleep(Duration::from_millis(500));
    assert!(registered(), "a pinned registration ended with its daemon");
    let r = iperf_result(client);
    let got = mean_of(&r, 2, 4);
    assert!(
        got > 85e6,
        "a flow whose daemon died ran at {got:.0} bit/s on a 100 Mbit/s path: {:?}",
        r.intervals_bps
    );
    let out = d.stop();
    assert!(
        out.status.success(),
        "stop after a crash failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_clean(&d, tag);
}
