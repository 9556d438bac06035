//! The eBPF datapath with the real `ccp-agent`: iperf3 flows through the BPF `ccp`
//! congestion control over a rate-limited veth between two network namespaces. Needs
//! root; skips (saying so) without it.

mod ebpf_support;

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use ebpf_support::*;

/// A running `ccp-agent`, its log on a file.
struct Agent {
    child: Child,
    log: PathBuf,
    trace: PathBuf,
    sock: PathBuf,
}

impl Agent {
    fn start(name: &str, args: &[&str]) -> Agent {
        // Each agent its own files, also two at one address (one replacing the other).
        static STARTED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = STARTED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let log = PathBuf::from(format!("/tmp/{name}-{n}.log"));
        let trace = PathBuf::from(format!("/tmp/{name}-{n}.trace"));
        let child = Command::new(env!("CARGO_BIN_EXE_ccp-agent"))
            .args(["--bind", name, "--trace-flows"])
            .arg(&trace)
            .args(args)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("agent log"))
            .spawn()
            .expect("ccp-agent starts");
        let sock = ccp_rundir::socket_path(name);
        for _ in 0..100 {
            if sock.exists() {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Agent {
            child,
            log,
            trace,
            sock,
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn trace(&self) -> String {
        std::fs::read_to_string(&self.trace).unwrap_or_default()
    }

    /// SIGKILL, like a crash.
    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_file(&self.log);
        let _ = std::fs::remove_file(&self.trace);
        let _ = std::fs::remove_file(&self.sock);
    }
}

/// "new flow" with this local and remote address in the agent's log.
fn saw_flow(log: &str, local: &str, remote: &str) -> bool {
    log.lines().any(|l| {
        l.contains("new flow")
            && l.contains(&format!("local={local}"))
            && l.contains(&format!("remote={remote}"))
    })
}

#[test]
fn agent_sees_iperf3_flows_by_four_tuple_and_its_fixed_rate_holds_within_5_percent() {
    if skip() {
        return;
    }
    let _g = serial();
    let tag = "afix";
    let net = Net::new(tag, 21, 100);
    let cg = Cgroup::new(tag);
    let agent = Agent::start(
        "ebpfh-agent-afix",
        &[
            "--default",
            "fixed",
            "--fixed-rate-mbps",
            "40",
            "--fixed-cwnd",
            "4000000",
        ],
    );
    let acks = PathBuf::from(format!("/tmp/ebpfh-{tag}-acks.csv"));
    let acks_arg = acks.display().to_string();
    let mut d = Daemon::start(tag, "ebpfh-agent-afix", &cg, &["--ack-trace", &acks_arg]);
    let _srv = iperf_server(&net, 5201);
    let r = iperf_result(iperf_client(&net, &cg, 5201, 8, "ccp", "--cport 40300"));
    let log = agent.log();
    assert!(
        saw_flow(
            &log,
            &format!("{}:40300", net.client_ip),
            &format!("{}:5201", net.server_ip)
        ),
        "agent did not see the flow's 4-tuple:\n{log}"
    );
    let got = mean_of(&r, 2, 8);
    assert!(
        (got / 40e6 - 1.0).abs() < 0.05,
        "flow ran at {got:.0} bit/s under fixed 40 Mbit/s: {:?}",
        r.intervals_bps
    );
    d.stop();
    assert_clean(&d, tag);
    let text = std::fs::read_to_string(&acks).unwrap_or_default();
    let _ = std::fs::remove_file(&acks);
    assert_ack_trace_of_the_fixed_flow(&text);
}

/// The ACK trace of the fixed-rate flow (40300 → 5201): its create line, then ACKs with RTT
/// samples, and the 40 Mbit/s rate in force once the agent decided.
fn assert_ack_trace_of_the_fixed_flow(text: &str) {
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap_or_default().split(',').collect();
    let col = |name: &str| {
        header
            .iter()
            .position(|h| *h == name)
            .unwrap_or_else(|| panic!("no column {name} in {header:?}"))
    };
    let (event, src, dst, rtt, rate) = (
        col("event"),
        col("src_port"),
        col("dst_port"),
        col("rtt_us"),
        col("ctl_rate_bytes_per_sec"),
    );
    let flow: Vec<Vec<&str>> = lines
        .map(|l| l.split(',').collect::<Vec<_>>())
        .filter(|f| f.len() == header.len() && f[src] == "40300" && f[dst] == "5201")
        .collect();
    assert_eq!(
        flow.first().map(|f| f[event]),
        Some("create"),
        "the flow's first line is not its create line"
    );
    let acks: Vec<&Vec<&str>> = flow.iter().filter(|f| f[event] == "ack").collect();
    let sampled = acks.iter().filter(|f| !f[rtt].is_empty()).count();
    let at_rate = acks.iter().filter(|f| f[rate] == "5000000").count();
    // 8 s at 40 Mbit/s is about 27,000 packets; over veth one ACK covers a GRO batch of
    // up to 64 KB (about 650 ACKs measured), so hundreds at least.
    assert!(acks.len() > 200, "only {} ACK lines", acks.len());
    assert!(
        sampled * 10 > acks.len() * 9,
        "{sampled} of {} ACKs carry an RTT",
        acks.len()
    );
    assert!(
        at_rate * 10 > acks.len() * 9,
        "{at_rate} of {} ACKs under the fixed rate",
        acks.len()
    );
}

#[test]
fn cubic_through_ccp_is_within_10_percent_of_kernel_cubic_on_the_same_path() {
    if skip() {
        return;
    }
    let _g = serial();
    let tag = "acub";
    let net = Net::routed(tag, 22, 100, 40);
    let cg = Cgroup::new(tag);
    let agent = Agent::start("ebpfh-agent-acub", &["--default", "cubic"]);
    let mut d = Daemon::start(tag, "ebpfh-agent-acub", &cg, &[]);

    let _s1 = iperf_server(&net, 5201);
    let kernel = iperf_result(iperf_client(&net, &cg, 5201, 10, "cubic", ""));
    let _s2 = iperf_server(&net, 5202);
    let ccp = iperf_result(iperf_client(&net, &cg, 5202, 10, "ccp", ""));
    let (k, c) = (mean_of(&kernel, 1, 10), mean_of(&ccp, 1, 10));
    eprintln!(
        "kernel cubic {:.1} Mbit/s ({} retransmits), cubic via ccp {:.1} Mbit/s ({} retransmits)",
        k / 1e6,
        kernel.retransmits,
        c / 1e6,
        ccp.retransmits
    );
    assert!(
        (c / k - 1.0).abs() < 0.10,
        "cubic via ccp {c:.0} vs kernel cubic {k:.0} bit/s"
    );
    let trace = agent.trace();
    assert!(
        trace.contains("\"algorithm\":\"cubic\"") && trace.contains("\"event\":\"report\""),
        "cubic did not control the flow: {}",
        &trace[..trace.len().min(2000)]
    );
    d.stop();
    assert_clean(&d, tag);
}

#[test]
fn setsockopt_priority_reaches_the_agent_as_a_priority_change_of_the_flow() {
    if skip() {
        return;
    }
    let _g = serial();
    let tag = "aprio";
    let net = Net::new(tag, 23, 100);
    let cg = Cgroup::new(tag);
    let agent = Agent::start("ebpfh-agent-aprio", &["--default", "cubic"]);
    let mut d = Daemon::start(tag, "ebpfh-agent-aprio", &cg, &[]);
    let _server = sink_server(&net, 5301);
    run(&format!(
        "sh -c '{}ip netns exec {} python3 -c \"\nimport socket, struct, time\n\
         s = socket.socket()\n\
         s.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, b\\\"ccp\\\")\n\
         s.connect((\\\"{}\\\", 5301))\n\
         s.sendall(b\\\"x\\\" * 1000000)\n\
         s.setsockopt(0xCC9, 1, struct.pack(\\\"<IIQ\\\", 1, 0, 0))\n\
         s.sendall(b\\\"x\\\" * 1000000)\n\
         time.sleep(0.5)\n\
         s.close()\n\"'",
        cg.enter(),
        net.client,
        net.server_ip
    ));
    // The agent logs the change (its trace shows it only when the algorithm acts on it).
    let changed = |log: &str| {
        let sid = log
            .lines()
            .find(|l| {
                l.contains("new flow") && l.contains(&format!("remote={}:5301", net.server_ip))
            })
            .and_then(|l| l.split_whitespace().find_map(|w| w.strip_prefix("sid=")))?;
        log.lines()
            .any(|l| {
                l.contains("priority change")
                    && l.contains(&format!("sid={sid} "))
                    && l.contains("priority=\"scavenger\"")
            })
            .then_some(())
    };
    let t0 = std::time::Instant::now();
    while changed(&agent.log()).is_none() {
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "no scavenger priority change for the client's flow:\n{}",
            agent.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    d.stop();
    assert_clean(&d, tag);
}

/// An agent's arguments for a fixed rate and a window that never limits it.
fn fixed(mbps: &'static str) -> [&'static str; 6] {
    [
        "--default",
        "fixed",
        "--fixed-rate-mbps",
        mbps,
        "--fixed-cwnd",
        "4000000",
    ]
}

/// The flow's mean over the 1 s intervals `secs` is within 5 % of `bps`, `who`'s rate.
fn assert_rate(r: &IperfResult, secs: std::ops::Range<usize>, bps: f64, who: &str) {
    let got = mean_of(r, secs.start, secs.end);
    assert!(
        (got / bps - 1.0).abs() < 0.05,
        "{who}: {got:.0} bit/s over {secs:?} s, not {bps:.0}: {:?}",
        r.intervals_bps
    );
}

/// A path, an agent at a fixed 40 Mbit/s, the datapath, and one iperf3 flow of `secs` s from
/// port `cport` to port 5201 through them.
struct AgentFlow {
    client: Child,
    _srv: Bg,
    d: Daemon,
    agent: Agent,
    cg: Cgroup,
    net: Net,
}

impl AgentFlow {
    fn start(tag: &str, subnet: u8, secs: u32, cport: u16) -> Self {
        let net = Net::new(tag, subnet, 100);
        let cg = Cgroup::new(tag);
        let name = format!("ebpfh-agent-{tag}");
        let agent = Agent::start(&name, &fixed("40"));
        let d = Daemon::start(tag, &name, &cg, &[]);
        let _srv = iperf_server(&net, 5201);
        let client = iperf_client(&net, &cg, 5201, secs, "ccp", &format!("--cport {cport}"));
        AgentFlow {
            client,
            _srv,
            d,
            agent,
            cg,
            net,
        }
    }
}

#[test]
fn killed_agent_leaves_flows_on_the_fallback_and_a_restarted_agent_takes_them_over() {
    if skip() {
        return;
    }
    let _g = serial();
    let tag = "arst";
    // Bound in set-up order, so that the flow is dropped first.
    let AgentFlow {
        net,
        cg,
        mut agent,
        mut d,
        _srv,
        client,
    } = AgentFlow::start(tag, 24, 16, 40400);
    std::thread::sleep(Duration::from_secs(4));
    agent.kill();
    std::thread::sleep(Duration::from_secs(5));
    let agent2 = Agent::start("ebpfh-agent-arst", &fixed("60"));
    std::thread::sleep(Duration::from_secs(1));
    let _srv2 = iperf_server(&net, 5202);
    let c2 = iperf_result(iperf_client(&net, &cg, 5202, 1, "ccp", "--cport 40401"));
    let r = iperf_result(client);
    assert!(c2.mean_bps > 0.0);
    let log2 = agent2.log();
    let remote = format!("{}:5201", net.server_ip);
    assert!(
        saw_flow(&log2, &format!("{}:40400", net.client_ip), &remote),
        "restarted agent did not get the running flow:\n{log2}"
    );
    assert!(
        saw_flow(
            &log2,
            &format!("{}:40401", net.client_ip),
            &format!("{}:5202", net.server_ip)
        ),
        "restarted agent did not get the new flow:\n{log2}"
    );
    assert_rate(&r, 1..4, 40e6, "first agent");
    assert!(
        mean_of(&r, 5, 9) > 52e6,
        "no fallback after the agent died: {:?}",
        r.intervals_bps
    );
    assert_rate(&r, 13..16, 60e6, "restarted agent");
    d.stop();
    assert_clean(&d, tag);
}

#[test]
fn an_agent_that_replaced_the_old_one_without_a_gap_learns_the_running_flows() {
    if skip() {
        return;
    }
    let _g = serial();
    let tag = "afst";
    let AgentFlow {
        net,
        cg: _cg,
        mut agent,
        mut d,
        _srv,
        client,
    } = AgentFlow::start(tag, 27, 10, 40500);
    std::thread::sleep(Duration::from_secs(3));
    // The new agent takes over the address while the old one still runs, so no send of
    // the datapath ever fails: only the new agent's answer to the datapath's probe ("no
    // Ready from you") can tell the datapath.
    let agent2 = Agent::start("ebpfh-agent-afst", &fixed("60"));
    let t0 = std::time::Instant::now();
    while !agent2.log().contains("listening") && t0.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(10));
    }
    agent.kill();
    let r = iperf_result(client);
    let log2 = agent2.log();
    assert!(
        saw_flow(
            &log2,
            &format!("{}:40500", net.client_ip),
            &format!("{}:5201", net.server_ip)
        ),
        "the agent restarted at once never learnt the running flow:\n{log2}"
    );
    assert_rate(&r, 1..3, 40e6, "first agent");
    assert_rate(&r, 5..10, 60e6, "restarted agent");
    d.stop();
    assert_clean(&d, tag);
}

#[test]
fn a_flow_handed_from_a_paced_algorithm_to_cubic_leaves_the_old_pacing_rate_behind() {
    if skip() {
        return;
    }
    let _g = serial();
    let tag = "ahnd";
    let net = Net::new(tag, 25, 100);
    let cg = Cgroup::new(tag);
    // The flow starts on `fixed` at 10 Mbit/s; its rule names CUBIC as the primary, so a
    // switch to primary hands it over. CUBIC sets no rate: the flow must not stay paced at
    // its predecessor's 10 Mbit/s.
    let policy = PathBuf::from("/tmp/ebpfh-agent-ahnd.toml");
    std::fs::write(
        &policy,
        "[[rule]]\nremote_port = \"5201\"\nalgorithm = \"fixed\"\nprimary = \"cubic\"\n",
    )
    .expect("policy");
    let agent = Agent::start(
        "ebpfh-agent-ahnd",
        &[
            "--default",
            "cubic",
            "--fixed-rate-mbps",
            "10",
            "--fixed-cwnd",
            "4000000",
            "--policy",
            policy.to_str().expect("utf-8"),
        ],
    );
    let mut d = Daemon::start(tag, "ebpfh-agent-ahnd", &cg, &[]);
    let _srv = iperf_server(&net, 5201);
    let client = iperf_client(&net, &cg, 5201, 10, "ccp", "--cport 40310");
    std::thread::sleep(Duration::from_secs(4));
    let o = d.set_priority(
        &format!("{}:40310", net.client_ip),
        &format!("{}:5201", net.server_ip),
        "primary",
    );
    assert!(
        o.status.success(),
        "set-priority failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let r = iperf_result(client);
    let _ = std::fs::remove_file(&policy);
    let trace = agent.trace();
    assert!(
        trace.contains("\"event\":\"handoff\"") && trace.contains("\"from\":\"fixed\""),
        "no hand-off to cubic: {}",
        &trace[..trace.len().min(2000)]
    );
    let (before, after) = (mean_of(&r, 1, 4), mean_of(&r, 6, 10));
    eprintln!(
        "fixed 10 Mbit/s: {:.1} Mbit/s; handed to cubic: {:.1} Mbit/s",
        before / 1e6,
        after / 1e6
    );
    // Pacing a 4 MB window at a low rate comes in bursts: a bound, not a tolerance.
    assert!(before < 15e6, "fixed rate: {:?}", r.intervals_bps);
    assert!(
        after > 50e6,
        "cubic kept the old pacing rate: {:?}",
        r.intervals_bps
    );
    d.stop();
    assert_clean(&d, tag);
}
