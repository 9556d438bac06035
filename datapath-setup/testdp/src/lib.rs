//! A CCP test datapath on the real libccp, run as its own process beside `ccp-agent`.
//!
//! Algorithms are tested through the real datapath-program machinery: libccp installs the
//! agent's programs, runs them per ACK, sends their reports, and applies the windows and
//! rates the agent decides. Only the network is simulated.
//!
//! * `ccp-testdp script FILE --agent NAME`: flows driven step by step from a TOML script;
//!   one JSON line per flow after every step ([`script`]).
//! * `ccp-testdp sim SCENARIO --agent NAME`: the deterministic bottleneck model of
//!   `ccp_sim` with its CCP flows on libccp; a JSON summary ([`sim`]).
//!
//! How it stays deterministic:
//! * **Virtual time** ([`clock`]): `clock_gettime(CLOCK_MONOTONIC)` is interposed, so
//!   libccp's `Ack.now` and `Micros` follow the script or the model, not the machine.
//! * **Lock-step** ([`link`]): after anything the datapath sends, a SYNC barrier waits until
//!   the agent has answered everything before it; its answers are in libccp before the
//!   next simulated ACK.
//!
//! This crate links libccp, whose exported `log` symbol breaks `f64::ln` in the whole
//! binary (docs/datapaths.md §5.5): no ln/log here, nor in anything it calls.
//!
//! Deviations from a kernel datapath: `Rate` reads the rate in force (ccp-kernel always
//! reads 0); ACKs are invoked one by one (no ACK aggregation).

pub mod clock;
pub mod datapath;
pub mod link;
pub mod script;
pub mod sim;

use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, Parser)]
#[command(
    name = "ccp-testdp",
    version,
    about = "CCP test datapath on libccp, in lock-step with ccp-agent"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Debug, clap::Args)]
struct Conn {
    /// Agent socket: a name under /tmp/ccp (as in `ccp-agent --bind NAME`) or a path.
    #[arg(long)]
    agent: Option<String>,
    /// This datapath's socket name or path [default: testdp-<pid>].
    #[arg(long)]
    bind: Option<String>,
    /// Real-time wait for each SYNC echo, ms.
    #[arg(long, default_value_t = 5000)]
    sync_timeout_ms: u64,
    /// Real-time wait for the agent to appear at start, ms.
    #[arg(long, default_value_t = 10_000)]
    agent_wait_ms: u64,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Drive flows from a TOML script; one JSON line per flow after each step (stdout).
    Script {
        file: PathBuf,
        #[command(flatten)]
        conn: Conn,
    },
    /// Run a bottleneck scenario (TOML); JSON summary to --out or stdout.
    Sim {
        scenario: PathBuf,
        #[command(flatten)]
        conn: Conn,
        /// Write the JSON summary here instead of stdout.
        #[arg(long)]
        out: Option<PathBuf>,
        /// Also write the per-bin series as CSV.
        #[arg(long)]
        series: Option<PathBuf>,
        /// Run without this flow (CCP or cross; repeatable), e.g. the "alone" baseline.
        #[arg(long, value_name = "NAME")]
        without: Vec<String>,
        /// Run with only these flows (repeatable); everything else is removed.
        #[arg(long, value_name = "NAME", conflicts_with = "without")]
        only: Vec<String>,
    },
}

impl Conn {
    fn options(&self) -> Option<datapath::DpOptions> {
        let agent = self.agent.as_deref()?;
        let mut o = datapath::DpOptions::new(agent);
        if let Some(b) = &self.bind {
            o.bind.clone_from(b);
        }
        o.sync_timeout = Duration::from_millis(self.sync_timeout_ms);
        o.agent_wait = Duration::from_millis(self.agent_wait_ms);
        Some(o)
    }
}

/// The command line of `ccp-testdp` (`src/main.rs` calls this).
pub fn main() {
    let cli = Cli::parse();
    if let Err(e) = run(cli) {
        eprintln!("ccp-testdp: {e}");
        std::process::exit(1);
    }
}

fn read(path: &PathBuf) -> Result<String, String> {
    std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))
}

fn run(cli: Cli) -> Result<(), String> {
    match cli.cmd {
        Cmd::Script { file, conn } => {
            let script: script::Script =
                toml::from_str(&read(&file)?).map_err(|e| format!("{}: {e}", file.display()))?;
            let opts = conn.options().ok_or("script needs --agent NAME")?;
            let mut dp = datapath::TestDatapath::connect(&opts).map_err(|e| e.to_string())?;
            let stdout = std::io::stdout();
            let mut out = stdout.lock();
            script::run(&script, &mut dp, &mut out).map_err(|e| e.to_string())
        }
        Cmd::Sim {
            scenario,
            conn,
            out,
            series,
            without,
            only,
        } => {
            let full: ccp_sim::Scenario = toml::from_str(&read(&scenario)?)
                .map_err(|e| format!("{}: {e}", scenario.display()))?;
            let removed: Vec<String> = if only.is_empty() {
                without
            } else {
                let all: Vec<String> = full
                    .flows
                    .iter()
                    .map(|f| f.name.clone())
                    .chain(full.cross.iter().map(|c| c.name().to_owned()))
                    .collect();
                if let Some(o) = only.iter().find(|o| !all.contains(o)) {
                    return Err(format!("--only {o}: no flow of that name"));
                }
                all.into_iter().filter(|n| !only.contains(n)).collect()
            };
            let names: Vec<&str> = removed.iter().map(String::as_str).collect();
            let s = full.without(&names).map_err(|e| e.to_string())?;
            let cpu0 = cpu_seconds();
            let output =
                sim::run(&s, conn.options().as_ref(), removed).map_err(|e| e.to_string())?;
            let cpu = cpu_seconds() - cpu0;
            eprintln!(
                "ccp-testdp: simulated {:.1} s in {:.3} s of CPU ({:.3} s per simulated minute)",
                output.summary.duration_s,
                cpu,
                cpu * 60.0 / output.summary.duration_s
            );
            let json = serde_json::to_string_pretty(&output).map_err(|e| e.to_string())?;
            match out {
                Some(p) => {
                    std::fs::write(&p, json + "\n").map_err(|e| format!("{}: {e}", p.display()))?
                }
                None => println!("{json}"),
            }
            if let Some(p) = series {
                std::fs::write(&p, sim::series_csv(&output.summary))
                    .map_err(|e| format!("{}: {e}", p.display()))?;
            }
            Ok(())
        }
    }
}

/// CPU time of this process (user + system), s.
fn cpu_seconds() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec. CLOCK_PROCESS_CPUTIME_ID is not virtual.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return 0.0;
    }
    ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9
}
