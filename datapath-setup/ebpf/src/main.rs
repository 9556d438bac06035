//! `ccp-ebpf`: the Linux TCP datapath for CCP without a kernel module.
//!
//! A BPF congestion control named `ccp` (struct_ops, `src/bpf/ccp.bpf.c`) records every
//! ACK in a ring buffer and applies per-flow cwnd and pacing rate from a shared array. This
//! daemon drains the ring buffer every millisecond, runs one real libccp connection per
//! flow (so the agent's datapath programs run per ACK exactly as in ccp-kernel), talks to
//! `ccp-agent` over its unix socket, and writes libccp's decisions back. A
//! `cgroup/setsockopt` program turns `setsockopt(SOL_CCP, CCP_PRIORITY)` into the PRIORITY
//! message (DESIGN.md "The Linux datapath on eBPF"; measurements in specs/ebpf.md).
//!
//! ```text
//!  kernel: tcp_congestion_ops "ccp"                     daemon (this binary)             agent
//!   init ──── CREATE ──────────► ring buffer ──► Connection::start ── Create ──────────►
//!   cong_control ── ACK ───────►  (1 ms batch) ─► load_primitives+invoke ── Measure ───►
//!   set_state(Loss) ── TIMEOUT ─►                  (was_timeout)                          
//!   release ── CLOSE ──────────►                  drop connection ── close ────────────►
//!   cgroup/setsockopt ── PRIORITY ►                 encode_priority ── PRIORITY ────────►
//!   next ACK applies ◄── ctl[flow % N] ◄──── set_cwnd/set_rate_abs ◄── Install/Update ──
//! ```
//!
//! Deviations from ccp-kernel:
//! * Rates (`Flow.rate_outgoing/incoming`) use the flow's MSS, not a constant 1500-byte
//!   MTU, so they are right on any MTU.
//! * ECN counts are 0 (no ECN negotiation).
//! * A flow without a decision (before the agent's first, or while the agent or daemon is
//!   gone) runs a BPF Reno fallback instead of freezing its window.
//! * Close is sent when the socket leaves `ccp` (its `release`), as in ccp-kernel.
//!
//! This binary links libccp, whose unmangled `log` replaces libm's: no `f64::ln`/`log`.

mod bpf;
mod daemon;
mod prims;
mod shard;

mod skel {
    #![allow(clippy::all, missing_debug_implementations, unused)]
    include!(concat!(env!("OUT_DIR"), "/ccp.skel.rs"));
}

mod shared {
    #![allow(
        non_camel_case_types,
        non_upper_case_globals,
        dead_code,
        missing_debug_implementations
    )]
    include!(concat!(env!("OUT_DIR"), "/ccp_shared.rs"));
}

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand, ValueEnum};

/// libccp's hard limit per datapath (specs/ccp-programs.md §3.1).
const LIBCCP_MAX_CONNECTIONS: usize = 1024;

#[derive(Parser, Debug)]
#[command(
    name = "ccp-ebpf",
    about = "CCP datapath for Linux TCP on eBPF struct_ops"
)]
struct Cli {
    /// Directory for the pid, state and control socket (and a private bpffs if needed).
    #[arg(long, global = true, default_value = "/run/ccp-ebpf")]
    run_dir: PathBuf,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Load and register "ccp", then run the datapath in the foreground until SIGTERM.
    Start {
        /// The agent's name: it binds /tmp/ccp/NAME (`ccp-agent --bind NAME`).
        #[arg(long, default_value = "ccp-agent")]
        agent: String,
        /// This datapath's socket name: shard i binds /tmp/ccp/NAME-i.
        #[arg(long, default_value = "ccp-ebpf")]
        name: String,
        /// A mounted bpffs for the pins; by default /sys/fs/bpf if it is one, else a
        /// private mount under the run directory.
        #[arg(long)]
        bpffs: Option<PathBuf>,
        /// Directory name for the pins inside the bpffs.
        #[arg(long, default_value = "ccp-ebpf")]
        pin_name: String,
        /// cgroup-v2 directory whose sockets may use setsockopt(SOL_CCP); by default the
        /// cgroup-v2 root.
        #[arg(long)]
        cgroup: Option<PathBuf>,
        /// Do not attach the setsockopt program.
        #[arg(long)]
        no_setsockopt: bool,
        /// Flows fall back to BPF Reno when the daemon has been silent this long.
        #[arg(long, default_value_t = 200)]
        fallback_timeout_ms: u64,
        /// Connections per libccp datapath before another shard (socket) is opened.
        #[arg(long, default_value_t = LIBCCP_MAX_CONNECTIONS)]
        flows_per_shard: usize,
    },
    /// Stop the daemon and remove everything it registered, pinned, attached or mounted.
    Stop,
    /// Show whether the datapath runs, its flows and counters.
    Status,
    /// Set the priority of a running flow by its 4-tuple (as the sender sees it).
    SetPriority {
        /// Local address, IP:PORT.
        #[arg(long)]
        src: String,
        /// Remote address, IP:PORT.
        #[arg(long)]
        dst: String,
        #[arg(long, value_enum)]
        class: ClassArg,
        /// Hybrid threshold in bytes/s (0 = the agent's default).
        #[arg(long, default_value_t = 0)]
        threshold: u64,
    },
}

#[derive(ValueEnum, Clone, Copy, Debug)]
enum ClassArg {
    Primary,
    Scavenger,
    Hybrid,
}

impl ClassArg {
    fn code(self) -> u32 {
        match self {
            ClassArg::Primary => ccp_wire::PriorityClass::Primary.code(),
            ClassArg::Scavenger => ccp_wire::PriorityClass::Scavenger.code(),
            ClassArg::Hybrid => ccp_wire::PriorityClass::Hybrid.code(),
        }
    }
}

/// What `start` set up, so that `stop` can undo it even after a crash.
#[derive(Debug, Default)]
struct State {
    pid: u32,
    pin_dir: PathBuf,
    /// A bpffs mount the daemon made itself and must unmount.
    own_mount: Option<PathBuf>,
}

impl State {
    fn path(run_dir: &Path) -> PathBuf {
        run_dir.join("state")
    }

    fn save(&self, run_dir: &Path) -> std::io::Result<()> {
        let mut s = format!("pid={}\npin_dir={}\n", self.pid, self.pin_dir.display());
        if let Some(m) = &self.own_mount {
            s.push_str(&format!("own_mount={}\n", m.display()));
        }
        std::fs::write(Self::path(run_dir), s)
    }

    fn load(run_dir: &Path) -> Option<Self> {
        let text = std::fs::read_to_string(Self::path(run_dir)).ok()?;
        let mut st = State::default();
        for line in text.lines() {
            match line.split_once('=') {
                Some(("pid", v)) => st.pid = v.parse().ok()?,
                Some(("pin_dir", v)) => st.pin_dir = PathBuf::from(v),
                Some(("own_mount", v)) => st.own_mount = Some(PathBuf::from(v)),
                _ => {}
            }
        }
        Some(st)
    }
}

fn control_path(run_dir: &Path) -> PathBuf {
    run_dir.join("control.sock")
}

fn cgroup2_root() -> Option<PathBuf> {
    let mounts = std::fs::read_to_string("/proc/self/mounts").ok()?;
    mounts.lines().find_map(|l| {
        let mut w = l.split_whitespace();
        let (_, dir, fs) = (w.next()?, w.next()?, w.next()?);
        (fs == "cgroup2").then(|| PathBuf::from(dir))
    })
}

fn pid_alive(pid: u32) -> bool {
    // SAFETY: signal 0 only checks for existence and permission.
    pid != 0 && unsafe { libc::kill(pid as libc::pid_t, 0) } == 0
}

/// Undo a (possibly crashed) daemon's setup: pins, its bpffs mount, state files.
fn cleanup(run_dir: &Path, st: &State) {
    if !st.pin_dir.as_os_str().is_empty() {
        bpf::remove_pins(&st.pin_dir);
    }
    if let Some(m) = &st.own_mount {
        let _ = bpf::umount(m);
        let _ = std::fs::remove_dir(m);
    }
    let _ = std::fs::remove_file(control_path(run_dir));
    let _ = std::fs::remove_file(State::path(run_dir));
}

#[allow(clippy::too_many_arguments)]
fn start(
    run_dir: &Path,
    agent: &str,
    name: &str,
    bpffs: Option<PathBuf>,
    pin_name: &str,
    cgroup: Option<PathBuf>,
    no_setsockopt: bool,
    fallback_timeout_ms: u64,
    flows_per_shard: usize,
) -> Result<(), String> {
    if !(1..=LIBCCP_MAX_CONNECTIONS).contains(&flows_per_shard) {
        return Err(format!(
            "--flows-per-shard must be 1..={LIBCCP_MAX_CONNECTIONS}"
        ));
    }
    std::fs::create_dir_all(run_dir).map_err(|e| format!("{}: {e}", run_dir.display()))?;
    if let Some(old) = State::load(run_dir) {
        if pid_alive(old.pid) {
            return Err(format!("already running as pid {}", old.pid));
        }
        // A crashed daemon left its pins (and so the registration) behind.
        cleanup(run_dir, &old);
    }

    let mut st = State {
        pid: std::process::id(),
        ..State::default()
    };
    let fs_root = match bpffs {
        Some(p) if bpf::is_bpffs(&p) => p,
        Some(p) => return Err(format!("{} is not a bpffs mount", p.display())),
        None if bpf::is_bpffs(Path::new("/sys/fs/bpf")) => PathBuf::from("/sys/fs/bpf"),
        None => {
            let m = run_dir.join("bpffs");
            bpf::mount_bpffs(&m).map_err(|e| e.to_string())?;
            st.own_mount = Some(m.clone());
            m
        }
    };
    st.pin_dir = fs_root.join(pin_name);
    st.save(run_dir).map_err(|e| e.to_string())?;

    let cgroup = if no_setsockopt {
        None
    } else {
        Some(
            cgroup
                .or_else(cgroup2_root)
                .ok_or("no cgroup-v2 mount found (use --cgroup or --no-setsockopt)")?,
        )
    };
    let loaded = match bpf::load(
        &st.pin_dir,
        cgroup.as_deref(),
        fallback_timeout_ms.saturating_mul(1_000_000),
    ) {
        Ok(l) => l,
        Err(e) => {
            cleanup(run_dir, &st);
            return Err(e.to_string());
        }
    };

    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::flag::register(sig, stop.clone()).map_err(|e| e.to_string())?;
    }
    let cfg = daemon::Config {
        agent: Path::new("/tmp/ccp").join(agent),
        sock_prefix: Path::new("/tmp/ccp").join(name),
        flows_per_shard,
        control: control_path(run_dir),
    };
    let d = daemon::Daemon::new(cfg, loaded).map_err(|e| e.to_string())?;
    eprintln!(
        "ccp-ebpf: \"ccp\" registered; pins in {}",
        st.pin_dir.display()
    );
    let res = d.run(stop).map_err(|e| e.to_string());
    cleanup(run_dir, &st);
    res
}

fn ask(run_dir: &Path, line: &str) -> Result<String, String> {
    let mut s = UnixStream::connect(control_path(run_dir))
        .map_err(|e| format!("daemon not reachable: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))
        .map_err(|e| e.to_string())?;
    s.write_all(line.as_bytes()).map_err(|e| e.to_string())?;
    s.shutdown(std::net::Shutdown::Write)
        .map_err(|e| e.to_string())?;
    let mut out = String::new();
    s.read_to_string(&mut out).map_err(|e| e.to_string())?;
    Ok(out)
}

fn stop(run_dir: &Path) -> Result<(), String> {
    let Some(st) = State::load(run_dir) else {
        if bpf::ccp_registered() {
            return Err("no daemon state here, but \"ccp\" is registered by someone else".into());
        }
        println!("not running");
        return Ok(());
    };
    if pid_alive(st.pid) {
        // SAFETY: plain kill(2) of the daemon's pid from its own state file.
        unsafe { libc::kill(st.pid as libc::pid_t, libc::SIGTERM) };
        let t0 = Instant::now();
        while pid_alive(st.pid) && t0.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    cleanup(run_dir, &st);
    if bpf::ccp_registered() {
        return Err("\"ccp\" is still registered".into());
    }
    println!("stopped");
    Ok(())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let res = match cli.cmd {
        Cmd::Start {
            agent,
            name,
            bpffs,
            pin_name,
            cgroup,
            no_setsockopt,
            fallback_timeout_ms,
            flows_per_shard,
        } => start(
            &cli.run_dir,
            &agent,
            &name,
            bpffs,
            &pin_name,
            cgroup,
            no_setsockopt,
            fallback_timeout_ms,
            flows_per_shard,
        ),
        Cmd::Stop => stop(&cli.run_dir),
        Cmd::Status => match ask(&cli.run_dir, "status\n") {
            Ok(s) => {
                print!("running\n{s}");
                Ok(())
            }
            Err(e) => {
                println!(
                    "not running ({e}); \"ccp\" {}registered",
                    if bpf::ccp_registered() { "" } else { "not " }
                );
                Err(String::new())
            }
        },
        Cmd::SetPriority {
            src,
            dst,
            class,
            threshold,
        } => ask(
            &cli.run_dir,
            &format!("prio {src} {dst} {} {threshold}\n", class.code()),
        )
        .and_then(|r| {
            if r.starts_with("ok") {
                print!("{r}");
                Ok(())
            } else {
                Err(r.trim().to_string())
            }
        }),
    };
    match res {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            if !e.is_empty() {
                eprintln!("ccp-ebpf: {e}");
            }
            ExitCode::FAILURE
        }
    }
}
