//! Putting the agent together: algorithms, programs, policy, socket, loop.

use crate::cli::LedbatProfile;
use crate::cli::{Ipc, RunArgs};
use crate::policy::{Policy, PolicyError};
use crate::programs::{ProgramError, ProgramSet};
use crate::registry::{AlgorithmOptions, Algorithms};
use crate::runtime::{
    Counters, DpHandle, IpcTransport, NetlinkSocket, Receive, Runtime, RuntimeConfig, UnixSocket,
    Unreachable,
};
use crate::trace::FlowTrace;
use algs_core::{Bytes, BytesPerSec, Micros};
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use thiserror::Error;
use tracing::{info, warn};

/// Why the agent could not start.
#[derive(Debug, Error)]
pub enum StartError {
    #[error("datapath programs refused:\n  {}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n  "))]
    Programs(Vec<ProgramError>),
    #[error("policy {path}:\n  {}", .errors.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n  "))]
    Policy {
        path: PathBuf,
        errors: Vec<PolicyError>,
    },
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("unknown {role} algorithm {name:?}; registered: {known}")]
    UnknownAlgorithm {
        role: &'static str,
        name: String,
        known: String,
    },
    #[error("cannot open the {ipc} socket: {reason}")]
    Socket { ipc: &'static str, reason: String },
    #[error("cannot create the flow trace {path}: {source}")]
    Trace {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// The algorithm options the command line sets.
pub fn algorithm_options(args: &RunArgs) -> AlgorithmOptions {
    AlgorithmOptions {
        fixed_cwnd: Some(Bytes(args.fixed_cwnd)),
        fixed_rate: args.fixed_rate_mbps.map(BytesPerSec::from_mbps),
        ledbat: match args.ledbat_profile {
            LedbatProfile::Draft => alg_ledbat_pp::Config::default(),
            LedbatProfile::Libutp => alg_ledbat_pp::Config::libutp_compat(),
        }
        .with_target(Micros::from_millis(args.ledbat_target_ms)),
        proteus: alg_proteus::Config::default()
            .with_hybrid_threshold(args.hybrid_threshold_mbps.map(BytesPerSec::from_mbps)),
    }
}

/// Reads and checks a policy file against the registered algorithm names.
pub fn load_policy<D: algs_core::ccp::DatapathTrait + 'static>(
    path: &Path,
    algorithms: &Algorithms<D>,
) -> Result<Policy, StartError> {
    let text = std::fs::read_to_string(path).map_err(|source| StartError::Read {
        path: path.into(),
        source,
    })?;
    Policy::parse(&text, &|name| algorithms.index_of(name).is_some()).map_err(|errors| {
        StartError::Policy {
            path: path.into(),
            errors,
        }
    })
}

fn known_names<D: algs_core::ccp::DatapathTrait + 'static>(algorithms: &Algorithms<D>) -> String {
    algorithms
        .iter()
        .map(|a| a.name())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Checks the algorithm names and the policy; returns the policy.
fn check_settings<D: algs_core::ccp::DatapathTrait + 'static>(
    args: &RunArgs,
    algorithms: &Algorithms<D>,
) -> Result<Policy, StartError> {
    for (role, name) in [
        ("default", &args.default_algorithm),
        ("primary", &args.primary_algorithm),
    ] {
        if algorithms.index_of(name).is_none() {
            return Err(StartError::UnknownAlgorithm {
                role,
                name: name.clone(),
                known: known_names(algorithms),
            });
        }
    }
    match &args.policy {
        Some(path) => load_policy(path, algorithms),
        None => Ok(Policy::default()),
    }
}

/// Checks the settings without opening anything, so that a mistake is reported before the
/// agent takes its socket.
pub fn check(args: &RunArgs) -> Result<(), StartError> {
    let algorithms =
        Algorithms::<DpHandle<crate::runtime::Recorder>>::builtin(&algorithm_options(args));
    check_settings(args, &algorithms).map(|_| ())
}

/// Builds the runtime on `transport` from the command-line settings.
pub fn build_runtime<T: Unreachable>(
    args: &RunArgs,
    transport: Rc<T>,
) -> Result<Runtime<T>, StartError> {
    let algorithms = Algorithms::<DpHandle<T>>::builtin(&algorithm_options(args));
    // Programs are compiled before anything else makes a portus Scope (uid 1; see programs.rs).
    let programs = ProgramSet::compile(&algorithms.programs()).map_err(StartError::Programs)?;
    if !programs.starts_at_uid_one() {
        warn!("first program does not have uid 1: datapaths will not clear old programs");
    }
    let policy = check_settings(args, &algorithms)?;
    let config = RuntimeConfig {
        default_algorithm: args.default_algorithm.clone(),
        primary_algorithm: args.primary_algorithm.clone(),
        tuple_order: args.tuple_order,
        // Only the kernel sends on netlink and the character device.
        accept_unannounced: args.ipc != Ipc::Unix,
    };
    info!(
        algorithms = %known_names(&algorithms), programs = programs.len(), rules = policy.len(),
        default = %args.default_algorithm, "agent configured"
    );
    let mut runtime = Runtime::new(transport, Rc::new(programs), algorithms, policy, config);
    if let Some(path) = &args.trace_flows {
        let trace = FlowTrace::create(path).map_err(|source| StartError::Trace {
            path: path.clone(),
            source,
        })?;
        runtime = runtime.with_trace(trace);
    }
    Ok(runtime)
}

/// Runs the agent until `stop` is set; returns what it counted.
pub fn run(args: &RunArgs, stop: Arc<AtomicBool>) -> Result<Counters, StartError> {
    check(args)?;
    match args.ipc {
        Ipc::Unix => {
            let socket_err = |reason: String| StartError::Socket {
                ipc: "unix",
                reason,
            };
            let gid = args
                .group
                .as_deref()
                .map(ccp_rundir::group_id)
                .transpose()
                .map_err(|e| socket_err(e.to_string()))?;
            let sock = UnixSocket::bind(&args.bind, gid).map_err(|e| socket_err(e.to_string()))?;
            info!(socket = %sock.path().display(), "listening");
            serve(args, Rc::new(sock), stop)
        }
        Ipc::Netlink => {
            let sock = NetlinkSocket::open().map_err(|e| StartError::Socket {
                ipc: "netlink",
                reason: e.to_string(),
            })?;
            serve(args, Rc::new(sock), stop)
        }
        Ipc::Char => {
            if !Path::new("/dev/ccpkp").exists() {
                return Err(StartError::Socket {
                    ipc: "char",
                    reason: "/dev/ccpkp does not exist (ccp-kernel loaded with ipc=1?)".into(),
                });
            }
            let sock = portus::ipc::kp::Socket::<portus::ipc::Blocking>::new().map_err(|e| {
                StartError::Socket {
                    ipc: "char",
                    reason: e.0,
                }
            })?;
            serve(args, Rc::new(IpcTransport::new(sock)), stop)
        }
    }
}

/// Receive buffer: far above libccp's largest message (a 110-field report is 896 bytes).
const RECV_BUFFER: usize = 64 * 1024;

fn serve<T: Receive + Unreachable>(
    args: &RunArgs,
    transport: Rc<T>,
    stop: Arc<AtomicBool>,
) -> Result<Counters, StartError> {
    let mut runtime = build_runtime(args, transport.clone())?;
    let mut buf = vec![0u8; RECV_BUFFER];
    let mut last_flush = Instant::now();
    let mut errors_in_a_row = 0u32;
    while !stop.load(Ordering::Relaxed) {
        match transport.recv_datagram(&mut buf) {
            Ok(Some((n, from))) => {
                errors_in_a_row = 0;
                runtime.handle_datagram(&buf[..n], &from);
            }
            // Idle: what waits for a slow datapath goes out now.
            Ok(None) => transport.flush(),
            Err(e) => {
                // Repeated errors back off instead of spinning.
                errors_in_a_row += 1;
                warn!(error = %e, "receive failed");
                if errors_in_a_row > 10 {
                    std::thread::sleep(Duration::from_millis(100));
                }
            }
        }
        if last_flush.elapsed() > Duration::from_secs(1) {
            runtime.flush_trace();
            last_flush = Instant::now();
        }
    }
    info!(flows = runtime.flow_count(), "stopping");
    runtime.close_all();
    let mut counters = runtime.counters().clone();
    counters.sends_dropped = transport.dropped_sends();
    counters.sends_deferred = transport.deferred_sends();
    Ok(counters)
}

/// Describes the registered algorithms (for `list-algs`).
pub fn describe_algorithms(args: &RunArgs) -> String {
    // Any transport type works for listing; the recorder needs no socket.
    let algorithms =
        Algorithms::<DpHandle<crate::runtime::Recorder>>::builtin(&algorithm_options(args));
    let mut out = String::new();
    for alg in algorithms.iter() {
        let programs: Vec<_> = alg.programs().into_iter().map(|(n, _)| n).collect();
        let aliases = alg.aliases();
        out.push_str(&format!(
            "{:<12} priority {:<9} programs [{}]{}\n",
            alg.name(),
            alg.default_priority().name(),
            programs.join(", "),
            if aliases.is_empty() {
                String::new()
            } else {
                format!(" aliases [{}]", aliases.join(", "))
            }
        ));
    }
    out
}
