//! Which ports each flow of a run uses.
//!
//! Runs that go at once (`ccp-exp run --jobs N`) share one eBPF datapath and one agent, and
//! every emulated path has the same two addresses, so the agent and the datapath tell flows
//! apart by their ports alone: the agent's policy picks a `ccp:` flow's algorithm by its
//! server port, a priority change names the flow's 4-tuple, and the run's slice of the flow
//! trace follows its ports. A flow's ports therefore encode three things:
//!
//! ```text
//! server port = 5201  + class * CLASS_STRIDE + slot * MAX_FLOWS + index
//! client port = 20001 + class * CLASS_STRIDE + slot * MAX_FLOWS + index
//! ```
//! `class` is the policy rule the flow needs (0 for kernel congestion controls, then one per
//! distinct `ccp:` algorithm and hand-off primary of the plan), `slot` the place of the run
//! among those running at once, `index` the flow's place in the run. Client ports stay below
//! Linux's ephemeral range (32768 and up) so that iperf3's control connections never take
//! one of them.

use std::collections::BTreeSet;
use std::fmt::Write;

use super::plan::{FlowSpec, RunSpec};

/// First iperf3 server port.
pub const SERVER_PORT: u16 = 5201;
/// First iperf3 client port.
pub const CLIENT_PORT: u16 = 20001;
/// Most flows in one run.
pub const MAX_FLOWS: u16 = 16;
/// Most runs at once (`--jobs`).
pub const MAX_SLOTS: u16 = 16;
/// Ports of one class.
const CLASS_STRIDE: u16 = MAX_FLOWS * MAX_SLOTS;
/// Classes that fit below the ephemeral port range.
const MAX_CLASSES: usize = ((32768 - CLIENT_PORT as u32) / CLASS_STRIDE as u32) as usize;

/// The policy a `ccp:` flow needs: its algorithm and its hand-off primary.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Class {
    algorithm: String,
    primary: Option<String>,
}

impl Class {
    fn of(flow: &FlowSpec) -> Option<Self> {
        Some(Class {
            algorithm: flow.ccp_algorithm()?.to_string(),
            primary: flow.primary.clone(),
        })
    }

    /// The class's policy rule for the server ports `first..=last`.
    fn rule(&self, first: u32, last: u32) -> String {
        // A scavenger algorithm starts as a scavenger; `-p` (Proteus-P) as a primary.
        let priority = if self.algorithm.ends_with("-p") {
            "primary"
        } else {
            "scavenger"
        };
        let ports = if first == last {
            first.to_string()
        } else {
            format!("{first}-{last}")
        };
        let mut s = format!(
            "[[rule]]\nremote_port = \"{ports}\"\nalgorithm = \"{}\"\npriority = \"{priority}\"\n",
            self.algorithm
        );
        if let Some(p) = &self.primary {
            let _ = writeln!(s, "primary = \"{p}\"");
        }
        s.push('\n');
        s
    }
}

/// Why a plan's flows do not fit the port layout.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PortError {
    #[error("run {run} has {flows} flows; at most {MAX_FLOWS} fit the port layout")]
    TooManyFlows { run: String, flows: usize },
    #[error("the plan has {0} distinct ccp: algorithms and primaries; at most {MAX_CLASSES} fit")]
    TooManyClasses(usize),
    #[error("slot {0}: at most {MAX_SLOTS} runs can go at once")]
    BadSlot(u16),
}

/// The port layout of one invocation: the classes of every run it may execute.
#[derive(Debug, Clone)]
pub struct PortLayout {
    classes: Vec<Class>,
}

/// The ports of one flow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlowPorts {
    pub client: u16,
    pub server: u16,
}

impl PortLayout {
    /// The layout for `runs` (all runs of the plan, so that every shard and every sitting
    /// numbers the classes alike).
    pub fn new(runs: &[RunSpec]) -> Result<Self, PortError> {
        if let Some(r) = runs.iter().find(|r| r.flows.len() > usize::from(MAX_FLOWS)) {
            return Err(PortError::TooManyFlows {
                run: r.id.clone(),
                flows: r.flows.len(),
            });
        }
        let classes: BTreeSet<Class> = runs
            .iter()
            .flat_map(|r| r.flows.iter().filter_map(Class::of))
            .collect();
        if classes.len() > MAX_CLASSES {
            return Err(PortError::TooManyClasses(classes.len()));
        }
        Ok(PortLayout {
            classes: classes.into_iter().collect(),
        })
    }

    /// The class number of a flow: 0 for kernel congestion controls.
    fn class(&self, flow: &FlowSpec) -> u16 {
        Class::of(flow)
            .and_then(|c| self.classes.iter().position(|x| *x == c))
            .map_or(0, |i| i as u16 + 1)
    }

    /// The ports of every flow of `run` in `slot`.
    pub fn ports(&self, run: &RunSpec, slot: u16) -> Result<Vec<FlowPorts>, PortError> {
        if slot >= MAX_SLOTS {
            return Err(PortError::BadSlot(slot));
        }
        Ok(run
            .flows
            .iter()
            .enumerate()
            .map(|(i, f)| {
                let offset = self.class(f) * CLASS_STRIDE + slot * MAX_FLOWS + i as u16;
                FlowPorts {
                    client: CLIENT_PORT + offset,
                    server: SERVER_PORT + offset,
                }
            })
            .collect())
    }

    /// One agent policy for every run of the layout, whatever slot it runs in.
    pub fn shared_policy(&self) -> Option<String> {
        let rules: String = self
            .classes
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let first = u32::from(SERVER_PORT) + (i as u32 + 1) * u32::from(CLASS_STRIDE);
                c.rule(first, first + u32::from(CLASS_STRIDE) - 1)
            })
            .collect();
        (!rules.is_empty()).then_some(rules)
    }
}

/// The agent policy of one run alone (its `run.sh` when it brings up its own agent).
pub fn run_policy(run: &RunSpec, ports: &[FlowPorts]) -> Option<String> {
    let rules: String = run
        .flows
        .iter()
        .zip(ports)
        .filter_map(|(f, p)| Class::of(f).map(|c| c.rule(u32::from(p.server), u32::from(p.server))))
        .collect();
    (!rules.is_empty()).then_some(rules)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exp::plan::Plan;

    fn runs() -> Vec<RunSpec> {
        Plan::parse(
            r#"
            name = "t"
            description = "t"
            kind = "primary-ratio"
            [quick]
            bandwidth_mbps = [12, 48]
            rtt_ms = [30]
            buffer_bdp = [1.0]
            duration_s = 20
            primaries = ["cubic", "bbr"]
            competitors = ["ccp:proteus-s", "ccp:ledbat++", { cc = "ccp:proteus-s", primary = "cubic" }]
        "#,
        )
        .expect("valid")
        .runs(false)
        .expect("runs")
    }

    #[test]
    fn concurrent_runs_never_share_a_port_and_ports_name_the_class() {
        let runs = runs();
        let layout = PortLayout::new(&runs).expect("fits");
        let mut seen = BTreeSet::new();
        for slot in 0..MAX_SLOTS {
            for r in &runs {
                for (f, p) in r.flows.iter().zip(layout.ports(r, slot).expect("slot")) {
                    assert!(p.client < 32768, "client port {} is ephemeral", p.client);
                    assert_eq!(p.client - CLIENT_PORT, p.server - SERVER_PORT);
                    if f.ccp_algorithm().is_some() {
                        // A ccp: flow's port in a slot names one policy class.
                        seen.insert((slot, p.server, f.cc.clone(), f.primary.clone()));
                    } else {
                        assert!(
                            p.server < SERVER_PORT + CLASS_STRIDE,
                            "kernel flows: class 0"
                        );
                    }
                }
            }
        }
        let servers: BTreeSet<(u16, u16)> = seen.iter().map(|(s, p, ..)| (*s, *p)).collect();
        assert_eq!(servers.len(), seen.len(), "one port, one class");
        let policy = layout.shared_policy().expect("ccp flows");
        // Classes in a stable order: ledbat++, proteus-s, proteus-s handed to cubic.
        assert!(policy.starts_with(
            "[[rule]]\nremote_port = \"5457-5712\"\nalgorithm = \"ledbat++\"\npriority = \"scavenger\"\n\n"
        ));
        assert!(policy.contains(
            "remote_port = \"5969-6224\"\nalgorithm = \"proteus-s\"\npriority = \"scavenger\"\nprimary = \"cubic\"\n"
        ));
        // A proteus-s flow in slot 3 as the second flow of its run: class 2.
        let r = runs
            .iter()
            .find(|r| r.id.ends_with("bbr-vs-ccp_proteus-s"))
            .expect("run");
        let p = layout.ports(r, 3).expect("slot 3");
        assert_eq!(p[0].server, SERVER_PORT + 3 * MAX_FLOWS);
        assert_eq!(
            p[1].server,
            SERVER_PORT + 2 * CLASS_STRIDE + 3 * MAX_FLOWS + 1
        );
        assert_eq!(
            p[1].client,
            CLIENT_PORT + 2 * CLASS_STRIDE + 3 * MAX_FLOWS + 1
        );
        let own = run_policy(r, &p).expect("one ccp flow");
        assert_eq!(
            own,
            format!(
                "[[rule]]\nremote_port = \"{}\"\nalgorithm = \"proteus-s\"\npriority = \"scavenger\"\n\n",
                p[1].server
            )
        );
    }

    #[test]
    fn layouts_that_do_not_fit_are_refused() {
        let runs = runs();
        let layout = PortLayout::new(&runs).expect("fits");
        assert_eq!(
            layout.ports(&runs[0], MAX_SLOTS),
            Err(PortError::BadSlot(MAX_SLOTS))
        );
        let mut big = runs[0].clone();
        big.flows = vec![big.flows[0].clone(); 17];
        assert!(matches!(
            PortLayout::new(&[big]),
            Err(PortError::TooManyFlows { flows: 17, .. })
        ));
        assert!(
            PortLayout::new(&[])
                .expect("empty")
                .shared_policy()
                .is_none()
        );
    }
}
