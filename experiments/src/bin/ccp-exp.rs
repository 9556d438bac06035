//! `ccp-exp`: run the project's experiment scenarios (see `ccp_experiments::exp`).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};

use ccp_experiments::emu::trace::Trace;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use ccp_experiments::exp::host_cpu;
use ccp_experiments::exp::plan::{Plan, RunSpec, Testbed};
use ccp_experiments::exp::ports::PortLayout;
use ccp_experiments::exp::runner::{self, RunSummary, RunnerConfig, Status};
use ccp_experiments::exp::schedule::{self, Progress, Shard};
use ccp_experiments::exp::script::Backend;
use ccp_experiments::exp::shared::SharedDatapath;
use ccp_experiments::exp::{backends, check, diff, probe, report, stale};

/// The scenario plans shipped with the project (experiments/scenarios/*.toml).
/// A line on stderr that never fails: a grid must not die because its console went away
/// (a closed pipe or terminal), since the runs and their results do not need it.
macro_rules! note {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

/// Why a Mahimahi run cannot start.
const MM_MISSING: &str =
    "Mahimahi's mm-link is not on PATH (built from source, put its bin directory on PATH)";

const SCENARIOS: &[(&str, &str)] = &[
    ("anrw-fig1", include_str!("../../scenarios/anrw-fig1.toml")),
    ("anrw-fig2", include_str!("../../scenarios/anrw-fig2.toml")),
    (
        "single-flow",
        include_str!("../../scenarios/single-flow.toml"),
    ),
    ("jain", include_str!("../../scenarios/jain.toml")),
    (
        "priority-switch",
        include_str!("../../scenarios/priority-switch.toml"),
    ),
    ("harm", include_str!("../../scenarios/harm.toml")),
    (
        "mahimahi-reference",
        include_str!("../../scenarios/mahimahi-reference.toml"),
    ),
    (
        "loss-tolerance",
        include_str!("../../scenarios/loss-tolerance.toml"),
    ),
    (
        "proteus-yield",
        include_str!("../../scenarios/proteus-yield.toml"),
    ),
    (
        "proteus-grid",
        include_str!("../../scenarios/proteus-grid.toml"),
    ),
    (
        "latecomers",
        include_str!("../../scenarios/latecomers.toml"),
    ),
    (
        "quic-datapath",
        include_str!("../../scenarios/quic-datapath.toml"),
    ),
    (
        "quic-alone",
        include_str!("../../scenarios/quic-alone.toml"),
    ),
    (
        "regression",
        include_str!("../../scenarios/regression.toml"),
    ),
    (
        "regression-fairness",
        include_str!("../../scenarios/regression-fairness.toml"),
    ),
    (
        "regression-alone",
        include_str!("../../scenarios/regression-alone.toml"),
    ),
];

#[derive(Parser)]
#[command(
    name = "ccp-exp",
    about = "Experiment runner for scavenger congestion control",
    long_about = "Experiment runner for scavenger congestion control: runs the papers' \
scenarios (shipped plans or plan files) through ccp-emu or Mahimahi with real Linux CUBIC/BBR \
flows and the project's algorithms on the eBPF datapath, and writes raw results, summaries, \
charts and a re-run script per run.\n\n\
A whole grid in parallel on one machine:   ccp-exp run anrw-fig1 --full --jobs 3\n\
One part of it on each of 8 machines:      ccp-exp run anrw-fig1 --full --shard 3/8\n\
Their results merged into one report:      ccp-exp report anrw-fig1 --full --from DIR1 --from DIR2\n\
The same with an earlier sitting's archive: ccp-exp report anrw-fig1 --full --from runs-full.jsonl --from DIR\n\
A change judged run by run:                ccp-exp diff regression --full --before DIR1 --after DIR2"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum BackendChoice {
    /// Mahimahi if `mm-link` is on PATH, else ccp-emu.
    Auto,
    Emulator,
    Mahimahi,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run a scenario (a shipped name or a plan file); finished runs are not repeated, except
    /// one that fell behind real time by the current rules and was never repeated.
    Run {
        /// A shipped scenario (anrw-fig1, harm, jain, ...: `ccp-exp list`) or a plan file.
        scenario: String,
        /// The CI subset (default).
        #[arg(long, conflicts_with = "full")]
        quick: bool,
        /// The papers' full grid.
        #[arg(long)]
        full: bool,
        /// Results directory.
        #[arg(long, default_value = "experiments/results")]
        out: PathBuf,
        #[arg(long, value_enum, default_value = "auto")]
        backend: BackendChoice,
        /// User that runs Mahimahi (it refuses root).
        #[arg(long, default_value = "nobody")]
        mahimahi_user: String,
        /// Keep the (large) uplink/downlink logs of each run.
        #[arg(long)]
        keep_logs: bool,
        /// Only print the runs.
        #[arg(long)]
        dry_run: bool,
        /// Repeat runs that already finished.
        #[arg(long)]
        force: bool,
        /// Emulated bottlenecks at once (1-16). Another run starts only once every running
        /// one has all its flows going and while the machine keeps them in real time (idle
        /// CPU, the emulators' lateness, how late the datapath reads ACKs); all `ccp:` flows
        /// share one eBPF datapath and agent.
        #[arg(long, default_value_t = 1)]
        jobs: usize,
        /// Only the K-th of N deterministic parts of the plan (K/N, e.g. 3/8): every N-th
        /// bottleneck with all its runs, for one task of a Slurm job array, a Kubernetes
        /// indexed Job or one sitting; merge with `ccp-exp report`.
        #[arg(long, default_value = "1/1")]
        shard: Shard,
        /// Only the runs with a flow of this congestion control (e.g. ccp:proteus-s): after a
        /// change to one algorithm, re-run what it affects and merge the new runs with the
        /// earlier grid's archive (`report --from NEW --from runs-full.jsonl`).
        #[arg(long)]
        only: Option<String>,
        /// Share of the uplink's packets the emulator may deliver over 1 ms late (and a
        /// quarter of it: of the ACKs the shared eBPF datapath may read over 10 ms late)
        /// before a run is repeated (up to `--late-repeats` times, then kept with a note);
        /// the admission of another run backs off at half of either. Raise it only on a
        /// machine whose timer wake-ups are late even when idle (a VM whose host deschedules
        /// its cores): every run's summary keeps its own share, and `report` lists it.
        #[arg(long, default_value_t = runner::MAX_LATE_SHARE, value_parser = parse_late_share)]
        max_late_share: f64,
        /// How often a run that fell behind real time is repeated at most before it is kept
        /// with a note. On a VM whose host takes its cores away for tens of ms, every
        /// attempt is late and repeats only multiply the wall time (the test suite uses 1).
        #[arg(long, default_value_t = runner::LATE_REPEATS)]
        late_repeats: usize,
        /// Have the eBPF datapath write every ACK of every `ccp:` flow (RTT sample,
        /// delivered, losses, SACK and retransmission counts, TCP state, the decision in
        /// force) to `<out>/<scenario>/shared/ack-trace-<pid>.csv`; a run's lines are those
        /// of its flows' ports between their `create` line and the next one. Large: a few
        /// thousand lines per second per flow.
        #[arg(long)]
        ack_trace: bool,
    },
    /// Rebuild a scenario's summary and charts from the runs already done, merging the
    /// results of several directories (e.g. one per shard) into `--out`.
    Report {
        scenario: String,
        #[arg(long)]
        full: bool,
        /// Where the merged summary and charts go (and, without --from, the runs).
        #[arg(long, default_value = "experiments/results")]
        out: PathBuf,
        /// Results directories, or `runs-<mode>.jsonl` archives that an earlier report
        /// wrote (e.g. committed under docs/grids/), to read runs from (repeatable); a run
        /// found in several is taken from the first that has it finished.
        #[arg(long = "from")]
        from: Vec<PathBuf>,
    },
    /// Compare a scenario's runs before and after a change: prints a markdown table (for
    /// primary-ratio and harm plans the primary's ratio per pair, its runs cut by 20 % or
    /// more and its mean by RTT; for fairness plans Jain's index of every run; for
    /// single-flow plans utilization and inflation of every run). Each side is read like
    /// `report --from`: results directories or `runs-<mode>.jsonl` archives.
    Diff {
        scenario: String,
        #[arg(long)]
        full: bool,
        /// Runs before the change (repeatable).
        #[arg(long, required = true)]
        before: Vec<PathBuf>,
        /// Runs after the change (repeatable).
        #[arg(long, required = true)]
        after: Vec<PathBuf>,
        /// Leave out of both sides every configuration whose run on either side delivered
        /// more than this share of its packets over 1 ms late (the summary's `late_share`;
        /// Mahimahi's runs, which have no such count, stay in). On a busy VM a delay-based
        /// scavenger reads the test bed's stalls as queues, and the runs that kept time are
        /// the ones that say something about the change. The table says how many went.
        #[arg(long, value_parser = parse_late_share)]
        max_late_share: Option<f64>,
    },
    /// Run a plan (default: the Mahimahi reference table) on ccp-emu and on real Mahimahi,
    /// each configuration `--repeats` times, one run at a time, and compare them: each
    /// flow's throughput, Jain's index of same-algorithm pairs and the queue's drops, mean ±
    /// standard deviation per backend. Needs Mahimahi's `mm-link` on PATH. Writes
    /// `backends.md` and `backends.csv` into `--out` (the runs under `emulator/` and
    /// `mahimahi/`); finished runs are kept and not repeated.
    Compare {
        #[arg(default_value = "mahimahi-reference")]
        scenario: String,
        #[arg(long, conflicts_with = "full")]
        quick: bool,
        #[arg(long)]
        full: bool,
        /// Runs of each configuration on each backend.
        #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=100))]
        repeats: u32,
        #[arg(long, default_value = "experiments/results/backends")]
        out: PathBuf,
        /// User that runs Mahimahi (it refuses root).
        #[arg(long, default_value = "nobody")]
        mahimahi_user: String,
    },
    /// Check finished runs against the acceptance bounds (Proteus-S leaves CUBIC and BBR
    /// at least 90% of their alone throughput; a switch to primary raises a flow's share).
    /// Exits non-zero when a check fails or a checked run is missing.
    Check {
        #[arg(required = true)]
        scenarios: Vec<String>,
        #[arg(long)]
        full: bool,
        #[arg(long, default_value = "experiments/results")]
        out: PathBuf,
    },
    /// List the shipped scenarios.
    List,
    /// Print the plan text of a shipped scenario.
    Show { scenario: String },
    /// Write a constant-rate Mahimahi trace.
    Trace {
        mbps: f64,
        #[arg(short, long)]
        output: Option<PathBuf>,
    },
    /// UDP echo server (for RTT probes).
    UdpEcho {
        #[arg(long, default_value_t = 7007)]
        port: u16,
    },
    /// UDP RTT probe; prints the RTTs in ms as a JSON list.
    UdpPing {
        to: std::net::SocketAddr,
        #[arg(long, default_value_t = 10)]
        count: u32,
        #[arg(long, default_value_t = 100)]
        interval_ms: u64,
    },
}

/// A share for `--max-late-share`: above 0, at most 1.
fn parse_late_share(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(share) if share > 0.0 && share <= 1.0 => Ok(share),
        _ => Err(format!(
            "`{text}` is not a share of packets: give a number above 0 and at most 1 (0.02 is 2 %)"
        )),
    }
}

fn load_plan(name: &str) -> Result<Plan, String> {
    let text = match SCENARIOS.iter().find(|(n, _)| *n == name) {
        Some((_, t)) => t.to_string(),
        None => std::fs::read_to_string(name).map_err(|e| {
            format!(
                "{name}: not a shipped scenario ({}) nor a readable file: {e}",
                names()
            )
        })?,
    };
    Plan::parse(&text).map_err(|e| format!("{name}: {e}"))
}

fn names() -> String {
    SCENARIOS
        .iter()
        .map(|(n, _)| *n)
        .collect::<Vec<_>>()
        .join(", ")
}

fn on_path(bin: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(bin).is_file()))
}

fn fmt_dur(d: Duration) -> String {
    let s = d.as_secs();
    format!("{}:{:02}", s / 60, s % 60)
}

fn one_line(r: &RunSummary) -> String {
    match r.status {
        Status::Ok => {
            let t: Vec<String> = r
                .flows
                .iter()
                .map(|f| format!("{:.1}", f.throughput_bps / 1e6))
                .collect();
            let util = r
                .link
                .as_ref()
                .map(|l| format!(" util {:.2}", l.utilization))
                .unwrap_or_default();
            let note = r
                .reason
                .as_ref()
                .map(|n| format!(" ({n})"))
                .unwrap_or_default();
            format!("ok  Mbit/s [{}]{util}{note}", t.join(", "))
        }
        Status::Skipped => format!("skipped: {}", r.reason.clone().unwrap_or_default()),
        Status::Failed => format!("FAILED: {}", r.reason.clone().unwrap_or_default()),
    }
}

/// Switches of `ccp-exp run`.
struct RunFlags {
    keep_logs: bool,
    dry_run: bool,
    force: bool,
    jobs: usize,
    shard: Shard,
    only: Option<String>,
    max_late_share: f64,
    late_repeats: usize,
    ack_trace: bool,
}

/// Progress lines of `ccp-exp run`: each start and end, with an estimate of the time left.
struct Console {
    total: usize,
    done: usize,
    start: Instant,
    /// Planned seconds of the runs that ran in this invocation, and of those still to go.
    ran_planned_s: f64,
    left_planned_s: f64,
}

impl Progress for Console {
    fn started(&mut self, spec: &RunSpec, running: usize, idle: Option<f64>) {
        let idle = idle
            .map(|i| format!(", {:.0} % idle", i * 100.0))
            .unwrap_or_default();
        note!("  start {} ({running} running{idle})", spec.id);
    }

    fn finished(&mut self, spec: &RunSpec, summary: &RunSummary, wall: Duration) {
        self.done += 1;
        self.left_planned_s -= spec.duration_s;
        let before = if wall.is_zero() {
            "(done before) "
        } else {
            self.ran_planned_s += spec.duration_s;
            ""
        };
        let eta = if self.ran_planned_s > 0.0 && self.left_planned_s > 0.0 {
            let rate = self.start.elapsed().as_secs_f64() / self.ran_planned_s;
            format!(
                ", about {} left",
                fmt_dur(Duration::from_secs_f64(self.left_planned_s * rate))
            )
        } else {
            String::new()
        };
        note!(
            "[{}/{}{eta}] {} {before}{}",
            self.done,
            self.total,
            spec.id,
            one_line(summary)
        );
    }
}

/// The bottleneck a choice stands for (auto: Mahimahi when `mm-link` is on PATH).
fn backend(choice: BackendChoice, mm_user: String) -> Backend {
    let use_mm = match choice {
        BackendChoice::Auto => on_path("mm-link"),
        BackendChoice::Emulator => false,
        BackendChoice::Mahimahi => true,
    };
    if use_mm {
        Backend::Mahimahi { user: mm_user }
    } else {
        let emu = std::env::current_exe()
            .ok()
            .and_then(|p| p.parent().map(|d| d.join("ccp-emu")))
            .filter(|p| p.exists())
            .map(|p| p.display().to_string())
            .unwrap_or_else(|| "ccp-emu".into());
        Backend::Emulator { default_path: emu }
    }
}

fn run(
    plan: &Plan,
    full: bool,
    out: &Path,
    backend: Backend,
    flags: RunFlags,
) -> Result<bool, String> {
    let mode = if full { "full" } else { "quick" };
    let all = plan.runs(full).map_err(|e| e.to_string())?;
    // The layout comes from the whole plan, so that every shard numbers ports alike.
    let layout = PortLayout::new(&all).map_err(|e| e.to_string())?;
    let mut runs = flags.shard.select(&all, RunSpec::bottleneck);
    if let Some(cc) = &flags.only {
        let has = |r: &RunSpec| r.flows.iter().any(|f| f.cc == *cc);
        if !all.iter().any(has) {
            let mut ccs: Vec<&str> = all
                .iter()
                .flat_map(|r| r.flows.iter().map(|f| f.cc.as_str()))
                .collect();
            ccs.sort_unstable();
            ccs.dedup();
            return Err(format!(
                "--only {cc}: no run of {} has such a flow (its flows: {})",
                plan.name,
                ccs.join(", ")
            ));
        }
        runs.retain(has);
    }
    if matches!(backend, Backend::Mahimahi { .. }) {
        if !on_path("mm-link") {
            return Err(MM_MISSING.into());
        }
        if let Some(r) = runs.iter().find(|r| r.testbed != Testbed::Mahimahi) {
            return Err(format!(
                "run {} asks for the serial test bed, which only ccp-emu emulates (--backend emulator)",
                r.id
            ));
        }
    }
    let dir = out.join(&plan.name);
    let mut shard = if flags.shard == Shard::ALL {
        String::new()
    } else {
        format!(
            " (shard {}/{} of {})",
            flags.shard.index,
            flags.shard.count,
            all.len()
        )
    };
    if let Some(cc) = &flags.only {
        shard += &format!(" with a {cc} flow");
    }
    note!(
        "{} ({mode}): {} runs{shard} on {}, up to {} at once; results in {}",
        plan.name,
        runs.len(),
        match backend {
            Backend::Mahimahi { .. } => "Mahimahi",
            Backend::Emulator { .. } => "ccp-emu",
        },
        flags.jobs,
        dir.display()
    );
    if flags.dry_run {
        let mut to_run = Vec::new();
        for r in &runs {
            let ccs: Vec<&str> = r.flows.iter().map(|f| f.cc.as_str()).collect();
            let done =
                runner::finished(&dir.join(&r.id), r, flags.force, flags.max_late_share).is_some();
            let mark = if done { "  (finished)" } else { "" };
            println!("{}  [{}]{mark}", r.id, ccs.join(", "));
            if !done {
                to_run.push(r);
            }
        }
        let planned_s: f64 = to_run.iter().map(|r| r.duration_s).sum();
        note!(
            "{} of {} finished; {} to run, {:.0} min of runs one at a time",
            runs.len() - to_run.len(),
            runs.len(),
            to_run.len(),
            planned_s / 60.0
        );
        return Ok(true);
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err("runs need root (network namespaces, TUN devices)".into());
    }
    let (removed, failed) = stale::remove();
    if !removed.is_empty() {
        note!("removed what killed runs left: {}", removed.join(", "));
    }
    for f in failed {
        note!("could not remove what a killed run left: {f}");
    }
    let interrupted = Arc::new(AtomicBool::new(false));
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        signal_hook::flag::register(sig, Arc::clone(&interrupted)).map_err(|e| e.to_string())?;
    }
    let mut cfg = RunnerConfig {
        backend,
        keep_logs: flags.keep_logs,
        force: flags.force,
        ccp_bin: runner::bin_dir(),
        shared_agent: None,
        interrupted: Arc::clone(&interrupted),
        max_late_share: flags.max_late_share,
        late_repeats: flags.late_repeats,
    };
    let needs_ccp = runs.iter().any(|r| {
        runner::finished(&dir.join(&r.id), r, cfg.force, cfg.max_late_share).is_none()
            && r.flows.iter().any(|f| f.ccp_algorithm().is_some())
    });
    // One datapath and agent for every run of this invocation; without them the `ccp:`
    // runs are skipped with the reason and the others go on.
    let mut shared = match (needs_ccp, runner::ccp_unavailable(&cfg.ccp_bin)) {
        (false, _) => None,
        (true, Some(why)) => {
            note!("{}: runs with ccp: flows are skipped: {why}", plan.name);
            None
        }
        (true, None) => {
            let policy = layout.shared_policy().unwrap_or_default();
            let flow_user = cfg.backend.flow_user();
            let dp = SharedDatapath::start(
                &dir.join("shared"),
                &policy,
                &cfg.ccp_bin,
                flow_user,
                flags.ack_trace,
            )?;
            cfg.shared_agent = Some(dp.agent().to_string());
            Some(dp)
        }
    };
    let mut console = Console {
        total: runs.len(),
        done: 0,
        start: Instant::now(),
        ran_planned_s: 0.0,
        left_planned_s: runs.iter().map(|r| r.duration_s).sum(),
    };
    let trace = shared.as_ref().map(SharedDatapath::trace_path);
    let mut alive = || shared.as_mut().is_none_or(SharedDatapath::alive);
    let results = schedule::run_all(
        &dir,
        &plan.name,
        &runs,
        &layout,
        flags.jobs,
        &cfg,
        trace
            .as_deref()
            .map(|t| (t, &mut alive as &mut dyn FnMut() -> bool)),
        &mut console,
    );
    // Down before the summary: the agent writes its last trace lines when it stops.
    drop(shared);
    let results = results.map_err(|e| e.to_string())?;
    let summaries: Vec<RunSummary> = results.into_iter().flatten().collect();
    report::write(&dir, plan, mode, &summaries)?;
    let failed = summaries
        .iter()
        .filter(|s| s.status == Status::Failed)
        .count();
    let skipped = summaries
        .iter()
        .filter(|s| s.status == Status::Skipped)
        .count();
    let not_run = runs.len() - summaries.len();
    note!(
        "{}: {} ok, {skipped} skipped, {failed} failed{} in {}; summary-{mode}.csv/json and charts in {}",
        plan.name,
        summaries.len() - failed - skipped,
        if not_run > 0 {
            format!(", {not_run} not run (interrupted; run the same command again to go on)")
        } else {
            String::new()
        },
        fmt_dur(console.start.elapsed()),
        dir.display()
    );
    let steal: Vec<f64> = summaries
        .iter()
        .filter_map(|s| s.host_steal_share)
        .collect();
    if let Some(notice) = host_cpu::steal_notice(&steal) {
        note!("{}: {notice}", plan.name);
    }
    Ok(failed == 0 && not_run == 0)
}

fn check(scenarios: &[String], full: bool, out: &Path) -> Result<bool, String> {
    let mut all_pass = true;
    for scenario in scenarios {
        let plan = load_plan(scenario)?;
        let specs = plan.runs(full).map_err(|e| e.to_string())?;
        let dir = out.join(&plan.name);
        let runs: Vec<Option<RunSummary>> = specs
            .iter()
            .map(|s| RunSummary::load(&dir.join(&s.id)).filter(|r| r.spec == *s))
            .collect();
        let findings = check::scenario(plan.kind, &specs, &runs);
        println!("{}:", plan.name);
        if findings.is_empty() {
            println!("  (nothing to check)");
        }
        for f in &findings {
            println!("  {f}");
            all_pass &= f.pass != Some(false);
        }
    }
    Ok(all_pass)
}

/// `ccp-exp compare`: the plan on both backends, then the comparison.
fn compare(
    scenario: &str,
    full: bool,
    repeats: u32,
    out: &Path,
    mm_user: String,
) -> Result<bool, String> {
    // Before the emulator's half, which would otherwise run for nothing.
    if !on_path("mm-link") {
        return Err(MM_MISSING.into());
    }
    let mut plan = load_plan(scenario)?;
    let mode = if full { "full" } else { "quick" };
    let set = if full {
        plan.full.as_mut()
    } else {
        plan.quick.as_mut()
    };
    set.ok_or_else(|| format!("{scenario} has no [{mode}] set"))?
        .repeats = Some(repeats);
    let runs = plan.runs(full).map_err(|e| e.to_string())?;
    let sides = [
        (
            "emulator",
            backend(BackendChoice::Emulator, mm_user.clone()),
        ),
        ("mahimahi", Backend::Mahimahi { user: mm_user }),
    ];
    let mut summaries = Vec::new();
    for (name, b) in sides {
        let dir = out.join(name);
        let flags = RunFlags {
            keep_logs: false,
            dry_run: false,
            force: false,
            jobs: 1,
            shard: Shard::ALL,
            only: None,
            max_late_share: runner::MAX_LATE_SHARE,
            late_repeats: runner::LATE_REPEATS,
            ack_trace: false,
        };
        if !run(&plan, full, &dir, b, flags)? {
            return Err(format!(
                "{name}: not every run finished; run the same command again to go on"
            ));
        }
        summaries.push(report::collect(
            &[report::Source::Dir(dir.join(&plan.name))],
            &runs,
        ));
    }
    let rows = backends::compare(&summaries[0], &summaries[1]);
    let table = backends::markdown(&rows);
    let write = |file: &str, text: &str| {
        std::fs::write(out.join(file), text).map_err(|e| format!("writing {file}: {e}"))
    };
    write("backends.md", &table)?;
    write("backends.csv", &backends::csv(&rows))?;
    print!("{table}");
    note!(
        "{} ({mode}), {repeats} runs per configuration and backend: backends.md and backends.csv in {}",
        plan.name,
        out.display()
    );
    Ok(true)
}

/// The runs of `plan` found in `inputs` (results directories or archives).
fn collect_from(plan: &Plan, full: bool, inputs: &[PathBuf]) -> Result<Vec<RunSummary>, String> {
    let runs = plan.runs(full).map_err(|e| e.to_string())?;
    let sources = inputs
        .iter()
        .map(|p| report::Source::open(p, &plan.name, &runs))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(report::collect(&sources, &runs))
}

fn diff(
    scenario: &str,
    full: bool,
    before: &[PathBuf],
    after: &[PathBuf],
    max_late_share: Option<f64>,
) -> Result<bool, String> {
    let plan = load_plan(scenario)?;
    let (mut b, mut a) = (
        collect_from(&plan, full, before)?,
        collect_from(&plan, full, after)?,
    );
    if let Some(share) = max_late_share {
        let dropped = diff::leave_out_late(&mut b, &mut a, share);
        println!(
            "Left out of both sides: {dropped} configuration(s) run with over {} % of the packets over 1 ms late on either side.\n",
            (share * 1e4).round() / 100.0
        );
    }
    print!("{}", diff::markdown(plan.kind, &b, &a)?);
    Ok(true)
}

fn report_only(scenario: &str, full: bool, out: &Path, from: &[PathBuf]) -> Result<bool, String> {
    let plan = load_plan(scenario)?;
    let mode = if full { "full" } else { "quick" };
    let planned = plan.runs(full).map_err(|e| e.to_string())?.len();
    let inputs: Vec<PathBuf> = if from.is_empty() {
        vec![out.to_path_buf()]
    } else {
        from.to_vec()
    };
    let summaries = collect_from(&plan, full, &inputs)?;
    note!(
        "{}: {} of {} runs found in {}",
        plan.name,
        summaries.len(),
        planned,
        inputs
            .iter()
            .map(|d| d.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    );
    let doc = report::write(&out.join(&plan.name), &plan, mode, &summaries)?;
    println!("{}", serde_json::to_string_pretty(&doc).unwrap_or_default());
    Ok(true)
}

/// Whether `cmd` writes only to stdout (and files). Such a command ends quietly when its
/// reader does (`ccp-exp list | head`), as Unix tools do; a run talks to its flows over
/// pipes and sockets, where a closed peer must stay an error it handles, not a signal.
fn only_prints(cmd: &Cmd) -> bool {
    matches!(
        cmd,
        Cmd::List
            | Cmd::Show { .. }
            | Cmd::Diff { .. }
            | Cmd::Trace { output: None, .. }
            | Cmd::Run { dry_run: true, .. }
    )
}

fn main() {
    let cli = Cli::parse();
    if only_prints(&cli.cmd) {
        // SAFETY: no other thread runs yet; SIG_DFL is a valid disposition for SIGPIPE.
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        }
    }
    let result = match cli.cmd {
        Cmd::Run {
            scenario,
            quick: _,
            full,
            out,
            backend,
            mahimahi_user,
            keep_logs,
            dry_run,
            force,
            jobs,
            shard,
            only,
            max_late_share,
            late_repeats,
            ack_trace,
        } => load_plan(&scenario).and_then(|plan| {
            run(
                &plan,
                full,
                &out,
                self::backend(backend, mahimahi_user),
                RunFlags {
                    keep_logs,
                    dry_run,
                    force,
                    jobs,
                    shard,
                    only,
                    max_late_share,
                    late_repeats,
                    ack_trace,
                },
            )
        }),
        Cmd::Compare {
            scenario,
            quick: _,
            full,
            repeats,
            out,
            mahimahi_user,
        } => compare(&scenario, full, repeats, &out, mahimahi_user),
        Cmd::Report {
            scenario,
            full,
            out,
            from,
        } => report_only(&scenario, full, &out, &from),
        Cmd::Diff {
            scenario,
            full,
            before,
            after,
            max_late_share,
        } => diff(&scenario, full, &before, &after, max_late_share),
        Cmd::Check {
            scenarios,
            full,
            out,
        } => check(&scenarios, full, &out),
        Cmd::List => {
            for (name, text) in SCENARIOS {
                let desc = Plan::parse(text).map(|p| p.description).unwrap_or_default();
                println!("{name}\n    {}\n", desc.replace('\n', " "));
            }
            Ok(true)
        }
        Cmd::Show { scenario } => match SCENARIOS.iter().find(|(n, _)| *n == scenario) {
            Some((_, t)) => {
                print!("{t}");
                Ok(true)
            }
            None => Err(format!("unknown scenario {scenario} ({})", names())),
        },
        Cmd::Trace { mbps, output } => Trace::constant(mbps)
            .map_err(|e| e.to_string())
            .and_then(|t| match output {
                Some(p) => std::fs::write(&p, t.to_text()).map_err(|e| e.to_string()),
                None => {
                    print!("{}", t.to_text());
                    Ok(())
                }
            })
            .map(|()| true),
        Cmd::UdpEcho { port } => probe::udp_echo(port)
            .map(|()| true)
            .map_err(|e| e.to_string()),
        Cmd::UdpPing {
            to,
            count,
            interval_ms,
        } => probe::udp_ping(to, count, Duration::from_millis(interval_ms))
            .map_err(|e| e.to_string())
            .map(|rtts| {
                println!("{}", serde_json::to_string(&rtts).unwrap_or_default());
                !rtts.is_empty()
            }),
    };
    match result {
        Ok(true) => {}
        Ok(false) => std::process::exit(1),
        Err(e) => {
            note!("ccp-exp: {e}");
            std::process::exit(1);
        }
    }
}
