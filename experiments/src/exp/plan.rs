//! Scenario plans (TOML) and their expansion into runs.
//!
//! A plan names a `kind` and gives `[quick]` and `[full]` parameter sets. Each kind expands
//! its parameters into [`RunSpec`]s: a bottleneck (rate, RTT, buffer) and flows. A flow is
//! `{cc, start, stop, priority changes}` where `cc` is a kernel congestion control (`cubic`,
//! `bbr`, `reno`) or `ccp:<algorithm>` (the eBPF datapath with `ccp-agent`).

use serde::{Deserialize, Serialize};

/// Which expansion a plan uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    /// ANRW Fig. 1 (and Proteus B5/B9): each primary alone, and each primary with each
    /// scavenger, over a grid of bottlenecks; primary throughput ratio and utilization.
    PrimaryRatio,
    /// Explicit flows over time on one bottleneck (ANRW Fig. 2, priority switch).
    Timeline,
    /// One flow alone: utilization and p95 RTT inflation versus buffer (Proteus B1/B2).
    SingleFlow,
    /// n flows of one algorithm started `stagger_s` apart: Jain's index (Proteus B4).
    Fairness,
    /// Harm (Ware et al.) of each competitor on each primary, CUBIC's harm as baseline.
    Harm,
}

/// A flow's priority change at run time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PriorityChange {
    /// When, s since the run started.
    pub at_s: f64,
    /// `primary`, `scavenger` or `hybrid`.
    pub class: String,
}

/// How a plan names a flow on the QUIC datapath: `quic:<algorithm>`.
const QUIC_PREFIX: &str = "quic:";

/// One flow of a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FlowSpec {
    /// Kernel congestion control name, `ccp:<algorithm>` (Linux TCP on the eBPF datapath)
    /// or `quic:<algorithm>` (the QUIC datapath, `ccp-quic`); both are steered by the agent.
    pub cc: String,
    /// Start, s since the run started.
    pub start_s: f64,
    /// Stop, s since the run started.
    pub stop_s: f64,
    /// Priority changes (only meaningful for `ccp:` and `quic:` flows).
    #[serde(default)]
    pub priority: Vec<PriorityChange>,
    /// The policy's `primary` for a `ccp:` flow: a switch to primary hands the flow to this
    /// algorithm (Proteus otherwise switches in place).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub primary: Option<String>,
}

impl FlowSpec {
    /// The algorithm a `ccp:` or `quic:` flow asks the agent for.
    pub fn ccp_algorithm(&self) -> Option<&str> {
        self.cc
            .strip_prefix("ccp:")
            .or_else(|| self.cc.strip_prefix(QUIC_PREFIX))
    }

    /// Whether the flow runs on the QUIC datapath instead of Linux TCP.
    pub fn quic(&self) -> bool {
        self.cc.starts_with(QUIC_PREFIX)
    }

    /// The flow's part of a run id.
    fn slug(&self) -> String {
        match &self.primary {
            None => slug(&self.cc),
            Some(p) => format!("{}-to-{}", slug(&self.cc), slug(p)),
        }
    }
}

/// A competitor: a congestion control (`cubic`, `ccp:proteus-s`), or a table that also
/// names the policy's `primary`, which a switch to primary hands the flow to:
/// `{ cc = "ccp:proteus-s", primary = "cubic" }`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Competitor {
    Cc(String),
    HandsOff { cc: String, primary: String },
}

impl Competitor {
    fn cc(&self) -> &str {
        match self {
            Competitor::Cc(cc) | Competitor::HandsOff { cc, .. } => cc,
        }
    }

    fn primary(&self) -> Option<String> {
        match self {
            Competitor::Cc(_) => None,
            Competitor::HandsOff { primary, .. } => Some(primary.clone()),
        }
    }

    /// A flow of this competitor, the `ccp:` ones with their policy's `primary`.
    fn flow(&self, template: &FlowSpec) -> FlowSpec {
        FlowSpec {
            cc: self.cc().to_string(),
            primary: self.primary().or_else(|| template.primary.clone()),
            ..template.clone()
        }
    }
}

/// The test bed a run emulates: how the link spaces its deliveries and how the senders' TCP
/// hands packets over. The Proteus paper measured on Emulab (links that serialize packets,
/// UDT senders that pace packet by packet), its ANRW follow-up on Mahimahi.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Testbed {
    /// Delivery opportunities at whole milliseconds, as Mahimahi's; TCP hands the link
    /// bursts of segments as Linux sizes them.
    #[default]
    Mahimahi,
    /// Opportunities spread over each millisecond, as a serializing link's, one packet per
    /// send buffer (`ccp-emu --timing=serial --no-gso`), and a buffer that counts IP bytes
    /// as a router's does (Mahimahi's counts a 4-byte header per packet too); the emulator
    /// only.
    Serial,
}

impl Testbed {
    fn is_mahimahi(&self) -> bool {
        *self == Testbed::Mahimahi
    }
}

/// A parameter set (`[quick]` or `[full]`); each kind reads the fields it needs.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Params {
    /// Bottleneck rates, Mbit/s (Mahimahi convention: 12 per opportunity per ms).
    #[serde(default)]
    pub bandwidth_mbps: Vec<f64>,
    /// Base RTTs, ms (the one-way delay is half).
    #[serde(default)]
    pub rtt_ms: Vec<u64>,
    /// Buffers in bandwidth-delay products.
    #[serde(default)]
    pub buffer_bdp: Vec<f64>,
    /// Buffers in bytes (used when `buffer_bdp` is empty).
    #[serde(default)]
    pub buffer_bytes: Vec<u64>,
    /// Random loss rates of the uplink (data direction), like Mahimahi's `mm-loss uplink`;
    /// none = no loss stage.
    #[serde(default)]
    pub loss_rate: Vec<f64>,
    /// The test bed the runs emulate (`mahimahi` unless given).
    #[serde(default)]
    pub testbed: Testbed,
    /// Run length, s.
    #[serde(default)]
    pub duration_s: f64,
    /// Algorithms (single-flow, fairness).
    #[serde(default)]
    pub algorithms: Vec<String>,
    /// Primaries (primary-ratio, harm).
    #[serde(default)]
    pub primaries: Vec<String>,
    /// Scavengers or competitors (primary-ratio, harm; timeline: each replaces
    /// `$scavenger` in turn).
    #[serde(default)]
    pub competitors: Vec<Competitor>,
    /// Flow counts (fairness).
    #[serde(default)]
    pub flow_counts: Vec<u32>,
    /// Fairness: rate per flow (Mbit/s) and buffer per flow (bytes), as in Proteus B4.
    #[serde(default)]
    pub per_flow_mbps: Option<f64>,
    #[serde(default)]
    pub per_flow_buffer_bytes: Option<u64>,
    /// Gap between flow starts, s (fairness; primary-ratio/harm: the competitor's head
    /// start before the primary).
    #[serde(default)]
    pub stagger_s: f64,
    /// Measurement starts this long after the last flow started, s.
    #[serde(default)]
    pub warmup_s: f64,
    /// primary-ratio and harm: the primary starts first and the competitor `stagger_s`
    /// later (Proteus B5–B8), instead of the competitor first (ANRW Fig. 1).
    #[serde(default)]
    pub primary_first: bool,
    /// Every run this many times (ids end in `-rep2`, `-rep3`, ...); a competing run is
    /// compared with the alone run of the same repetition.
    #[serde(default)]
    pub repeats: Option<u32>,
    /// Explicit flows (timeline).
    #[serde(default)]
    pub flows: Vec<FlowSpec>,
}

/// A plan file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Plan {
    /// Scenario name (results directory).
    pub name: String,
    /// What the scenario reproduces.
    pub description: String,
    /// Expansion.
    pub kind: Kind,
    /// Parameters for CI (`--quick`); a plan may have only this set.
    #[serde(default)]
    pub quick: Option<Params>,
    /// Parameters of the papers (`--full`); a plan may have only this set.
    #[serde(default)]
    pub full: Option<Params>,
}

/// A run's bottleneck and flows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunSpec {
    /// Stable identifier (directory name); equal specs get equal ids.
    pub id: String,
    /// Bottleneck rate, Mbit/s.
    pub bandwidth_mbps: f64,
    /// Base RTT, ms.
    pub rtt_ms: u64,
    /// Droptail buffer, bytes.
    pub buffer_bytes: u64,
    /// Buffer in BDPs (for plots; computed from bytes when given in bytes).
    pub buffer_bdp: f64,
    /// Random loss probability of the uplink (data) packets.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub uplink_loss: f64,
    /// The test bed it emulates.
    #[serde(default, skip_serializing_if = "Testbed::is_mahimahi")]
    pub testbed: Testbed,
    /// Run length, s.
    pub duration_s: f64,
    /// Flows.
    pub flows: Vec<FlowSpec>,
    /// Measurement window, s since the run started.
    pub measure_from_s: f64,
    pub measure_to_s: f64,
    /// Role of each flow for the metrics, e.g. `primary`, `competitor`, `flow`.
    pub roles: Vec<String>,
    /// Which repetition of the same configuration (1 = the first; `repeats`).
    #[serde(default = "first_repeat", skip_serializing_if = "is_first_repeat")]
    pub repeat: u32,
}

/// The emulated path and run length of a run (floats by their bits: they come from the
/// plan, never from arithmetic).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PathKey {
    bandwidth_bits: u64,
    rtt_ms: u64,
    buffer_bytes: u64,
    loss_bits: u64,
    testbed: Testbed,
    duration_bits: u64,
}

impl RunSpec {
    /// Its emulated path: runs that share it (an alone baseline, the competing runs
    /// compared with it, their repetitions) belong together.
    pub fn bottleneck(&self) -> PathKey {
        PathKey {
            bandwidth_bits: self.bandwidth_mbps.to_bits(),
            rtt_ms: self.rtt_ms,
            buffer_bytes: self.buffer_bytes,
            loss_bits: self.uplink_loss.to_bits(),
            testbed: self.testbed,
            duration_bits: self.duration_s.to_bits(),
        }
    }
}

fn first_repeat() -> u32 {
    1
}

fn is_first_repeat(r: &u32) -> bool {
    *r == 1
}

/// A plan that cannot be expanded.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    #[error("plan is not valid TOML: {0}")]
    Toml(#[from] toml::de::Error),
    #[error("plan {plan}: {what} is empty or missing")]
    Missing { plan: String, what: &'static str },
    #[error("plan {plan}: loss rate {rate} is not in [0, 1)")]
    BadLoss { plan: String, rate: f64 },
    #[error("plan {plan} has no [{mode}] section")]
    NoSection { plan: String, mode: &'static str },
    #[error("plan {plan}: flow {index}: {reason}")]
    BadFlow {
        plan: String,
        index: usize,
        reason: String,
    },
}

/// Placeholder cc in timeline flows, replaced by each of `competitors`.
pub const SCAVENGER_SLOT: &str = "$scavenger";

/// Bytes in one BDP.
pub fn bdp_bytes(mbps: f64, rtt_ms: u64) -> f64 {
    mbps * 1e6 / 8.0 * rtt_ms as f64 / 1000.0
}

fn is_zero(x: &f64) -> bool {
    *x == 0.0
}

fn slug(cc: &str) -> String {
    cc.replace(':', "_").replace('+', "p")
}

struct Bottleneck {
    mbps: f64,
    rtt_ms: u64,
    buffer_bytes: u64,
    buffer_bdp: f64,
    uplink_loss: f64,
    testbed: Testbed,
}

impl Bottleneck {
    fn id(&self) -> String {
        let loss = if self.uplink_loss > 0.0 {
            format!("-loss{}", self.uplink_loss)
        } else {
            String::new()
        };
        let testbed = match self.testbed {
            Testbed::Mahimahi => "",
            Testbed::Serial => "-serial",
        };
        format!(
            "bw{}-rtt{}-buf{}{loss}{testbed}",
            self.mbps, self.rtt_ms, self.buffer_bytes
        )
    }
}

impl Plan {
    /// Parses a plan.
    pub fn parse(text: &str) -> Result<Self, PlanError> {
        Ok(toml::from_str(text)?)
    }

    /// The parameter set of a mode: `[full]` or `[quick]`.
    pub fn params(&self, full: bool) -> Result<&Params, PlanError> {
        let (set, mode) = if full {
            (&self.full, "full")
        } else {
            (&self.quick, "quick")
        };
        set.as_ref().ok_or_else(|| PlanError::NoSection {
            plan: self.name.clone(),
            mode,
        })
    }

    /// The runs of a mode.
    pub fn runs(&self, full: bool) -> Result<Vec<RunSpec>, PlanError> {
        self.expand(self.params(full)?)
    }

    fn missing(&self, what: &'static str) -> PlanError {
        PlanError::Missing {
            plan: self.name.clone(),
            what,
        }
    }

    fn bottlenecks(&self, p: &Params) -> Result<Vec<Bottleneck>, PlanError> {
        if p.bandwidth_mbps.is_empty() {
            return Err(self.missing("bandwidth_mbps"));
        }
        if p.rtt_ms.is_empty() {
            return Err(self.missing("rtt_ms"));
        }
        let mut out = Vec::new();
        for &mbps in &p.bandwidth_mbps {
            for &rtt_ms in &p.rtt_ms {
                let bdp = bdp_bytes(mbps, rtt_ms);
                let buffers: Vec<(u64, f64)> = if !p.buffer_bdp.is_empty() {
                    p.buffer_bdp
                        .iter()
                        .map(|b| ((b * bdp).round() as u64, *b))
                        .collect()
                } else if !p.buffer_bytes.is_empty() {
                    p.buffer_bytes
                        .iter()
                        .map(|b| (*b, *b as f64 / bdp))
                        .collect()
                } else {
                    return Err(self.missing("buffer_bdp or buffer_bytes"));
                };
                let losses = if p.loss_rate.is_empty() {
                    vec![0.0]
                } else {
                    p.loss_rate.clone()
                };
                if let Some(bad) = losses.iter().find(|l| !(0.0..1.0).contains(*l)) {
                    return Err(PlanError::BadLoss {
                        plan: self.name.clone(),
                        rate: *bad,
                    });
                }
                for (buffer_bytes, buffer_bdp) in buffers {
                    for &uplink_loss in &losses {
                        out.push(Bottleneck {
                            mbps,
                            rtt_ms,
                            buffer_bytes,
                            buffer_bdp,
                            uplink_loss,
                            testbed: p.testbed,
                        });
                    }
                }
            }
        }
        Ok(out)
    }

    /// Expands a parameter set into runs (deduplicated by id, in a stable order).
    pub fn expand(&self, p: &Params) -> Result<Vec<RunSpec>, PlanError> {
        if p.duration_s <= 0.0 {
            return Err(self.missing("duration_s"));
        }
        let d = p.duration_s;
        let flow = |cc: &str, start_s: f64| FlowSpec {
            cc: cc.to_string(),
            start_s,
            stop_s: d,
            priority: Vec::new(),
            primary: None,
        };
        let mut runs = Vec::new();
        let mut push =
            |b: &Bottleneck, name: String, flows: Vec<FlowSpec>, roles: Vec<&str>, from: f64| {
                runs.push(RunSpec {
                    id: format!("{}-d{}-{name}", b.id(), d),
                    bandwidth_mbps: b.mbps,
                    rtt_ms: b.rtt_ms,
                    buffer_bytes: b.buffer_bytes,
                    buffer_bdp: b.buffer_bdp,
                    uplink_loss: b.uplink_loss,
                    testbed: b.testbed,
                    duration_s: d,
                    flows,
                    measure_from_s: from.min(d),
                    measure_to_s: d,
                    roles: roles.into_iter().map(String::from).collect(),
                    repeat: 1,
                });
            };
        match self.kind {
            Kind::PrimaryRatio | Kind::Harm => {
                if p.primaries.is_empty() {
                    return Err(self.missing("primaries"));
                }
                if p.competitors.is_empty() {
                    return Err(self.missing("competitors"));
                }
                let from = p.stagger_s + p.warmup_s;
                let (primary_start, competitor_start) = if p.primary_first {
                    (0.0, p.stagger_s)
                } else {
                    (p.stagger_s, 0.0)
                };
                let order = if p.primary_first { "-then-" } else { "-vs-" };
                for b in self.bottlenecks(p)? {
                    for pr in &p.primaries {
                        push(
                            &b,
                            format!("{}-alone", slug(pr)),
                            vec![flow(pr, primary_start)],
                            vec!["primary"],
                            from,
                        );
                        for c in &p.competitors {
                            let competitor = c.flow(&flow("", competitor_start));
                            push(
                                &b,
                                format!("{}{order}{}", slug(pr), competitor.slug()),
                                vec![flow(pr, primary_start), competitor],
                                vec!["primary", "competitor"],
                                from,
                            );
                        }
                    }
                }
            }
            Kind::SingleFlow => {
                if p.algorithms.is_empty() {
                    return Err(self.missing("algorithms"));
                }
                for b in self.bottlenecks(p)? {
                    for a in &p.algorithms {
                        push(&b, slug(a), vec![flow(a, 0.0)], vec!["flow"], p.warmup_s);
                    }
                }
            }
            Kind::Fairness => {
                if p.algorithms.is_empty() {
                    return Err(self.missing("algorithms"));
                }
                if p.flow_counts.is_empty() {
                    return Err(self.missing("flow_counts"));
                }
                let per_mbps = p
                    .per_flow_mbps
                    .ok_or_else(|| self.missing("per_flow_mbps"))?;
                let per_buf = p
                    .per_flow_buffer_bytes
                    .ok_or_else(|| self.missing("per_flow_buffer_bytes"))?;
                if p.rtt_ms.is_empty() {
                    return Err(self.missing("rtt_ms"));
                }
                for &rtt_ms in &p.rtt_ms {
                    for &n in &p.flow_counts {
                        let mbps = per_mbps * f64::from(n);
                        let buffer_bytes = per_buf * u64::from(n);
                        let b = Bottleneck {
                            mbps,
                            rtt_ms,
                            buffer_bytes,
                            buffer_bdp: buffer_bytes as f64 / bdp_bytes(mbps, rtt_ms),
                            uplink_loss: 0.0,
                            testbed: p.testbed,
                        };
                        // duration_s counts from the last start (Proteus B4: 200 s after it).
                        let last = f64::from(n.saturating_sub(1)) * p.stagger_s;
                        let run_d = last + d;
                        for a in &p.algorithms {
                            let flows: Vec<FlowSpec> = (0..n)
                                .map(|i| FlowSpec {
                                    stop_s: run_d,
                                    ..flow(a, f64::from(i) * p.stagger_s)
                                })
                                .collect();
                            runs.push(RunSpec {
                                id: format!("{}-d{}-n{n}-{}", b.id(), run_d, slug(a)),
                                bandwidth_mbps: b.mbps,
                                rtt_ms,
                                buffer_bytes,
                                buffer_bdp: b.buffer_bdp,
                                uplink_loss: 0.0,
                                testbed: b.testbed,
                                duration_s: run_d,
                                flows,
                                measure_from_s: (last + p.warmup_s).min(run_d),
                                measure_to_s: run_d,
                                roles: vec!["flow".to_string(); n as usize],
                                repeat: 1,
                            });
                        }
                    }
                }
            }
            Kind::Timeline => {
                if p.flows.is_empty() {
                    return Err(self.missing("flows"));
                }
                for (index, f) in p.flows.iter().enumerate() {
                    if !(f.start_s >= 0.0 && f.stop_s > f.start_s && f.stop_s <= d) {
                        return Err(PlanError::BadFlow {
                            plan: self.name.clone(),
                            index,
                            reason: format!(
                                "needs 0 <= start ({}) < stop ({}) <= duration ({d})",
                                f.start_s, f.stop_s
                            ),
                        });
                    }
                }
                // `$scavenger` in a flow's cc is replaced by each competitor in turn.
                let variants: Vec<Vec<FlowSpec>> = if p.competitors.is_empty() {
                    vec![p.flows.clone()]
                } else {
                    p.competitors
                        .iter()
                        .map(|c| {
                            p.flows
                                .iter()
                                .map(|f| {
                                    if f.cc == SCAVENGER_SLOT {
                                        c.flow(f)
                                    } else {
                                        f.clone()
                                    }
                                })
                                .collect()
                        })
                        .collect()
                };
                for b in self.bottlenecks(p)? {
                    for flows in &variants {
                        let name = flows
                            .iter()
                            .map(FlowSpec::slug)
                            .collect::<Vec<_>>()
                            .join("+");
                        let roles = vec!["flow"; flows.len()];
                        push(&b, name, flows.clone(), roles, 0.0);
                    }
                }
            }
        }
        let mut seen = std::collections::HashSet::new();
        runs.retain(|r| seen.insert(r.id.clone()));
        let repeats = p.repeats.unwrap_or(1);
        if repeats == 0 {
            return Err(self.missing("repeats (at least 1)"));
        }
        // Repetitions of one configuration next to each other, so that a shard or an
        // interrupted sitting holds whole configurations first.
        Ok(runs
            .into_iter()
            .flat_map(|r| {
                (1..=repeats).map(move |k| RunSpec {
                    id: if k == 1 {
                        r.id.clone()
                    } else {
                        format!("{}-rep{k}", r.id)
                    },
                    repeat: k,
                    ..r.clone()
                })
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FIG1: &str = r#"
        name = "anrw-fig1"
        description = "test"
        kind = "primary-ratio"
        [quick]
        bandwidth_mbps = [12, 48]
        rtt_ms = [30]
        buffer_bdp = [1.0, 2.0]
        duration_s = 20
        primaries = ["cubic", "bbr"]
        competitors = ["ccp:proteus-s", "ccp:ledbat++"]
        stagger_s = 5
        warmup_s = 5
        [full]
    "#;

    #[test]
    fn primary_ratio_expands_alone_and_competing_runs() {
        let plan = Plan::parse(FIG1).expect("valid");
        let runs = plan.runs(false).expect("expands");
        // 2 rates x 2 buffers x 2 primaries x (1 alone + 2 competitors).
        assert_eq!(runs.len(), 24);
        let r = runs
            .iter()
            .find(|r| r.id == "bw48-rtt30-buf360000-d20-bbr-vs-ccp_ledbatpp")
            .expect("present");
        assert_eq!(r.flows[0].cc, "bbr");
        assert_eq!(r.flows[0].start_s, 5.0);
        assert_eq!(r.flows[1].ccp_algorithm(), Some("ledbat++"));
        assert_eq!((r.measure_from_s, r.measure_to_s), (10.0, 20.0));
        assert!(plan.runs(true).is_err(), "empty full set is refused");
    }

    #[test]
    fn a_plan_may_have_only_one_of_its_two_sets() {
        let quick_only = FIG1.replace("[full]", "");
        let plan = Plan::parse(&quick_only).expect("a plan without [full] is valid");
        assert_eq!(plan.runs(false).expect("quick runs").len(), 24);
        let e = plan.runs(true).expect_err("no full set").to_string();
        assert_eq!(e, "plan anrw-fig1 has no [full] section");
    }

    #[test]
    fn the_serial_test_bed_is_named_in_the_id_and_kept_apart() {
        let plan = Plan::parse(&FIG1.replace("warmup_s = 5", "warmup_s = 5\ntestbed = \"serial\""))
            .expect("valid");
        let serial = plan.runs(false).expect("runs");
        let whole_ms = Plan::parse(FIG1).expect("valid").runs(false).expect("runs");
        assert!(serial.iter().all(|r| r.testbed == Testbed::Serial));
        assert_eq!(serial[0].id, "bw12-rtt30-buf45000-serial-d20-cubic-alone");
        assert_ne!(serial[0].bottleneck(), whole_ms[0].bottleneck());
        // Archived runs of the default test bed read back as such.
        let json = serde_json::to_string(&whole_ms[0]).expect("serializes");
        assert!(!json.contains("testbed"));
        let back: RunSpec = serde_json::from_str(&json).expect("parses");
        assert_eq!(back.testbed, Testbed::Mahimahi);
        assert!(
            Plan::parse(&FIG1.replace("warmup_s = 5", "warmup_s = 5\ntestbed = \"emulab\""))
                .is_err()
        );
    }

    #[test]
    fn repeats_and_primary_first_shape_the_runs() {
        let plan = Plan::parse(&FIG1.replace(
            "warmup_s = 5",
            "warmup_s = 5\nrepeats = 3\nprimary_first = true",
        ))
        .expect("valid");
        let runs = plan.runs(false).expect("runs");
        assert_eq!(runs.len(), 72);
        let ids: Vec<&str> = runs[..3].iter().map(|r| r.id.as_str()).collect();
        assert_eq!(
            ids,
            [
                "bw12-rtt30-buf45000-d20-cubic-alone",
                "bw12-rtt30-buf45000-d20-cubic-alone-rep2",
                "bw12-rtt30-buf45000-d20-cubic-alone-rep3"
            ]
        );
        assert_eq!(runs[2].repeat, 3);
        let r = &runs[3];
        assert_eq!(r.id, "bw12-rtt30-buf45000-d20-cubic-then-ccp_proteus-s");
        // The primary first, the scavenger stagger_s later.
        assert_eq!((r.flows[0].start_s, r.flows[1].start_s), (0.0, 5.0));
        assert!(plan.runs(false).is_ok_and(|again| again == runs), "stable");
    }

    #[test]
    fn fairness_scales_rate_and_buffer_with_n() {
        let plan = Plan::parse(
            r#"
            name = "jain"
            description = "t"
            kind = "fairness"
            [quick]
            rtt_ms = [30]
            flow_counts = [2, 3]
            per_flow_mbps = 20
            per_flow_buffer_bytes = 300000
            algorithms = ["cubic"]
            duration_s = 40
            stagger_s = 5
            warmup_s = 10
            [full]
        "#,
        )
        .expect("valid");
        let runs = plan.runs(false).expect("expands");
        assert_eq!(runs.len(), 2);
        assert_eq!(runs[1].bandwidth_mbps, 60.0);
        assert_eq!(runs[1].buffer_bytes, 900_000);
        assert_eq!(runs[1].flows[2].start_s, 10.0);
        assert_eq!(runs[1].measure_from_s, 20.0);
        // duration_s counts from the last start.
        assert_eq!((runs[0].duration_s, runs[1].duration_s), (45.0, 50.0));
        assert!(runs[1].flows.iter().all(|f| f.stop_s == 50.0));
    }

    #[test]
    fn timeline_substitutes_each_competitor_for_the_scavenger_slot() {
        let plan = Plan::parse(
            r#"
            name = "t"
            description = "t"
            kind = "timeline"
            [quick]
            bandwidth_mbps = [48]
            rtt_ms = [30]
            buffer_bdp = [4]
            duration_s = 60
            competitors = ["ccp:proteus-s", "cubic", { cc = "ccp:proteus-s", primary = "cubic" }]
            flows = [
              { cc = "$scavenger", start_s = 0, stop_s = 60, priority = [{ at_s = 20, class = "primary" }] },
              { cc = "bbr", start_s = 10, stop_s = 30 },
            ]
            [full]
        "#,
        )
        .expect("valid");
        let runs = plan.runs(false).expect("expands");
        assert_eq!(runs.len(), 3);
        assert_eq!(runs[0].flows[0].cc, "ccp:proteus-s");
        assert_eq!(runs[0].flows[0].primary, None);
        assert_eq!(runs[1].flows[0].cc, "cubic");
        assert_eq!(runs[1].flows[0].priority[0].class, "primary");
        assert!(runs[1].id.ends_with("cubic+bbr"));
        // A competitor with a hand-off primary: its own run, the primary in the flow.
        assert_eq!(runs[2].flows[0].cc, "ccp:proteus-s");
        assert_eq!(runs[2].flows[0].primary.as_deref(), Some("cubic"));
        assert_eq!(runs[2].flows[0].priority.len(), 1);
        assert!(runs[2].id.ends_with("ccp_proteus-s-to-cubic+bbr"));
        assert!(runs[0].id.ends_with("ccp_proteus-s+bbr"));
    }

    #[test]
    fn timeline_refuses_flows_outside_the_run() {
        let plan = Plan::parse(
            r#"
            name = "t"
            description = "t"
            kind = "timeline"
            [quick]
            bandwidth_mbps = [48]
            rtt_ms = [30]
            buffer_bdp = [4]
            duration_s = 10
            flows = [{ cc = "cubic", start_s = 5, stop_s = 12 }]
            [full]
        "#,
        )
        .expect("valid");
        assert!(matches!(
            plan.runs(false),
            Err(PlanError::BadFlow { index: 0, .. })
        ));
    }
}
