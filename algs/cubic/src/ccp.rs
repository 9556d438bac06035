//! Glue between the agent runtime (or plain portus) and the controller: the only file that
//! knows about portus. Reports become a [`Measurement`] once; decisions become
//! `update_field` calls on `Cwnd` and the `ssthresh` register.

use crate::controller::{Controller, Measurement};
use crate::datapath::{
    ACKED_BYTES, CWND_BYTES, CWND_REG, ECN_PACKETS, LAST_RTT_US, LOST_PACKETS, MAX_FLIGHT_BYTES,
    MIN_RTT_US, NOW_US, PROGRAM_NAME, SSTHRESH_REG, TIMEOUT, program,
};
use crate::params::{Config, FALLBACK_MSS_BYTES};
use algs_core::ccp::{
    CcpAlgorithm, CcpFlow, DatapathTrait, FlowError, FlowStart, PriorityOutcome, ReportError,
    ReportFields, StaticName,
};
use algs_core::metrics::FlowMetrics;
use algs_core::register::{INFINITY_REGISTER, clamp_to_register};
use algs_core::{Bytes, Decision, Micros, Priority};
use portus::lang::Scope;

/// CUBIC as the agent registers it.
#[derive(Debug, Clone, Default)]
pub struct Cubic {
    config: Config,
}

impl Cubic {
    pub fn new(config: Config) -> Self {
        Cubic { config }
    }

    pub fn config(&self) -> &Config {
        &self.config
    }
}

impl StaticName for Cubic {
    const NAME: &'static str = "cubic";
}

impl<D: DatapathTrait + 'static> CcpAlgorithm<D> for Cubic {
    fn name(&self) -> &'static str {
        <Cubic as StaticName>::NAME
    }

    fn programs(&self) -> Vec<(&'static str, String)> {
        vec![(
            PROGRAM_NAME,
            program(
                self.config.report_floor().0,
                self.config.cwnd_limited_only(),
            ),
        )]
    }

    fn new_flow(&self, dp: D, start: FlowStart) -> Result<Box<dyn CcpFlow>, FlowError> {
        Ok(Box::new(CubicFlow::start(dp, self.config.clone(), start)?))
    }
}

/// One CUBIC flow on a datapath.
pub struct CubicFlow<D> {
    dp: D,
    sid: u32,
    /// Scope of the installed program: report decoding and updates go through it.
    scope: Scope,
    ctl: Controller,
    /// The ssthresh register's value as last written, bytes.
    sent_ssthresh: Option<u32>,
    /// `Config::hand_off_on_scavenger`.
    hand_off_on_scavenger: bool,
}

impl<D> std::fmt::Debug for CubicFlow<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CubicFlow")
            .field("sid", &self.sid)
            .field("program_uid", &self.scope.program_uid)
            .field("ctl", &self.ctl)
            .finish()
    }
}

impl<D: DatapathTrait> CubicFlow<D> {
    /// Installs the program with the controller's window (and ssthresh, if finite): a new
    /// flow starts in slow start, a handed-over one in avoidance at the carried window.
    pub fn start(mut dp: D, config: Config, start: FlowStart) -> Result<Self, FlowError> {
        let mss = if start.mss.0 == 0 {
            tracing::warn!(
                sid = start.sid,
                "datapath announced MSS 0, assuming {FALLBACK_MSS_BYTES}"
            );
            Bytes(FALLBACK_MSS_BYTES)
        } else {
            start.mss
        };
        let hand_off_on_scavenger = config.hand_off_on_scavenger();
        let ctl = match &start.carried {
            Some(carried) => Controller::start_from(config, mss, carried),
            None => Controller::new(config, mss, start.init_cwnd),
        };
        let sent_ssthresh = ctl.ssthresh().map(|b| clamp_to_register(b.0));
        let mut fields = vec![(CWND_REG, clamp_to_register(ctl.cwnd().0))];
        if let Some(s) = sent_ssthresh {
            fields.push((SSTHRESH_REG, s));
        }
        let scope = dp.set_program(PROGRAM_NAME, Some(&fields))?;
        if start.carried.is_some() {
            tracing::info!(
                sid = start.sid,
                cwnd = ctl.cwnd().0,
                "cubic flow started from carried state"
            );
        }
        Ok(CubicFlow {
            sid: start.sid,
            dp,
            scope,
            ctl,
            sent_ssthresh,
            hand_off_on_scavenger,
        })
    }

    pub fn controller(&self) -> &Controller {
        &self.ctl
    }

    fn apply(&mut self, d: Decision) -> Result<(), FlowError> {
        let mut fields = Vec::with_capacity(2);
        if let Some(w) = d.cwnd {
            fields.push((CWND_REG, clamp_to_register(w.0)));
        }
        let ssthresh = self.ctl.ssthresh().map(|b| clamp_to_register(b.0));
        if let Some(s) = ssthresh.filter(|_| ssthresh != self.sent_ssthresh) {
            fields.push((SSTHRESH_REG, s));
        }
        if fields.is_empty() {
            return Ok(());
        }
        self.dp.update_field(&self.scope, &fields)?;
        self.sent_ssthresh = ssthresh;
        Ok(())
    }
}

/// Reads one report of [`PROGRAM_NAME`]; a report of an earlier program is `Stale`.
pub fn decode(
    report: &dyn ReportFields,
    scope: &Scope,
) -> Result<(Micros, Measurement), ReportError> {
    if report.program_uid() != scope.program_uid {
        return Err(ReportError::Stale {
            expected: scope.program_uid,
            got: report.program_uid(),
        });
    }
    let field = |name| report.field(scope, name);
    let rtt = |v: u64| (v > 0 && v < INFINITY_REGISTER).then_some(Micros(v));
    let m = Measurement {
        acked: Bytes(field(ACKED_BYTES)?),
        lost_packets: field(LOST_PACKETS)?,
        ecn_packets: field(ECN_PACKETS)?,
        timeout: field(TIMEOUT)? > 0,
        min_rtt: rtt(field(MIN_RTT_US)?),
        last_rtt: rtt(field(LAST_RTT_US)?),
        max_flight: Bytes(field(MAX_FLIGHT_BYTES)?),
        cwnd: Some(Bytes(field(CWND_BYTES)?)).filter(|w| w.0 > 0),
    };
    Ok((Micros(field(NOW_US)?), m))
}

impl<D: DatapathTrait> CcpFlow for CubicFlow<D> {
    fn on_report(&mut self, report: &dyn ReportFields) -> Result<(), FlowError> {
        let (now, m) = decode(report, &self.scope)?;
        let before = self.ctl.state().name();
        let d = self.ctl.on_report(now, &m);
        let after = self.ctl.state().name();
        if before != after {
            tracing::debug!(
                sid = self.sid,
                from = before,
                to = after,
                cwnd = self.ctl.cwnd().0,
                ssthresh = self.ctl.ssthresh().map(|s| s.0),
                "cubic state change"
            );
        }
        self.apply(d)
    }

    /// A CUBIC flow is primary and has no scavenger mode. By default every request is
    /// accepted as is (moving the flow to a scavenger algorithm is the runtime's policy);
    /// with `Config::hand_off_on_scavenger` a scavenger or hybrid request hands the flow's
    /// state back for the runtime to continue with a scavenger algorithm.
    fn on_priority(&mut self, priority: Priority) -> Result<PriorityOutcome, FlowError> {
        Ok(match priority {
            Priority::Scavenger | Priority::Hybrid { .. } if self.hand_off_on_scavenger => {
                PriorityOutcome::HandOff(self.ctl.carried_state())
            }
            _ => PriorityOutcome::Applied,
        })
    }

    fn metrics(&self) -> FlowMetrics {
        self.ctl.metrics()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use algs_core::CarriedState;
    use algs_core::ccp::{PortusAdapter, RawReport, RecordingDatapath, report_fields};

    const MSS: u64 = 1448;

    fn recorder() -> RecordingDatapath {
        let programs = <Cubic as CcpAlgorithm<RecordingDatapath>>::programs(&Cubic::default());
        RecordingDatapath::new(7, &programs)
    }

    fn start(carried: Option<CarriedState>) -> FlowStart {
        FlowStart {
            sid: 7,
            init_cwnd: Bytes(10 * MSS),
            mss: Bytes(MSS),
            priority: Priority::Primary,
            carried,
            hand_off_to_primary: false,
        }
    }

    fn fields(v: &[(&str, u32)]) -> Vec<(String, u32)> {
        v.iter().map(|&(n, x)| (n.to_owned(), x)).collect()
    }

    /// Sends a report built from named values to `flow`.
    fn report(
        flow: &mut dyn CcpFlow,
        dp: &RecordingDatapath,
        uid_offset: u32,
        values: &[(&str, u64)],
    ) -> Result<(), FlowError> {
        let scope = dp.scope(PROGRAM_NAME).expect("program compiled");
        let f = report_fields(scope, values);
        flow.on_report(&RawReport {
            program_uid: scope.program_uid + uid_offset,
            fields: &f,
        })
    }

    #[test]
    fn registers_as_cubic_with_one_prefixed_program() {
        let alg = Cubic::default();
        assert_eq!(CcpAlgorithm::<RecordingDatapath>::name(&alg), "cubic");
        let programs = CcpAlgorithm::<RecordingDatapath>::programs(&alg);
        assert_eq!(programs.len(), 1);
        assert!(programs[0].0.starts_with("cubic"));
    }

    #[test]
    fn runs_under_plain_portus() {
        fn is_cong_alg<I: portus::ipc::Ipc, A: portus::CongAlg<I>>(_: &A) -> &'static str {
            A::name()
        }
        let adapter = PortusAdapter {
            alg: Cubic::default(),
            priority: Priority::Primary,
        };
        assert_eq!(
            is_cong_alg::<portus::ipc::chan::Socket<portus::ipc::Blocking>, _>(&adapter),
            "cubic"
        );
    }

    #[test]
    fn new_flow_installs_program_with_initial_window() {
        let dp = recorder();
        Cubic::default()
            .new_flow(dp.clone(), start(None))
            .expect("starts");
        assert_eq!(
            dp.installs(),
            vec![(PROGRAM_NAME, fields(&[("Cwnd", (10 * MSS) as u32)]))]
        );
    }

    #[test]
    fn hand_off_installs_carried_window_as_cwnd_and_ssthresh() {
        // docs/algorithms/ledbat-pp.md §7 TV-13.
        let dp = recorder();
        let carried = CarriedState {
            cwnd: Bytes(120_000),
            ssthresh: None,
            rate: None,
            srtt: Some(Micros(40_000)),
            min_rtt: Some(Micros(30_000)),
            at: Micros(1_000_000),
        };
        let flow = Cubic::default()
            .new_flow(dp.clone(), start(Some(carried)))
            .expect("starts");
        assert_eq!(
            dp.installs(),
            vec![(
                PROGRAM_NAME,
                fields(&[("Cwnd", 120_000), ("ssthresh", 120_000)])
            )]
        );
        assert_eq!(dp.installs().len(), 1, "exactly one program");
        let m = flow.metrics();
        assert_eq!(m.state, "avoidance");
        assert_eq!(m.cwnd_bytes, Some(120_000));
    }

    #[test]
    fn reports_are_decoded_by_name_and_a_loss_updates_cwnd_and_ssthresh() {
        let dp = recorder();
        let mut flow = Cubic::default()
            .new_flow(dp.clone(), start(None))
            .expect("starts");
        let w = 100 * MSS;
        report(
            flow.as_mut(),
            &dp,
            0,
            &[
                (ACKED_BYTES, w / 2),
                (MIN_RTT_US, 20_000),
                (LAST_RTT_US, 21_000),
                (MAX_FLIGHT_BYTES, w / 2),
                (CWND_BYTES, w),
                (NOW_US, 1_000_000),
            ],
        )
        .expect("report used");
        assert!(dp.updates().is_empty(), "slow start is the datapath's");
        report(
            flow.as_mut(),
            &dp,
            0,
            &[
                (LOST_PACKETS, 1),
                (MIN_RTT_US, INFINITY_REGISTER),
                (LAST_RTT_US, 21_000),
                (MAX_FLIGHT_BYTES, w),
                (CWND_BYTES, w),
                (NOW_US, 1_010_000),
            ],
        )
        .expect("report used");
        let cut = (70 * MSS) as u32;
        assert_eq!(
            dp.updates(),
            vec![fields(&[("Cwnd", cut), ("ssthresh", cut)])]
        );
        let m = flow.metrics();
        assert_eq!(m.state, "recovery");
        let get = |n: &str| m.extra.iter().find(|(k, _)| *k == n).map(|&(_, v)| v);
        // The missing sample (4294967295) did not become a minimum.
        assert_eq!(get("min_rtt_us"), Some(20_000.0));
        assert_eq!(get("srtt_us"), Some(21_000.0));
    }

    #[test]
    fn timeout_report_installs_loss_window() {
        let dp = recorder();
        let mut flow = Cubic::default()
            .new_flow(dp.clone(), start(None))
            .expect("starts");
        report(flow.as_mut(), &dp, 0, &[(TIMEOUT, 1), (NOW_US, 5)]).expect("report used");
        // ssthresh from the window at the timeout: 0.7 * 10 segments.
        assert_eq!(dp.last_value("Cwnd"), Some((2 * MSS) as u32));
        assert_eq!(dp.last_value("ssthresh"), Some((7 * MSS) as u32));
    }

    #[test]
    fn stale_report_is_ignored() {
        let dp = recorder();
        let mut flow = Cubic::default()
            .new_flow(dp.clone(), start(None))
            .expect("starts");
        let before = flow.metrics();
        let r = report(flow.as_mut(), &dp, 1, &[(LOST_PACKETS, 3), (NOW_US, 9)]);
        assert!(matches!(
            r,
            Err(FlowError::Report(ReportError::Stale { .. }))
        ));
        assert!(dp.updates().is_empty());
        assert_eq!(flow.metrics(), before);
    }

    #[test]
    fn every_priority_is_applied_without_change() {
        let dp = recorder();
        let mut flow = Cubic::default()
            .new_flow(dp.clone(), start(None))
            .expect("starts");
        for p in [
            Priority::Scavenger,
            Priority::Hybrid { threshold: None },
            Priority::Primary,
        ] {
            assert_eq!(flow.on_priority(p), Ok(PriorityOutcome::Applied));
        }
        assert!(dp.updates().is_empty());
        assert_eq!(dp.installs().len(), 1);
        assert_eq!(flow.metrics().priority, Priority::Primary);
    }

    #[test]
    fn hand_off_on_scavenger_returns_the_flow_state() {
        let dp = recorder();
        let alg = Cubic::new(Config::default().with_hand_off_on_scavenger(true));
        let mut flow = alg.new_flow(dp.clone(), start(None)).expect("starts");
        report(
            flow.as_mut(),
            &dp,
            0,
            &[(CWND_BYTES, 20 * MSS), (NOW_US, 77)],
        )
        .expect("report used");
        assert_eq!(
            flow.on_priority(Priority::Primary),
            Ok(PriorityOutcome::Applied)
        );
        match flow.on_priority(Priority::Scavenger) {
            Ok(PriorityOutcome::HandOff(s)) => {
                assert_eq!(s.cwnd, Bytes(20 * MSS));
                assert_eq!(s.ssthresh, None);
                assert_eq!(s.at, Micros(77));
            }
            other => panic!("{other:?}"),
        }
    }
}
