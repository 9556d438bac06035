//! Shared fixtures of the eBPF datapath tests: network namespaces joined by a rate-limited
//! veth (HTB; this kernel has no netem or fq), a cgroup, the `ccp-ebpf` daemon, a scripted
//! CCP agent, and iperf3. Every name starts with `ebpfh-`; every fixture removes what it
//! made when dropped.
#![allow(dead_code)]

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use ccp_test_support::processes::RawSocket;
use ccp_test_support::program::{install_msg, register};
use ccp_wire::{CreateMsg, DatapathMsg, Frames, PriorityMsg};

/// "ccp" is one global registration: the tests of a file take turns.
static SERIAL: Mutex<()> = Mutex::new(());

pub fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// True (and says why) when the test cannot run here.
pub fn skip() -> bool {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let euid = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|l| l.split_whitespace().nth(1).map(str::to_owned));
    if euid.as_deref() != Some("0") {
        eprintln!("SKIPPED: the eBPF datapath tests need root (struct_ops, netns, cgroups)");
        return true;
    }
    for tool in ["iperf3", "ip", "tc", "python3"] {
        if Command::new(tool).arg("-V").output().is_err()
            && Command::new(tool).arg("--version").output().is_err()
        {
            eprintln!("SKIPPED: {tool} is not installed");
            return true;
        }
    }
    false
}

pub fn run(cmd: &str) -> Output {
    let out = Command::new("sh")
        .arg("-c")
        .arg(cmd)
        .output()
        .expect("sh runs");
    assert!(
        out.status.success(),
        "`{cmd}` failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn run_quiet(cmd: &str) {
    let _ = Command::new("sh").arg("-c").arg(cmd).output();
}

/// The daemon binary, built as part of the workspace (`cargo build -p ccp-ebpf`).
pub fn daemon_bin() -> PathBuf {
    let exe = std::env::current_exe().expect("test exe path");
    let dir = exe.parent().and_then(Path::parent).expect("target dir");
    let bin = dir.join("ccp-ebpf");
    assert!(
        bin.exists(),
        "{} is missing: run `cargo build -p ccp-ebpf` first",
        bin.display()
    );
    bin
}

pub fn available_ccs() -> String {
    std::fs::read_to_string("/proc/sys/net/ipv4/tcp_available_congestion_control")
        .unwrap_or_default()
        .trim()
        .to_string()
}

/// Two namespaces: the client sends through a veth limited by HTB to the server.
#[derive(Debug)]
pub struct Net {
    pub client: String,
    pub server: String,
    /// The middle namespace of a routed path.
    pub router: Option<String>,
    pub server_ip: Ipv4Addr,
    pub client_ip: Ipv4Addr,
}

impl Net {
    /// `tag` must be short (interface names are at most 15 bytes); `n` picks the subnet.
    pub fn new(tag: &str, n: u8, rate_mbit: u32) -> Net {
        let client = format!("ebpfh-{tag}-c");
        let server = format!("ebpfh-{tag}-s");
        run_quiet(&format!("ip netns del {client}; ip netns del {server}"));
        let (vc, vs) = (format!("ebh{tag}c"), format!("ebh{tag}s"));
        run(&format!(
            "ip netns add {client} && ip netns add {server} && \
             ip link add {vc} netns {client} type veth peer name {vs} netns {server} && \
             ip -n {client} addr add 10.201.{n}.2/24 dev {vc} && \
             ip -n {server} addr add 10.201.{n}.1/24 dev {vs} && \
             ip -n {client} link set {vc} up && ip -n {server} link set {vs} up && \
             ip -n {client} link set lo up && ip -n {server} link set lo up && \
             tc -n {client} qdisc add dev {vc} root handle 1: htb default 10 && \
             tc -n {client} class add dev {vc} parent 1: classid 1:10 htb \
                rate {rate_mbit}mbit ceil {rate_mbit}mbit"
        ));
        Net {
            client,
            server,
            router: None,
            server_ip: Ipv4Addr::new(10, 201, n, 1),
            client_ip: Ipv4Addr::new(10, 201, n, 2),
        }
    }
}

impl Net {
    /// Client and server joined through a router namespace whose link toward the server is
    /// the bottleneck: HTB at `rate_mbit` with a drop-tail FIFO of `queue_pkts` packets.
    /// Unlike a qdisc on the sender's own interface (which TCP small queues and local
    /// congestion signals keep from ever dropping), this queue overflows and drops
    /// packets, so the congestion control's loss response decides the throughput.
    pub fn routed(tag: &str, n: u8, rate_mbit: u32, queue_pkts: u32) -> Net {
        let client = format!("ebpfh-{tag}-c");
        let server = format!("ebpfh-{tag}-s");
        let router = format!("ebpfh-{tag}-r");
        run_quiet(&format!(
            "ip netns del {client}; ip netns del {server}; ip netns del {router}"
        ));
        let (c, r1, r2, s) = (
            format!("ebh{tag}c"),
            format!("ebh{tag}r1"),
            format!("ebh{tag}r2"),
            format!("ebh{tag}s"),
        );
        run(&format!(
            "ip netns add {client} && ip netns add {server} && ip netns add {router} && \
             ip link add {c} netns {client} type veth peer name {r1} netns {router} && \
             ip link add {r2} netns {router} type veth peer name {s} netns {server} && \
             ip -n {client} addr add 10.201.{n}.2/24 dev {c} && \
             ip -n {router} addr add 10.201.{n}.1/24 dev {r1} && \
             ip -n {router} addr add 10.202.{n}.1/24 dev {r2} && \
             ip -n {server} addr add 10.202.{n}.2/24 dev {s} && \
             for ns in {client} {server} {router}; do ip -n $ns link set lo up; done && \
             ip -n {client} link set {c} up && ip -n {server} link set {s} up && \
             ip -n {router} link set {r1} up && ip -n {router} link set {r2} up && \
             ip -n {client} route add default via 10.201.{n}.1 && \
             ip -n {server} route add default via 10.202.{n}.1 && \
             ip netns exec {router} sysctl -q -w net.ipv4.ip_forward=1 && \
             tc -n {router} qdisc add dev {r2} root handle 1: htb default 10 && \
             tc -n {router} class add dev {r2} parent 1: classid 1:10 htb \
                rate {rate_mbit}mbit ceil {rate_mbit}mbit && \
             tc -n {router} qdisc add dev {r2} parent 1:10 handle 10: pfifo limit {queue_pkts}"
        ));
        Net {
            client,
            server,
            router: Some(router),
            server_ip: Ipv4Addr::new(10, 202, n, 2),
            client_ip: Ipv4Addr::new(10, 201, n, 2),
        }
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        run_quiet(&format!(
            "ip netns pids {c} | xargs -r kill; ip netns pids {s} | xargs -r kill; \
             sleep 0.2; ip netns del {c}; ip netns del {s}",
            c = self.client,
            s = self.server
        ));
        if let Some(r) = &self.router {
            run_quiet(&format!("ip netns del {r}"));
        }
    }
}

/// A cgroup-v2 directory for the test's processes (the setsockopt program is attached
/// here, not to the whole machine).
#[derive(Debug)]
pub struct Cgroup {
    pub path: PathBuf,
}

impl Cgroup {
    pub fn new(tag: &str) -> Cgroup {
        let path = PathBuf::from(format!("/sys/fs/cgroup/unified/ebpfh-{tag}"));
        let _ = std::fs::create_dir_all(&path);
        Cgroup { path }
    }

    /// A shell prefix that moves the command into this cgroup (before `ip netns exec`,
    /// which remounts /sys without the cgroup-v2 hierarchy).
    pub fn enter(&self) -> String {
        format!("echo $$ > {}/cgroup.procs && exec ", self.path.display())
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        let procs = self.path.join("cgroup.procs");
        for _ in 0..50 {
            let left = std::fs::read_to_string(&procs).unwrap_or_default();
            if left.trim().is_empty() {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = std::fs::remove_dir(&self.path);
    }
}

/// A running `ccp-ebpf start`; dropping it runs `ccp-ebpf stop`.
#[derive(Debug)]
pub struct Daemon {
    pub run_dir: PathBuf,
    child: Option<Child>,
}

impl Daemon {
    /// A daemon whose registration ends with it, so that a killed test leaves none behind.
    pub fn start(tag: &str, agent: &str, cgroup: &Cgroup, extra: &[&str]) -> Daemon {
        Self::spawn(tag, agent, cgroup, &[&["--no-pin"], extra].concat())
    }

    /// A daemon with pinned links: its registration outlives it until `stop`.
    pub fn start_pinned(tag: &str, agent: &str, cgroup: &Cgroup) -> Daemon {
        let pin_name = format!("ebpfh-pins-{tag}");
        Self::spawn(tag, agent, cgroup, &["--pin-name", &pin_name])
    }

    fn spawn(tag: &str, agent: &str, cgroup: &Cgroup, extra: &[&str]) -> Daemon {
        let run_dir = PathBuf::from(format!("/tmp/ebpfh-{tag}-run"));
        let mut cmd = Command::new(daemon_bin());
        cmd.arg("--run-dir")
            .arg(&run_dir)
            .arg("start")
            .args(["--agent", agent])
            .args(["--name", &format!("ebpfh-dp-{tag}")])
            .arg("--cgroup")
            .arg(&cgroup.path)
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit());
        let child = cmd.spawn().expect("start ccp-ebpf");
        let t0 = Instant::now();
        while !available_ccs().split_whitespace().any(|c| c == "ccp") {
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "\"ccp\" was not registered"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        // The control socket appears once the loop runs.
        while !run_dir.join("control.sock").exists() && t0.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(20));
        }
        Daemon {
            run_dir,
            child: Some(child),
        }
    }

    pub fn cli(&self, args: &[&str]) -> Output {
        Command::new(daemon_bin())
            .arg("--run-dir")
            .arg(&self.run_dir)
            .args(args)
            .output()
            .expect("ccp-ebpf runs")
    }

    /// `ccp-ebpf set-priority` for the flow `src` → `dst` (`addr:port` each).
    pub fn set_priority(&self, src: &str, dst: &str, class: &str) -> Output {
        self.cli(&["set-priority", "--src", src, "--dst", dst, "--class", class])
    }

    /// One counter of `status` (0 when it is not there).
    pub fn counter(status: &str, key: &str) -> u64 {
        status
            .split_whitespace()
            .skip_while(|w| *w != key)
            .nth(1)
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    }

    pub fn status(&self) -> String {
        String::from_utf8_lossy(&self.cli(&["status"]).stdout).into_owned()
    }

    /// SIGKILL, as a crash or an out-of-memory kill would end it; `stop` still cleans up.
    pub fn kill_hard(&mut self) {
        if let Some(c) = self.child.as_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// `ccp-ebpf stop`; returns its output.
    pub fn stop(&mut self) -> Output {
        let out = self.cli(&["stop"]);
        if let Some(mut c) = self.child.take() {
            let _ = c.wait();
        }
        out
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if self.child.is_some() {
            self.stop();
        }
        let _ = std::fs::remove_dir(&self.run_dir);
    }
}

/// What the scripted agent saw.
#[derive(Debug, Default, Clone)]
pub struct AgentLog {
    pub readies: Vec<PathBuf>,
    /// Each Create with the datapath socket it came from.
    pub creates: Vec<(PathBuf, CreateMsg)>,
    pub priorities: Vec<(PathBuf, PriorityMsg)>,
    pub measures: u64,
    pub closes: u64,
    pub syncs: u64,
}

/// The fixed-rate test program: every ACK sets Rate and Cwnd to the values the agent
/// gave; it reports every 100 ms so the test can see libccp running.
pub const FIXED_RATE_PROG: &str = "
(def (Report (volatile acked 0)) (rateGoal 0) (cwndGoal 0))
(when true
    (:= Report.acked (+ Report.acked Ack.bytes_acked))
    (:= Rate rateGoal)
    (:= Cwnd cwndGoal)
    (fallthrough))
(when (> Micros 100000)
    (report)
    (:= Micros 0))
";

/// A minimal CCP agent on portus' serializers: installs `FIXED_RATE_PROG` on every
/// datapath, gives every flow `rate_bytes_per_sec` with a large window, echoes SYNC and
/// records everything.
pub struct ScriptedAgent {
    pub log: Arc<Mutex<AgentLog>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    path: PathBuf,
}

impl std::fmt::Debug for ScriptedAgent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScriptedAgent")
            .field("path", &self.path)
            .finish()
    }
}

impl ScriptedAgent {
    pub fn start(name: &str, rate_bytes_per_sec: u64) -> ScriptedAgent {
        let socket = RawSocket::bind(name);
        socket
            .sock
            .set_read_timeout(Some(Duration::from_millis(50)))
            .expect("timeout");
        let path = socket.path.clone();
        let log = Arc::new(Mutex::new(AgentLog::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let (l, s) = (log.clone(), stop.clone());
        let thread = std::thread::spawn(move || agent_loop(socket, l, s, rate_bytes_per_sec));
        ScriptedAgent {
            log,
            stop,
            thread: Some(thread),
            path,
        }
    }

    pub fn snapshot(&self) -> AgentLog {
        self.log.lock().expect("log").clone()
    }

    /// Stop answering and remove the socket, like a killed agent.
    pub fn kill(mut self) -> AgentLog {
        self.shutdown();
        self.snapshot()
    }

    /// The agent's thread ends and drops its socket, which removes the file.
    fn shutdown(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for ScriptedAgent {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn agent_loop(socket: RawSocket, log: Arc<Mutex<AgentLog>>, stop: Arc<AtomicBool>, rate: u64) {
    let sock = &socket.sock;
    let (install, scope) = install_msg(FIXED_RATE_PROG);
    let reg = |n: &str| register(&scope, n);
    let mut installed: Vec<PathBuf> = Vec::new();
    let mut buf = vec![0u8; 65536];
    while !stop.load(Ordering::Relaxed) {
        let Ok((n, from)) = sock.recv_from(&mut buf) else {
            continue;
        };
        let Some(from) = from.as_pathname().map(Path::to_path_buf) else {
            continue;
        };
        for frame in Frames::new(&buf[..n]).flatten() {
            let Ok(msg) = ccp_wire::decode(frame) else {
                continue;
            };
            let mut l = log.lock().expect("log");
            match msg {
                DatapathMsg::Ready { .. } => {
                    l.readies.push(from.clone());
                    let _ = sock.send_to(&install, &from);
                    installed.push(from.clone());
                }
                DatapathMsg::Create(c) => {
                    if !installed.contains(&from) {
                        let _ = sock.send_to(&install, &from);
                        installed.push(from.clone());
                    }
                    let change =
                        portus::serialize::serialize(&portus::serialize::changeprog::Msg {
                            sid: c.sid,
                            program_uid: scope.program_uid,
                            num_fields: 2,
                            fields: vec![(reg("rateGoal"), rate), (reg("cwndGoal"), 4_000_000)],
                        })
                        .expect("changeprog serializes");
                    let _ = sock.send_to(&change, &from);
                    l.creates.push((from.clone(), c));
                }
                DatapathMsg::Measure(m) if m.is_close() => l.closes += 1,
                DatapathMsg::Measure(_) => l.measures += 1,
                DatapathMsg::Priority(p) => l.priorities.push((from.clone(), p)),
                DatapathMsg::Sync { .. } => {
                    l.syncs += 1;
                    let _ = sock.send_to(frame, &from);
                }
            }
        }
    }
}

/// Network byte order as the datapath (like ccp-kernel) puts it into Create.
pub fn wire_ip(ip: Ipv4Addr) -> u32 {
    u32::from(ip).to_be()
}

pub fn wire_port(port: u16) -> u32 {
    u32::from(port.to_be())
}

/// A background process, killed and reaped when dropped.
#[derive(Debug)]
pub struct Bg(pub Child);

impl Drop for Bg {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Start `iperf3 -s -1 -J` in the server namespace: its JSON reaches the client
/// (`--get-server-output`, [`iperf_client`]), whose result reads the receiver's counts.
pub fn iperf_server(net: &Net, port: u16) -> Bg {
    let c = Command::new("ip")
        .args(["netns", "exec", &net.server])
        .args(["iperf3", "-s", "-1", "-J", "-p", &port.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("iperf3 -s");
    let server = Bg(c);
    wait_listening(&net.server, port);
    server
}

/// A TCP server in the server namespace that reads and discards one connection.
pub fn sink_server(net: &Net, port: u16) -> Bg {
    let c = Command::new("ip")
        .args(["netns", "exec", &net.server, "python3", "-c"])
        .arg(format!(
            "import socket\n\
             s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n\
             s.bind((\"0.0.0.0\", {port})); s.listen(1); c, _ = s.accept()\n\
             while c.recv(65536): pass\n"
        ))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("python3 server");
    let server = Bg(c);
    wait_listening(&net.server, port);
    server
}

/// Wait until something listens on TCP `port` in namespace `ns` (a loaded machine can
/// take well over a second to start a server; a fixed sleep raced here).
fn wait_listening(ns: &str, port: u16) {
    let t0 = Instant::now();
    loop {
        let out = Command::new("ip")
            .args(["netns", "exec", ns, "ss", "-Hltn"])
            .arg(format!("sport = :{port}"))
            .output()
            .expect("ss runs");
        if !String::from_utf8_lossy(&out.stdout).trim().is_empty() {
            return;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(15),
            "nothing listens on port {port} in {ns} after 15 s"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A running iperf3 client (JSON output), in the client namespace and the cgroup.
pub fn iperf_client(net: &Net, cg: &Cgroup, port: u16, secs: u32, cc: &str, extra: &str) -> Child {
    Command::new("sh")
        .arg("-c")
        .arg(format!(
            "{}ip netns exec {} iperf3 -c {} -p {port} -t {secs} -C {cc} -J --get-server-output {extra}",
            cg.enter(),
            net.client,
            net.server_ip
        ))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("iperf3 -c")
}

/// Per-second throughput (bits/s) and the whole run's as the receiver counted them, from
/// iperf3's JSON. The sender's count is of the application's writes, in 128 KiB blocks, and
/// runs ahead of the wire while the socket buffer grows: a flow paced at 40 Mbit/s read
/// 41.94 (40 blocks a second) for seconds on end.
#[derive(Debug)]
pub struct IperfResult {
    pub intervals_bps: Vec<f64>,
    pub mean_bps: f64,
    pub local_port: u16,
    pub retransmits: u64,
}

pub fn iperf_result(child: Child) -> IperfResult {
    let out = child.wait_with_output().expect("iperf3 ends");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("iperf3 JSON: {e}: {}", String::from_utf8_lossy(&out.stdout)));
    assert!(v.get("error").is_none(), "iperf3 failed: {}", v["error"]);
    let intervals_bps = v["server_output_json"]["intervals"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|i| i["sum"]["bits_per_second"].as_f64())
                .collect()
        })
        .unwrap_or_default();
    IperfResult {
        intervals_bps,
        mean_bps: v["end"]["sum_received"]["bits_per_second"]
            .as_f64()
            .unwrap_or(0.0),
        local_port: v["start"]["connected"][0]["local_port"]
            .as_u64()
            .unwrap_or(0) as u16,
        retransmits: v["end"]["sum_sent"]["retransmits"].as_u64().unwrap_or(0),
    }
}

/// The mean of the intervals in `[from, to)` (seconds).
pub fn mean_of(r: &IperfResult, from: usize, to: usize) -> f64 {
    let s = &r.intervals_bps[from.min(r.intervals_bps.len())..to.min(r.intervals_bps.len())];
    if s.is_empty() {
        return 0.0;
    }
    s.iter().sum::<f64>() / s.len() as f64
}

/// Wait until `cond` holds on the agent's log, or panic after `secs`.
pub fn wait_for(agent: &ScriptedAgent, secs: u64, what: &str, cond: impl Fn(&AgentLog) -> bool) {
    let t0 = Instant::now();
    while !cond(&agent.snapshot()) {
        assert!(
            t0.elapsed() < Duration::from_secs(secs),
            "timed out waiting for {what}: {:?}",
            agent.snapshot()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Everything `stop` must have removed.
pub fn assert_clean(d: &Daemon, tag: &str) {
    assert_eq!(available_ccs(), "reno bbr cubic", "ccp still registered");
    let pins = d.run_dir.join("bpffs");
    assert!(!pins.exists(), "bpffs mount point {} left", pins.display());
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    assert!(
        !mounts.contains(&format!("ebpfh-{tag}-run")),
        "bpffs still mounted"
    );
    let cg = String::from_utf8_lossy(
        &run(&format!(
            "bpftool cgroup show /sys/fs/cgroup/unified/ebpfh-{tag}"
        ))
        .stdout,
    )
    .into_owned();
    assert!(!cg.contains("setsockopt"), "cgroup program left: {cg}");
    // The kernel frees an unregistered struct_ops map only after its last socket is gone and
    // an RCU-tasks grace period, which under load takes a while after `stop` returns.
    let struct_ops_left = || {
        let so = String::from_utf8_lossy(&run("bpftool struct_ops list").stdout).into_owned();
        so.split_whitespace().any(|w| w == "ccp").then_some(so)
    };
    let t0 = Instant::now();
    while struct_ops_left().is_some() && t0.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(100));
    }
    if let Some(so) = struct_ops_left() {
        panic!("struct_ops left 10 s after stop: {so}");
    }
    assert!(
        !ccp_rundir::socket_path(&format!("ebpfh-dp-{tag}-0")).exists(),
        "datapath socket left"
    );
}
