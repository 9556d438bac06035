//! `ccp-quic`: bulk QUIC transfers whose congestion control is the CCP agent's.

use std::net::SocketAddr;
use std::time::Duration;

use ccp_quic::transfer::{self, Controller, PriorityAt, SendPlan};
use ccp_quic::{Config, QuicDatapath};
use clap::{Parser, Subcommand, ValueEnum};

/// QUIC transfers steered by a CCP agent (the agent's policy picks each connection's
/// algorithm).
///
/// TLS is for show: `serve` makes a self-signed certificate at start and `send` accepts any
/// certificate. A test tool for congestion control, not for data anyone must trust.
#[derive(Debug, Parser)]
#[command(name = "ccp-quic", version)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Accept connections and discard what they send; prints "listening ADDR" first.
    Serve {
        /// Address to listen on (port 0: any free port).
        #[arg(long, default_value = "127.0.0.1:4433")]
        listen: SocketAddr,
    },
    /// Send bulk data to ADDR for --time seconds; a JSON report (iperf3 -J shaped: intervals
    /// and end.sum_sent, bytes counted as acknowledged datagrams, or with --cc quinn-cubic as
    /// datagrams sent and not lost; end.sum_sent.udp_bytes: every UDP byte sent) on stdout.
    Send {
        /// The server's address.
        addr: SocketAddr,
        /// The local UDP port (as iperf3's --cport): a policy can then match the connection
        /// by its ports. Default: any free port.
        #[arg(long, default_value_t = 0)]
        cport: u16,
        /// Seconds to send.
        #[arg(long, default_value_t = 10.0, value_parser = positive_seconds)]
        time: f64,
        /// Seconds per reported interval.
        #[arg(long, default_value_t = 1.0, value_parser = positive_seconds)]
        interval: f64,
        /// Whose congestion control the connection runs.
        #[arg(long, value_enum, default_value_t = Cc::Ccp)]
        cc: Cc,
        /// The agent's socket: a name under /tmp/ccp (as in `ccp-agent --bind NAME`) or a
        /// path. Without an agent the connection runs its NewReno fallback.
        #[arg(long, default_value = "ccp-agent")]
        agent: String,
        /// This datapath's socket name or path [default: quic-<pid> beside the agent's].
        #[arg(long)]
        bind: Option<String>,
        /// A group that shares the datapath's socket with the agent (mode 0660, else 0600).
        #[arg(long, value_name = "GROUP")]
        group: Option<String>,
        /// Change the connection's priority SECONDS into the transfer (repeatable);
        /// CLASS: primary, scavenger, hybrid or hybrid=MBPS.
        #[arg(long, value_name = "SECONDS:CLASS")]
        priority_at: Vec<PriorityAt>,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Cc {
    /// The CCP agent's (its policy picks the algorithm), through libccp.
    Ccp,
    /// quinn's own CUBIC, without libccp or the agent (the stack's baseline; no
    /// --priority-at).
    QuinnCubic,
}

fn positive_seconds(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        _ => Err(format!("{s:?}: want seconds above 0")),
    }
}

fn main() {
    if let Err(e) = run(Cli::parse()) {
        eprintln!("ccp-quic: {e}");
        std::process::exit(1);
    }
}

fn runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("tokio runtime: {e}"))
}

fn run(cli: Cli) -> Result<(), String> {
    match cli.cmd {
        Cmd::Serve { listen } => runtime()?
            .block_on(transfer::serve(listen, |a| println!("listening {a}")))
            .map_err(|e| e.to_string()),
        Cmd::Send {
            addr,
            cport,
            time,
            interval,
            cc,
            agent,
            bind,
            group,
            priority_at,
        } => {
            let plan = SendPlan {
                to: addr,
                local_port: cport,
                duration: Duration::from_secs_f64(time),
                interval: Duration::from_secs_f64(interval),
                priorities: priority_at,
            };
            if cc == Cc::QuinnCubic {
                if !plan.priorities.is_empty() {
                    return Err(
                        "--priority-at needs --cc ccp: quinn's CUBIC has no priority".into(),
                    );
                }
                return print_report(
                    runtime()?.block_on(transfer::send(Controller::QuinnCubic, &plan)),
                );
            }
            let mut cfg = Config::new(&agent);
            if let Some(b) = bind {
                cfg.bind = ccp_rundir::socket_path(&b);
            }
            cfg.group = group
                .map(|g| ccp_rundir::group_id(&g))
                .transpose()
                .map_err(|e| e.to_string())?;
            let dp = QuicDatapath::start(&cfg).map_err(|e| e.to_string())?;
            let report = runtime()?.block_on(transfer::send(Controller::Ccp(&dp), &plan));
            drop(dp);
            print_report(report)
        }
    }
}

fn print_report(report: Result<serde_json::Value, transfer::TransferError>) -> Result<(), String> {
    let report = report.map_err(|e| e.to_string())?;
    let text = serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?;
    println!("{text}");
    Ok(())
}
