//! What a simulation runs: one bottleneck, the CCP flows and the cross traffic.
//!
//! The same structure is read from TOML by the test datapath (`ccp-testdp sim FILE`) and
//! built in code by algorithm tests. Times are seconds, rates Mbit/s (10^6-based), sizes
//! bytes, as a person writes them; [`Scenario::validate`] turns them into the model's units
//! and refuses nonsense with the field that is wrong.

use algs_core::BytesPerSec;
use algs_core::Priority;
use serde::{Deserialize, Serialize};
use thiserror::Error;

/// Default segment size: a 1500-byte MTU minus IPv4, TCP and timestamp option headers.
pub const DEFAULT_MSS: u32 = 1448;
/// Default initial window in packets (RFC 6928).
pub const DEFAULT_INIT_CWND_PKTS: u32 = 10;
/// Default width of the time-series bins.
pub const DEFAULT_BIN_MS: u64 = 100;

/// A whole simulation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// Free text that ends up in the summary.
    #[serde(default)]
    pub name: Option<String>,
    pub link: LinkSpec,
    /// Flows controlled through CCP (the test datapath runs them on libccp).
    #[serde(default, rename = "flow")]
    pub flows: Vec<CcpFlowSpec>,
    /// Traffic the model generates itself.
    #[serde(default, rename = "cross")]
    pub cross: Vec<CrossSpec>,
    /// Windows in which the summary reports mean throughput, utilization and queueing delay.
    #[serde(default, rename = "report")]
    pub reports: Vec<ReportWindow>,
    /// Width of the time-series bins, ms.
    #[serde(default = "default_bin_ms")]
    pub bin_ms: u64,
}

fn default_bin_ms() -> u64 {
    DEFAULT_BIN_MS
}

fn default_mss() -> u32 {
    DEFAULT_MSS
}

/// The bottleneck.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinkSpec {
    /// Capacity, Mbit/s of segment bytes (headers are not modelled).
    pub rate_mbps: f64,
    /// Base round-trip time (propagation only), ms.
    pub rtt_ms: f64,
    /// Droptail buffer in bytes; give this or `buffer_bdp`.
    #[serde(default)]
    pub buffer_bytes: Option<u64>,
    /// Droptail buffer in multiples of the bandwidth-delay product (rate x base RTT).
    #[serde(default)]
    pub buffer_bdp: Option<f64>,
    /// Simulated time, s.
    pub duration_s: f64,
    /// Segment size of every sender, bytes.
    #[serde(default = "default_mss")]
    pub mss: u32,
    /// Random (non-congestive) loss: the probability that a packet which crossed the
    /// bottleneck is lost on the way to the receiver (a lossy link); 0 = none.
    #[serde(default)]
    pub random_loss: f64,
    /// Seed of the deterministic generator that draws the random losses.
    #[serde(default)]
    pub loss_seed: u64,
    /// The link hands over what it serialized within each millisecond at the millisecond's
    /// end, as Mahimahi's and `ccp-emu`'s trace links do (delivery opportunities at whole
    /// milliseconds), and those packets keep their buffer space until then; false = each
    /// packet as soon as it is serialized, the buffer holding only those that wait.
    #[serde(default)]
    pub whole_ms_delivery: bool,
}

impl LinkSpec {
    /// A link of `rate_mbps` and `rtt_ms` with a droptail buffer of `buffer_bdp` BDPs, run for
    /// `duration_s`, default MSS, no random loss.
    pub fn with_bdp_buffer(rate_mbps: f64, rtt_ms: f64, buffer_bdp: f64, duration_s: f64) -> Self {
        LinkSpec {
            rate_mbps,
            rtt_ms,
            buffer_bytes: None,
            buffer_bdp: Some(buffer_bdp),
            duration_s,
            mss: DEFAULT_MSS,
            random_loss: 0.0,
            loss_seed: 0,
            whole_ms_delivery: false,
        }
    }
}

/// One CCP flow: the datapath creates it with `alg` in the Create message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CcpFlowSpec {
    /// Unique name, used in the summary and by `--without`.
    pub name: String,
    /// Algorithm asked for in Create (empty = no preference).
    #[serde(default)]
    pub alg: String,
    #[serde(default)]
    pub start_s: f64,
    /// The application stops sending (and the datapath closes the flow) at this time;
    /// absent = runs to the end.
    #[serde(default)]
    pub stop_s: Option<f64>,
    /// Initial window, packets.
    #[serde(default)]
    pub init_cwnd_pkts: Option<u32>,
    /// Priority changes the application makes while the flow runs.
    #[serde(default)]
    pub priority: Vec<PriorityChange>,
    /// Stretch ACKs: the datapath hears of this many packets per ACK (GRO/LRO-like);
    /// absent = 1, every packet. An ACK that reveals a loss is never held back.
    #[serde(default)]
    pub ack_every: Option<u32>,
}

impl CcpFlowSpec {
    /// A flow named `name` asking for `alg`, from `start_s` to the end, with the defaults.
    pub fn new(name: &str, alg: &str, start_s: f64) -> Self {
        CcpFlowSpec {
            name: name.to_owned(),
            alg: alg.to_owned(),
            start_s,
            stop_s: None,
            init_cwnd_pkts: None,
            priority: vec![],
            ack_every: None,
        }
    }
}

/// One priority change, sent to the agent as a PRIORITY message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PriorityChange {
    pub at_s: f64,
    pub class: PriorityClassName,
    /// Hybrid threshold, Mbit/s; absent or 0 = keep the configured one.
    #[serde(default)]
    pub threshold_mbps: Option<f64>,
}

/// Priority class names as scenario files spell them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PriorityClassName {
    Primary,
    Scavenger,
    Hybrid,
}

impl PriorityChange {
    /// The priority this change asks for.
    pub fn priority(&self) -> Priority {
        match self.class {
            PriorityClassName::Primary => Priority::Primary,
            PriorityClassName::Scavenger => Priority::Scavenger,
            PriorityClassName::Hybrid => Priority::Hybrid {
                threshold: self
                    .threshold_mbps
                    .filter(|t| *t > 0.0)
                    .map(BytesPerSec::from_mbps),
            },
        }
    }
}

/// Traffic generated by the model itself, not through CCP.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase", deny_unknown_fields)]
pub enum CrossSpec {
    /// Unresponsive packets at a fixed rate.
    Constant {
        name: String,
        rate_mbps: f64,
        #[serde(default)]
        start_s: f64,
        #[serde(default)]
        stop_s: Option<f64>,
    },
    /// A Reno-like window flow (slow start, +1 MSS per RTT, halving once per loss event,
    /// 1 MSS after a timeout), built into the model.
    Aimd {
        name: String,
        #[serde(default)]
        start_s: f64,
        #[serde(default)]
        stop_s: Option<f64>,
        #[serde(default)]
        init_cwnd_pkts: Option<u32>,
    },
}

impl CrossSpec {
    pub fn name(&self) -> &str {
        match self {
            CrossSpec::Constant { name, .. } | CrossSpec::Aimd { name, .. } => name,
        }
    }
}

/// A window of the run that the summary reports on separately.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReportWindow {
    #[serde(default)]
    pub name: Option<String>,
    pub from_s: f64,
    pub to_s: f64,
}

/// Why a scenario cannot run.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum ScenarioError {
    #[error("{field} must be {what}, got {value}")]
    OutOfRange {
        field: String,
        what: &'static str,
        value: f64,
    },
    #[error("give exactly one of link.buffer_bytes and link.buffer_bdp")]
    Buffer,
    #[error("two flows are named {0:?}")]
    DuplicateName(String),
    #[error("no flow is named {0:?}")]
    UnknownName(String),
}

fn check(
    field: impl Into<String>,
    value: f64,
    ok: bool,
    what: &'static str,
) -> Result<(), ScenarioError> {
    if ok && value.is_finite() {
        Ok(())
    } else {
        Err(ScenarioError::OutOfRange {
            field: field.into(),
            what,
            value,
        })
    }
}

impl Scenario {
    /// Checks every number and name; the model only runs validated scenarios.
    pub fn validate(&self) -> Result<(), ScenarioError> {
        let l = &self.link;
        check("link.rate_mbps", l.rate_mbps, l.rate_mbps > 0.0, "> 0")?;
        check("link.rtt_ms", l.rtt_ms, l.rtt_ms > 0.0, "> 0")?;
        check(
            "link.duration_s",
            l.duration_s,
            l.duration_s > 0.0 && l.duration_s <= 86_400.0,
            "in (0, 86400]",
        )?;
        check(
            "link.mss",
            f64::from(l.mss),
            (64..=65_535).contains(&l.mss),
            "in [64, 65535]",
        )?;
        match (l.buffer_bytes, l.buffer_bdp) {
            (Some(_), None) => {}
            (None, Some(b)) => check("link.buffer_bdp", b, b >= 0.0, ">= 0")?,
            _ => return Err(ScenarioError::Buffer),
        }
        check(
            "link.random_loss",
            l.random_loss,
            (0.0..1.0).contains(&l.random_loss),
            "in [0, 1)",
        )?;
        check("bin_ms", self.bin_ms as f64, self.bin_ms > 0, "> 0")?;
        let mut names: Vec<&str> = Vec::new();
        for n in self
            .flows
            .iter()
            .map(|f| f.name.as_str())
            .chain(self.cross.iter().map(|c| c.name()))
        {
            if names.contains(&n) {
                return Err(ScenarioError::DuplicateName(n.to_owned()));
            }
            names.push(n);
        }
        for f in &self.flows {
            check_span(&format!("flow {:?}", f.name), f.start_s, f.stop_s)?;
            if let Some(c) = f.init_cwnd_pkts {
                check(
                    format!("flow {:?} init_cwnd_pkts", f.name),
                    f64::from(c),
                    c > 0,
                    "> 0",
                )?;
            }
            if let Some(n) = f.ack_every {
                check(
                    format!("flow {:?} ack_every", f.name),
                    f64::from(n),
                    n > 0,
                    "> 0",
                )?;
            }
            for p in &f.priority {
                check(
                    format!("flow {:?} priority at_s", f.name),
                    p.at_s,
                    p.at_s >= 0.0,
                    ">= 0",
                )?;
                if let Some(t) = p.threshold_mbps {
                    check(
                        format!("flow {:?} threshold_mbps", f.name),
                        t,
                        t >= 0.0,
                        ">= 0",
                    )?;
                }
            }
        }
        for c in &self.cross {
            let n = c.name();
            match c {
                CrossSpec::Constant {
                    rate_mbps,
                    start_s,
                    stop_s,
                    ..
                } => {
                    check(
                        format!("cross {n:?} rate_mbps"),
                        *rate_mbps,
                        *rate_mbps > 0.0,
                        "> 0",
                    )?;
                    check_span(&format!("cross {n:?}"), *start_s, *stop_s)?;
                }
                CrossSpec::Aimd {
                    start_s,
                    stop_s,
                    init_cwnd_pkts,
                    ..
                } => {
                    check_span(&format!("cross {n:?}"), *start_s, *stop_s)?;
                    if let Some(c) = init_cwnd_pkts {
                        check(
                            format!("cross {n:?} init_cwnd_pkts"),
                            f64::from(*c),
                            *c > 0,
                            "> 0",
                        )?;
                    }
                }
            }
        }
        for (i, w) in self.reports.iter().enumerate() {
            check(
                format!("report {i} from_s"),
                w.from_s,
                w.from_s >= 0.0,
                ">= 0",
            )?;
            check(
                format!("report {i} to_s"),
                w.to_s,
                w.to_s > w.from_s,
                "> from_s",
            )?;
        }
        Ok(())
    }

    /// The same scenario without the named flows (CCP or cross), for "alone" baselines:
    /// e.g. the AIMD flow's throughput without the scavenger next to it.
    pub fn without(&self, names: &[&str]) -> Result<Scenario, ScenarioError> {
        for n in names {
            let known = self.flows.iter().any(|f| f.name == *n)
                || self.cross.iter().any(|c| c.name() == *n);
            if !known {
                return Err(ScenarioError::UnknownName((*n).to_owned()));
            }
        }
        let mut s = self.clone();
        s.flows.retain(|f| !names.contains(&f.name.as_str()));
        s.cross.retain(|c| !names.contains(&c.name()));
        Ok(s)
    }

    /// Capacity of the link.
    pub fn capacity(&self) -> BytesPerSec {
        BytesPerSec::from_mbps(self.link.rate_mbps)
    }

    /// Buffer in bytes, whichever way it was given.
    pub fn buffer_bytes(&self) -> u64 {
        match (self.link.buffer_bytes, self.link.buffer_bdp) {
            (Some(b), _) => b,
            (None, Some(m)) => (m * self.bdp_bytes()).round().max(0.0) as u64,
            (None, None) => 0,
        }
    }

    /// Bandwidth-delay product of the base RTT, bytes.
    pub fn bdp_bytes(&self) -> f64 {
        self.capacity().0 * self.link.rtt_ms / 1e3
    }
}

fn check_span(what: &str, start_s: f64, stop_s: Option<f64>) -> Result<(), ScenarioError> {
    check(format!("{what} start_s"), start_s, start_s >= 0.0, ">= 0")?;
    if let Some(s) = stop_s {
        check(format!("{what} stop_s"), s, s > start_s, "> start_s")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::link;

    fn scenario() -> Scenario {
        Scenario {
            name: None,
            link: link(48.0, 30.0, 1.0, 10.0),
            flows: vec![],
            cross: vec![CrossSpec::Aimd {
                name: "reno".into(),
                start_s: 0.0,
                stop_s: None,
                init_cwnd_pkts: None,
            }],
            reports: vec![],
            bin_ms: DEFAULT_BIN_MS,
        }
    }

    #[test]
    fn buffer_in_bdp_multiples_is_rate_times_rtt() {
        // 48 Mbit/s = 6e6 B/s; x 30 ms = 180 kB.
        let mut s = scenario();
        assert_eq!(s.buffer_bytes(), 180_000);
        s.link.buffer_bdp = Some(0.5);
        assert_eq!(s.buffer_bytes(), 90_000);
    }

    #[test]
    fn refuses_two_buffers_and_duplicate_names() {
        let mut s = scenario();
        s.link.buffer_bytes = Some(1);
        assert_eq!(s.validate(), Err(ScenarioError::Buffer));
        let mut s = scenario();
        s.flows.push(CcpFlowSpec {
            name: "reno".into(),
            alg: String::new(),
            start_s: 0.0,
            stop_s: None,
            init_cwnd_pkts: None,
            priority: vec![],
            ack_every: None,
        });
        assert_eq!(
            s.validate(),
            Err(ScenarioError::DuplicateName("reno".into()))
        );
    }

    #[test]
    fn refuses_a_stop_before_the_start() {
        let mut s = scenario();
        s.cross[0] = CrossSpec::Aimd {
            name: "reno".into(),
            start_s: 5.0,
            stop_s: Some(1.0),
            init_cwnd_pkts: None,
        };
        assert!(matches!(
            s.validate(),
            Err(ScenarioError::OutOfRange { .. })
        ));
    }

    #[test]
    fn without_removes_named_flows_and_refuses_unknown_ones() {
        let s = scenario();
        assert!(s.without(&["reno"]).expect("known").cross.is_empty());
        assert_eq!(
            s.without(&["nope"]),
            Err(ScenarioError::UnknownName("nope".into()))
        );
    }

    #[test]
    fn hybrid_threshold_zero_means_keep_the_configured_one() {
        let p = PriorityChange {
            at_s: 1.0,
            class: PriorityClassName::Hybrid,
            threshold_mbps: Some(0.0),
        };
        assert_eq!(p.priority(), Priority::Hybrid { threshold: None });
        let p = PriorityChange {
            threshold_mbps: Some(8.0),
            ..p
        };
        assert_eq!(
            p.priority(),
            Priority::Hybrid {
                threshold: Some(BytesPerSec(1e6))
            }
        );
    }
}
