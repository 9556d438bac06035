//! Per-flow algorithm selection rules (docs/architecture.md §5).
//!
//! A policy is a TOML file of `[[rule]]` tables, tried in order; the first rule whose
//! address and port matches all hold gives the flow its algorithm, initial priority and
//! hybrid threshold. "local" is the datapath's end of the flow (Create's source), "remote"
//! the peer. Every error names its line, and a file with any error is refused as a whole.
//!
//! ```toml
//! [[rule]]
//! name = "nightly backups"        # optional, shown in logs
//! remote_addr = "192.0.2.0/24"    # address or CIDR; optional
//! remote_port = "873"             # port or "low-high"; optional
//! algorithm = "proteus-s"
//! priority = "scavenger"          # primary | scavenger | hybrid; optional
//! hybrid_threshold_mbps = 20      # with priority = "hybrid"
//! primary = "cubic"               # hand-off target on a switch to primary; optional
//! ```
//!
//! Without `primary`, a switch to primary hands LEDBAT++ to the agent's `--primary` and
//! switches Proteus to Proteus-P in place. With it, every algorithm hands off to it:
//! Proteus-P, like Vivace, yields to a loss-based flow's growing queue, so an operator who
//! wants promoted flows to hold their own against CUBIC names `primary = "cubic"`.

use algs_core::{BytesPerSec, Priority};
use serde::Deserialize;
use std::net::Ipv4Addr;
use std::ops::Range;
use thiserror::Error;
use toml::Spanned;

/// One error in a policy file, with its 1-based line.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("line {line}: {reason}")]
pub struct PolicyError {
    pub line: usize,
    pub reason: String,
}

/// A flow's identity as the policy sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlowTuple {
    pub local_addr: Ipv4Addr,
    pub local_port: u16,
    pub remote_addr: Ipv4Addr,
    pub remote_port: u16,
}

/// What a matching rule says about a flow.
#[derive(Debug, Clone, PartialEq)]
pub struct RuleChoice {
    /// Index of the rule in the file, for logs.
    pub rule: usize,
    pub name: Option<String>,
    pub algorithm: String,
    pub priority: Option<Priority>,
    pub primary: Option<String>,
}

/// A checked policy.
#[derive(Debug, Clone, Default)]
pub struct Policy {
    rules: Vec<Rule>,
}

#[derive(Debug, Clone)]
struct Rule {
    name: Option<String>,
    local_addr: Option<Cidr>,
    remote_addr: Option<Cidr>,
    local_port: Option<(u16, u16)>,
    remote_port: Option<(u16, u16)>,
    algorithm: String,
    priority: Option<Priority>,
    primary: Option<String>,
}

#[derive(Debug, Clone, Copy)]
struct Cidr {
    net: u32,
    mask: u32,
}

impl Cidr {
    fn contains(self, addr: Ipv4Addr) -> bool {
        u32::from(addr) & self.mask == self.net
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPolicy {
    #[serde(default)]
    rule: Vec<Spanned<RawRule>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRule {
    name: Option<String>,
    local_addr: Option<Spanned<String>>,
    remote_addr: Option<Spanned<String>>,
    local_port: Option<Spanned<PortSpec>>,
    remote_port: Option<Spanned<PortSpec>>,
    algorithm: Option<Spanned<String>>,
    priority: Option<Spanned<String>>,
    hybrid_threshold_mbps: Option<Spanned<f64>>,
    primary: Option<Spanned<String>>,
}

/// A port given as a number or as a "low-high" string.
#[derive(Deserialize)]
#[serde(untagged)]
enum PortSpec {
    Number(i64),
    Text(String),
}

impl Policy {
    /// Parses and checks a policy. `is_algorithm` says whether a name is registered.
    pub fn parse(
        text: &str,
        is_algorithm: &dyn Fn(&str) -> bool,
    ) -> Result<Self, Vec<PolicyError>> {
        let lines = LineIndex::new(text);
        let raw: RawPolicy = toml::from_str(text).map_err(|e| {
            let line = e.span().map_or(1, |s| lines.line(s.start));
            vec![PolicyError {
                line,
                reason: e.message().trim().to_owned(),
            }]
        })?;
        let mut errors = Vec::new();
        let mut rules = Vec::new();
        for spanned in raw.rule {
            let rule_line = lines.line(spanned.span().start);
            let raw = spanned.into_inner();
            let mut err = |span: Range<usize>, reason: String| {
                errors.push(PolicyError {
                    line: lines.line(span.start),
                    reason,
                })
            };
            let local_addr = raw
                .local_addr
                .and_then(|a| parse_cidr(a.get_ref()).map_err(|r| err(a.span(), r)).ok());
            let remote_addr = raw
                .remote_addr
                .and_then(|a| parse_cidr(a.get_ref()).map_err(|r| err(a.span(), r)).ok());
            let local_port = raw
                .local_port
                .and_then(|p| parse_ports(p.get_ref()).map_err(|r| err(p.span(), r)).ok());
            let remote_port = raw
                .remote_port
                .and_then(|p| parse_ports(p.get_ref()).map_err(|r| err(p.span(), r)).ok());
            let algorithm = match raw.algorithm {
                None => {
                    err(
                        rule_line_span(&lines, rule_line),
                        "rule has no `algorithm`".into(),
                    );
                    None
                }
                Some(a) if !is_algorithm(a.get_ref()) => {
                    err(
                        a.span(),
                        format!(
                            "unknown algorithm {:?} (see `ccp-agent list-algs`)",
                            a.get_ref()
                        ),
                    );
                    None
                }
                Some(a) => Some(a.into_inner()),
            };
            let primary = match raw.primary {
                Some(p) if !is_algorithm(p.get_ref()) => {
                    err(
                        p.span(),
                        format!("unknown primary algorithm {:?}", p.get_ref()),
                    );
                    None
                }
                p => p.map(Spanned::into_inner),
            };
            let threshold = match raw.hybrid_threshold_mbps {
                Some(t) if !(t.get_ref().is_finite() && *t.get_ref() > 0.0) => {
                    err(
                        t.span(),
                        "hybrid_threshold_mbps must be a positive number".into(),
                    );
                    None
                }
                t => t.map(|t| (BytesPerSec::from_mbps(*t.get_ref()), t.span())),
            };
            let priority = match raw.priority {
                None => {
                    if let Some((_, span)) = &threshold {
                        err(
                            span.clone(),
                            "hybrid_threshold_mbps needs priority = \"hybrid\"".into(),
                        );
                    }
                    None
                }
                Some(p) => match p.get_ref().as_str() {
                    "primary" | "scavenger" if threshold.is_some() => {
                        err(
                            p.span(),
                            "hybrid_threshold_mbps needs priority = \"hybrid\"".into(),
                        );
                        None
                    }
                    "primary" => Some(Priority::Primary),
                    "scavenger" => Some(Priority::Scavenger),
                    "hybrid" => Some(Priority::Hybrid {
                        threshold: threshold.as_ref().map(|t| t.0),
                    }),
                    other => {
                        err(
                            p.span(),
                            format!("priority {other:?} is not primary, scavenger or hybrid"),
                        );
                        None
                    }
                },
            };
            if let Some(algorithm) = algorithm {
                rules.push(Rule {
                    name: raw.name,
                    local_addr,
                    remote_addr,
                    local_port,
                    remote_port,
                    algorithm,
                    priority,
                    primary,
                });
            }
        }
        if errors.is_empty() {
            Ok(Policy { rules })
        } else {
            Err(errors)
        }
    }

    /// The first rule that matches, if any.
    pub fn choose(&self, flow: &FlowTuple) -> Option<RuleChoice> {
        let in_range = |p: u16, r: Option<(u16, u16)>| r.is_none_or(|(lo, hi)| lo <= p && p <= hi);
        self.rules
            .iter()
            .enumerate()
            .find(|(_, r)| {
                r.local_addr.is_none_or(|c| c.contains(flow.local_addr))
                    && r.remote_addr.is_none_or(|c| c.contains(flow.remote_addr))
                    && in_range(flow.local_port, r.local_port)
                    && in_range(flow.remote_port, r.remote_port)
            })
            .map(|(i, r)| RuleChoice {
                rule: i,
                name: r.name.clone(),
                algorithm: r.algorithm.clone(),
                priority: r.priority,
                primary: r.primary.clone(),
            })
    }

    pub fn len(&self) -> usize {
        self.rules.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }
}

fn rule_line_span(lines: &LineIndex, line: usize) -> Range<usize> {
    let start = lines
        .starts
        .get(line.saturating_sub(1))
        .copied()
        .unwrap_or(0);
    start..start
}

fn parse_cidr(text: &str) -> Result<Cidr, String> {
    let (addr, bits) = match text.split_once('/') {
        Some((a, b)) => (
            a,
            b.parse::<u32>()
                .ok()
                .filter(|&b| b <= 32)
                .ok_or_else(|| format!("{text:?}: prefix length must be 0 to 32"))?,
        ),
        None => (text, 32),
    };
    let addr: Ipv4Addr = addr
        .parse()
        .map_err(|_| format!("{text:?} is not an IPv4 address or CIDR"))?;
    let mask = if bits == 0 {
        0
    } else {
        u32::MAX << (32 - bits)
    };
    Ok(Cidr {
        net: u32::from(addr) & mask,
        mask,
    })
}

fn parse_ports(spec: &PortSpec) -> Result<(u16, u16), String> {
    let port = |v: i64| u16::try_from(v).map_err(|_| format!("port {v} is outside 0-65535"));
    match spec {
        PortSpec::Number(n) => port(*n).map(|p| (p, p)),
        PortSpec::Text(t) => {
            let parse = |s: &str| {
                s.trim()
                    .parse::<i64>()
                    .map_err(|_| format!("{t:?} is not a port or a low-high range"))
                    .and_then(port)
            };
            let (lo, hi) = match t.split_once('-') {
                Some((lo, hi)) => (parse(lo)?, parse(hi)?),
                None => {
                    let p = parse(t)?;
                    (p, p)
                }
            };
            if lo > hi {
                return Err(format!("port range {t:?} is empty (low > high)"));
            }
            Ok((lo, hi))
        }
    }
}

/// Byte offset → 1-based line.
struct LineIndex {
    starts: Vec<usize>,
}

impl LineIndex {
    fn new(text: &str) -> Self {
        let mut starts = vec![0];
        starts.extend(text.match_indices('\n').map(|(i, _)| i + 1));
        LineIndex { starts }
    }

    fn line(&self, offset: usize) -> usize {
        self.starts.partition_point(|&s| s <= offset)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn known(name: &str) -> bool {
        matches!(name, "cubic" | "proteus-s" | "ledbat++")
    }

    fn tuple(remote: [u8; 4], remote_port: u16) -> FlowTuple {
        FlowTuple {
            local_addr: Ipv4Addr::new(10, 0, 0, 1),
            local_port: 40000,
            remote_addr: Ipv4Addr::from(remote),
            remote_port,
        }
    }

    #[test]
    fn first_matching_rule_wins() {
        let text = r#"
[[rule]]
remote_addr = "192.0.2.0/24"
remote_port = "800-900"
algorithm = "ledbat++"

[[rule]]
remote_port = 873
algorithm = "proteus-s"
priority = "hybrid"
hybrid_threshold_mbps = 8
"#;
        let p = Policy::parse(text, &known).expect("valid");
        assert_eq!(
            p.choose(&tuple([192, 0, 2, 9], 873))
                .expect("match")
                .algorithm,
            "ledbat++"
        );
        let second = p.choose(&tuple([198, 51, 100, 1], 873)).expect("match");
        assert_eq!(second.algorithm, "proteus-s");
        assert_eq!(
            second.priority,
            Some(Priority::Hybrid {
                threshold: Some(BytesPerSec(1_000_000.0))
            })
        );
        assert!(p.choose(&tuple([198, 51, 100, 1], 22)).is_none());
    }

    #[test]
    fn every_error_names_its_line() {
        let text = "[[rule]]\nalgorithm = \"nope\"\nremote_port = \"9-2\"\n\n[[rule]]\nalgorithm = \"cubic\"\nremote_addr = \"10.0.0.300\"\npriority = \"urgent\"\n";
        let errs = Policy::parse(text, &known).expect_err("invalid");
        let lines: Vec<usize> = errs.iter().map(|e| e.line).collect();
        assert_eq!(lines, vec![3, 2, 7, 8], "{errs:?}");
        assert!(errs[1].reason.contains("unknown algorithm"));
    }

    #[test]
    fn syntax_errors_and_unknown_keys_name_their_line() {
        let errs = Policy::parse("[[rule]]\nalgorithm = \"cubic\"\nremote_prot = 5\n", &known)
            .expect_err("invalid");
        assert_eq!(errs[0].line, 3, "{errs:?}");
        let errs = Policy::parse("[[rule]]\nalgorithm = cubic\n", &known).expect_err("invalid");
        assert_eq!(errs[0].line, 2, "{errs:?}");
    }

    #[test]
    fn rule_without_algorithm_is_refused() {
        let errs = Policy::parse("\n[[rule]]\nremote_port = 5\n", &known).expect_err("invalid");
        assert_eq!(errs[0].line, 2, "{errs:?}");
    }

    #[test]
    fn threshold_without_hybrid_is_refused() {
        let text =
            "[[rule]]\nalgorithm = \"cubic\"\npriority = \"primary\"\nhybrid_threshold_mbps = 3\n";
        assert!(Policy::parse(text, &known).is_err());
    }
}
