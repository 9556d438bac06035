//! The `ccp-emu` command line, shaped like nested Mahimahi shells so that experiment scripts
//! can target either tool:
//!
//! ```text
//! ccp-emu [--name N] [--server CMD]... [--wait-port P]... [--stats FILE] [--flow-log FILE]
//!         [--default-cc CC]
//!         [--tcp-mem BYTES] [--no-realtime] [--no-gso] \
//!         [--loss-seed N] \
//!         delay MS  [loss uplink|downlink RATE]... \
//!         link UP.trace DOWN.trace [--uplink-queue=T] [--uplink-queue-args=A]
//!         [--downlink-queue=T] [--downlink-queue-args=A] [--uplink-log=F] [--downlink-log=F]
//!         [--timing=whole-ms|serial] \
//!         [-- CMD ARGS...]
//! ```
//! `--timing=serial` (not Mahimahi's) spreads each millisecond's delivery opportunities over
//! it, as a link that serializes packets at its rate; `--no-gso` (not Mahimahi's either)
//! makes both namespaces' TCP send one packet per buffer, so that a paced sender sends
//! packet by packet instead of in bursts of segments (`link::Timing`).
//! `mm-delay`/`mm-link`/`mm-loss` are accepted as stage names too; several delay stages add
//! up, as do several loss stages of one direction (their survival probabilities multiply).

use std::path::PathBuf;

use super::link::Timing;
use super::queue::{QueueConfig, QueueError};

/// One `link` stage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkSpec {
    /// Uplink trace (sender to receiver).
    pub up_trace: PathBuf,
    /// Downlink trace (receiver to sender).
    pub down_trace: PathBuf,
    /// Queues.
    pub up_queue: QueueConfig,
    pub down_queue: QueueConfig,
    /// Mahimahi-format logs.
    pub up_log: Option<PathBuf>,
    pub down_log: Option<PathBuf>,
    /// When inside a millisecond the link serves its opportunities (both directions).
    pub timing: Timing,
}

/// Everything `ccp-emu` was asked to do.
#[derive(Debug, Clone, PartialEq)]
pub struct EmuConfig {
    /// Namespaces are `emuh-<name>-snd` and `emuh-<name>-rcv`.
    pub name: String,
    /// One-way delay, ms (applied in each direction).
    pub delay_ms: u64,
    /// The trace-driven link, or none (unlimited rate).
    pub link: Option<LinkSpec>,
    /// Commands run in the receiver namespace for the whole run (e.g. `iperf3 -s -p 5201`).
    pub servers: Vec<String>,
    /// Ports that a server must have open in the receiver namespace before CMD starts (a
    /// listening TCP socket, or a bound UDP socket for a QUIC server).
    pub wait_ports: Vec<u16>,
    /// Where to write end-of-run statistics (JSON).
    pub stats: Option<PathBuf>,
    /// Where to write per-flow delivered bytes over time (CSV, see `flowlog`).
    pub flow_log: Option<PathBuf>,
    /// Default congestion control of both namespaces (the host's may be bbr; see
    /// docs/mahimahi.md §1 on iperf3 setting it after connect()).
    pub default_cc: String,
    /// Maximum of tcp_rmem/tcp_wmem in both namespaces, bytes.
    pub tcp_mem_max: u64,
    /// Random loss probability per packet, uplink and downlink (`loss` stages).
    pub up_loss: f64,
    pub down_loss: f64,
    /// Seed of the loss draws (`--loss-seed`; by default from the clock, like Mahimahi).
    pub loss_seed: u64,
    /// Run the packet loop with real-time priority (`--no-realtime` turns it off).
    pub realtime: bool,
    /// One packet per send buffer in both namespaces (`--no-gso`): no bursts of segments.
    pub no_gso: bool,
    /// The command to run in the sender namespace; empty = an interactive shell.
    pub command: Vec<String>,
}

/// A command line that cannot be run.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CliError {
    #[error("{0} needs a value")]
    MissingValue(String),
    #[error("bad value {value:?} for {what}")]
    BadValue { what: String, value: String },
    #[error("unknown argument {0:?}")]
    Unknown(String),
    #[error("only one link stage is supported")]
    TwoLinks,
    #[error("link option {0} given before any link stage")]
    OptionWithoutLink(String),
    #[error("--once is not supported")]
    Once,
    #[error(transparent)]
    Queue(#[from] QueueError),
}

/// Default name of the namespaces' congestion control.
pub const DEFAULT_CC: &str = "cubic";
/// Default tcp_rmem/tcp_wmem maximum: enough for 5 BDP at 192 Mbit/s and 200 ms.
pub const DEFAULT_TCP_MEM_MAX: u64 = 64 << 20;

#[derive(Default)]
struct LinkBuilder {
    traces: Vec<PathBuf>,
    up_kind: Option<String>,
    up_args: String,
    down_kind: Option<String>,
    down_args: String,
    up_log: Option<PathBuf>,
    down_log: Option<PathBuf>,
    timing: Timing,
}

impl EmuConfig {
    /// Parses the arguments after the program name.
    pub fn parse(args: &[String]) -> Result<Self, CliError> {
        let mut cfg = Self {
            name: std::process::id().to_string(),
            delay_ms: 0,
            link: None,
            servers: Vec::new(),
            wait_ports: Vec::new(),
            stats: None,
            flow_log: None,
            default_cc: DEFAULT_CC.to_string(),
            tcp_mem_max: DEFAULT_TCP_MEM_MAX,
            up_loss: 0.0,
            down_loss: 0.0,
            loss_seed: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64),
            realtime: true,
            no_gso: false,
            command: Vec::new(),
        };
        let mut link: Option<LinkBuilder> = None;
        let mut links = 0;
        let mut i = 0;
        while i < args.len() {
            let arg = args[i].as_str();
            i += 1;
            if arg == "--" {
                cfg.command = args[i..].to_vec();
                break;
            }
            let (key, inline) = match arg.split_once('=') {
                Some((k, v)) if k.starts_with("--") => (k, Some(v.to_string())),
                _ => (arg, None),
            };
            let mut value = |what: &str| -> Result<String, CliError> {
                if let Some(v) = inline.clone() {
                    return Ok(v);
                }
                let v = args
                    .get(i)
                    .cloned()
                    .ok_or_else(|| CliError::MissingValue(what.to_string()))?;
                i += 1;
                Ok(v)
            };
            match key {
                "delay" | "mm-delay" => {
                    let v = value("delay")?;
                    cfg.delay_ms += parse_num::<u64>(&v, "delay (ms)")?;
                }
                "link" | "mm-link" => {
                    links += 1;
                    if links > 1 {
                        return Err(CliError::TwoLinks);
                    }
                    let up = value("link uplink trace")?;
                    let down = value("link downlink trace")?;
                    link = Some(LinkBuilder {
                        traces: vec![up.into(), down.into()],
                        ..LinkBuilder::default()
                    });
                }
                "loss" | "mm-loss" => {
                    let dir = value("loss direction")?;
                    let rate = value("loss rate")?;
                    let r: f64 = parse_num(&rate, "loss rate")?;
                    if !(0.0..=1.0).contains(&r) {
                        return Err(CliError::BadValue {
                            what: "loss rate (a probability in [0, 1])".into(),
                            value: rate,
                        });
                    }
                    let total = match dir.as_str() {
                        "uplink" => &mut cfg.up_loss,
                        "downlink" => &mut cfg.down_loss,
                        _ => {
                            return Err(CliError::BadValue {
                                what: "loss direction (uplink or downlink)".into(),
                                value: dir,
                            });
                        }
                    };
                    *total = 1.0 - (1.0 - *total) * (1.0 - r);
                }
                "--loss-seed" => cfg.loss_seed = parse_num(&value("--loss-seed")?, "--loss-seed")?,
                "--name" => cfg.name = value("--name")?,
                "--server" => cfg.servers.push(value("--server")?),
                "--wait-port" => {
                    let v = value("--wait-port")?;
                    cfg.wait_ports.push(parse_num(&v, "--wait-port")?);
                }
                "--stats" => cfg.stats = Some(value("--stats")?.into()),
                "--flow-log" => cfg.flow_log = Some(value("--flow-log")?.into()),
                "--default-cc" => cfg.default_cc = value("--default-cc")?,
                "--tcp-mem" => cfg.tcp_mem_max = parse_num(&value("--tcp-mem")?, "--tcp-mem")?,
                "--once" => return Err(CliError::Once),
                "--no-realtime" => cfg.realtime = false,
                "--no-gso" => cfg.no_gso = true,
                "--uplink-queue"
                | "--downlink-queue"
                | "--uplink-queue-args"
                | "--downlink-queue-args"
                | "--uplink-log"
                | "--downlink-log"
                | "--timing" => {
                    let v = value(key)?;
                    let b = link
                        .as_mut()
                        .ok_or_else(|| CliError::OptionWithoutLink(key.to_string()))?;
                    match key {
                        "--uplink-queue" => b.up_kind = Some(v),
                        "--downlink-queue" => b.down_kind = Some(v),
                        "--uplink-queue-args" => b.up_args = v,
                        "--downlink-queue-args" => b.down_args = v,
                        "--uplink-log" => b.up_log = Some(v.into()),
                        "--downlink-log" => b.down_log = Some(v.into()),
                        _ => {
                            b.timing = match v.as_str() {
                                "whole-ms" => Timing::WholeMs,
                                "serial" => Timing::Serial,
                                _ => {
                                    return Err(CliError::BadValue {
                                        what: "--timing (whole-ms or serial)".into(),
                                        value: v,
                                    });
                                }
                            }
                        }
                    }
                }
                _ => return Err(CliError::Unknown(arg.to_string())),
            }
        }
        if let Some(b) = link {
            let queue = |kind: &Option<String>, args: &str| {
                QueueConfig::from_mahimahi(kind.as_deref().unwrap_or("infinite"), args)
            };
            let mut traces = b.traces.into_iter();
            cfg.link = Some(LinkSpec {
                up_trace: traces.next().unwrap_or_default(),
                down_trace: traces.next().unwrap_or_default(),
                up_queue: queue(&b.up_kind, &b.up_args)?,
                down_queue: queue(&b.down_kind, &b.down_args)?,
                up_log: b.up_log,
                down_log: b.down_log,
                timing: b.timing,
            });
        }
        Ok(cfg)
    }
}

fn parse_num<T: std::str::FromStr>(v: &str, what: &str) -> Result<T, CliError> {
    v.parse().map_err(|_| CliError::BadValue {
        what: what.to_string(),
        value: v.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::emu::queue::Discipline;

    fn parse(s: &str) -> Result<EmuConfig, CliError> {
        let args: Vec<String> = s.split_whitespace().map(String::from).collect();
        EmuConfig::parse(&args)
    }

    #[test]
    fn parses_the_mahimahi_shape() {
        let c = parse(
            "--name t1 mm-delay 15 mm-link 48.trace 48.trace --uplink-queue=droptail \
             --uplink-queue-args=bytes=720000 --uplink-log=up.log -- iperf3 -c 10.0.0.1",
        )
        .expect("valid");
        assert_eq!(c.name, "t1");
        assert_eq!(c.delay_ms, 15);
        let l = c.link.expect("link");
        assert_eq!(l.up_queue.discipline, Discipline::DropTail);
        assert_eq!(l.up_queue.bytes, Some(720_000));
        assert_eq!(l.down_queue, QueueConfig::INFINITE);
        assert_eq!(l.up_log, Some("up.log".into()));
        assert_eq!(l.timing, Timing::WholeMs);
        assert!(!c.no_gso);
        assert_eq!(c.command, ["iperf3", "-c", "10.0.0.1"]);
    }

    #[test]
    fn nested_delays_add_up_and_options_take_separate_values() {
        let c = parse(
            "--no-gso delay 10 delay 5 link a b --downlink-queue drophead --downlink-queue-args packets=3 \
             --timing serial",
        )
        .expect("valid");
        assert_eq!(c.delay_ms, 15);
        assert!(c.no_gso);
        let l = c.link.expect("link");
        assert_eq!(l.down_queue.packets, Some(3));
        assert_eq!(l.timing, Timing::Serial);
        assert!(c.command.is_empty());
    }

    #[test]
    fn refuses_what_it_cannot_do() {
        assert_eq!(parse("link a b link c d"), Err(CliError::TwoLinks));
        assert!(matches!(
            parse("--uplink-queue=droptail"),
            Err(CliError::OptionWithoutLink(_))
        ));
        assert!(matches!(
            parse("link a b --uplink-queue=droptail"),
            Err(CliError::Queue(_))
        ));
        assert!(matches!(parse("delay x"), Err(CliError::BadValue { .. })));
        assert!(matches!(
            parse("link a b --timing=fast"),
            Err(CliError::BadValue { .. })
        ));
        assert!(matches!(
            parse("--timing=serial link a b"),
            Err(CliError::OptionWithoutLink(_))
        ));
        assert!(matches!(parse("delay"), Err(CliError::MissingValue(_))));
        assert!(matches!(
            parse("loss sideways 0.1"),
            Err(CliError::BadValue { .. })
        ));
        assert!(matches!(
            parse("loss uplink 1.5"),
            Err(CliError::BadValue { .. })
        ));
    }

    #[test]
    fn loss_stages_take_mahimahis_arguments() {
        let c = parse(
            "--loss-seed 5 delay 15 mm-loss uplink 0.1 loss uplink 0.1 loss downlink 0.02 link a b",
        )
        .expect("valid");
        assert!((c.up_loss - 0.19).abs() < 1e-12, "{}", c.up_loss);
        assert!((c.down_loss - 0.02).abs() < 1e-12 && c.loss_seed == 5);
    }
}
