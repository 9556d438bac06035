//! `ccp-exp`: run the project's experiment scenarios (see `ccp_experiments::exp`).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};

use ccp_experiments::emu::trace::Trace;
use ccp_experiments::exp::plan::{Plan, RunSpec};
use ccp_experiments::exp::runner::{self, RunSummary, RunnerConfig, Status};
use ccp_experiments::exp::script::Backend;
use ccp_experiments::exp::{check, probe, report};

/// The scenario plans shipped with the project (experiments/scenarios/*.toml).
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
];

#[derive(Parser)]
#[command(
    name = "ccp-exp",
    about = "Experiment runner for scavenger congestion control"
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
    /// Run a scenario (a shipped name or a plan file); finished runs are not repeated.
    Run {
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
    },
    /// Rebuild a scenario's summary and charts from the runs already done.
    Report {
        scenario: String,
        #[arg(long)]
        full: bool,
        #[arg(long, default_value = "experiments/results")]
        out: PathBuf,
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
}

fn run(
    scenario: &str,
    full: bool,
    out: &Path,
    backend: BackendChoice,
    mm_user: String,
    flags: RunFlags,
) -> Result<bool, String> {
    let RunFlags {
        keep_logs,
        dry_run,
        force,
    } = flags;
    let plan = load_plan(scenario)?;
    let mode = if full { "full" } else { "quick" };
    let params = if full { &plan.full } else { &plan.quick };
    let runs = plan.expand(params).map_err(|e| e.to_string())?;
    let use_mm = match backend {
        BackendChoice::Auto => on_path("mm-link"),
        BackendChoice::Emulator => false,
        BackendChoice::Mahimahi => true,
    };
    let backend = if use_mm {
        Backend::Mahimahi { user: mm_user }
    } else {
        let emu = std::env::current_exe()
            .ok()
            .and_then(|p| p.parent().map(|d| d.join("ccp-emu")))
            .filter(|p| p.exists())
            .map(|p| p.display().to_string())
            .unwrap_or_else(|| "ccp-emu".into());
        Backend::Emulator { default_path: emu }
    };
    let dir = out.join(&plan.name);
    eprintln!(
        "{} ({mode}): {} runs on {}; results in {}",
        plan.name,
        runs.len(),
        if use_mm { "Mahimahi" } else { "ccp-emu" },
        dir.display()
    );
    if dry_run {
        for r in &runs {
            let ccs: Vec<&str> = r.flows.iter().map(|f| f.cc.as_str()).collect();
            println!("{}  [{}]", r.id, ccs.join(", "));
        }
        return Ok(true);
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err("runs need root (network namespaces, TUN devices)".into());
    }
    let cfg = RunnerConfig {
        backend,
        keep_logs,
        force,
        ccp_bin: runner::bin_dir(),
    };
    let start = Instant::now();
    let mut executed = Duration::ZERO;
    let mut executed_planned = 0.0;
    // Runs that will be skipped do not count towards the time estimate.
    let ccp_missing = runner::ccp_unavailable(&cfg.ccp_bin).is_some();
    let will_run =
        |r: &&RunSpec| !(ccp_missing && r.flows.iter().any(|f| f.ccp_algorithm().is_some()));
    let remaining_planned: f64 = runs.iter().filter(will_run).map(|r| r.duration_s).sum();
    let mut summaries = Vec::new();
    for (i, spec) in runs.iter().enumerate() {
        let eta = if executed_planned > 0.0 {
            let rate = executed.as_secs_f64() / executed_planned;
            let left: f64 = runs[i..]
                .iter()
                .filter(will_run)
                .map(|r| r.duration_s)
                .sum();
            format!(" eta {}", fmt_dur(Duration::from_secs_f64(left * rate)))
        } else {
            format!(
                " (at most {} of runs)",
                fmt_dur(Duration::from_secs_f64(remaining_planned))
            )
        };
        eprint!("[{}/{}]{eta} {} ... ", i + 1, runs.len(), spec.id);
        let t = Instant::now();
        let (summary, ran) = runner::execute(&dir.join(&spec.id), &plan.name, spec, &cfg);
        if ran && summary.status != Status::Skipped {
            executed += t.elapsed();
            executed_planned += spec.duration_s;
        }
        eprintln!(
            "{}{}",
            if ran { "" } else { "(done before) " },
            one_line(&summary)
        );
        summaries.push(summary);
    }
    report::write(&dir, &plan, mode, &summaries)?;
    let failed = summaries
        .iter()
        .filter(|s| s.status == Status::Failed)
        .count();
    let skipped = summaries
        .iter()
        .filter(|s| s.status == Status::Skipped)
        .count();
    eprintln!(
        "{}: {} ok, {skipped} skipped, {failed} failed in {}; summary-{mode}.csv/json and charts in {}",
        plan.name,
        summaries.len() - failed - skipped,
        fmt_dur(start.elapsed()),
        dir.display()
    );
    Ok(failed == 0)
}

fn check(scenarios: &[String], full: bool, out: &Path) -> Result<bool, String> {
    let mut all_pass = true;
    for scenario in scenarios {
        let plan = load_plan(scenario)?;
        let specs = plan
            .expand(if full { &plan.full } else { &plan.quick })
            .map_err(|e| e.to_string())?;
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

fn report_only(scenario: &str, full: bool, out: &Path) -> Result<bool, String> {
    let plan = load_plan(scenario)?;
    let mode = if full { "full" } else { "quick" };
    let runs = plan
        .expand(if full { &plan.full } else { &plan.quick })
        .map_err(|e| e.to_string())?;
    let dir = out.join(&plan.name);
    let summaries: Vec<RunSummary> = runs
        .iter()
        .filter_map(|r| RunSummary::load(&dir.join(&r.id)))
        .collect();
    let doc = report::write(&dir, &plan, mode, &summaries)?;
    println!("{}", serde_json::to_string_pretty(&doc).unwrap_or_default());
    Ok(true)
}

fn main() {
    let cli = Cli::parse();
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
        } => run(
            &scenario,
            full,
            &out,
            backend,
            mahimahi_user,
            RunFlags {
                keep_logs,
                dry_run,
                force,
            },
        ),
        Cmd::Report {
            scenario,
            full,
            out,
        } => report_only(&scenario, full, &out),
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
            eprintln!("ccp-exp: {e}");
            std::process::exit(1);
        }
    }
}
