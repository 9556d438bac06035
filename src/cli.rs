//! The command line.

use crate::runtime::TupleOrder;
use clap::{Parser, Subcommand, ValueEnum};
use std::path::PathBuf;

/// CCP agent for scavenger congestion control.
///
/// Runs congestion-control algorithms (Proteus P/S/H, LEDBAT++, CUBIC) for flows of any CCP
/// datapath (the eBPF Linux TCP datapath, ccp-kernel, libccp user-space stacks), and lets
/// applications change a flow's priority while it runs (the PRIORITY message).
///
/// A flow's algorithm is, in order: the one its Create names (if registered; "reno", which
/// ccp-kernel always sends, means no preference), the first matching rule of --policy, or
/// --default.
#[derive(Debug, Parser)]
#[command(name = "ccp-agent", version, args_conflicts_with_subcommands = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    #[command(flatten)]
    pub run: RunArgs,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// List the registered algorithms and their programs.
    ListAlgs,
    /// Check a policy file; prints every error with its line.
    CheckPolicy {
        /// The TOML policy file.
        file: PathBuf,
    },
}

/// How to talk to datapaths.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Ipc {
    /// Unix datagram socket /tmp/ccp/<bind> (libccp user-space datapaths, the eBPF datapath).
    Unix,
    /// Netlink (ccp-kernel; needs CAP_NET_ADMIN).
    Netlink,
    /// ccp-kernel's character device /dev/ccpkp.
    Char,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// IPC mechanism.
    #[arg(long, value_enum, default_value_t = Ipc::Unix)]
    pub ipc: Ipc,
    /// Name of the unix socket: the agent binds /tmp/ccp/<NAME>.
    #[arg(long, default_value = "portus", value_name = "NAME")]
    pub bind: String,
    /// Group that shares the unix socket (mode 0660, else 0600) and may write to /tmp/ccp;
    /// an unprivileged agent beside a root `ccp-ebpf --group GROUP` names the same group.
    #[arg(long, value_name = "GROUP")]
    pub group: Option<String>,
    /// Algorithm for flows that name none and match no policy rule.
    #[arg(long = "default", default_value = "cubic", value_name = "ALG")]
    pub default_algorithm: String,
    /// Algorithm a flow is handed to when its application asks for primary priority and its
    /// own algorithm has no primary mode (LEDBAT++).
    #[arg(long = "primary", default_value = "cubic", value_name = "ALG")]
    pub primary_algorithm: String,
    /// Per-flow selection rules (TOML); checked at start, refused with line and reason.
    #[arg(long, value_name = "FILE")]
    pub policy: Option<PathBuf>,
    /// Log format (on standard error; RUST_LOG sets the level, default info).
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// Write one JSON line per algorithm decision and flow event to FILE.
    #[arg(long, value_name = "FILE")]
    pub trace_flows: Option<PathBuf>,
    /// Byte order of addresses and ports in Create messages.
    #[arg(long, value_enum, default_value_t = TupleOrder::Network)]
    pub tuple_order: TupleOrder,
    /// Window (bytes) of the diagnostic `fixed` algorithm.
    #[arg(long, value_name = "BYTES", default_value_t = 1_000_000)]
    pub fixed_cwnd: u64,
    /// Pacing rate (Mbit/s) of the diagnostic `fixed` algorithm; unpaced when absent.
    #[arg(long, value_name = "MBPS", value_parser = positive_mbps)]
    pub fixed_rate_mbps: Option<f64>,
    /// LEDBAT++ target queueing delay (draft: 60 ms).
    #[arg(long, value_name = "MS", default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    pub ledbat_target_ms: u64,
    /// LEDBAT++ behaviour: the draft, or the libutp-based implementation the ANRW'21 paper
    /// measured (for comparing with published numbers).
    #[arg(long, value_enum, default_value_t = LedbatProfile::Draft)]
    pub ledbat_profile: LedbatProfile,
    /// Proteus-H threshold (Mbit/s) for flows whose policy rule or PRIORITY message gives none.
    #[arg(long, value_name = "MBPS", value_parser = positive_mbps)]
    pub hybrid_threshold_mbps: Option<f64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LedbatProfile {
    /// draft-irtf-iccrg-ledbat-plus-plus.
    Draft,
    /// The libutp fork's differences (3-sample filter, doubling ramp, ...).
    Libutp,
}

/// A rate in Mbit/s: a finite number above zero.
fn positive_mbps(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        _ => Err(format!("{text:?} is not a positive rate in Mbit/s")),
    }
}
