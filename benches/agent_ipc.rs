//! Agent throughput and latency on the unix socket, against portus' own runtime in the same
//! run. Both serve the diagnostic `fixed` algorithm, which answers every report with an
//! UpdateFields, so each report costs one round trip through the agent.
//!
//! `cargo bench --bench agent_ipc` (optionally `-- --quick`). Prints, for 1, 100 and 10,000
//! flows: reports per second with 8 reports in flight, and per-report latency (median, p99)
//! with one in flight, for this agent and for portus, and the ratio.

use algs_core::Priority;
use algs_core::ccp::PortusAdapter;
use ccp_agent::cli::Cli;
use ccp_agent::fixed::Fixed;
use ccp_test_support::processes::{self, RawSocket};
use clap::Parser;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

// Below net.unix.max_dgram_qlen (10 by default): more would make the replies queue up at the
// client, which then measures its own socket.
const IN_FLIGHT: usize = 8;

struct Client {
    socket: RawSocket,
    agent: PathBuf,
    buf: Vec<u8>,
}

impl Client {
    fn new(name: &str, agent: &str) -> Client {
        let socket = RawSocket::bind(name);
        socket
            .sock
            .set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        Client {
            socket,
            agent: processes::sock(agent),
            buf: vec![0; 65536],
        }
    }

    fn send(&self, msg: &[u8]) {
        self.socket.sock.send_to(msg, &self.agent).expect("send");
    }

    /// Waits for the next agent message; returns its type and bytes.
    fn recv(&mut self) -> (u8, &[u8]) {
        let n = self.socket.sock.recv(&mut self.buf).expect("agent answers");
        (self.buf[0], &self.buf[..n])
    }

    /// Connects: Ready, then `flows` Creates; returns the program uid of `fixed`.
    fn setup(&mut self, flows: u32) -> u32 {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if self
                .socket
                .sock
                .send_to(&ccp_wire::encode_ready(1), &self.agent)
                .is_ok()
            {
                break;
            }
            assert!(Instant::now() < deadline, "agent did not come up");
            std::thread::sleep(Duration::from_millis(20));
        }
        let mut uid = 0;
        for sid in 1..=flows {
            self.send(&ccp_wire::encode_create(&ccp_wire::CreateMsg {
                sid,
                init_cwnd: 14480,
                mss: 1448,
                src_ip: 0,
                src_port: 0,
                dst_ip: 0,
                dst_port: 0,
                cong_alg: Some("fixed".into()),
            }));
            loop {
                let (typ, msg) = self.recv();
                if typ == 4 {
                    uid = u32::from_le_bytes([msg[8], msg[9], msg[10], msg[11]]);
                    break;
                }
            }
        }
        uid
    }

    /// Reports per second with IN_FLIGHT outstanding, over `duration`.
    fn throughput(&mut self, flows: u32, uid: u32, duration: Duration) -> f64 {
        let report = |sid: u32| ccp_wire::encode_measure(sid, uid, &[1448, 0, 1]);
        let mut next = 0u32;
        for _ in 0..IN_FLIGHT {
            self.send(&report(next % flows + 1));
            next += 1;
        }
        let start = Instant::now();
        let mut done = 0u64;
        while start.elapsed() < duration {
            let (typ, _) = self.recv();
            if typ == 3 {
                done += 1;
                self.send(&report(next % flows + 1));
                next += 1;
            }
        }
        let rate = done as f64 / start.elapsed().as_secs_f64();
        // Drain what is still in flight.
        let mut left = IN_FLIGHT;
        while left > 0 {
            if self.recv().0 == 3 {
                left -= 1;
            }
        }
        rate
    }

    /// Median and p99 round trip of one report, in microseconds.
    fn latency(&mut self, flows: u32, uid: u32, samples: usize) -> (f64, f64) {
        let mut rtts = Vec::with_capacity(samples);
        for i in 0..samples {
            let msg = ccp_wire::encode_measure(i as u32 % flows + 1, uid, &[1448, 0, 1]);
            let t = Instant::now();
            self.send(&msg);
            while self.recv().0 != 3 {}
            rtts.push(t.elapsed().as_secs_f64() * 1e6);
        }
        rtts.sort_by(f64::total_cmp);
        (rtts[samples / 2], rtts[samples * 99 / 100])
    }
}

struct Result {
    per_sec: f64,
    median_us: f64,
    p99_us: f64,
}

fn measure(agent: &str, client: &str, flows: u32, duration: Duration, samples: usize) -> Result {
    let mut c = Client::new(client, agent);
    let uid = c.setup(flows);
    c.throughput(flows, uid, duration / 4); // warm-up
    let per_sec = c.throughput(flows, uid, duration);
    let (median_us, p99_us) = c.latency(flows, uid, samples);
    Result {
        per_sec,
        median_us,
        p99_us,
    }
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let (duration, samples) = if quick {
        (Duration::from_millis(500), 2000)
    } else {
        (Duration::from_secs(2), 20_000)
    };
    let tag = std::process::id();

    // This agent, in a thread of this process.
    let ours = format!("bench-agent-{tag}");
    let args = Cli::parse_from([
        "ccp-agent",
        "--bind",
        &ours,
        "--default",
        "fixed",
        "--primary",
        "fixed",
    ])
    .run;
    let stop = Arc::new(AtomicBool::new(false));
    let agent_stop = stop.clone();
    let agent =
        std::thread::spawn(move || ccp_agent::agent::run(&args, agent_stop).map(|c| c.reports));

    // portus' own runtime, serving the same algorithm through the adapter.
    let theirs = format!("bench-portus-{tag}");
    let sock =
        portus::ipc::unix::Socket::<portus::ipc::Blocking>::new(&theirs).expect("portus socket");
    let portus = portus::RunBuilder::new(portus::ipc::BackendBuilder { sock })
        .default_alg(PortusAdapter {
            alg: Fixed::default(),
            priority: Priority::Primary,
        })
        .spawn_thread()
        .run()
        .expect("portus runtime");

    println!(
        "agent_ipc: {} s per throughput run, {samples} latency samples, {IN_FLIGHT} reports in flight",
        duration.as_secs_f64()
    );
    println!(
        "{:>7} | {:>22} | {:>22} | {:>24} | {:>24}",
        "flows",
        "reports/s (ours/portus)",
        "ratio",
        "median us (ours/portus)",
        "p99 us (ours/portus)"
    );
    for flows in [1u32, 100, 10_000] {
        let a = measure(
            &ours,
            &format!("bench-c-ours-{tag}-{flows}"),
            flows,
            duration,
            samples,
        );
        let p = measure(
            &theirs,
            &format!("bench-c-portus-{tag}-{flows}"),
            flows,
            duration,
            samples,
        );
        println!(
            "{flows:>7} | {:>10.0} / {:>9.0} | {:>22.2} | {:>10.1} / {:>11.1} | {:>10.1} / {:>11.1}",
            a.per_sec,
            p.per_sec,
            a.per_sec / p.per_sec,
            a.median_us,
            p.median_us,
            a.p99_us,
            p.p99_us
        );
    }

    stop.store(true, Ordering::Relaxed);
    portus.kill();
    let _ = portus.wait();
    match agent.join() {
        Ok(Ok(reports)) => println!("agent served {reports} reports"),
        other => println!("agent ended badly: {other:?}"),
    }
    let _ = std::fs::remove_file(processes::sock(&theirs));
}
