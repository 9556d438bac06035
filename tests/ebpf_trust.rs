//! Who may steer a flow on the eBPF datapath: only the agent's own socket address. Needs
//! root; skips (saying so) without it.
//!
//! Regression: the daemon applied whatever arrived on its socket; 3,000 UpdateFields from a
//! foreign socket set a running flow's window to one packet, without a log line.

mod ebpf_support;

use std::os::unix::net::UnixDatagram;
use std::time::Duration;

use ebpf_support::*;

/// 40 Mbit/s from the scripted agent.
const RATE_BYTES_PER_SEC: u64 = 5_000_000;
const FOREIGN_UPDATES: u32 = 3000;

/// UpdateFields for `sid` that would stall the flow: one packet of window, 1448 bytes/s.
fn stalling_update(sid: u32) -> Vec<u8> {
    let (_, scope) =
        portus::lang::compile(FIXED_RATE_PROG.as_bytes(), &[]).expect("the program compiles");
    let reg = |n: &str| scope.get(n).expect("register exists").clone();
    portus::serialize::serialize(&portus::serialize::update_field::Msg {
        sid,
        num_fields: 3,
        fields: vec![
            (reg("Cwnd"), 1448),
            (reg("cwndGoal"), 1448),
            (reg("rateGoal"), 1448),
        ],
    })
    .expect("update serializes")
}

#[test]
fn update_fields_from_a_foreign_socket_are_rejected_counted_and_never_applied() {
    if skip() {
        return;
    }
    let _g = serial();
    let tag = "forg";
    let agent_name = "ebpfh-agent-forg";
    let net = Net::new(tag, 25, 100);
    let cg = Cgroup::new(tag);
    let _agent = ScriptedAgent::start(agent_name, RATE_BYTES_PER_SEC);
    let mut d = Daemon::start(tag, agent_name, &cg, &[]);
    let srv = iperf_server(&net, 5201);
    let client = iperf_client(&net, &cg, 5201, 8, "ccp", "");
    std::thread::sleep(Duration::from_secs(2));

    // A root process with its own socket, as any local attacker that can reach the path.
    let foreign_path = ccp_rundir::socket_path(&format!("ebpfh-foreign-{tag}"));
    let _ = std::fs::remove_file(&foreign_path);
    let foreign = UnixDatagram::bind(&foreign_path).expect("bind foreign socket");
    let target = ccp_rundir::socket_path(&format!("ebpfh-dp-{tag}-0"));
    let mut sent = 0u64;
    for i in 0..FOREIGN_UPDATES {
        // The first sids: the iperf3 control and data connections.
        let msg = stalling_update(1 + i % 4);
        // The daemon may be slower than this loop: retry until the queue takes it.
        while foreign.send_to(&msg, &target).is_err() {
            std::thread::sleep(Duration::from_millis(1));
        }
        sent += 1;
    }
    std::thread::sleep(Duration::from_millis(500));
    let status = d.status();
    let r = iperf_result(client);
    drop(foreign);
    let _ = std::fs::remove_file(&foreign_path);
    let counter = |key: &str| Daemon::counter(&status, key);
    eprintln!(
        "{sent} foreign updates sent, {} rejected; {:?} bit/s",
        counter("rejected"),
        r.intervals_bps
    );
    assert_eq!(counter("rejected"), sent, "{status}");
    assert!(
        status.contains(&format!("cwnd 4000000 rate {RATE_BYTES_PER_SEC}")),
        "a flow lost the agent's window or rate: {status}"
    );
    let got = mean_of(&r, 2, 8);
    assert!(
        (got / (RATE_BYTES_PER_SEC as f64 * 8.0) - 1.0).abs() < 0.10,
        "the flow ran at {got:.0} bit/s under the agent's 40 Mbit/s: {:?}",
        r.intervals_bps
    );
    // The server's ccp sockets would keep the struct_ops alive past `stop`.
    drop(srv);
    d.stop();
    assert_clean(&d, tag);
}
