//! Sets up the two namespaces and their TUN devices, runs the servers and the command, and
//! moves packets between the TUN devices through the [`Pipeline`] until the command exits.
//!
//! Topology (no NAT, no forwarding, no iptables: each TUN is the only route of its namespace):
//! ```text
//!  emuh-N-snd                        ccp-emu (this process)                emuh-N-rcv
//!  CMD --> emutun 10.0.0.2 ==fd==> [uplink link, delay] ==fd==> emutun 10.0.0.1 --> servers
//!      <--                 <==fd== [downlink delay, link] <==fd==
//! ```
//! The command sees `MAHIMAHI_BASE=10.0.0.1` (the receiver), as inside Mahimahi.

use std::io::BufWriter;
use std::os::fd::OwnedFd;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::cli::{EmuConfig, LinkSpec};
use super::disk::{self, Appender, Snapshot};
use super::flowlog::FlowLog;
use super::link::{Link, LinkStats, Timing};
use super::log::LogWriter;
use super::loss::RandomLoss;
use super::pipeline::{Direction, Pipeline, Side};
use super::sys::{self, NetNs, SysError};
use super::trace::{MICROS_PER_MILLI, Trace, TraceError};

/// Address of the receiver's side, exported to the command as `MAHIMAHI_BASE`.
pub const RECEIVER_ADDR: &str = "10.0.0.1";
/// Address of the sender's side.
pub const SENDER_ADDR: &str = "10.0.0.2";
/// Name of the TUN device in both namespaces.
const TUN_NAME: &str = "emutun";
/// TUN transmit ring: large enough that the kernel never drops before the emulated queue
/// (drops there would not be in the log).
const TUN_TXQUEUELEN: &str = "10000";
/// Most packets read from one device per loop turn, so one direction cannot starve the other.
const READ_BATCH: usize = 256;
/// Longest sleep without checking the command and signals, µs.
const MAX_SLEEP_US: u64 = 5_000;
/// How long servers get to start listening on `--wait-port` ports.
const SERVER_START_TIMEOUT: Duration = Duration::from_secs(10);
/// SCHED_FIFO priority of the packet loop: above every normal task, so busy builders on the
/// same machine do not delay packets (low among real-time priorities).
const REALTIME_PRIORITY: i32 = 10;
/// How often the statistics file is rewritten during a run.
const STATS_INTERVAL_US: u64 = 1_000_000;

/// Why a run failed.
#[derive(Debug, thiserror::Error)]
pub enum EmuError {
    #[error(transparent)]
    Trace(#[from] TraceError),
    #[error(transparent)]
    Sys(#[from] SysError),
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("namespace name {0:?}: use letters, digits, '-' and '_' only")]
    BadName(String),
    #[error("servers did not listen on ports {0:?} within {SERVER_START_TIMEOUT:?}")]
    ServersNotListening(Vec<u16>),
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> EmuError {
    let what = what.into();
    move |source| EmuError::Io { what, source }
}

/// End-of-run statistics (written with `--stats`).
#[derive(Debug, Default, serde::Serialize)]
pub struct RunStats {
    /// Uplink (sender to receiver) link counters.
    pub uplink: LinkStats,
    /// Downlink link counters.
    pub downlink: LinkStats,
    /// Largest lateness of the loop behind an uplink/downlink opportunity, µs.
    pub uplink_max_lateness_us: u64,
    pub downlink_max_lateness_us: u64,
    /// Departures the loop processed more than 1 ms after their opportunity (CPU starvation:
    /// a fidelity warning when not near zero).
    pub uplink_late_over_1ms: u64,
    pub downlink_late_over_1ms: u64,
    /// Uplink drops among the packets read while the loop caught up on a stall (it woke over
    /// 1 ms behind an event, until a read emptied the sender's TUN): the sender's packets of
    /// the stall arrive at the queue at once, so a shallow buffer can overflow where a
    /// punctual link would have drained it. A fidelity warning when not zero.
    pub uplink_stall_drops: u64,
    /// Packets the random loss stages dropped (`loss uplink|downlink RATE`).
    pub uplink_random_losses: u64,
    pub downlink_random_losses: u64,
    /// Whether the loop ran with real-time priority.
    pub realtime: bool,
    /// Packets the kernel dropped in the sender's/receiver's TUN before the emulator read them.
    pub sender_tun_tx_dropped: Option<u64>,
    pub receiver_tun_tx_dropped: Option<u64>,
    /// Packets the emulator could not write into a TUN.
    pub write_failures: u64,
    /// Exit status of the command (None if killed by a signal).
    pub command_exit_code: Option<i32>,
    /// CPU time of the emulator process itself (user + system), s, and its wall time, s.
    pub cpu_s: f64,
    pub wall_s: f64,
    /// False while the run goes on: the file is rewritten every `STATS_INTERVAL` so that a
    /// runner can see whether the emulator keeps real time.
    pub finished: bool,
}

/// The two namespaces with their TUN fds. Dropping it deletes the namespaces.
struct Fabric {
    snd: NetNs,
    rcv: NetNs,
    snd_tun: OwnedFd,
    rcv_tun: OwnedFd,
}

fn setup_side(ns: &NetNs, addr: &str, cfg: &EmuConfig) -> Result<OwnedFd, EmuError> {
    let mem = format!("4096 131072 {}", cfg.tcp_mem_max);
    let tun = ns.enter(|| -> Result<OwnedFd, SysError> {
        // No IPv6: router solicitations and MLD reports would cross the link and the log.
        sys::write_sysctl("net.ipv6.conf.all.disable_ipv6", "1")?;
        sys::write_sysctl("net.ipv6.conf.default.disable_ipv6", "1")?;
        // A namespace may only default to a congestion control in the host's
        // net.ipv4.tcp_allowed_congestion_control; without it flows start on the host
        // default (pacing stays on after a switch away from bbr), which is worth a warning,
        // not a refusal.
        if let Err(e) = sys::write_sysctl("net.ipv4.tcp_congestion_control", &cfg.default_cc) {
            eprintln!(
                "ccp-emu: warning: {e}; add {} to net.ipv4.tcp_allowed_congestion_control",
                cfg.default_cc
            );
        }
        sys::write_sysctl("net.ipv4.tcp_rmem", &mem)?;
        sys::write_sysctl("net.ipv4.tcp_wmem", &mem)?;
        sys::create_tun(TUN_NAME)
    })??;
    let n = ns.name();
    sys::ip(&[
        "-n",
        n,
        "addr",
        "add",
        &format!("{addr}/24"),
        "dev",
        TUN_NAME,
    ])?;
    let mut link = vec![
        "-n",
        n,
        "link",
        "set",
        TUN_NAME,
        "up",
        "txqueuelen",
        TUN_TXQUEUELEN,
    ];
    if cfg.no_gso {
        // TCP sizes its buffers by the device's limit: one segment each, paced one by one.
        link.extend(["gso_max_segs", "1"]);
    }
    sys::ip(&link)?;
    sys::ip(&["-n", n, "route", "add", "default", "dev", TUN_NAME])?;
    Ok(tun)
}

impl Fabric {
    fn create(cfg: &EmuConfig) -> Result<Self, EmuError> {
        let ok = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '_';
        if cfg.name.is_empty() || !cfg.name.chars().all(ok) {
            return Err(EmuError::BadName(cfg.name.clone()));
        }
        let snd = NetNs::create(&format!("emuh-{}-snd", cfg.name))?;
        let rcv = NetNs::create(&format!("emuh-{}-rcv", cfg.name))?;
        let snd_tun = setup_side(&snd, SENDER_ADDR, cfg)?;
        let rcv_tun = setup_side(&rcv, RECEIVER_ADDR, cfg)?;
        Ok(Self {
            snd,
            rcv,
            snd_tun,
            rcv_tun,
        })
    }
}

type Log = LogWriter<Appender>;

fn open_log(
    path: &Option<std::path::PathBuf>,
    dir: &str,
    trace_path: &std::path::Path,
    queue: &str,
    timing: Timing,
    init_epoch_ms: u64,
) -> Result<Option<Log>, EmuError> {
    let Some(path) = path else { return Ok(None) };
    let file = disk::create(path)
        .and_then(|f| Appender::spawn(&format!("emu-{dir}-log"), f))
        .map_err(io(format!("creating log {}", path.display())))?;
    let mut header = vec![
        format!("ccp-emu mm-link ({dir}) [{}]", trace_path.display()),
        format!("queue: {queue}"),
    ];
    if timing == Timing::Serial {
        // The lines keep Mahimahi's whole ms: a reader must not take them for its timing.
        header
            .push("timing: serial (opportunities spread over each ms; times rounded down)".into());
    }
    let w = LogWriter::new(file, &header, init_epoch_ms, 0)
        .map_err(io(format!("writing log {}", path.display())))?;
    Ok(Some(w))
}

fn build_pipeline(cfg: &EmuConfig, init_epoch_ms: u64) -> Result<Pipeline<Appender>, EmuError> {
    // Two seeds from one: the directions draw independently.
    let loss = |rate: f64, seed: u64| {
        (rate > 0.0)
            .then(|| RandomLoss::new(rate, seed))
            .transpose()
            .map_err(|e| EmuError::Io {
                what: "loss stage".into(),
                source: std::io::Error::new(std::io::ErrorKind::InvalidInput, e),
            })
    };
    let up_loss = loss(cfg.up_loss, cfg.loss_seed)?;
    let down_loss = loss(cfg.down_loss, cfg.loss_seed ^ 0x5DEE_CE66_D1CE_5EED)?;
    let Some(LinkSpec {
        up_trace,
        down_trace,
        up_queue,
        down_queue,
        up_log,
        down_log,
        timing,
    }) = &cfg.link
    else {
        return Ok(Pipeline::new(
            cfg.delay_ms,
            Direction::new(None, None).with_loss(up_loss),
            Direction::new(None, None).with_loss(down_loss),
        ));
    };
    let up_log = open_log(
        up_log,
        "uplink",
        up_trace,
        &up_queue.describe(),
        *timing,
        init_epoch_ms,
    )?;
    let down_log = open_log(
        down_log,
        "downlink",
        down_trace,
        &down_queue.describe(),
        *timing,
        init_epoch_ms,
    )?;
    let link = |trace, queue, log: bool| {
        Ok::<_, EmuError>(Link::new(Trace::load(trace)?, *timing, queue, 0, log))
    };
    let up = link(up_trace, *up_queue, up_log.is_some())?;
    let down = link(down_trace, *down_queue, down_log.is_some())?;
    Ok(Pipeline::new(
        cfg.delay_ms,
        Direction::new(Some(up), up_log).with_loss(up_loss),
        Direction::new(Some(down), down_log).with_loss(down_loss),
    ))
}

/// A child in its own process group, killed (the whole group) on drop.
struct Group(Child);

impl Group {
    fn spawn(mut cmd: Command, own_group: bool) -> Result<Self, EmuError> {
        if own_group {
            cmd.process_group(0);
        }
        cmd.spawn().map(Group).map_err(io("starting a command"))
    }

    fn signal(&self, sig: libc::c_int) {
        let pgid = self.0.id() as libc::pid_t;
        // SAFETY: kill() has no memory effects; the group is one this process created.
        unsafe {
            libc::kill(-pgid, sig);
        }
    }

    fn stop(&mut self) {
        if matches!(self.0.try_wait(), Ok(Some(_))) {
            // The leader is gone; helpers it left in the group still get the signal.
            self.signal(libc::SIGKILL);
            return;
        }
        self.signal(libc::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(2);
        while Instant::now() < deadline {
            if matches!(self.0.try_wait(), Ok(Some(_))) {
                self.signal(libc::SIGKILL);
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        self.signal(libc::SIGKILL);
        let _ = self.0.wait();
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        self.stop();
    }
}

fn netns_exec(ns: &NetNs, argv: &[String]) -> Command {
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", ns.name()]).args(argv);
    cmd.env("MAHIMAHI_BASE", RECEIVER_ADDR);
    cmd
}

fn wait_for_ports(rcv: &NetNs, ports: &[u16]) -> Result<(), EmuError> {
    let deadline = Instant::now() + SERVER_START_TIMEOUT;
    loop {
        let missing: Vec<u16> = rcv.enter(|| {
            ports
                .iter()
                .copied()
                .filter(|p| !sys::tcp_listening(*p) && !sys::udp_bound(*p))
                .collect()
        })?;
        if missing.is_empty() {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(EmuError::ServersNotListening(missing));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Runs the emulator; returns the statistics (the command's exit status inside).
pub fn run(cfg: &EmuConfig) -> Result<RunStats, EmuError> {
    let start = Instant::now();
    let init_epoch_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0);
    let mut pipeline = build_pipeline(cfg, init_epoch_ms)?;
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        signal_hook::flag::register(sig, Arc::clone(&stop))
            .map_err(io("installing signal handlers"))?;
    }
    sys::tighten_timer_slack();
    let fabric = Fabric::create(cfg)?;

    let mut servers = Vec::new();
    for s in &cfg.servers {
        let argv = ["sh".to_string(), "-c".to_string(), s.clone()];
        let mut cmd = netns_exec(&fabric.rcv, &argv);
        // The command's stdout is the run's output (e.g. iperf3 -J): keep servers off it.
        cmd.stdout(std::io::stderr());
        servers.push(Group::spawn(cmd, true)?);
    }
    wait_for_ports(&fabric.rcv, &cfg.wait_ports)?;
    let interactive = cfg.command.is_empty();
    let argv = if interactive {
        vec![std::env::var("SHELL").unwrap_or_else(|_| "sh".to_string())]
    } else {
        cfg.command.clone()
    };
    let mut command = Group::spawn(netns_exec(&fabric.snd, &argv), !interactive)?;

    let stats_file = cfg
        .stats
        .as_ref()
        .map(|path| Snapshot::spawn("emu-stats", path.clone()))
        .transpose()
        .map_err(io("starting the statistics writer"))?;
    // Only the packet loop gets real-time priority; children and the file writers' threads
    // were started before it and do not inherit it. The loop sleeps between events, so it
    // cannot lock up a core.
    let stats_realtime = cfg.realtime && sys::set_realtime(REALTIME_PRIORITY);
    let now_us = || start.elapsed().as_micros() as u64;
    let mut buf = vec![0u8; 65_536];
    let mut flow_log = cfg.flow_log.as_ref().map(|_| FlowLog::default());
    let mut stats = RunStats {
        realtime: stats_realtime,
        ..RunStats::default()
    };
    let mut last_check = 0;
    let mut last_stats = 0;
    let mut stall = Stall::default();
    // The earliest event the loop last slept towards (nothing moves in the pipeline while
    // it waits).
    let mut due = None;
    loop {
        stall.wake(due, now_us());
        let drops = pipeline.up.stats().drops;
        let read = read_batch(&fabric.snd_tun, &mut buf, &now_us, |t, p| {
            pipeline.from_sender(t, p)
        })
        .map_err(io("reading a TUN device"))?;
        stats.uplink_stall_drops += stall.read(read, pipeline.up.stats().drops - drops);
        read_batch(&fabric.rcv_tun, &mut buf, &now_us, |t, p| {
            pipeline.from_receiver(t, p)
        })
        .map_err(io("reading a TUN device"))?;
        let now = now_us();
        let (snd_tun, rcv_tun) = (&fabric.snd_tun, &fabric.rcv_tun);
        let failures = &mut stats.write_failures;
        let flows = &mut flow_log;
        pipeline.step(now, &mut |side, packet| {
            let fd = match side {
                Side::Sender => snd_tun,
                Side::Receiver => {
                    if let Some(f) = flows.as_mut() {
                        f.record(now, &packet);
                    }
                    rcv_tun
                }
            };
            if !sys::write_packet(fd, &packet) {
                *failures += 1;
            }
        });
        if stop.load(Ordering::Relaxed) {
            command.stop();
            break;
        }
        if let Some(file) = &stats_file
            && now.saturating_sub(last_stats) >= STATS_INTERVAL_US
        {
            last_stats = now;
            collect(&mut stats, &pipeline, start);
            file.offer(stats_json(&stats));
        }
        if now.saturating_sub(last_check) >= MAX_SLEEP_US {
            last_check = now;
            if let Ok(Some(status)) = command.0.try_wait() {
                stats.command_exit_code = status.code();
                break;
            }
        }
        due = pipeline.next_wakeup_us();
        let wake = due.unwrap_or(u64::MAX).min(now + MAX_SLEEP_US);
        let now = now_us();
        if wake > now {
            sys::wait_readable(&[&fabric.snd_tun, &fabric.rcv_tun], wake - now)
                .map_err(io("waiting for packets"))?;
        }
    }
    command.stop();
    for s in &mut servers {
        s.stop();
    }
    stats.sender_tun_tx_dropped = fabric.snd.enter(|| sys::tx_dropped(TUN_NAME))?;
    stats.receiver_tun_tx_dropped = fabric.rcv.enter(|| sys::tx_dropped(TUN_NAME))?;
    collect(&mut stats, &pipeline, start);
    stats.finished = true;
    pipeline.up.finish().map_err(io("writing the uplink log"))?;
    pipeline
        .down
        .finish()
        .map_err(io("writing the downlink log"))?;
    drop(fabric);
    if let (Some(path), Some(log)) = (&cfg.flow_log, &flow_log) {
        let file = disk::create(path).map_err(io(format!("creating {}", path.display())))?;
        log.write(BufWriter::new(file), init_epoch_ms)
            .map_err(io(format!("writing {}", path.display())))?;
    }
    if let (Some(path), Some(file)) = (&cfg.stats, stats_file) {
        file.finish(stats_json(&stats))
            .map_err(io(format!("writing {}", path.display())))?;
    }
    Ok(stats)
}

/// Whether the loop is catching up on a stall: it woke over 1 ms behind its earliest event,
/// and no read has emptied the sender's TUN since.
#[derive(Debug, Default)]
struct Stall {
    catching_up: bool,
}

impl Stall {
    /// The loop woke at `now_us`; `due_us` is its earliest event, if any.
    fn wake(&mut self, due_us: Option<u64>, now_us: u64) {
        if due_us.is_some_and(|due| now_us.saturating_sub(due) > MICROS_PER_MILLI) {
            self.catching_up = true;
        }
    }

    /// A read of the sender's TUN took `read` packets and the uplink dropped `drops`; returns
    /// the drops that count as the stall's.
    fn read(&mut self, read: usize, drops: u64) -> u64 {
        let counted = if self.catching_up { drops } else { 0 };
        if read < READ_BATCH {
            self.catching_up = false;
        }
        counted
    }
}

/// Reads up to [`READ_BATCH`] packets from `fd`, handing each on with the time `clock` gives
/// right after its read; returns how many it read. Stamped when read, not when the loop
/// woke: preempted in between, the loop would date packets sent meanwhile before they
/// arrived, and they would cross the path early (paced senders, which keep sending through
/// the pause, measured RTTs up to 11 ms below the path's).
fn read_batch(
    fd: &OwnedFd,
    buf: &mut [u8],
    clock: &impl Fn() -> u64,
    mut take: impl FnMut(u64, Vec<u8>),
) -> std::io::Result<usize> {
    for read in 0..READ_BATCH {
        let Some(n) = sys::read_packet(fd, buf)? else {
            return Ok(read);
        };
        take(clock(), buf[..n].to_vec());
    }
    Ok(READ_BATCH)
}

/// The pipeline's counters so far.
fn collect<W: std::io::Write>(stats: &mut RunStats, pipeline: &Pipeline<W>, start: Instant) {
    stats.uplink = pipeline.up.stats();
    stats.downlink = pipeline.down.stats();
    stats.uplink_max_lateness_us = pipeline.up.max_lateness_us();
    stats.downlink_max_lateness_us = pipeline.down.max_lateness_us();
    stats.uplink_late_over_1ms = pipeline.up.late_over_1ms();
    stats.downlink_late_over_1ms = pipeline.down.late_over_1ms();
    stats.uplink_random_losses = pipeline.up.random_losses();
    stats.downlink_random_losses = pipeline.down.random_losses();
    stats.cpu_s = sys::own_cpu_seconds();
    stats.wall_s = start.elapsed().as_secs_f64();
}

/// The statistics file's text.
fn stats_json(stats: &RunStats) -> String {
    serde_json::to_string_pretty(stats).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;
    use std::os::unix::net::UnixDatagram;

    #[test]
    fn a_packet_that_arrives_while_the_loop_is_paused_is_dated_when_read() {
        let (tx, rx) = UnixDatagram::pair().expect("socket pair");
        rx.set_nonblocking(true).expect("non-blocking");
        tx.send(b"A").expect("send");
        let now = Cell::new(0);
        // The loop is paused for 10 ms right after reading A, and B arrives meanwhile.
        let clock = || {
            let t = now.get();
            if t == 0 {
                tx.send(b"B").expect("send");
                now.set(10_000);
            }
            t
        };
        let mut got = Vec::new();
        read_batch(&OwnedFd::from(rx), &mut [0; 16], &clock, |t, p| {
            got.push((t, p))
        })
        .expect("read");
        assert_eq!(got, vec![(0, b"A".to_vec()), (10_000, b"B".to_vec())]);
    }

    #[test]
    fn drops_count_as_the_stalls_until_a_read_empties_the_tun() {
        let mut stall = Stall::default();
        // On time (0.9 ms behind its event): a drop is the queue's own.
        stall.wake(Some(10_000), 10_900);
        assert_eq!(stall.read(3, 2), 0);
        // 12 ms behind: the backlog of the stall overflows over two full reads.
        stall.wake(Some(20_000), 32_000);
        assert_eq!(stall.read(READ_BATCH, 5), 5);
        stall.wake(Some(33_000), 33_100);
        assert_eq!(stall.read(READ_BATCH - 1, 4), 4);
        // The TUN was emptied: the next drops are the queue's own again.
        stall.wake(Some(34_000), 34_100);
        assert_eq!(stall.read(10, 1), 0);
        // Nothing due (an idle link) is no stall, however long the loop slept.
        stall.wake(None, 90_000);
        assert_eq!(stall.read(2, 1), 0);
    }
}
