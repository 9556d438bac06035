//! The emulator keeps its promises: idle RTT, throughput of one CUBIC flow at the trace rate,
//! queue limits, and drops all in the log. Needs root (namespaces, TUN) and iperf3; each test
//! says so and passes vacuously when they are missing. Tests run one at a time (a lock), since
//! concurrent emulators on a small machine would measure each other.

use std::path::PathBuf;
use std::process::Command;
use std::sync::Mutex;

use ccp_experiments::emu::log::LogSummary;
use ccp_experiments::emu::trace::Trace;
use ccp_experiments::exp::host_cpu::{NOTABLE_STEAL_SHARE, with_steal_share};
use ccp_experiments::exp::metrics::max_goodput_bits_per_sec;
use ccp_experiments::exp::runner::{MAX_LATE_SHARE, fell_behind, late_share};
use serde_json::Value;

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn missing_prerequisite() -> Option<&'static str> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("needs root (network namespaces and TUN devices)");
    }
    if Command::new("iperf3").arg("--version").output().is_err() {
        return Some("needs iperf3");
    }
    None
}

macro_rules! require_root {
    () => {
        if let Some(why) = missing_prerequisite() {
            eprintln!("SKIPPED: {why}");
            return;
        }
    };
}

struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> Self {
        let p = std::env::temp_dir().join(format!("emuh-test-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&p).expect("temp dir");
        Self(p)
    }
    fn path(&self, f: &str) -> PathBuf {
        self.0.join(f)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn write_trace(dir: &TempDir, mbps: f64) -> PathBuf {
    let p = dir.path(&format!("{mbps}.trace"));
    std::fs::write(&p, Trace::constant(mbps).expect("valid rate").to_text()).expect("trace");
    p
}

/// Runs ccp-emu with `args` (the stats file is added); returns (stdout of CMD, stats).
fn emu(dir: &TempDir, name: &str, args: &[&str]) -> (String, Value) {
    let stats = dir.path("stats.json");
    let out = Command::new(env!("CARGO_BIN_EXE_ccp-emu"))
        .args(["--name", &format!("t{}{name}", std::process::id())])
        .args(["--stats", stats.to_str().expect("utf-8 path")])
        .args(args)
        .current_dir(&dir.0)
        .output()
        .expect("ccp-emu runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "ccp-emu failed: {stderr}");
    let stats: Value =
        serde_json::from_str(&std::fs::read_to_string(&stats).expect("stats written"))
            .expect("json");
    (String::from_utf8_lossy(&out.stdout).into_owned(), stats)
}

/// RTTs of 25 UDP pings through a `delay_ms` delay line (and `link`, if given).
fn rtts(dir: &TempDir, name: &str, delay_ms: &str, link: &[&str]) -> Vec<f64> {
    let exp = env!("CARGO_BIN_EXE_ccp-exp");
    // Both endpoints run real-time (below the emulator's packet loop, priority 10): the test
    // measures the emulator, not how long an ordinary process waits for a CPU on a busy VM.
    let echo = format!("chrt -f 5 {exp} udp-echo --port 7007");
    let ping =
        format!("sleep 0.5; chrt -f 5 {exp} udp-ping 10.0.0.1:7007 --count 25 --interval-ms 40");
    let mut args = vec!["--server", &echo, "delay", delay_ms];
    args.extend_from_slice(link);
    args.extend_from_slice(&["--", "sh", "-c", &ping]);
    let (out, _) = emu(dir, name, &args);
    let r: Vec<f64> = serde_json::from_str(out.trim()).expect("list of RTTs");
    assert!(r.len() >= 20, "answers: {r:?}");
    r
}

/// `r` in ascending order.
fn sorted(r: &[f64]) -> Vec<f64> {
    let mut s = r.to_vec();
    s.sort_by(f64::total_cmp);
    s
}

/// Fails unless `measure(1)`, or else `measure(2)`, holds (each returns whether it held and
/// what it saw): a VM whose timers wake late for a while fails one measurement, an emulator
/// that breaks the promise fails both.
fn holds_once_of_twice(what: &str, measure: impl Fn(usize) -> (bool, String)) {
    let (holds, first) = measure(1);
    if !holds {
        let (holds, second) = measure(2);
        assert!(holds, "{what}, twice: {first}; then {second}");
    }
}

/// Median RTT of the same path with no delay: what the endpoints, the TUN devices and the
/// emulator's wake-ups cost on this host. A VM with an idle host gave 0.6-0.8 ms (and 41.0-41.2
/// ms through `delay 20`): the promise is on what the delay adds beyond that.
fn path_cost_ms(dir: &TempDir, name: &str) -> f64 {
    median(&rtts(dir, name, "0", &[]))
}

fn median(r: &[f64]) -> f64 {
    sorted(r)[r.len() / 2]
}

#[test]
fn idle_rtt_is_twice_the_one_way_delay() {
    require_root!();
    let _lock = ONE_AT_A_TIME.lock();
    let dir = TempDir::new("rtt");
    // A few samples may still wait (interrupts, the VM's other tenants: 5-45 % of them over
    // 41 ms on the 2-core VM in one afternoon), so the promise is held on the median and the
    // lower quartile; the upper tail is the machine's, not the emulator's. The path's own cost
    // is measured beside it, since a VM's wake-ups can cost a millisecond per round trip for
    // hours; a second measurement tells a VM that stalls for a second from an emulator that
    // holds packets too long, which fails both.
    holds_once_of_twice(
        "delay 20 without a link: p25 under 40 ms or the median over 1 ms beyond 40 plus the path's cost",
        |attempt| {
            let cost = path_cost_ms(&dir, &format!("rtt0{attempt}"));
            let r = rtts(&dir, &format!("rtt{attempt}"), "20", &[]);
            let s = sorted(&r);
            let (p25, median) = (s[s.len() / 4], s[s.len() / 2]);
            let holds = p25 >= 40.0 && median - cost <= 41.0;
            (holds, format!("path cost {cost} ms, RTTs {r:?}"))
        },
    );
    // With a 48 Mbit/s link each direction also waits for the next whole-ms opportunity
    // (0..1 ms; Mahimahi adds the same and rounds the delay too: 32.5 ms for mm-delay 15).
    // The reply leaves the delay line a few µs after a ms boundary and so always waits
    // almost a full ms: RTT = 2 x delay + (0..1] + ~1 ms.
    // A serializing link (`--timing=serial`) has an opportunity every 250 µs at 48 Mbit/s:
    // neither direction waits for a whole millisecond, and the reply's near-full ms is gone.
    // Late timer wake-ups narrow the gap, since the
    // serial link wakes the emulator for an opportunity after each release where the
    // whole-ms link's wait for its boundary absorbs the release's lateness: 0.45-0.58 ms on
    // slow days (serial median 41.34 ms against 41.92; 41.40 and 41.44 against 41.91 and
    // 41.88). A serial link that waited for whole milliseconds would show no gap; the test
    // asks for 0.3 ms.
    let t = write_trace(&dir, 48.0);
    let t = t.to_str().expect("utf-8");
    let median_of = |name: &str, extra: &[&str]| {
        let r = rtts(&dir, name, "20", &[&["link", t, t][..], extra].concat());
        let s = sorted(&r);
        // No sample can come back before the delay line has held it both ways.
        assert!(s[0] >= 40.0, "min RTT {} ms, link {extra:?}: {r:?}", s[0]);
        (s[s.len() / 2], r)
    };
    holds_once_of_twice(
        "a link's median RTT beyond the path's cost not within 40-42.1 ms, or a serial link's not 0.3 ms below it",
        |attempt| {
            let cost = path_cost_ms(&dir, &format!("rttl0{attempt}"));
            let (median, r) = median_of(&format!("rttl{attempt}"), &[]);
            let (median_serial, rs) = median_of(&format!("rtts{attempt}"), &["--timing=serial"]);
            let holds = (40.0..=42.1).contains(&(median - cost)) && median_serial < median - 0.3;
            let seen = format!(
                "path cost {cost} ms, whole-ms median {median} ms {r:?}, serial median {median_serial} ms {rs:?}"
            );
            (holds, seen)
        },
    );
}

#[test]
fn no_gso_leaves_tcp_one_segment_per_buffer() {
    require_root!();
    let _lock = ONE_AT_A_TIME.lock();
    let dir = TempDir::new("gso");
    let show = ["--", "ip", "-d", "link", "show", "emutun"];
    let (default, _) = emu(&dir, "gso", &show);
    let (off, _) = emu(&dir, "nogso", &[&["--no-gso"][..], &show].concat());
    assert!(!default.contains("gso_max_segs 1 "), "{default}");
    assert!(off.contains("gso_max_segs 1 "), "{off}");
}

fn cubic_goodput(mbps: f64) {
    let _lock = ONE_AT_A_TIME.lock();
    let dir = TempDir::new(&format!("tput{mbps}"));
    let t = write_trace(&dir, mbps);
    let t = t.to_str().expect("utf-8");
    // 20 ms RTT, 2 BDP of droptail buffer.
    let buffer = format!(
        "bytes={}",
        (2.0 * mbps * 1e6 / 8.0 * 0.020).max(30_000.0) as u64
    );
    // An attempt during which the emulator fell behind real time or the hypervisor took
    // the CPU measures the host, not the emulator: it is repeated, as the runner repeats
    // such runs, at most twice; a repeat that keeps time must reach the link's goodput.
    let want = max_goodput_bits_per_sec(mbps);
    for attempt in 1..=MAX_GOODPUT_ATTEMPTS {
        let ((got, stats), steal) = with_steal_share(|| cubic_attempt(&dir, mbps, t, &buffer));
        let steal = steal.unwrap_or(0.0);
        let late = late_share(&stats).unwrap_or(0.0);
        let err = (got / want - 1.0).abs();
        eprintln!(
            "{mbps} Mbit/s trace, attempt {attempt}: CUBIC {:.2} Mbit/s of {:.2} ({:+.1}%); \
             {:.1} % of the packets over 1 ms late, hypervisor {:.1} % of the CPU",
            got / 1e6,
            want / 1e6,
            (got / want - 1.0) * 100.0,
            late * 100.0,
            steal * 100.0
        );
        assert_eq!(
            stats["sender_tun_tx_dropped"], 0,
            "no drops before the emulated queue"
        );
        assert_eq!(stats["write_failures"], 0);
        let spoiled = fell_behind(&stats, MAX_LATE_SHARE).is_some() || steal >= NOTABLE_STEAL_SHARE;
        if err <= 0.05 {
            return;
        }
        if spoiled && attempt < MAX_GOODPUT_ATTEMPTS {
            continue;
        }
        panic!(
            "{mbps} Mbit/s: CUBIC got {:.2} Mbit/s, link goodput {:.2} ({:.1}% off); stats {stats}",
            got / 1e6,
            want / 1e6,
            err * 100.0
        );
    }
}

/// Attempts of [`cubic_goodput`] at most.
const MAX_GOODPUT_ATTEMPTS: usize = 3;

/// One 10 s CUBIC transfer over a `mbps` trace `t` with a droptail `buffer`: the receiver's
/// rate, bit/s, and the emulator's statistics.
fn cubic_attempt(dir: &TempDir, mbps: f64, t: &str, buffer: &str) -> (f64, Value) {
    let (out, stats) = emu(
        dir,
        &format!("tp{mbps}"),
        &[
            "--server",
            "iperf3 -s -p 5201",
            "--wait-port",
            "5201",
            "delay",
            "10",
            "link",
            t,
            t,
            "--uplink-queue=droptail",
            &format!("--uplink-queue-args={buffer}"),
            "--",
            "iperf3",
            "-c",
            "10.0.0.1",
            "-p",
            "5201",
            "-C",
            "cubic",
            "-t",
            "10",
            "-O",
            "2",
            "-J",
        ],
    );
    let v: Value = serde_json::from_str(&out).expect("iperf3 JSON");
    let got = v["end"]["sum_received"]["bits_per_second"]
        .as_f64()
        .expect("receiver rate");
    (got, stats)
}

#[test]
fn cubic_reaches_the_trace_rate_at_12_mbps() {
    require_root!();
    cubic_goodput(12.0);
}

#[test]
fn cubic_reaches_the_trace_rate_at_48_mbps() {
    require_root!();
    cubic_goodput(48.0);
}

#[test]
fn cubic_reaches_the_trace_rate_at_192_mbps() {
    require_root!();
    cubic_goodput(192.0);
}

fn check_queue(kind: &str, args: &str, limit_bytes: Option<u64>, limit_packets: Option<u64>) {
    let _lock = ONE_AT_A_TIME.lock();
    let dir = TempDir::new(kind);
    let t = write_trace(&dir, 12.0);
    let t = t.to_str().expect("utf-8");
    let up_log = dir.path("up.log");
    let (out, stats) = emu(
        &dir,
        kind,
        &[
            "--server",
            "iperf3 -s -p 5201",
            "--wait-port",
            "5201",
            "delay",
            "10",
            "link",
            t,
            t,
            &format!("--uplink-queue={kind}"),
            &format!("--uplink-queue-args={args}"),
            &format!("--uplink-log={}", up_log.display()),
            "--",
            "iperf3",
            "-c",
            "10.0.0.1",
            "-p",
            "5201",
            "-C",
            "cubic",
            "-t",
            "6",
            "-J",
        ],
    );
    let up = &stats["uplink"];
    let max_bytes = up["max_queue_bytes"].as_u64().expect("counter");
    let max_packets = up["max_queue_packets"].as_u64().expect("counter");
    if let Some(b) = limit_bytes {
        assert!(max_bytes <= b, "{kind}: queue held {max_bytes} bytes > {b}");
    }
    if let Some(p) = limit_packets {
        assert!(
            max_packets <= p,
            "{kind}: queue held {max_packets} packets > {p}"
        );
    }
    let log =
        LogSummary::parse(&std::fs::read_to_string(&up_log).expect("log")).expect("valid log");
    let drops = up["drops"].as_u64().expect("counter");
    assert!(
        drops > 0,
        "{kind}: a CUBIC flow must overflow a small queue"
    );
    assert_eq!(log.drops, drops, "{kind}: every drop is in the log");
    assert_eq!(log.arrivals, up["arrivals"].as_u64().expect("counter"));
    let left = log.arrivals - log.departures - log.drops;
    assert!(
        limit_packets.is_none_or(|p| left <= p + 1),
        "{kind}: {left} packets unaccounted for"
    );
    // The log's own occupancy (which counts the packet being sent) respects the limit.
    if let Some(b) = limit_bytes {
        assert!(
            log.max_backlog_bytes <= b + 1504,
            "{kind}: log backlog {}",
            log.max_backlog_bytes
        );
    }
    // Every retransmission comes from a logged drop: nothing is lost elsewhere.
    assert_eq!(stats["sender_tun_tx_dropped"], 0);
    let v: Value = serde_json::from_str(&out).expect("iperf3 JSON");
    let retrans = v["end"]["sum_sent"]["retransmits"]
        .as_u64()
        .expect("retransmits");
    assert!(
        retrans <= drops + 2,
        "{kind}: {retrans} retransmissions but {drops} logged drops"
    );
}

#[test]
fn droptail_never_exceeds_its_byte_limit_and_logs_every_drop() {
    require_root!();
    check_queue("droptail", "bytes=30000", Some(30_000), None);
}

#[test]
fn drophead_never_exceeds_its_packet_limit_and_logs_every_drop() {
    require_root!();
    check_queue("drophead", "packets=15", None, Some(15));
}

#[test]
fn namespaces_are_removed_after_a_run() {
    require_root!();
    let _lock = ONE_AT_A_TIME.lock();
    let dir = TempDir::new("ns");
    let name = format!("t{}ns", std::process::id());
    emu(&dir, "ns", &["delay", "1", "--", "true"]);
    let list = Command::new("ip")
        .args(["netns", "list"])
        .output()
        .expect("ip runs");
    let list = String::from_utf8_lossy(&list.stdout);
    assert!(!list.contains(&name), "left behind: {list}");
}

#[test]
fn random_loss_drops_the_share_it_is_asked_to_and_tcp_sees_it() {
    require_root!();
    let _lock = ONE_AT_A_TIME.lock();
    let dir = TempDir::new("loss");
    let t = write_trace(&dir, 12.0);
    let t = t.to_str().expect("utf-8");
    let (out, stats) = emu(
        &dir,
        "loss",
        &[
            "--server",
            "iperf3 -s -p 5201",
            "--wait-port",
            "5201",
            "--loss-seed",
            "42",
            "delay",
            "10",
            "loss",
            "uplink",
            "0.03",
            "link",
            t,
            t,
            "--uplink-queue=droptail",
            "--uplink-queue-args=bytes=60000",
            "--",
            "iperf3",
            "-c",
            "10.0.0.1",
            "-p",
            "5201",
            "-C",
            "cubic",
            "-t",
            "6",
            "-J",
        ],
    );
    let lost = stats["uplink_random_losses"].as_u64().expect("counter");
    let carried = stats["uplink"]["departures"].as_u64().expect("counter");
    let share = lost as f64 / carried as f64;
    // Every packet the link carried was lost with probability 0.03 (binomial: a few
    // thousand packets keep the share within 1.5 points).
    assert!((0.015..=0.045).contains(&share), "lost {lost} of {carried}");
    assert_eq!(stats["downlink_random_losses"], 0);
    // TCP repairs what the loss stage took (and what the queue dropped): the lost packets
    // show up as retransmissions. A few go uncounted: losses in the last round trips are
    // repaired after iperf3 reads its counters, and the uplink also carries the control
    // connection's packets (one run counted 52 retransmissions for 55 losses).
    let v: Value = serde_json::from_str(&out).expect("iperf3 JSON");
    let retrans = v["end"]["sum_sent"]["retransmits"]
        .as_u64()
        .expect("retransmits");
    let drops = stats["uplink"]["drops"].as_u64().expect("counter");
    assert!(
        retrans + 2 + lost / 10 >= lost && retrans <= lost + drops + 2,
        "{retrans} retransmissions for {lost} random losses and {drops} queue drops"
    );
}
