//! Any CCP agent drives the eBPF datapath: a stock portus 0.9 runtime (`RunBuilder`, which
//! knows nothing of this project's SYNC message) serving our `fixed` algorithm through its
//! portus adapter steers real iperf3 flows through `ccp-ebpf`. Needs root; skips (saying so)
//! without it.
//!
//! Regressions: the daemon used to take only SYNC echoes as signs of life, so after 500 ms it
//! declared a stock agent lost and ran every flow on the BPF fallback while the agent's
//! windows and rates were ignored; and a stock agent restarted mid-flow was never found
//! again (it does not speak first, and a probe that reached its new socket did not count).

mod ebpf_support;

use std::time::Duration;

use algs_core::ccp::PortusAdapter;
use algs_core::{Bytes, BytesPerSec, Priority};
use ccp_agent::fixed::Fixed;
use ebpf_support::*;

/// 40 Mbit/s, far below the 100 Mbit/s bottleneck the fallback would fill.
const RATE_BYTES_PER_SEC: f64 = 5e6;

/// A stock portus runtime serving `fixed` at `rate` bytes/s on `/tmp/ccp/NAME`.
fn stock_agent(name: &'static str, rate: f64) -> Portus {
    let sock =
        portus::ipc::unix::Socket::<portus::ipc::Blocking>::new(name).expect("portus socket");
    let handle = portus::RunBuilder::new(portus::ipc::BackendBuilder { sock })
        .default_alg(PortusAdapter {
            alg: Fixed {
                cwnd: Some(Bytes(4_000_000)),
                rate: Some(BytesPerSec(rate)),
            },
            priority: Priority::Primary,
        })
        .spawn_thread()
        .run()
        .expect("portus runtime");
    Portus(Some(handle), name)
}

#[test]
fn a_stock_portus_runtime_agent_controls_flows_on_ccp_ebpf() {
    if skip() {
        return;
    }
    let _g = serial();
    let tag = "port";
    let name = "ebpfh-portus-port";
    let net = Net::new(tag, 24, 100);
    let cg = Cgroup::new(tag);
    let _portus = stock_agent(name, RATE_BYTES_PER_SEC);
    let mut d = Daemon::start(tag, name, &cg, &[]);
    let srv = iperf_server(&net, 5201);
    let client = iperf_client(&net, &cg, 5201, 8, "ccp", "");
    // Well past the 500 ms after which a SYNC-only daemon gave up on the agent.
    std::thread::sleep(Duration::from_secs(5));
    let status = d.status();
    let r = iperf_result(client);
    let counter = |key: &str| Daemon::counter(&status, key);
    let (acks, fallback) = (counter("acks"), counter("fallback_acks"));
    eprintln!(
        "stock portus agent: {acks} ACKs, {fallback} on the fallback, {} resyncs; {:?} bit/s",
        counter("resyncs"),
        r.intervals_bps
    );
    assert!(
        status.contains(&format!(
            "{} alive",
            ccp_rundir::socket_path(name).display()
        )),
        "agent declared lost: {status}"
    );
    assert!(
        status.contains("agent_echoes_sync false"),
        "portus cannot echo SYNC: {status}"
    );
    assert!(acks > 100, "the daemon saw no flow: {status}");
    // portus installed its program and libccp applied the rate it asked for.
    assert!(
        status.contains(&format!("rate {}", RATE_BYTES_PER_SEC as u64)),
        "no flow carries portus' rate: {status}"
    );
    assert!(
        fallback * 100 < acks * 5,
        "{fallback} of {acks} ACKs ran the fallback: {status}"
    );
    let got = mean_of(&r, 2, 8);
    assert!(
        (got / (RATE_BYTES_PER_SEC * 8.0) - 1.0).abs() < 0.05,
        "flow ran at {got:.0} bit/s under portus' fixed 40 Mbit/s: {:?}",
        r.intervals_bps
    );
    // The server's ccp sockets would keep the struct_ops alive past `stop`.
    drop(srv);
    d.stop();
    assert_clean(&d, tag);
}

#[test]
fn a_restarted_stock_agent_is_found_by_the_next_probe_and_steers_again() {
    if skip() {
        return;
    }
    let _g = serial();
    let tag = "prst";
    let name = "ebpfh-portus-prst";
    let net = Net::new(tag, 24, 100);
    let cg = Cgroup::new(tag);
    let first = stock_agent(name, RATE_BYTES_PER_SEC);
    let mut d = Daemon::start(tag, name, &cg, &[]);
    let srv = iperf_server(&net, 5201);
    let client = iperf_client(&net, &cg, 5201, 12, "ccp", "");
    std::thread::sleep(Duration::from_secs(3));
    // The agent goes (its socket with it): the next send fails, the flow falls back.
    drop(first);
    std::thread::sleep(Duration::from_secs(1));
    // A new stock agent at the same address, at half the rate. It says nothing until the
    // datapath's Ready and Create reach it.
    let _second = stock_agent(name, RATE_BYTES_PER_SEC / 2.0);
    std::thread::sleep(Duration::from_secs(2));
    let status = d.status();
    let r = iperf_result(client);
    let counter = |key: &str| Daemon::counter(&status, key);
    eprintln!(
        "restarted stock agent: {} resyncs, {} of {} ACKs on the fallback; {:?} bit/s",
        counter("resyncs"),
        counter("fallback_acks"),
        counter("acks"),
        r.intervals_bps
    );
    assert!(
        status.contains(&format!(
            "{} alive",
            ccp_rundir::socket_path(name).display()
        )),
        "the new agent was not found: {status}"
    );
    assert!(counter("resyncs") >= 1, "no resync: {status}");
    // Sender-side intervals of a paced flow swing by a factor of two now and then (one
    // interval short, the next long): judge the mean over several, far from the old
    // agent's 40 Mbit/s and from the fallback's 100.
    let got = mean_of(&r, 5, 12);
    assert!(
        (got / (RATE_BYTES_PER_SEC / 2.0 * 8.0) - 1.0).abs() < 0.15,
        "flow ran at {got:.0} bit/s under the new agent's 20 Mbit/s: {:?}",
        r.intervals_bps
    );
    drop(srv);
    d.stop();
    assert_clean(&d, tag);
}

/// The portus runtime thread and its socket, ended and removed however the test ends.
struct Portus(Option<portus::CCPHandle>, &'static str);

impl Drop for Portus {
    fn drop(&mut self) {
        if let Some(h) = self.0.take() {
            h.kill();
            let _ = h.wait();
        }
        let _ = std::fs::remove_file(ccp_rundir::socket_path(self.1));
    }
}
