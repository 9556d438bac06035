use ccp_agent::agent::{self, StartError};
use ccp_agent::cli::{Cli, Command, LogFormat};
use ccp_agent::registry::Algorithms;
use ccp_agent::runtime::{DpHandle, Recorder};
use clap::Parser;
use std::io::IsTerminal;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use tracing_subscriber::EnvFilter;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    match cli.run.log_format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
    match cli.command {
        Some(Command::ListAlgs) => {
            print!("{}", agent::describe_algorithms(&cli.run));
            ExitCode::SUCCESS
        }
        Some(Command::CheckPolicy { file }) => {
            let algorithms =
                Algorithms::<DpHandle<Recorder>>::builtin(&agent::algorithm_options(&cli.run));
            match agent::load_policy(&file, &algorithms) {
                Ok(p) => {
                    println!("{}: ok, {} rule(s)", file.display(), p.len());
                    ExitCode::SUCCESS
                }
                Err(StartError::Policy { errors, .. }) => {
                    for e in errors {
                        println!("{}:{}: {}", file.display(), e.line, e.reason);
                    }
                    ExitCode::FAILURE
                }
                Err(e) => {
                    eprintln!("error: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        None => {
            let stop = Arc::new(AtomicBool::new(false));
            for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
                if let Err(e) = signal_hook::flag::register(sig, stop.clone()) {
                    eprintln!("error: cannot install signal handler: {e}");
                    return ExitCode::FAILURE;
                }
            }
            match agent::run(&cli.run, stop) {
                Ok(counters) => {
                    // One machine-readable line for scripts and tests.
                    match serde_json::to_string(&counters) {
                        Ok(json) => tracing::info!(counters = %json, "agent stopped"),
                        Err(e) => tracing::warn!(error = %e, "cannot serialize counters"),
                    }
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("error: {e}");
                    ExitCode::FAILURE
                }
            }
        }
    }
}
