//! Closed-loop runs of a pure controller on the model, with invariant checks: the layer the
//! algorithm crates' scenario and property tests stand on (docs/architecture.md §11, layers 3-4).
//!
//! A [`Controller`] sees what a libccp datapath program would see per ACK ([`AckSample`])
//! and answers with a [`Decision`]. Every decision is checked (a window of at least one
//! byte, a finite positive rate that fits libccp's u32 `Rate`), and so is the model after
//! every event.

use crate::model::{AckSample, FlowId, InvariantViolation, Sim, SimEvent};
use crate::scenario::{Scenario, ScenarioError};
use crate::summary::Summary;
use algs_core::{Decision, Priority};

/// A controller of the scenario's CCP flows.
pub trait Controller {
    /// The flow's application started.
    fn on_start(&mut self, _flow: FlowId, _now_us: u64) -> Decision {
        Decision::default()
    }
    /// An ACK or a timeout.
    fn on_ack(&mut self, flow: FlowId, sample: &AckSample) -> Decision;
    /// The application asked for another priority.
    fn on_priority(&mut self, _flow: FlowId, _priority: Priority, _now_us: u64) -> Decision {
        Decision::default()
    }
    /// The application stopped or the run ended.
    fn on_stop(&mut self, _flow: FlowId) {}
}

/// Why a closed-loop run failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum HarnessError {
    #[error(transparent)]
    Scenario(#[from] ScenarioError),
    #[error("at {at_us} µs: {violation}")]
    Invariant {
        at_us: u64,
        violation: InvariantViolation,
    },
}

/// Runs the scenario with `ctl` controlling its CCP flows, checking every decision and the
/// model's invariants after every event.
pub fn run(scenario: &Scenario, ctl: &mut impl Controller) -> Result<Summary, HarnessError> {
    let mut sim = Sim::new(scenario)?;
    while let Some(ev) = sim.next_event() {
        let now_us = sim.now_us();
        let (flow, decision) = match ev {
            SimEvent::Start { flow } => (flow, ctl.on_start(flow, now_us)),
            SimEvent::Ack { flow, sample } => (flow, ctl.on_ack(flow, &sample)),
            SimEvent::Priority { flow, priority } => {
                (flow, ctl.on_priority(flow, priority, now_us))
            }
            SimEvent::Stop { flow } => {
                ctl.on_stop(flow);
                continue;
            }
        };
        let fail = |violation| HarnessError::Invariant {
            at_us: now_us,
            violation,
        };
        check_decision(&scenario.flows[flow].name, &decision).map_err(fail)?;
        apply(&mut sim, flow, &decision);
        sim.check_invariants().map_err(fail)?;
    }
    sim.check_invariants()
        .map_err(|violation| HarnessError::Invariant {
            at_us: sim.now_us(),
            violation,
        })?;
    Ok(sim.summary())
}

/// Applies a decision the way libccp would: a window in bytes, a rate in whole bytes/s.
pub fn apply(sim: &mut Sim, flow: FlowId, d: &Decision) {
    if let Some(c) = d.cwnd {
        sim.set_cwnd(flow, c.0);
    }
    if let Some(r) = d.rate {
        let reg = r.to_rate_register();
        if reg > 0 {
            sim.set_rate(flow, Some(u64::from(reg)));
        }
    }
}

/// The checks every decision must pass.
pub fn check_decision(flow: &str, d: &Decision) -> Result<(), InvariantViolation> {
    let bad = |what: String| InvariantViolation::Decision {
        flow: flow.to_owned(),
        what,
    };
    if let Some(c) = d.cwnd {
        if c.0 == 0 {
            return Err(bad("window of 0 bytes".into()));
        }
        if c.0 > u64::from(u32::MAX) {
            return Err(bad(format!(
                "window of {} bytes does not fit libccp's u32 Cwnd",
                c.0
            )));
        }
    }
    if let Some(r) = d.rate {
        if !r.0.is_finite() || r.0 <= 0.0 {
            return Err(bad(format!("rate {} B/s is not finite and positive", r.0)));
        }
        if r.0 >= f64::from(u32::MAX) {
            return Err(bad(format!(
                "rate {} B/s does not fit libccp's u32 Rate",
                r.0
            )));
        }
    }
    Ok(())
}
