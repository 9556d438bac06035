//! Glue between the agent runtime (or plain portus) and the pure controller: the only file
//! that touches portus types. Report → `Measurement` once; `Decision` → `Cwnd`.

use crate::controller::{Controller, Measurement};
use crate::datapath::{
    ACKED, CUR_DELAY, CUR_DELAY_3, INFINITY_REGISTER, LAST_RTT, LOST, MAX_INFLIGHT, MIN_RTT, NOW,
    PROGRAM, PROGRAM_NAME, TIMEOUT,
};
use crate::params::{Config, HybridPolicy};
use algs_core::ccp::{
    CcpAlgorithm, CcpFlow, DatapathTrait, FlowError, FlowStart, PriorityOutcome, ReportFields,
    StaticName,
};
use algs_core::metrics::FlowMetrics;
use algs_core::{Bytes, Decision, Micros, Priority};
use portus::lang::Scope;

/// LEDBAT++ as the agent registers it.
#[derive(Debug, Clone, Copy, Default)]
pub struct LedbatPlusPlus {
    config: Config,
}

impl LedbatPlusPlus {
    pub fn new(config: Config) -> Self {
        LedbatPlusPlus { config }
    }

    pub fn config(&self) -> &Config {
        &self.config
    }
}

impl StaticName for LedbatPlusPlus {
    const NAME: &'static str = "ledbat++";
}

impl<D: DatapathTrait + 'static> CcpAlgorithm<D> for LedbatPlusPlus {
    fn name(&self) -> &'static str {
        <Self as StaticName>::NAME
    }

    fn aliases(&self) -> &'static [&'static str] {
        &["ledbatpp"]
    }

    fn programs(&self) -> Vec<(&'static str, String)> {
        vec![(PROGRAM_NAME, PROGRAM.to_owned())]
    }

    fn new_flow(&self, mut dp: D, start: FlowStart) -> Result<Box<dyn CcpFlow>, FlowError> {
        let (ctl, now) = match &start.carried {
            Some(c) => (Controller::from_carried(self.config, start.mss, c), c.at),
            None => (Controller::new(self.config, start.mss), Micros::ZERO),
        };
        // Install with our window so the datapath's own initial window (e.g. IW10) never
        // applies (spec §5.3, §5.4 item 5).
        let scope = dp.set_program(PROGRAM_NAME, Some(&[("Cwnd", cwnd_register(ctl.cwnd()))]))?;
        tracing::debug!(
            sid = start.sid,
            cwnd = ctl.cwnd().0,
            state = ctl.state().name(),
            "ledbat++ flow"
        );
        Ok(Box::new(LedbatFlow {
            dp,
            scope,
            ctl,
            priority: start.priority,
            now,
            handed_off: false,
        }))
    }
}

/// One LEDBAT++ flow on a datapath.
struct LedbatFlow<D> {
    dp: D,
    /// Scope of the installed program (its uid tells stale reports apart).
    scope: Scope,
    ctl: Controller,
    /// The priority the application asked for last.
    priority: Priority,
    /// `Ack.now` of the last report: the time of events that carry none.
    now: Micros,
    /// Set once the flow was handed to a primary; later reports are not acted on.
    handed_off: bool,
}

impl<D: DatapathTrait> LedbatFlow<D> {
    fn measurement(&self, r: &dyn ReportFields) -> Result<(Micros, Measurement), FlowError> {
        let f = |name: &str| r.field(&self.scope, name);
        let cur_delay_field = if self.ctl.config().cur_delay_samples() == 3 {
            CUR_DELAY_3
        } else {
            CUR_DELAY
        };
        let now = Micros(f(NOW)?);
        let m = Measurement {
            acked: Bytes(f(ACKED)?),
            lost_pkts: f(LOST)?,
            timeout: f(TIMEOUT)? != 0,
            min_rtt: valid_rtt(f(MIN_RTT)?),
            cur_delay: valid_rtt(f(cur_delay_field)?),
            last_rtt: valid_rtt(f(LAST_RTT)?),
            max_inflight: Bytes(f(MAX_INFLIGHT)?),
        };
        Ok((now, m))
    }

    fn apply(&self, d: Decision) -> Result<(), FlowError> {
        if let Some(cwnd) = d.cwnd {
            self.dp
                .update_field(&self.scope, &[("Cwnd", cwnd_register(cwnd))])?;
        }
        Ok(())
    }
}

impl<D: DatapathTrait> CcpFlow for LedbatFlow<D> {
    fn on_report(&mut self, report: &dyn ReportFields) -> Result<(), FlowError> {
        if self.handed_off {
            return Ok(());
        }
        let (now, m) = self.measurement(report)?;
        self.now = now;
        let d = self.ctl.on_report(now, &m);
        self.apply(d)
    }

    fn on_priority(&mut self, priority: Priority) -> Result<PriorityOutcome, FlowError> {
        self.priority = priority;
        let hand_off = match priority {
            Priority::Primary => true,
            Priority::Scavenger => false,
            Priority::Hybrid { .. } => self.ctl.config().get_hybrid() == HybridPolicy::HandOff,
        };
        if !hand_off {
            return Ok(PriorityOutcome::Applied);
        }
        self.handed_off = true;
        let carried = self.ctl.carry(self.now);
        tracing::info!(
            cwnd = carried.cwnd.0,
            state = self.ctl.state().name(),
            "ledbat++ hands the flow to the primary"
        );
        Ok(PriorityOutcome::HandOff(carried))
    }

    fn metrics(&self) -> FlowMetrics {
        let mut extra = Vec::with_capacity(6);
        let us = |m: Option<Micros>| m.map(|m| m.0 as f64);
        for (name, value) in [
            ("base_delay_us", us(self.ctl.base_delay())),
            ("current_delay_us", us(self.ctl.current_delay())),
            ("queuing_delay_us", us(self.ctl.queuing_delay())),
            ("gain", self.ctl.gain()),
            ("srtt_us", us(self.ctl.srtt())),
            (
                "ssthresh_bytes",
                Some(self.ctl.ssthresh()).filter(|s| s.is_finite()),
            ),
        ] {
            if let Some(v) = value {
                extra.push((name, v));
            }
        }
        FlowMetrics {
            priority: self.priority,
            cwnd_bytes: Some(self.ctl.cwnd().0),
            rate_bytes_per_sec: None,
            state: self.ctl.state().name(),
            extra,
        }
    }
}

/// A report's RTT field as a sample: 0 and +∞ mean "none" (ccp-programs.md §2).
fn valid_rtt(us: u64) -> Option<Micros> {
    (us > 0 && us < INFINITY_REGISTER).then_some(Micros(us))
}

/// The u32 `Cwnd` register value for a window.
fn cwnd_register(cwnd: Bytes) -> u32 {
    u32::try_from(cwnd.0).unwrap_or(u32::MAX)
}
