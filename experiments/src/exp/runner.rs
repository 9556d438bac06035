//! Executing runs: write the run's scripts, run `run.sh` (so that the script is exactly what
//! ran), read the results back and write `summary.json`. A run whose summary says `ok` is
//! not repeated.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::control_lag::AckLag;
use super::host_cpu::{NOTABLE_STEAL_SHARE, with_steal_share};
use super::iperf::FlowResult;
use super::metrics::{self, Interval};
use super::plan::{FlowSpec, RunSpec};
use super::plot::{self, Chart, Series};
use super::ports::FlowPorts;
use super::script::{self, Backend};
use super::shared::RUN_TRACE;
use crate::emu::flowlog;
use crate::emu::log::LogSummary;

/// Extra time a run may take beyond its duration (setup, connection, teardown).
const RUN_SLACK: Duration = Duration::from_secs(90);

/// A run in which the emulator delivered more than this share of the uplink's packets over
/// 1 ms late did not emulate the configured link: the machine could not keep real time.
/// On the 2-core VM a run under the scheduler's admission has 0.05–0.3 %; one with 19 % had
/// BBR cut to 0.8 of its usual throughput, and one with about 5 % (up to 15.8 ms late) was
/// kept by an earlier limit of 10 %. Twice the admission limit (`schedule`). The default of
/// `ccp-exp run --max-late-share`.
pub const MAX_LATE_SHARE: f64 = 0.02;

/// A run in which the emulator stalled longer than this (ms) did not emulate the link either,
/// however few packets waited: Linux's minimum RTO is 200 ms, so a longer stall can time a
/// flow out. Under `--jobs 8` the 2-core VM stalled 0.4–1.5 s 9 times in 45 minutes, often
/// in several emulators at the same instant, with under 0.5 % of the packets late.
pub const MAX_STALL_MS: f64 = 200.0;

/// The share of the ACKs the shared eBPF datapath may read late in a run, as a fraction of
/// the share of packets the emulator may deliver late (`max_late_share`): three 180 Mbit/s
/// runs of nine flows at once had 23 % read late and the flows on the kernel's fallback; two
/// at once had 1.6 %, which cost one of them 2 % of its utilization (0.957 against 0.98).
const LATE_ACK_FRACTION: f64 = 0.25;

/// The share of the ACKs the shared datapath may read late in a run whose emulator may
/// deliver `max_late_share` of the packets late.
pub fn max_late_ack_share(max_late_share: f64) -> f64 {
    max_late_share * LATE_ACK_FRACTION
}

/// How often such a run is repeated at most: the default of `ccp-exp run --late-repeats`.
pub const LATE_REPEATS: usize = 2;

/// Outcome of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Results are complete.
    Ok,
    /// Not run (e.g. the ccp datapath is not available); retried next time.
    Skipped,
    /// Ran and failed; retried next time.
    Failed,
}

/// One flow's results.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FlowSummary {
    /// Congestion control as planned.
    pub cc: String,
    /// Role in the scenario (`primary`, `competitor`, `flow`).
    pub role: String,
    /// Mean receiver throughput in the measurement window, bit/s.
    pub throughput_bps: f64,
    /// Mean receiver throughput over the flow's own lifetime, bit/s.
    pub lifetime_bps: f64,
    /// Retransmitted segments.
    pub retransmits: u64,
    /// Median and 95th percentile of the sender's smoothed RTT samples, ms.
    pub rtt_p50_ms: Option<f64>,
    pub rtt_p95_ms: Option<f64>,
    /// Delivered bytes over time on the run's clock.
    pub intervals: Vec<Interval>,
    /// Where `intervals` come from: `emulator` (ccp-emu's per-flow log, exact), `receiver`
    /// (iperf3 server intervals, placed by the client's start: a few RTTs early) or `sender`
    /// (bytes written, when the server's JSON is missing).
    pub intervals_source: String,
}

/// Bottleneck metrics from the uplink log and the flows.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LinkMetrics {
    /// Maximum TCP goodput of the link, bit/s.
    pub max_goodput_bps: f64,
    /// Sum of the flows' throughput in the window, bit/s.
    pub total_bps: f64,
    /// total / max goodput.
    pub utilization: f64,
    /// Packets the queue dropped (whole run).
    pub drops: u64,
    /// Time packets spent in the uplink (queue + wait for an opportunity) in the window, ms.
    pub qdelay_p50_ms: Option<f64>,
    pub qdelay_p95_ms: Option<f64>,
    /// Base RTT + p95 uplink delay, ms.
    pub rtt_p95_ms: Option<f64>,
    /// Proteus' 95th-percentile inflation ratio: (p95 RTT - base RTT) / (buffer / rate).
    pub inflation_ratio: Option<f64>,
}

/// What `summary.json` holds.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunSummary {
    pub status: Status,
    /// Why it was skipped or failed.
    pub reason: Option<String>,
    pub spec: RunSpec,
    pub flows: Vec<FlowSummary>,
    pub link: Option<LinkMetrics>,
    /// The emulator's statistics (drops outside the queue, loop lateness).
    pub emulator: Option<serde_json::Value>,
    /// How many ACKs the shared eBPF datapath read during the run, and how many of them
    /// late (every run's flows, and those of the runs beside it); none without a shared
    /// datapath, or from runs recorded before it counted.
    #[serde(default)]
    pub datapath: Option<AckLag>,
    /// Wall time of the run, s.
    pub wall_s: f64,
    /// How often the run was repeated because the emulator or the datapath fell behind
    /// real time.
    #[serde(default)]
    pub late_repeats: usize,
    /// The share of the machine's CPU time its hypervisor took during the run (`steal` in
    /// `/proc/stat`, every CPU, whatever ran); none off Linux or from runs recorded before.
    #[serde(default)]
    pub host_steal_share: Option<f64>,
}

/// How runs are executed.
#[derive(Debug, Clone)]
pub struct RunnerConfig {
    /// Bottleneck tool.
    pub backend: Backend,
    /// Keep the Mahimahi logs (they are large at high rates).
    pub keep_logs: bool,
    /// Repeat runs that already finished.
    pub force: bool,
    /// Where `ccp-agent` and `ccp-ebpf` are (for `ccp:` flows).
    pub ccp_bin: PathBuf,
    /// The agent of the datapath `ccp-exp run` shares among its runs, if it brought one up
    /// (runs then bring up none of their own).
    pub shared_agent: Option<String>,
    /// Set when the runs must stop (Ctrl-C): a running run is ended and not repeated.
    pub interrupted: Arc<AtomicBool>,
    /// The share of the uplink's packets over 1 ms late above which a run is repeated
    /// (`MAX_LATE_SHARE` unless the user accepts more).
    pub max_late_share: f64,
    /// How often a run that fell behind real time is repeated at most (`LATE_REPEATS`).
    pub late_repeats: usize,
}

impl RunSummary {
    fn skipped(spec: &RunSpec, status: Status, reason: String) -> Self {
        Self {
            status,
            reason: Some(reason),
            spec: spec.clone(),
            flows: Vec::new(),
            link: None,
            emulator: None,
            datapath: None,
            wall_s: 0.0,
            late_repeats: 0,
            host_steal_share: None,
        }
    }

    /// Reads a finished run's summary.
    pub fn load(dir: &Path) -> Option<Self> {
        let text = std::fs::read_to_string(dir.join("summary.json")).ok()?;
        serde_json::from_str(&text).ok()
    }
}

/// Why `ccp:` flows cannot run here, if they cannot: `ccp-exp run` brings up `ccp-ebpf` and
/// `ccp-agent` from `ccp_bin` itself, so both must be built, and no other datapath may hold
/// the `ccp` registration.
pub fn ccp_unavailable(ccp_bin: &Path) -> Option<String> {
    for bin in ["ccp-agent", "ccp-ebpf"] {
        if !ccp_bin.join(bin).is_file() {
            return Some(format!(
                "datapath not available: {} is missing (cargo build --release -p ccp-agent -p ccp-ebpf)",
                ccp_bin.join(bin).display()
            ));
        }
    }
    let avail = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_available_congestion_control")
        .unwrap_or_default();
    if avail
        .split_whitespace()
        .any(|c| c == script::CCP_KERNEL_NAME)
    {
        return Some(
            "datapath busy: `ccp` is registered already (another eBPF datapath runs)".into(),
        );
    }
    None
}

/// Why a run's `quic:` flows cannot run here, if it has any: `ccp-quic` must be built next
/// to `ccp-exp`. (Under Mahimahi they run as its unprivileged user, with whose group the
/// agent shares its socket: script.rs.)
pub fn quic_unavailable(spec: &RunSpec, ccp_bin: &Path) -> Option<String> {
    if !spec.flows.iter().any(FlowSpec::quic) {
        return None;
    }
    let bin = ccp_bin.join("ccp-quic");
    (!bin.is_file()).then(|| {
        format!(
            "QUIC datapath not available: {} is missing (cargo build --release -p ccp-quic)",
            bin.display()
        )
    })
}

/// The directory of the running binary: `ccp-emu`, `ccp-agent` and `ccp-ebpf` are built
/// next to `ccp-exp`.
pub fn bin_dir() -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(Path::to_path_buf))
        .unwrap_or_default()
}

/// Why a run did not finish.
const INTERRUPTED: &str = "interrupted";

fn run_command(dir: &Path, timeout: Duration, cfg: &RunnerConfig) -> Result<(), String> {
    use std::os::unix::process::CommandExt;
    let log = std::fs::File::create(dir.join("run.log")).map_err(|e| e.to_string())?;
    let log2 = log.try_clone().map_err(|e| e.to_string())?;
    let mut cmd = Command::new("bash");
    cmd.arg("run.sh")
        .current_dir(dir)
        .env("CCP_EMU", emu_path())
        .env("CCP_BIN", &cfg.ccp_bin)
        .env_remove(script::SHARED_AGENT_ENV);
    if let Some(agent) = &cfg.shared_agent {
        cmd.env(script::SHARED_AGENT_ENV, agent);
    }
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log2)
        .process_group(0)
        .spawn()
        .map_err(|e| format!("starting run.sh: {e}"))?;
    let start = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(status)) if status.success() => return Ok(()),
            Ok(Some(status)) => return Err(format!("run.sh exited with {status} (see run.log)")),
            Ok(None) if start.elapsed() > timeout || cfg.interrupted.load(Ordering::Relaxed) => {
                // SAFETY: kill() has no memory effects; the group is the one run.sh leads.
                unsafe {
                    libc::kill(-(child.id() as libc::pid_t), libc::SIGTERM);
                }
                let _ = child.wait();
                if cfg.interrupted.load(Ordering::Relaxed) {
                    return Err(INTERRUPTED.into());
                }
                return Err(format!("run.sh took longer than {timeout:?}"));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(200)),
            Err(e) => return Err(e.to_string()),
        }
    }
}

fn summarize(
    dir: &Path,
    spec: &RunSpec,
    ports: &[FlowPorts],
) -> Result<(Vec<FlowSummary>, Option<LinkMetrics>), String> {
    let (from, to) = (spec.measure_from_s, spec.measure_to_s);
    let read_ms = |name: &str| {
        std::fs::read_to_string(dir.join(name))
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok())
    };
    let t0 = read_ms("t0");
    // ccp-emu's per-flow log, and the offset of its clock from the run's (ms).
    let emu_flows = std::fs::read_to_string(dir.join("flows.csv"))
        .ok()
        .and_then(|text| {
            let (init, rows) = flowlog::parse(&text);
            Some((rows, t0?.checked_sub(init?)?))
        });
    let mut flows = Vec::new();
    for (i, f) in spec.flows.iter().enumerate() {
        let text = std::fs::read_to_string(dir.join(format!("flow-{i}.json")))
            .map_err(|e| format!("flow {i}: no iperf3 result ({e})"))?;
        // Place the flow on the run's clock where it really started (a late `sleep` would
        // otherwise shift its intervals and count its tail inside the window).
        let offset_s = match (t0, read_ms(&format!("flow-{i}.start"))) {
            (Some(t0), Some(s)) => s.saturating_sub(t0) as f64 / 1000.0,
            _ => f.start_s,
        };
        let r = FlowResult::parse(&text, offset_s).map_err(|e| format!("flow {i}: {e}"))?;
        flows.push(FlowSummary {
            cc: f.cc.clone(),
            role: spec.roles.get(i).cloned().unwrap_or_else(|| "flow".into()),
            throughput_bps: 0.0,
            lifetime_bps: metrics::throughput_in(
                &r.intervals,
                offset_s,
                offset_s + (f.stop_s - f.start_s),
            ),
            retransmits: r.retransmits,
            rtt_p50_ms: metrics::percentile(&r.rtt_ms, 50.0),
            rtt_p95_ms: metrics::percentile(&r.rtt_ms, 95.0),
            intervals: emu_flows
                .as_ref()
                .map(|(rows, offset_ms)| flow_intervals(rows, *offset_ms, ports[i]))
                .unwrap_or(r.intervals),
            intervals_source: if emu_flows.is_some() {
                "emulator"
            } else if r.receiver_side {
                "receiver"
            } else {
                "sender"
            }
            .into(),
        });
    }
    for f in &mut flows {
        f.throughput_bps = metrics::throughput_in(&f.intervals, from, to);
    }
    let link = std::fs::read_to_string(dir.join("up.log"))
        .ok()
        .and_then(|text| LogSummary::parse(&text).ok())
        .map(|log| {
            let offset_ms = match (t0, log.init_epoch_ms) {
                (Some(t0), Some(init)) => t0.saturating_sub(init),
                _ => 0,
            };
            let (a, b) = (
                offset_ms + (from * 1000.0) as u64,
                offset_ms + (to * 1000.0) as u64,
            );
            let delays: Vec<f64> = log
                .departures_ms
                .iter()
                .filter(|(t, _)| (a..=b).contains(t))
                .map(|(_, d)| *d as f64)
                .collect();
            let max_goodput_bps = metrics::max_goodput_bits_per_sec(spec.bandwidth_mbps);
            let total_bps: f64 = flows.iter().map(|f| f.throughput_bps).sum();
            let p95 = metrics::percentile(&delays, 95.0);
            let buffer_ms = spec.buffer_bytes as f64 * 8.0 / (spec.bandwidth_mbps * 1e6) * 1000.0;
            LinkMetrics {
                max_goodput_bps,
                total_bps,
                utilization: total_bps / max_goodput_bps,
                drops: log.drops,
                qdelay_p50_ms: metrics::percentile(&delays, 50.0),
                qdelay_p95_ms: p95,
                rtt_p95_ms: p95.map(|d| spec.rtt_ms as f64 + d),
                inflation_ratio: p95.and_then(|d| (buffer_ms > 0.0).then(|| d / buffer_ms)),
            }
        });
    Ok((flows, link))
}

/// A flow's intervals from ccp-emu's per-flow log (client port to server port).
fn flow_intervals(rows: &[flowlog::Row], offset_ms: u64, ports: FlowPorts) -> Vec<Interval> {
    rows.iter()
        .filter(|(_, s, d, _)| *s == ports.client && *d == ports.server)
        .map(|(bin, _, _, bytes)| {
            let start_s = (*bin as f64 - offset_ms as f64) / 1000.0;
            Interval {
                start_s,
                end_s: start_s + flowlog::BIN_MS as f64 / 1000.0,
                bytes: *bytes as f64,
            }
        })
        .collect()
}

/// Per-run chart: each flow's throughput over time.
pub fn timeline_chart(
    stem: &Path,
    title: &str,
    flows: &[FlowSummary],
) -> Result<(), plot::PlotError> {
    let series: Vec<Series> = flows
        .iter()
        .enumerate()
        .map(|(i, f)| {
            // One point per second, whatever the intervals' width.
            let end = f.intervals.iter().map(|iv| iv.end_s).fold(0.0, f64::max);
            let points = (0..end.ceil() as u64)
                .map(|k| {
                    let k = k as f64;
                    (
                        k + 1.0,
                        metrics::throughput_in(&f.intervals, k, k + 1.0) / 1e6,
                    )
                })
                .collect();
            Series::line(format!("{i}: {} ({})", f.cc, f.role), points)
        })
        .collect();
    plot::line_chart(
        stem,
        &Chart {
            title,
            x_label: "time (s)",
            y_label: "throughput (Mbit/s)",
            steps: false,
        },
        &series,
    )
}

/// The finished summary of `spec` in `dir`, if it needs no new run (`force`: every run does).
/// `max_late_share` as in [`RunnerConfig`].
pub fn finished(
    dir: &Path,
    spec: &RunSpec,
    force: bool,
    max_late_share: f64,
) -> Option<RunSummary> {
    RunSummary::load(dir).filter(|done| {
        !force
            && done.status == Status::Ok
            && done.spec == *spec
            && !due_for_repeat(done, max_late_share)
    })
}

/// A run that fell behind real time by today's rules (`max_late_share`, `MAX_STALL_MS`) but
/// that was never repeated, e.g. one finished before a rule was tightened: resuming the grid
/// does it again.
fn due_for_repeat(done: &RunSummary, max_late_share: f64) -> bool {
    done.late_repeats == 0 && behind_real_time(done, max_late_share).is_some()
}

/// Runs one spec in `dir` with its flows on `ports`; repeats it when the emulator or the
/// datapath fell behind real time. Writes and returns its summary, unless it was
/// interrupted.
pub fn execute(
    dir: &Path,
    scenario: &str,
    spec: &RunSpec,
    ports: &[FlowPorts],
    cfg: &RunnerConfig,
) -> Option<RunSummary> {
    let first = run_fresh(dir, scenario, spec, ports, cfg);
    let (mut summary, late, stolen) =
        repeat_while_late(first, cfg.max_late_share, cfg.late_repeats, |attempt| {
            set_aside_late_trace(dir, attempt);
            run_fresh(dir, scenario, spec, ports, cfg)
        });
    if summary.reason.as_deref() == Some(INTERRUPTED) {
        return None;
    }
    summary.late_repeats = late.len();
    if !late.is_empty() {
        let why = late.join(", ");
        let note = match (cfg.late_repeats, stolen, late.len() > cfg.late_repeats) {
            (0, _, _) => format!("kept though the run fell behind real time ({why})"),
            (_, Some(steal), _) => format!(
                "not repeated: the run fell behind real time ({why}) while the hypervisor took \
                 {:.0} % of the machine's CPU time, so a repeat would be late as well",
                steal * 100.0
            ),
            (_, None, true) => {
                format!("repeated: the run fell behind real time ({why}); still late")
            }
            (_, None, false) => format!("repeated: the run fell behind real time ({why})"),
        };
        summary.reason = Some(match summary.reason.take() {
            Some(r) => format!("{note}; {r}"),
            None => note,
        });
    }
    if let Ok(text) = serde_json::to_string_pretty(&summary) {
        let _ = std::fs::write(dir.join("summary.json"), text);
    }
    Some(summary)
}

/// Runs `again` (given the number of the late attempt it replaces) while the latest summary
/// fell behind real time, at most `repeats` times; returns the summary kept, why each late
/// attempt was late (one more than the repeats when the last one was late too), and the
/// share of the CPU time the hypervisor took if that ended the repeats early. A late run
/// during which the hypervisor took `NOTABLE_STEAL_SHARE` or more is not repeated: in the
/// test suite's quick subsets on a day it took 7-25 %, all 41 runs were late and so was
/// every repeat, which only doubled the time.
fn repeat_while_late(
    mut summary: RunSummary,
    max_late_share: f64,
    repeats: usize,
    mut again: impl FnMut(usize) -> RunSummary,
) -> (RunSummary, Vec<String>, Option<f64>) {
    let mut late = Vec::new();
    while let Some(why) = behind_real_time(&summary, max_late_share) {
        late.push(why);
        if late.len() > repeats {
            break;
        }
        if let Some(steal) = summary
            .host_steal_share
            .filter(|&share| share >= NOTABLE_STEAL_SHARE)
        {
            return (summary, late, Some(steal));
        }
        summary = again(late.len());
    }
    (summary, late, None)
}

/// Moves a late attempt's flow trace to `agent-trace-late-<attempt>.jsonl`, so that the
/// run's `agent-trace.jsonl` holds only the attempt its summary is of (the shared trace's
/// splitter appends to the run's file, which otherwise mixed every attempt's flows).
fn set_aside_late_trace(dir: &Path, attempt: usize) {
    let _ = std::fs::rename(
        dir.join(RUN_TRACE),
        dir.join(format!("agent-trace-late-{attempt}.jsonl")),
    );
}

/// How a run fell behind real time, if more than it may: its emulator (`fell_behind`), or
/// the shared datapath, which read over `max_late_ack_share` of the ACKs late (the flows ran
/// on stale decisions, or on the kernel's fallback).
fn behind_real_time(summary: &RunSummary, max_late_share: f64) -> Option<String> {
    summary
        .emulator
        .as_ref()
        .and_then(|e| fell_behind(e, max_late_share))
        .or_else(|| {
            let share = summary.datapath.and_then(AckLag::late_share)?;
            (share > max_late_ack_share(max_late_share)).then(|| {
                format!(
                    "{:.1} % of the ACKs read late by the datapath",
                    share * 100.0
                )
            })
        })
}

/// How the emulator fell behind real time, if more than a run may (`max_late_share`,
/// `MAX_STALL_MS`).
pub fn fell_behind(emulator: &serde_json::Value, max_late_share: f64) -> Option<String> {
    if let Some(share) = late_share(emulator).filter(|&share| share > max_late_share) {
        return Some(format!(
            "{:.1} % of the uplink's packets over 1 ms late",
            share * 100.0
        ));
    }
    max_lateness_ms(emulator)
        .filter(|&ms| ms > MAX_STALL_MS)
        .map(|ms| format!("a stall of {ms:.0} ms"))
}

/// The uplink's departures and how many of them the emulator delivered over 1 ms late,
/// from its statistics (`emu-stats.json`; Mahimahi leaves none).
pub fn uplink_lateness(emulator: &serde_json::Value) -> Option<(u64, u64)> {
    Some((
        emulator.get("uplink")?.get("departures")?.as_u64()?,
        emulator.get("uplink_late_over_1ms")?.as_u64()?,
    ))
}

/// The share of the uplink's packets the emulator delivered over 1 ms late.
pub fn late_share(emulator: &serde_json::Value) -> Option<f64> {
    let (departures, late) = uplink_lateness(emulator)?;
    (departures > 0).then(|| late as f64 / departures as f64)
}

/// How far the emulator's loop fell behind a delivery opportunity at worst, ms: on either
/// link, since ACKs held back that long can time the sender out as surely as data.
pub fn max_lateness_ms(emulator: &serde_json::Value) -> Option<f64> {
    let up = emulator.get("uplink_max_lateness_us")?.as_f64()?;
    let down = emulator
        .get("downlink_max_lateness_us")
        .and_then(|v| v.as_f64())
        .unwrap_or(0.0);
    Some(up.max(down) / 1000.0)
}

/// The uplink's drops among packets the emulator read while catching up on a stall of its
/// loop (`ccp-emu` since it counts them; Mahimahi leaves none).
pub fn stall_drops(emulator: &serde_json::Value) -> Option<u64> {
    emulator.get("uplink_stall_drops")?.as_u64()
}

fn emu_path() -> PathBuf {
    Some(bin_dir().join("ccp-emu"))
        .filter(|p| p.exists())
        .unwrap_or_else(|| PathBuf::from("ccp-emu"))
}

fn run_fresh(
    dir: &Path,
    scenario: &str,
    spec: &RunSpec,
    ports: &[FlowPorts],
    cfg: &RunnerConfig,
) -> RunSummary {
    if let Err(e) = std::fs::create_dir_all(dir) {
        return RunSummary::skipped(
            spec,
            Status::Failed,
            format!("creating {}: {e}", dir.display()),
        );
    }
    let _ = std::fs::write(
        dir.join("spec.json"),
        serde_json::to_string_pretty(spec).unwrap_or_default(),
    );
    let _ = std::fs::write(
        dir.join("run.sh"),
        script::run_script(
            scenario,
            spec,
            ports,
            &cfg.backend,
            &cfg.ccp_bin.display().to_string(),
        ),
    );
    if spec.flows.iter().any(|f| f.ccp_algorithm().is_some())
        && cfg.shared_agent.is_none()
        && let Some(reason) = ccp_unavailable(&cfg.ccp_bin)
    {
        return RunSummary::skipped(spec, Status::Skipped, reason);
    }
    if let Some(reason) = quic_unavailable(spec, &cfg.ccp_bin) {
        return RunSummary::skipped(spec, Status::Skipped, reason);
    }
    let start = Instant::now();
    let timeout = Duration::from_secs_f64(spec.duration_s) + RUN_SLACK;
    // A run's own datapath (no shared one) is gone when run.sh returns: nothing to read.
    let shared_acks = || {
        cfg.shared_agent
            .as_ref()
            .and_then(|_| AckLag::read(&cfg.ccp_bin))
    };
    let acks_before = shared_acks();
    let (ran, host_steal_share) = with_steal_share(|| run_command(dir, timeout, cfg));
    if let Err(e) = ran {
        return RunSummary::skipped(spec, Status::Failed, e);
    }
    let datapath = shared_acks().zip(acks_before).and_then(|(a, b)| a.since(b));
    let wall_s = start.elapsed().as_secs_f64();
    let (flows, link) = match summarize(dir, spec, ports) {
        Ok(x) => x,
        Err(e) => return RunSummary::skipped(spec, Status::Failed, e),
    };
    if !cfg.keep_logs {
        let _ = std::fs::remove_file(dir.join("up.log"));
        let _ = std::fs::remove_file(dir.join("down.log"));
    }
    let emulator = std::fs::read_to_string(dir.join("emu-stats.json"))
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok());
    let reason = timeline_chart(&dir.join("timeline"), &spec.id, &flows)
        .err()
        .map(|e| e.to_string());
    RunSummary {
        status: Status::Ok,
        reason,
        spec: spec.clone(),
        flows,
        link,
        emulator,
        datapath,
        wall_s,
        late_repeats: 0,
        host_steal_share,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_late_attempts_trace_is_set_aside_before_the_repeat() {
        let dir = std::env::temp_dir().join(format!("ccp-late-trace-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        std::fs::write(dir.join(RUN_TRACE), "{\"event\":\"create\"}\n").expect("trace");
        set_aside_late_trace(&dir, 1);
        assert!(
            !dir.join(RUN_TRACE).exists(),
            "the repeat starts a trace of its own"
        );
        let kept = std::fs::read_to_string(dir.join("agent-trace-late-1.jsonl")).expect("kept");
        assert_eq!(kept, "{\"event\":\"create\"}\n");
        // A run without a flow trace (no ccp: flow) has nothing to set aside.
        set_aside_late_trace(&dir, 2);
        assert!(!dir.join("agent-trace-late-2.jsonl").exists());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_run_the_emulator_fell_behind_in_is_recognised() {
        let stats = |late: u64, max_us: u64| serde_json::json!({ "uplink": { "departures": 1000 }, "uplink_late_over_1ms": late, "uplink_max_lateness_us": max_us });
        assert_eq!(fell_behind(&stats(20, 15_000), MAX_LATE_SHARE), None);
        assert_eq!(
            fell_behind(&stats(21, 15_000), MAX_LATE_SHARE).as_deref(),
            Some("2.1 % of the uplink's packets over 1 ms late")
        );
        assert_eq!(
            fell_behind(&stats(188, 15_000), MAX_LATE_SHARE).as_deref(),
            Some("18.8 % of the uplink's packets over 1 ms late")
        );
        // Few packets late, but one stall long enough to time a flow out.
        assert_eq!(fell_behind(&stats(5, 200_000), MAX_LATE_SHARE), None);
        assert_eq!(
            fell_behind(&stats(5, 1_510_922), MAX_LATE_SHARE).as_deref(),
            Some("a stall of 1511 ms")
        );
        // A stall of the ACK path counts as much.
        let mut acks_held = stats(5, 15_000);
        acks_held["downlink_max_lateness_us"] = 270_333.into();
        assert_eq!(
            fell_behind(&acks_held, MAX_LATE_SHARE).as_deref(),
            Some("a stall of 270 ms")
        );
        // Mahimahi leaves no statistics; nothing was delivered: no verdict.
        assert_eq!(fell_behind(&serde_json::json!({}), MAX_LATE_SHARE), None);
        assert_eq!(
            fell_behind(
                &serde_json::json!({ "uplink": { "departures": 0 }, "uplink_late_over_1ms": 0 }),
                MAX_LATE_SHARE
            ),
            None
        );
        // A user who accepts more lateness (`--max-late-share`) keeps such runs; a stall
        // still times flows out whatever the share.
        assert_eq!(fell_behind(&stats(60, 15_000), 0.07), None);
        assert_eq!(
            fell_behind(&stats(80, 15_000), 0.07).as_deref(),
            Some("8.0 % of the uplink's packets over 1 ms late")
        );
        assert_eq!(
            fell_behind(&stats(5, 1_510_922), 0.5).as_deref(),
            Some("a stall of 1511 ms")
        );
    }

    /// A run of nine flows at 180 Mbit/s, 30 ms, 4 BDP (where the datapath read ACKs late).
    fn spec_180_mbps() -> RunSpec {
        serde_json::from_value(serde_json::json!({ "id": "r",
            "bandwidth_mbps": 180.0, "rtt_ms": 30, "buffer_bytes": 2_700_000,
            "buffer_bdp": 4.0, "duration_s": 360.0, "flows": [], "measure_from_s": 160.0,
            "measure_to_s": 360.0, "roles": [] }))
        .expect("spec")
    }

    #[test]
    fn a_run_whose_datapath_read_acks_late_fell_behind_as_well() {
        let spec = spec_180_mbps();
        let mut run = RunSummary::skipped(&spec, Status::Ok, String::new());
        // The emulator on time (as in the runs whose flows ran on the fallback).
        run.emulator = Some(serde_json::json!({ "uplink": { "departures": 1000 },
            "uplink_late_over_1ms": 1, "uplink_max_lateness_us": 5_000 }));
        assert_eq!(behind_real_time(&run, MAX_LATE_SHARE), None);
        let acks = |late_acks| AckLag {
            acks: 1000,
            late_acks,
        };
        run.datapath = Some(acks(5));
        assert_eq!(behind_real_time(&run, MAX_LATE_SHARE), None);
        run.datapath = Some(acks(16));
        assert_eq!(
            behind_real_time(&run, MAX_LATE_SHARE).as_deref(),
            Some("1.6 % of the ACKs read late by the datapath")
        );
        // A user who accepts more lateness accepts more of both.
        assert_eq!(behind_real_time(&run, 0.1), None);
        assert!(due_for_repeat(&run, MAX_LATE_SHARE));
        // The emulator's verdict comes first.
        run.emulator = Some(serde_json::json!({ "uplink": { "departures": 1000 },
            "uplink_late_over_1ms": 50, "uplink_max_lateness_us": 5_000 }));
        assert_eq!(
            behind_real_time(&run, MAX_LATE_SHARE).as_deref(),
            Some("5.0 % of the uplink's packets over 1 ms late")
        );
    }

    #[test]
    fn a_late_run_is_repeated_at_most_late_repeats_times() {
        let spec = spec_180_mbps();
        let attempt = |late: u64| {
            let mut run = RunSummary::skipped(&spec, Status::Ok, String::new());
            run.emulator = Some(serde_json::json!({ "uplink": { "departures": 1000 },
                "uplink_late_over_1ms": late, "uplink_max_lateness_us": 5_000 }));
            run
        };
        let late_share = |run: &RunSummary| run.emulator.as_ref().and_then(late_share);
        for repeats in [0, 1, 2] {
            // Every attempt late (a host that takes the cores away): 1 + `repeats` attempts.
            let mut replaced = Vec::new();
            let (kept, why, stolen) =
                repeat_while_late(attempt(90), MAX_LATE_SHARE, repeats, |n| {
                    replaced.push(n);
                    attempt(90)
                });
            assert_eq!(replaced, (1..=repeats).collect::<Vec<_>>());
            assert_eq!(why.len(), repeats + 1);
            assert_eq!((late_share(&kept), stolen), (Some(0.09), None));
        }
        // An attempt on time ends the repeats.
        let mut shares = [5, 90].into_iter();
        let (kept, why, _) = repeat_while_late(attempt(90), MAX_LATE_SHARE, 2, |_| {
            attempt(shares.next_back().expect("at most two repeats"))
        });
        assert_eq!(why, ["9.0 % of the uplink's packets over 1 ms late"; 2]);
        assert_eq!(late_share(&kept), Some(0.005));
        // A late attempt during which the hypervisor took a notable share is kept: a repeat
        // would be late as well. Below that share it is repeated as before.
        let stolen_from = |steal: f64| {
            let mut run = attempt(90);
            run.host_steal_share = Some(steal);
            run
        };
        let (kept, why, stolen) = repeat_while_late(stolen_from(0.18), MAX_LATE_SHARE, 2, |_| {
            panic!("not repeated")
        });
        assert_eq!((why.len(), stolen), (1, Some(0.18)));
        assert_eq!(kept.host_steal_share, Some(0.18));
        let mut repeated = 0;
        let (_, why, stolen) = repeat_while_late(stolen_from(0.02), MAX_LATE_SHARE, 2, |_| {
            repeated += 1;
            attempt(5)
        });
        assert_eq!((repeated, why.len(), stolen), (1, 1, None));
    }

    #[test]
    fn a_finished_run_that_stalled_and_was_never_repeated_is_done_again() {
        let dir = std::env::temp_dir().join(format!("ccp-exp-finished-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        // A summary as runs wrote it before `late_repeats` existed.
        let spec = serde_json::json!({ "id": "r", "bandwidth_mbps": 20.0, "rtt_ms": 10,
            "buffer_bytes": 25_000, "buffer_bdp": 1.0, "duration_s": 60.0, "flows": [],
            "measure_from_s": 20.0, "measure_to_s": 60.0, "roles": [] });
        let write = |max_us: u64, repeats: Option<usize>| {
            let mut summary = serde_json::json!({ "status": "ok", "reason": null, "spec": spec,
                "flows": [], "link": null, "wall_s": 61.0, "emulator": { "uplink":
                { "departures": 100_000 }, "uplink_late_over_1ms": 40,
                "uplink_max_lateness_us": max_us } });
            if let Some(n) = repeats {
                summary["late_repeats"] = n.into();
            }
            std::fs::write(dir.join("summary.json"), summary.to_string()).expect("write");
        };
        let spec: RunSpec = serde_json::from_value(spec.clone()).expect("spec");
        write(12_000, None);
        assert!(finished(&dir, &spec, false, MAX_LATE_SHARE).is_some());
        assert!(finished(&dir, &spec, true, MAX_LATE_SHARE).is_none());
        write(569_000, None);
        assert!(
            finished(&dir, &spec, false, MAX_LATE_SHARE).is_none(),
            "a 569 ms stall is redone"
        );
        // Repeated and still late: kept, so that resuming does not loop on it.
        write(569_000, Some(3));
        assert!(finished(&dir, &spec, false, MAX_LATE_SHARE).is_some());
        std::fs::remove_dir_all(&dir).expect("clean up");
    }

    #[test]
    fn flow_intervals_pick_the_flows_ports_and_move_to_the_run_clock() {
        let rows = [
            (1_000, 20001, 5201, 12_500),
            (1_100, 20001, 5201, 12_500),
            (1_100, 20002, 5202, 99),
            (1_100, 5201, 20001, 77),
        ];
        let ports = |i: u16| FlowPorts {
            client: 20001 + i,
            server: 5201 + i,
        };
        // The run started 900 ms after the emulator.
        let iv = flow_intervals(&rows, 900, ports(0));
        assert_eq!(iv.len(), 2);
        assert!((iv[0].start_s - 0.1).abs() < 1e-12 && (iv[0].end_s - 0.2).abs() < 1e-12);
        // 12,500 bytes per 100 ms = 1 Mbit/s.
        assert!((metrics::throughput_in(&iv, 0.1, 0.3) - 1e6).abs() < 1e-6);
        assert_eq!(flow_intervals(&rows, 900, ports(1))[0].bytes, 99.0);
    }
}
