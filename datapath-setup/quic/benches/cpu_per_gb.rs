//! CPU per transferred GB of the QUIC datapath under CCP algorithms against quinn's own
//! CUBIC, in one run: bulk `ccp-quic send` transfers over loopback to one `ccp-quic serve`,
//! the controllers taking turns round after round so that they share the machine's state.
//!
//! `cargo bench -p ccp-quic --bench cpu_per_gb` (optionally `-- --quick`). For each
//! controller: GB sent (every UDP byte, the measure both controllers share), Gbit/s, CPU
//! seconds per GB of the sender (all its threads: quinn, TLS, and for CCP the libccp host
//! thread) and of the agent, and the total's ratio to quinn's CUBIC. Loopback has no
//! bottleneck: each controller sends as fast as its window lets it, so throughput differs;
//! CPU per GB is the comparable number. The receiver's CPU is left out (the same per byte
//! whoever sends).

#[path = "../tests/common/mod.rs"]
mod common;

use std::path::Path;
use std::process::{Command, Stdio};

use ccp_test_support::processes::AgentProcess;
use common::Server;

/// Who runs the connection: quinn's CUBIC, or the agent with this default algorithm.
const CONTROLLERS: [Option<&str>; 4] = [None, Some("cubic"), Some("proteus-p"), Some("ledbat++")];

/// CPU seconds (user + system) of the waited-for children of this process so far.
fn children_cpu() -> f64 {
    // SAFETY: getrusage fills the struct we own.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut u) };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    secs(u.ru_utime) + secs(u.ru_stime)
}

/// CPU seconds (user + system) of a running process, from /proc.
fn process_cpu(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name (which may hold spaces) in parentheses.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<f64> = rest
        .split_whitespace()
        .map(|x| x.parse().unwrap_or(0.0))
        .collect();
    // SAFETY: sysconf has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name.
    (f.get(11).unwrap_or(&0.0) + f.get(12).unwrap_or(&0.0)) / ticks
}

/// One transfer's numbers.
#[derive(Debug, Default, Clone, Copy)]
struct Sample {
    gb: f64,
    secs: f64,
    sender_cpu: f64,
    agent_cpu: f64,
}

fn send(server: &Server, agent: Option<&AgentProcess>, secs: f64) -> Sample {
    let time = secs.to_string();
    let mut args = vec!["--time", &time];
    match agent {
        Some(a) => args.extend(["--cc", "ccp", "--agent", &a.name]),
        None => args.extend(["--cc", "quinn-cubic"]),
    }
    let agent_pid = agent.and_then(AgentProcess::pid);
    let agent_before = agent_pid.map_or(0.0, process_cpu);
    let before = children_cpu();
    let report = common::report(common::spawn_send(server, &args));
    let sender_cpu = children_cpu() - before;
    let agent_cpu = agent_pid.map_or(0.0, process_cpu) - agent_before;
    let udp_bytes = report["end"]["sum_sent"]["udp_bytes"]
        .as_f64()
        .expect("udp_bytes");
    if agent.is_some() {
        assert!(
            report["intervals"]
                .as_array()
                .is_some_and(|i| i.iter().any(|i| i["streams"][0]["ccp_steered"] == true)),
            "the agent never steered the connection"
        );
    }
    Sample {
        gb: udp_bytes / 1e9,
        secs,
        sender_cpu,
        agent_cpu,
    }
}

fn start_agent(alg: &str, name: &str, bin: &Path) -> AgentProcess {
    let mut cmd = Command::new(bin);
    cmd.args(["--bind", name, "--default", alg])
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    AgentProcess::start(cmd, name)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let (rounds, secs) = if quick { (1, 2.0) } else { (3, 5.0) };
    let bin = common::agent_bin();
    let server = Server::start();
    let mut samples: Vec<Vec<Sample>> = vec![Vec::new(); CONTROLLERS.len()];
    for round in 1..=rounds {
        eprintln!("round {round} of {rounds}");
        for (i, c) in CONTROLLERS.iter().enumerate() {
            let s = match c {
                None => send(&server, None, secs),
                Some(alg) => {
                    let agent = start_agent(alg, &common::unique("agent"), &bin);
                    send(&server, Some(&agent), secs)
                }
            };
            samples[i].push(s);
        }
    }

    println!(
        "{rounds} round(s) of {secs} s transfers over loopback; medians over the rounds\n\
         controller             GB sent  Gbit/s  sender CPU s/GB  agent CPU s/GB  total s/GB  vs quinn CUBIC"
    );
    let mut baseline = None;
    for (c, ss) in CONTROLLERS.iter().zip(&samples) {
        let per_gb = |f: fn(&Sample) -> f64| median(ss.iter().map(|s| f(s) / s.gb).collect());
        let gb = median(ss.iter().map(|s| s.gb).collect());
        let gbps = median(ss.iter().map(|s| s.gb * 8.0 / s.secs).collect());
        let sender = per_gb(|s| s.sender_cpu);
        let agent = per_gb(|s| s.agent_cpu);
        let total = per_gb(|s| s.sender_cpu + s.agent_cpu);
        let base = *baseline.get_or_insert(total);
        let name = c.map_or("quinn's CUBIC".to_owned(), |a| format!("ccp:{a}"));
        println!(
            "{name:<22} {gb:>7.2}  {gbps:>6.2}  {sender:>15.2}  {agent:>14.3}  {total:>10.2}  {:>13.2}",
            total / base
        );
    }
}
