//! Glue between the agent runtime (or plain portus) and the pure controller: the only file
//! that touches portus types. Report → `Measurement` once; `Decision` → `Cwnd`.

use crate::controller::{Controller, Measurement};
use crate::datapath::{
    ACKED, CUR_DELAY, CUR_DELAY_3, LAST_RTT, LOST, MAX_FLIGHT, MIN_RTT, NOW, PROGRAM, PROGRAM_NAME,
    TIMEOUT,
};
use crate::params::{Config, HybridPolicy};
use algs_core::ccp::{
    CcpAlgorithm, CcpFlow, DatapathTrait, FlowError, FlowStart, PriorityOutcome, ReportFields,
    StaticName,
};
use algs_core::metrics::FlowMetrics;
use algs_core::register::{INFINITY_REGISTER, clamp_to_register};
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

    /// A scavenger unless the policy says otherwise.
    fn default_priority(&self) -> Priority {
        Priority::Scavenger
    }

    fn programs(&self) -> Vec<(&'static str, String)> {
        vec![(PROGRAM_NAME, PROGRAM.to_owned())]
    }

    fn new_flow(&self, mut dp: D, start: FlowStart) -> Result<Box<dyn CcpFlow>, FlowError> {
        let ctl = match &start.carried {
            Some(c) => Controller::start_from(self.config, start.priority, start.mss, c),
            None => Controller::new(self.config, start.priority, start.mss),
        };
        // Install with our window so the datapath's own initial window (e.g. IW10) never
        // applies (docs/algorithms/ledbat-pp.md §5.3, §5.4 item 5).
        let scope = dp.set_program(
            PROGRAM_NAME,
            Some(&[("Cwnd", clamp_to_register(ctl.cwnd().0))]),
        )?;
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
            closed: false,
        }))
    }
}

/// One LEDBAT++ flow on a datapath.
struct LedbatFlow<D> {
    dp: D,
    /// Scope of the installed program (its uid tells stale reports apart).
    scope: Scope,
    ctl: Controller,
    /// Set by `close` (end of flow, or a completed hand-off); later reports are not acted on.
    closed: bool,
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
            lost_packets: f(LOST)?,
            timeout: f(TIMEOUT)? != 0,
            min_rtt: valid_rtt(f(MIN_RTT)?),
            cur_delay: valid_rtt(f(cur_delay_field)?),
            last_rtt: valid_rtt(f(LAST_RTT)?),
            max_flight: Bytes(f(MAX_FLIGHT)?),
        };
        Ok((now, m))
    }

    fn apply(&self, d: Decision) -> Result<(), FlowError> {
        if let Some(cwnd) = d.cwnd {
            self.dp
                .update_field(&self.scope, &[("Cwnd", clamp_to_register(cwnd.0))])?;
        }
        Ok(())
    }
}

impl<D: DatapathTrait> CcpFlow for LedbatFlow<D> {
    fn on_report(&mut self, report: &dyn ReportFields) -> Result<(), FlowError> {
        if self.closed {
            return Ok(());
        }
        let (now, m) = self.measurement(report)?;
        let d = self.ctl.on_report(now, &m);
        self.apply(d)
    }

    fn on_priority(&mut self, priority: Priority) -> Result<PriorityOutcome, FlowError> {
        self.ctl.on_priority_change(priority);
        let hand_off = match priority {
            Priority::Primary => true,
            Priority::Scavenger => false,
            Priority::Hybrid { .. } => self.ctl.config().hybrid() == HybridPolicy::HandOff,
        };
        if !hand_off {
            return Ok(PriorityOutcome::Applied);
        }
        // The flow goes on acting until the runtime closes it: with no algorithm to hand the
        // flow to, the runtime keeps it here.
        let carried = self.ctl.carried_state();
        tracing::info!(
            cwnd = carried.cwnd.0,
            state = self.ctl.state().name(),
            "ledbat++ hands the flow to the primary"
        );
        Ok(PriorityOutcome::HandOff(carried))
    }

    fn close(&mut self) {
        self.closed = true;
    }

    fn metrics(&self) -> FlowMetrics {
        self.ctl.metrics()
    }
}

/// A report's RTT field as a sample: 0 and +∞ mean "none" (docs/datapaths.md §4.2).
fn valid_rtt(us: u64) -> Option<Micros> {
    (us > 0 && us < INFINITY_REGISTER).then_some(Micros(us))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::params::HandOffWindow;
    use algs_core::CarriedState;
    use algs_core::ccp::{RawReport, RecordingDatapath, ReportError, report_fields};

    const MSS: u64 = 1500;

    fn datapath() -> RecordingDatapath {
        let alg = LedbatPlusPlus::default();
        let programs = <LedbatPlusPlus as CcpAlgorithm<RecordingDatapath>>::programs(&alg);
        RecordingDatapath::new(7, &programs)
    }

    fn start(carried: Option<CarriedState>) -> FlowStart {
        FlowStart {
            sid: 7,
            init_cwnd: Bytes(14_480),
            mss: Bytes(MSS),
            priority: Priority::Scavenger,
            carried,
            hand_off_to_primary: false,
        }
    }

    fn flow(alg: LedbatPlusPlus, dp: &RecordingDatapath) -> Box<dyn CcpFlow> {
        alg.new_flow(dp.clone(), start(None)).expect("flow starts")
    }

    fn report(dp: &RecordingDatapath, values: &[(&str, u64)]) -> (u32, Vec<u64>) {
        let scope = dp.scope(PROGRAM_NAME).expect("installed");
        (scope.program_uid, report_fields(scope, values))
    }

    fn send(f: &mut dyn CcpFlow, r: &(u32, Vec<u64>)) -> Result<(), FlowError> {
        f.on_report(&RawReport {
            program_uid: r.0,
            fields: &r.1,
        })
    }

    /// An RTT-long report at `now_ms` with every sample `rtt_ms`.
    fn rtt_report(dp: &RecordingDatapath, now_ms: u64, rtt_ms: u64, acked: u64) -> (u32, Vec<u64>) {
        report(
            dp,
            &[
                (NOW, now_ms * 1000),
                (ACKED, acked),
                (MIN_RTT, rtt_ms * 1000),
                (CUR_DELAY, rtt_ms * 1000),
                (CUR_DELAY_3, rtt_ms * 1000),
                (LAST_RTT, rtt_ms * 1000),
                (MAX_FLIGHT, acked),
            ],
        )
    }

    #[test]
    fn registered_as_ledbat_plus_plus_with_alias() {
        let alg = LedbatPlusPlus::default();
        assert_eq!(
            <LedbatPlusPlus as CcpAlgorithm<RecordingDatapath>>::name(&alg),
            "ledbat++"
        );
        assert_eq!(
            <LedbatPlusPlus as CcpAlgorithm<RecordingDatapath>>::aliases(&alg),
            &["ledbatpp"]
        );
        let programs = <LedbatPlusPlus as CcpAlgorithm<RecordingDatapath>>::programs(&alg);
        assert_eq!(programs.len(), 1);
        assert!(programs[0].0.starts_with("ledbat++"));
        assert_eq!(<LedbatPlusPlus as StaticName>::NAME, "ledbat++");
        assert_eq!(
            <LedbatPlusPlus as CcpAlgorithm<RecordingDatapath>>::default_priority(&alg),
            Priority::Scavenger
        );
    }

    /// Runs under plain portus through the shared adapter, under its registered name.
    #[test]
    fn portus_adapter_exposes_name_and_program() {
        use algs_core::ccp::PortusAdapter;
        use portus::CongAlg;
        type Ipc = portus::ipc::unix::Socket<portus::ipc::Blocking>;
        let adapter = PortusAdapter {
            alg: LedbatPlusPlus::default(),
            priority: Priority::Scavenger,
        };
        assert_eq!(
            <PortusAdapter<LedbatPlusPlus> as CongAlg<Ipc>>::name(),
            "ledbat++"
        );
        let programs = <PortusAdapter<LedbatPlusPlus> as CongAlg<Ipc>>::datapath_programs(&adapter);
        assert_eq!(
            programs.get(PROGRAM_NAME).map(String::as_str),
            Some(PROGRAM)
        );
    }

    /// The program is installed with a 2-packet window, overriding the datapath's IW10.
    #[test]
    fn new_flow_installs_program_with_two_packets() {
        let dp = datapath();
        let _f = flow(LedbatPlusPlus::default(), &dp);
        let installs = dp.installs();
        assert_eq!(installs.len(), 1);
        assert_eq!(installs[0].0, PROGRAM_NAME);
        assert_eq!(installs[0].1, vec![("Cwnd".to_owned(), 3000)]);
    }

    /// Reports drive the window: slow start grows by G·acked (base 30 ms → G = 1/4).
    #[test]
    fn reports_publish_the_window() {
        let dp = datapath();
        let mut f = flow(LedbatPlusPlus::default(), &dp);
        send(f.as_mut(), &rtt_report(&dp, 30, 30, 3000)).expect("report used");
        assert_eq!(dp.last_value("Cwnd"), Some(3750));
        let m = f.metrics();
        assert_eq!(m.state, "slow_start");
        assert_eq!(m.cwnd_bytes, Some(3750));
        let extra: std::collections::HashMap<_, _> = m.extra.into_iter().collect();
        assert_eq!(extra["base_delay_us"], 30_000.0);
        assert_eq!(extra["current_delay_us"], 30_000.0);
        assert_eq!(extra["queueing_delay_us"], 0.0);
        assert_eq!(extra["gain"], 0.25);
        // The report's own values and time, and the priority asked for last.
        assert_eq!(extra["datapath_time_us"], 30_000.0);
        assert_eq!(extra["acked_bytes"], 3000.0);
        assert_eq!(extra["max_flight_bytes"], 3000.0);
        assert_eq!(m.priority, Priority::Scavenger);
        f.on_priority(Priority::Hybrid { threshold: None })
            .expect("ok");
        assert_eq!(f.metrics().priority, Priority::Hybrid { threshold: None });
    }

    /// Missing samples arrive as 0 or 4294967295 and must not become a zero base delay.
    #[test]
    fn missing_samples_are_ignored() {
        let dp = datapath();
        let mut f = flow(LedbatPlusPlus::default(), &dp);
        let r = report(
            &dp,
            &[
                (NOW, 1000),
                (ACKED, 3000),
                (MIN_RTT, INFINITY_REGISTER),
                (CUR_DELAY, INFINITY_REGISTER),
                (LAST_RTT, 0),
                (MAX_FLIGHT, 3000),
            ],
        );
        send(f.as_mut(), &r).expect("report used");
        assert_eq!(
            dp.last_value("Cwnd"),
            Some(3000),
            "no growth without a delay"
        );
        assert!(f.metrics().extra.iter().all(|(n, _)| *n != "base_delay_us"));
    }

    #[test]
    fn loss_report_halves_and_republishes() {
        let dp = datapath();
        let mut f = flow(LedbatPlusPlus::default(), &dp);
        let mut t = 0;
        for _ in 0..30 {
            t += 30;
            let w = u64::from(dp.last_value("Cwnd").expect("cwnd"));
            send(f.as_mut(), &rtt_report(&dp, t, 30, w)).expect("report used");
        }
        let before = dp.last_value("Cwnd").expect("cwnd");
        let updates = dp.updates().len();
        let r = report(&dp, &[(NOW, (t + 5) * 1000), (LOST, 1), (LAST_RTT, 30_000)]);
        send(f.as_mut(), &r).expect("report used");
        assert_eq!(dp.updates().len(), updates + 1);
        assert_eq!(dp.last_value("Cwnd"), Some(before / 2));
    }

    /// A report of a program the flow no longer runs is refused, not misread.
    #[test]
    fn stale_report_is_an_error() {
        let dp = datapath();
        let mut f = flow(LedbatPlusPlus::default(), &dp);
        let (uid, fields) = rtt_report(&dp, 30, 30, 3000);
        let err = send(f.as_mut(), &(uid + 1000, fields)).expect_err("stale");
        assert!(matches!(err, FlowError::Report(ReportError::Stale { .. })));
        assert!(dp.updates().is_empty());
    }

    /// TV-13 at the flow level: primary hands off with W, scavenger is a no-op, and the flow
    /// stops acting after a hand-off.
    #[test]
    fn priority_primary_hands_off_with_window() {
        let dp = datapath();
        let mut f = flow(LedbatPlusPlus::default(), &dp);
        send(f.as_mut(), &rtt_report(&dp, 30, 30, 3000)).expect("report used");
        assert_eq!(
            f.on_priority(Priority::Scavenger).expect("ok"),
            PriorityOutcome::Applied
        );
        assert_eq!(
            f.on_priority(Priority::Hybrid { threshold: None })
                .expect("ok"),
            PriorityOutcome::Applied
        );
        let PriorityOutcome::HandOff(c) = f.on_priority(Priority::Primary).expect("ok") else {
            panic!("LEDBAT++ cannot be primary");
        };
        assert_eq!(c.cwnd, Bytes(3750));
        assert_eq!(c.ssthresh, Some(Bytes(3750)));
        assert_eq!(c.at, Micros(30_000));
        assert_eq!(c.min_rtt, Some(Micros(30_000)));
        // Until the runtime closes it (it may find no primary), the flow keeps acting.
        let updates = dp.updates().len();
        send(f.as_mut(), &rtt_report(&dp, 60, 30, 3750)).expect("used");
        assert_eq!(dp.updates().len(), updates + 1);
        f.close();
        send(f.as_mut(), &rtt_report(&dp, 90, 30, 3750)).expect("ignored");
        assert_eq!(dp.updates().len(), updates + 1, "no decision after close");
    }

    #[test]
    fn hybrid_can_be_configured_to_hand_off() {
        let dp = datapath();
        let alg = LedbatPlusPlus::new(Config::default().with_hybrid(HybridPolicy::HandOff));
        let mut f = flow(alg, &dp);
        let out = f
            .on_priority(Priority::Hybrid { threshold: None })
            .expect("ok");
        assert!(matches!(out, PriorityOutcome::HandOff(_)));
    }

    /// A flow handed over from a primary installs the carried window and starts in
    /// avoidance.
    #[test]
    fn carried_flow_starts_from_primary_window() {
        let dp = datapath();
        let alg =
            LedbatPlusPlus::new(Config::default().with_hand_off_window(HandOffWindow::Strict));
        let carried = CarriedState {
            cwnd: Bytes(60_000),
            ssthresh: Some(Bytes(60_000)),
            rate: None,
            srtt: Some(Micros(40_000)),
            min_rtt: Some(Micros(30_000)),
            at: Micros(9_000_000),
        };
        let mut f = alg
            .new_flow(dp.clone(), start(Some(carried)))
            .expect("flow starts");
        assert_eq!(dp.last_value("Cwnd"), Some(60_000));
        assert_eq!(f.metrics().state, "avoidance");
        // Handed back before any report: at the time it was handed over.
        let PriorityOutcome::HandOff(c) = f.on_priority(Priority::Primary).expect("ok") else {
            panic!("LEDBAT++ cannot be primary");
        };
        assert_eq!(c.at, Micros(9_000_000));
    }

    /// The libutp profile reads the 3-sample filter.
    #[test]
    fn libutp_profile_reads_three_sample_filter() {
        let dp = datapath();
        let mut f = flow(LedbatPlusPlus::new(Config::libutp_compat()), &dp);
        let r = report(
            &dp,
            &[
                (NOW, 30_000),
                (ACKED, 3000),
                (MIN_RTT, 30_000),
                (CUR_DELAY, 30_000),
                (CUR_DELAY_3, 50_000),
                (LAST_RTT, 50_000),
                (MAX_FLIGHT, 3000),
            ],
        );
        send(f.as_mut(), &r).expect("report used");
        let extra: std::collections::HashMap<_, _> = f.metrics().extra.into_iter().collect();
        assert_eq!(extra["current_delay_us"], 50_000.0);
    }
}
