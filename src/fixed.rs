//! `fixed`: a diagnostic algorithm that holds a flow at a set window and pacing rate.
//!
//! Not a congestion controller: it exists to validate datapaths (does a flow told to run at
//! 20 Mbit/s run at 20 Mbit/s?) and to test the runtime. It reports every 100 ms so the
//! agent can see the flow is alive, re-asserts its values on every report, and records
//! priority changes without acting on them, except that a switch to primary hands the flow
//! to the policy's `primary` when the rule names one (as every algorithm does).

use algs_core::ccp::{
    CcpAlgorithm, CcpFlow, DatapathTrait, FlowError, FlowStart, PriorityOutcome, ReportFields,
    StaticName,
};
use algs_core::metrics::FlowMetrics;
use algs_core::{Bytes, BytesPerSec, CarriedState, Micros, Priority};
use portus::lang::Scope;

const PROGRAM: &str = "fixed";
const REPORT_INTERVAL_US: u64 = 100_000;

/// Window and rate the flows are held at.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Fixed {
    /// Window; `None` leaves the datapath's own.
    pub cwnd: Option<Bytes>,
    /// Pacing rate; `None` leaves it unpaced.
    pub rate: Option<BytesPerSec>,
}

impl Default for Fixed {
    fn default() -> Self {
        Fixed {
            cwnd: Some(Bytes(1_000_000)),
            rate: None,
        }
    }
}

fn program() -> String {
    format!(
        "(def (Report (volatile acked 0) (volatile lost 0) (now 0)))
         (when true
           (:= Report.acked (+ Report.acked Ack.bytes_acked))
           (:= Report.lost (+ Report.lost Ack.lost_pkts_sample))
           (:= Report.now Ack.now)
           (fallthrough))
         (when (> Micros {REPORT_INTERVAL_US})
           (report)
           (:= Micros 0))"
    )
}

impl StaticName for Fixed {
    const NAME: &'static str = "fixed";
}

impl<D: DatapathTrait + 'static> CcpAlgorithm<D> for Fixed {
    fn name(&self) -> &'static str {
        "fixed"
    }

    fn programs(&self) -> Vec<(&'static str, String)> {
        vec![(PROGRAM, program())]
    }

    fn new_flow(&self, mut dp: D, start: FlowStart) -> Result<Box<dyn CcpFlow>, FlowError> {
        let fields = self.fields();
        let scope = dp.set_program(PROGRAM, Some(&fields))?;
        Ok(Box::new(FixedFlow {
            dp,
            scope,
            config: *self,
            priority: start.priority,
            acked_bytes: 0,
            init_cwnd: start.init_cwnd,
            now: Micros::ZERO,
            hand_off_to_primary: start.hand_off_to_primary,
        }))
    }
}

impl Fixed {
    fn fields(&self) -> Vec<(&'static str, u32)> {
        let mut f = Vec::new();
        if let Some(c) = self.cwnd {
            f.push(("Cwnd", algs_core::register::clamp_to_register(c.0)));
        }
        if let Some(r) = self.rate {
            f.push(("Rate", r.to_rate_register()));
        }
        f
    }
}

struct FixedFlow<D> {
    dp: D,
    scope: Scope,
    config: Fixed,
    priority: Priority,
    /// Bytes acknowledged over the flow's life.
    acked_bytes: u64,
    init_cwnd: Bytes,
    /// The datapath's clock at the last report.
    now: Micros,
    hand_off_to_primary: bool,
}

impl<D: DatapathTrait> CcpFlow for FixedFlow<D> {
    fn on_report(&mut self, report: &dyn ReportFields) -> Result<(), FlowError> {
        self.acked_bytes = self
            .acked_bytes
            .saturating_add(report.field(&self.scope, "Report.acked")?);
        self.now = Micros(report.field(&self.scope, "Report.now")?);
        let fields = self.config.fields();
        if !fields.is_empty() {
            self.dp.update_field(&self.scope, &fields)?;
        }
        Ok(())
    }

    fn on_priority(&mut self, priority: Priority) -> Result<PriorityOutcome, FlowError> {
        if priority == Priority::Primary && self.hand_off_to_primary {
            return Ok(PriorityOutcome::HandOff(CarriedState {
                cwnd: self.config.cwnd.unwrap_or(self.init_cwnd),
                ssthresh: None,
                rate: self.config.rate,
                srtt: None,
                min_rtt: None,
                at: self.now,
            }));
        }
        self.priority = priority;
        Ok(PriorityOutcome::Applied)
    }

    fn metrics(&self) -> FlowMetrics {
        FlowMetrics {
            priority: self.priority,
            cwnd_bytes: self.config.cwnd.map(|c| c.0),
            rate_bytes_per_sec: self.config.rate.map(|r| r.0),
            state: "fixed",
            extra: vec![("acked_bytes", self.acked_bytes as f64)],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use algs_core::ccp::{RawReport, RecordingDatapath, report_fields};

    #[test]
    fn holds_window_and_rate_and_counts_acks() {
        let alg = Fixed {
            cwnd: Some(Bytes(30_000)),
            rate: Some(BytesPerSec(2_500_000.0)),
        };
        let dp = RecordingDatapath::new(1, &CcpAlgorithm::<RecordingDatapath>::programs(&alg));
        let start = FlowStart {
            sid: 1,
            init_cwnd: Bytes(14480),
            mss: Bytes(1448),
            priority: Priority::Primary,
            carried: None,
            hand_off_to_primary: false,
        };
        let mut flow = alg.new_flow(dp.clone(), start).expect("starts");
        assert_eq!(dp.last_value("Cwnd"), Some(30_000));
        assert_eq!(dp.last_value("Rate"), Some(2_500_000));
        let scope = dp.scope(PROGRAM).expect("compiled");
        let fields = report_fields(scope, &[("Report.acked", 5000), ("Report.now", 7)]);
        flow.on_report(&RawReport {
            program_uid: scope.program_uid,
            fields: &fields,
        })
        .expect("used");
        flow.on_report(&RawReport {
            program_uid: scope.program_uid,
            fields: &fields,
        })
        .expect("used");
        assert_eq!(dp.updates().len(), 2);
        assert_eq!(flow.metrics().extra, vec![("acked_bytes", 10_000.0)]);
        let stale = flow.on_report(&RawReport {
            program_uid: scope.program_uid + 100,
            fields: &fields,
        });
        assert!(matches!(
            stale,
            Err(FlowError::Report(algs_core::ccp::ReportError::Stale { .. }))
        ));
    }
}
