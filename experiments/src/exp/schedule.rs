//! Which runs an invocation does and when: `--shard K/N` picks a deterministic part of a
//! plan, `--jobs N` runs up to N emulated bottlenecks at once, starting another only while
//! the machine keeps the running ones in real time and every running one has all its flows
//! going (the load a run will put on the machine shows only then).

use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use super::control_lag::AckLag;
use super::host_cpu::CpuTimes;
use super::plan::RunSpec;
use super::ports::{MAX_SLOTS, PortLayout};
use super::runner::{self, RunSummary, RunnerConfig};
use super::shared::TraceSplitter;

/// Share of all cores that must have been idle over the last `LOAD_WINDOW` before another
/// run starts: the endpoints (iperf3, the kernel's TCP), the agent and the datapath daemon
/// run at normal priority, and a starved sender or agent changes a run's result although the
/// emulator (real-time priority) stays on time. Time spent on niced work (a build under
/// `nice -n 19` beside the grid) counts as idle: it yields to the runs.
const ADMIT_MIN_IDLE: f64 = 0.35;
/// Largest share of a running run's recent uplink departures over 1 ms late (and of the
/// shared datapath's recent ACKs read late) that still admits another run, as a fraction of
/// the share above which the runner repeats a run (`RunnerConfig::max_late_share`,
/// `runner::max_late_ack_share`).
const ADMIT_LATE_FRACTION: f64 = 0.5;
/// Time after a start before the next one: setting up namespaces, servers and flows costs
/// CPU the load window must see before deciding again.
const ADMIT_GAP: Duration = Duration::from_secs(5);
/// The window over which load and lateness are judged.
const LOAD_WINDOW: Duration = Duration::from_secs(3);
/// How often the scheduler looks.
const TICK: Duration = Duration::from_millis(250);

/// A deterministic part of a plan. Runs that share a group (a bottleneck: its alone
/// baselines, the competing runs and their repetitions) stay in one part, so every part's
/// report has whole ratios; group `g` in the plan's order belongs to part `g mod N + 1`, so
/// the parts are disjoint, cover the plan, and each spreads over the whole grid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    /// 1-based index.
    pub index: usize,
    pub count: usize,
}

impl FromStr for Shard {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("{s:?}: a shard is K/N with 1 <= K <= N, e.g. 2/8");
        let (k, n) = s.split_once('/').ok_or_else(bad)?;
        let (index, count) = (
            k.trim().parse().map_err(|_| bad())?,
            n.trim().parse().map_err(|_| bad())?,
        );
        if index == 0 || index > count {
            return Err(bad());
        }
        Ok(Shard { index, count })
    }
}

impl Shard {
    pub const ALL: Shard = Shard { index: 1, count: 1 };

    /// The runs of this shard, in the plan's order; `group` names each run's group.
    pub fn select<T: Clone, K: Eq + std::hash::Hash>(
        &self,
        runs: &[T],
        group: impl Fn(&T) -> K,
    ) -> Vec<T> {
        let mut order = std::collections::HashMap::new();
        runs.iter()
            .filter(|r| {
                let next = order.len();
                let g = *order.entry(group(r)).or_insert(next);
                g % self.count == self.index - 1
            })
            .cloned()
            .collect()
    }
}

/// The uplink counters of a running emulator (its statistics file, rewritten every second).
fn emulator_progress(dir: &Path) -> Option<(u64, u64)> {
    let text = std::fs::read_to_string(dir.join("emu-stats.json")).ok()?;
    runner::uplink_lateness(&serde_json::from_str(&text).ok()?)
}

/// Samples over the load window.
#[derive(Debug, Default)]
struct Window<T> {
    samples: Vec<(Instant, T)>,
}

impl<T: Copy> Window<T> {
    /// Adds a sample; returns the oldest one still inside the window.
    fn push(&mut self, now: Instant, x: T) -> T {
        self.samples.push((now, x));
        while self.samples.len() > 1 && now.duration_since(self.samples[1].0) >= LOAD_WINDOW {
            self.samples.remove(0);
        }
        self.samples[0].1
    }

    fn span(&self) -> Duration {
        match (self.samples.first(), self.samples.last()) {
            (Some(a), Some(b)) => b.0.duration_since(a.0),
            _ => Duration::ZERO,
        }
    }
}

/// A run in progress.
struct Running {
    index: usize,
    slot: u16,
    dir: PathBuf,
    progress: Window<(u64, u64)>,
    /// `ADMIT_GAP` after its last flow starts: no other run starts before. Three runs of
    /// nine flows 20 s apart, all admitted within 10 s on an idle 2-core machine, left it
    /// 0-2 % idle once their flows were going; the datapath then read a fifth of the ACKs
    /// over 10 ms late and the kernel ran the flows on its fallback for seconds.
    all_flows_at: Instant,
}

/// Seconds after its start at which a run's last flow starts.
fn last_flow_start_s(spec: &RunSpec) -> f64 {
    spec.flows.iter().map(|f| f.start_s).fold(0.0, f64::max)
}

/// What the scheduler reports as runs start and end.
pub trait Progress {
    fn started(&mut self, spec: &RunSpec, running: usize, idle: Option<f64>);
    fn finished(&mut self, spec: &RunSpec, summary: &RunSummary, wall: Duration);
}

/// Why the scheduler did not finish its runs.
#[derive(Debug, thiserror::Error)]
pub enum ScheduleError {
    #[error("--jobs {0}: between 1 and {MAX_SLOTS} runs can go at once")]
    BadJobs(usize),
    #[error(transparent)]
    Ports(#[from] super::ports::PortError),
    #[error("the shared eBPF datapath or agent exited during the runs (see {0})")]
    DatapathDied(String),
}

/// Runs `specs` (each in `dir/<id>`) with at most `jobs` at once; returns the summaries of
/// the runs that finished (in the order of `specs`), stopping early when
/// `cfg.interrupted` is set. `trace` is the shared flow trace to split into the runs, if
/// `ccp-exp` brought up a shared datapath, and `alive` says whether it still runs.
#[allow(clippy::too_many_arguments)]
pub fn run_all(
    dir: &Path,
    scenario: &str,
    specs: &[RunSpec],
    layout: &PortLayout,
    jobs: usize,
    cfg: &RunnerConfig,
    mut shared: Option<(&Path, &mut dyn FnMut() -> bool)>,
    progress: &mut dyn Progress,
) -> Result<Vec<Option<RunSummary>>, ScheduleError> {
    if jobs == 0 || jobs > usize::from(MAX_SLOTS) {
        return Err(ScheduleError::BadJobs(jobs));
    }
    let mut results: Vec<Option<RunSummary>> = vec![None; specs.len()];
    // Runs that finished in an earlier invocation are not repeated.
    let mut pending = Vec::new();
    for (index, spec) in specs.iter().enumerate() {
        match runner::finished(&dir.join(&spec.id), spec, cfg.force, cfg.max_late_share) {
            Some(done) => {
                progress.finished(spec, &done, Duration::ZERO);
                results[index] = Some(done);
            }
            None => pending.push(index),
        }
    }
    let mut pending = pending.into_iter().peekable();
    let mut running: Vec<Running> = Vec::new();
    let mut free_slots: Vec<u16> = (0..jobs as u16).rev().collect();
    let mut last_start: Option<Instant> = None;
    let mut cpu = Window::default();
    let mut acks: Window<AckLag> = Window::default();
    let mut splitter = TraceSplitter::default();
    let admit_max_late = cfg.max_late_share * ADMIT_LATE_FRACTION;
    let (tx, rx) = mpsc::channel::<(usize, Option<RunSummary>, Duration)>();
    std::thread::scope(|scope| -> Result<(), ScheduleError> {
        loop {
            let now = Instant::now();
            let idle = CpuTimes::read().and_then(|t| {
                let old = cpu.push(now, t);
                t.idle_share_since(old)
                    .filter(|_| cpu.span() >= Duration::from_secs(1))
            });
            let mut keeps_up = true;
            for r in &mut running {
                if let Some(p) = emulator_progress(&r.dir) {
                    let (dep0, late0) = r.progress.push(now, p);
                    let dep = p.0.saturating_sub(dep0);
                    keeps_up &=
                        dep == 0 || p.1.saturating_sub(late0) as f64 / dep as f64 <= admit_max_late;
                }
            }
            let interrupted = cfg.interrupted.load(Ordering::Relaxed);
            let could_start = pending.peek().is_some()
                && !interrupted
                && !free_slots.is_empty()
                && running.iter().all(|r| now >= r.all_flows_at);
            // The shared datapath is asked only while another run could start; a window
            // with a gap in it would average over the gap.
            let acks_in_time = if could_start && !running.is_empty() && cfg.shared_agent.is_some() {
                AckLag::read(&cfg.ccp_bin).map(|a| {
                    let old = acks.push(now, a);
                    acks.span() >= Duration::from_secs(1)
                        && a.since(old)
                            .and_then(AckLag::late_share)
                            .is_none_or(|share| share <= runner::max_late_ack_share(admit_max_late))
                })
            } else {
                acks = Window::default();
                None
            };
            let may_start = could_start
                && (running.is_empty()
                    || (keeps_up
                        && acks_in_time != Some(false)
                        && idle.is_some_and(|i| i >= ADMIT_MIN_IDLE)
                        && last_start.is_none_or(|t| now.duration_since(t) >= ADMIT_GAP)));
            if may_start && let (Some(index), Some(slot)) = (pending.next(), free_slots.pop()) {
                let spec = &specs[index];
                let run_dir = dir.join(&spec.id);
                let ports = layout.ports(spec, slot)?;
                // Server ports name the senders' flows, client ports the receivers' (iperf3
                // asks its server for the client's congestion control too).
                let owned: Vec<u16> = ports.iter().flat_map(|p| [p.server, p.client]).collect();
                splitter.claim(&owned, &run_dir);
                progress.started(spec, running.len() + 1, idle);
                last_start = Some(now);
                running.push(Running {
                    index,
                    slot,
                    dir: run_dir.clone(),
                    progress: Window::default(),
                    all_flows_at: now
                        + Duration::from_secs_f64(last_flow_start_s(spec))
                        + ADMIT_GAP,
                });
                let tx = tx.clone();
                scope.spawn(move || {
                    let t = Instant::now();
                    let summary = runner::execute(&run_dir, scenario, spec, &ports, cfg);
                    let _ = tx.send((index, summary, t.elapsed()));
                });
                continue;
            }
            if let Some((trace, alive)) = shared.as_mut() {
                let _ = splitter.pump(trace);
                if !alive() {
                    cfg.interrupted.store(true, Ordering::Relaxed);
                    drain(&rx, &mut running, &mut results, specs, progress);
                    return Err(ScheduleError::DatapathDied(trace.display().to_string()));
                }
            }
            if running.is_empty() && (pending.peek().is_none() || interrupted) {
                return Ok(());
            }
            if let Ok(done) = rx.recv_timeout(TICK) {
                finish(
                    done,
                    &mut running,
                    &mut free_slots,
                    &mut results,
                    specs,
                    progress,
                );
            }
        }
    })?;
    Ok(results)
}

fn finish(
    (index, summary, wall): (usize, Option<RunSummary>, Duration),
    running: &mut Vec<Running>,
    free_slots: &mut Vec<u16>,
    results: &mut [Option<RunSummary>],
    specs: &[RunSpec],
    progress: &mut dyn Progress,
) {
    if let Some(pos) = running.iter().position(|r| r.index == index) {
        free_slots.push(running.remove(pos).slot);
    }
    if let Some(s) = &summary {
        progress.finished(&specs[index], s, wall);
    }
    results[index] = summary;
}

/// Waits for the runs still going after an interruption.
fn drain(
    rx: &mpsc::Receiver<(usize, Option<RunSummary>, Duration)>,
    running: &mut Vec<Running>,
    results: &mut [Option<RunSummary>],
    specs: &[RunSpec],
    progress: &mut dyn Progress,
) {
    let mut slots = Vec::new();
    while !running.is_empty() {
        match rx.recv() {
            Ok(done) => finish(done, running, &mut slots, results, specs, progress),
            Err(_) => break,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_are_disjoint_cover_the_plan_and_keep_groups_whole() {
        // 103 runs in groups of up to 6 consecutive runs (a bottleneck's runs), plus runs
        // of an early group that come back later in the plan's order.
        let runs: Vec<usize> = (0..103).collect();
        let group = |r: &usize| if r % 17 == 16 { 0 } else { r / 6 };
        let groups = runs
            .iter()
            .map(group)
            .collect::<std::collections::HashSet<_>>();
        for n in [1, 2, 3, 7, 18, 200] {
            let shards: Vec<Vec<usize>> = (1..=n)
                .map(|k| Shard { index: k, count: n }.select(&runs, group))
                .collect();
            // Disjoint: no run twice; covering: every run once.
            let mut all: Vec<usize> = shards.concat();
            all.sort_unstable();
            assert_eq!(all, runs, "{n} shards");
            // Whole groups: each group in exactly one shard.
            for g in &groups {
                let holders = shards
                    .iter()
                    .filter(|s| s.iter().any(|r| group(r) == *g))
                    .count();
                assert_eq!(holders, 1, "group {g} in {holders} of {n} shards");
            }
            // Balanced to one group.
            let counts: Vec<usize> = shards
                .iter()
                .map(|s| {
                    s.iter()
                        .map(group)
                        .collect::<std::collections::HashSet<_>>()
                        .len()
                })
                .collect();
            let (lo, hi) = (counts.iter().min(), counts.iter().max());
            assert!(hi.zip(lo).is_some_and(|(h, l)| h - l <= 1), "{counts:?}");
        }
        assert_eq!(Shard::ALL.select(&runs, group), runs);
    }

    #[test]
    fn shard_arguments_are_checked() {
        assert_eq!("2/8".parse::<Shard>(), Ok(Shard { index: 2, count: 8 }));
        for bad in ["0/4", "5/4", "1", "a/b", "1/0", ""] {
            assert!(bad.parse::<Shard>().is_err(), "{bad}");
        }
    }

    #[test]
    fn the_load_window_compares_with_the_newest_sample_a_window_old() {
        let mut w = Window::default();
        let t0 = Instant::now();
        let at = |s| t0 + Duration::from_secs(s);
        assert_eq!(w.push(t0, 1), 1);
        assert_eq!(w.push(at(2), 2), 1);
        // At 4 s the sample at 2 s is not yet a window (3 s) old: compare with 0 s.
        assert_eq!(w.push(at(4), 3), 1);
        assert_eq!(w.span(), Duration::from_secs(4));
        // At 5 s it is: the one at 0 s goes.
        assert_eq!(w.push(at(5), 4), 2);
        assert_eq!(w.span(), Duration::from_secs(3));
    }
}
