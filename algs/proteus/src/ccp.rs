//! Glue to CCP: the three registered algorithms (`proteus-p`, `proteus-s`, `proteus-h`),
//! report decoding, schedules to `set_program`/`update_field`, priority switches and the
//! flow trace. The only file that touches portus.

use crate::controller::{Controller, Schedule};
use crate::datapath::{self, MI_EPOCH_STRIDE, PROGRAM, RESTART, control, report};
use crate::monitor_interval::{MiReport, MiSums, ReportKind};
use crate::params::Config;
use algs_core::ccp::{
    CcpAlgorithm, CcpFlow, DatapathTrait, FlowError, FlowStart, PriorityOutcome, ReportFields,
    StaticName,
};
use algs_core::metrics::FlowMetrics;
use algs_core::register::{INFINITY_REGISTER, clamp_to_register};
use algs_core::{BytesPerSec, Micros, Priority};
use portus::lang::Scope;

/// Starts a flow of any variant. The runtime gives the priority (a pending PRIORITY
/// message, the policy's rule, or the variant's `default_priority`); a hybrid priority
/// without a threshold takes the configured one.
fn start_flow<D: DatapathTrait + 'static>(
    cfg: &Config,
    mut dp: D,
    start: FlowStart,
) -> Result<Box<dyn CcpFlow>, FlowError> {
    let threshold = match start.priority {
        Priority::Hybrid { threshold: Some(h) } => Some(h),
        _ => cfg.hybrid_threshold(),
    };
    let priority = match start.priority {
        Priority::Hybrid { .. } => Priority::Hybrid { threshold },
        other => other,
    };
    let seed = u64::from(start.sid);
    let ctl = match &start.carried {
        Some(c) => {
            Controller::start_from(cfg.clone(), priority, start.mss, start.init_cwnd, seed, c)
        }
        None => Controller::new(cfg.clone(), priority, start.mss, start.init_cwnd, seed),
    };
    let fields = schedule_fields(ctl.schedule(), false);
    let scope = dp.set_program(PROGRAM, Some(&as_refs(&fields)))?;
    Ok(Box::new(ProteusFlow {
        dp,
        scope,
        ctl,
        threshold,
        hand_off_to_primary: start.hand_off_to_primary,
    }))
}

/// Control-register values of a schedule. `restart` adds the sentinel that makes a
/// running program take it (the program's initial `txIdx` already is the sentinel).
fn schedule_fields(s: &Schedule, restart: bool) -> Vec<(&'static str, u32)> {
    let mut f: Vec<(&'static str, u32)> = control::RATES
        .iter()
        .zip(&s.rates)
        .map(|(&name, r)| (name, r.to_rate_register().max(1)))
        .collect();
    f.extend([
        (control::SCHED_LEN, s.rates.len() as u32),
        (control::HOLD_RATE, s.hold.to_rate_register().max(1)),
        (control::MI_DUR, clamp_to_register(s.mi_duration.0)),
        (control::MI_BASE, s.epoch.wrapping_mul(MI_EPOCH_STRIDE)),
        (control::CWND, clamp_to_register(s.cwnd.0)),
    ]);
    if restart {
        f.push((control::TX_IDX, RESTART));
    }
    f
}

fn as_refs<'a>(f: &'a [(&'static str, u32)]) -> Vec<(&'a str, u32)> {
    f.iter().map(|&(n, v)| (n, v)).collect()
}

/// Decodes one report of the MI program.
fn decode(r: &dyn ReportFields, scope: &Scope) -> Result<MiReport, FlowError> {
    let get = |name: &str| r.field(scope, name);
    let mi = get(report::MI)?;
    let stride = u64::from(MI_EPOCH_STRIDE);
    let min_rtt = get(report::MIN_RTT)?;
    Ok(MiReport {
        epoch: clamp_to_register(mi / stride),
        index: (mi % stride) as u32,
        pkts_sent: get(report::PKTS_SENT)?,
        tx_dur: Micros(get(report::TX_DUR)?),
        acked: get(report::ACKED)?,
        lost: get(report::LOST)?,
        sums: MiSums {
            n: get(report::N)?,
            sum_s: get(report::SUM_S)?,
            sum_r: get(report::SUM_R)?,
            sum_ss: get(report::SUM_SS)?,
            sum_sr: get(report::SUM_SR)?,
            sum_rr: get(report::SUM_RR)?,
        },
        min_rtt_us: (min_rtt < INFINITY_REGISTER).then_some(min_rtt),
        timeout: get(report::TIMEOUT)? != 0,
        kind: match get(report::STATUS)? {
            datapath::STATUS_COMPLETE => ReportKind::Complete,
            datapath::STATUS_TRUNCATED => ReportKind::Truncated,
            _ => ReportKind::Idle,
        },
        now: Micros(get(report::NOW)?),
    })
}

/// One Proteus flow on a CCP datapath.
struct ProteusFlow<D> {
    dp: D,
    scope: Scope,
    ctl: Controller,
    /// Proteus-H's threshold h, kept across switches so `Hybrid { threshold: None }`
    /// returns to it.
    threshold: Option<BytesPerSec>,
    /// The policy named a primary: a switch to primary hands the flow to it instead of
    /// switching to Proteus-P, which yields to a loss-based flow's growing queue.
    hand_off_to_primary: bool,
}

impl<D: DatapathTrait> ProteusFlow<D> {
    fn write(&self, s: &Schedule) -> Result<(), FlowError> {
        let fields = schedule_fields(s, true);
        self.dp.update_field(&self.scope, &as_refs(&fields))?;
        Ok(())
    }
}

impl<D: DatapathTrait> CcpFlow for ProteusFlow<D> {
    fn on_report(&mut self, r: &dyn ReportFields) -> Result<(), FlowError> {
        let mi = decode(r, &self.scope)?;
        if let Some(s) = self.ctl.on_report(&mi) {
            self.write(&s)?;
        }
        Ok(())
    }

    fn on_priority(&mut self, p: Priority) -> Result<PriorityOutcome, FlowError> {
        if p == Priority::Primary && self.hand_off_to_primary {
            return Ok(PriorityOutcome::HandOff(self.ctl.carried_state()));
        }
        if let Priority::Hybrid { threshold: Some(h) } = p {
            self.threshold = Some(h);
        }
        let from = self.ctl.priority();
        let to = match p {
            Priority::Hybrid { .. } => Priority::Hybrid {
                threshold: self.threshold,
            },
            other => other,
        };
        let aborted = self.ctl.on_priority_change(to);
        tracing::info!(
            sid = self.dp.get_sock_id(),
            from = from.name(),
            to = to.name(),
            threshold_bytes_per_sec = self.threshold.map(|h| h.0),
            at_us = self.ctl.now().0,
            aborted_batch = aborted.is_some(),
            "proteus priority switch"
        );
        if let Some(s) = aborted {
            self.write(&s)?;
        }
        Ok(PriorityOutcome::Applied)
    }

    fn metrics(&self) -> FlowMetrics {
        self.ctl.metrics()
    }
}

macro_rules! variant {
    ($(#[$doc:meta])* $ty:ident, $name:literal, |$cfg:ident| $priority:expr) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Default)]
        pub struct $ty {
            pub config: Config,
        }

        impl StaticName for $ty {
            const NAME: &'static str = $name;
        }

        impl<D: DatapathTrait + 'static> CcpAlgorithm<D> for $ty {
            fn name(&self) -> &'static str {
                $name
            }

            fn default_priority(&self) -> Priority {
                let $cfg = &self.config;
                $priority
            }

            fn programs(&self) -> Vec<(&'static str, String)> {
                vec![(PROGRAM, datapath::program())]
            }

            fn new_flow(&self, dp: D, start: FlowStart) -> Result<Box<dyn CcpFlow>, FlowError> {
                start_flow(&self.config, dp, start)
            }
        }
    };
}

variant!(
    /// Proteus-P: the primary utility (docs/algorithms/proteus.md §1.2).
    ProteusP,
    "proteus-p",
    |_cfg| Priority::Primary
);
variant!(
    /// Proteus-S: the scavenger utility (docs/algorithms/proteus.md §1.3).
    ProteusS,
    "proteus-s",
    |_cfg| Priority::Scavenger
);
variant!(
    /// Proteus-H: primary below the threshold h, scavenger above (docs/algorithms/proteus.md §1.4).
    /// h comes from `FlowStart.priority`, a PRIORITY message or `Config`.
    ProteusH,
    "proteus-h",
    |cfg| Priority::Hybrid {
        threshold: cfg.hybrid_threshold()
    }
);

#[cfg(test)]
mod tests {
    use super::*;
    use algs_core::Bytes;
    use algs_core::ccp::{RawReport, RecordingDatapath, ReportError, report_fields};

    const MSS: u64 = 1448;

    fn dp() -> RecordingDatapath {
        let programs = CcpAlgorithm::<RecordingDatapath>::programs(&ProteusP::default());
        RecordingDatapath::new(7, &programs)
    }

    fn start(priority: Priority) -> FlowStart {
        FlowStart {
            sid: 7,
            init_cwnd: Bytes(10 * MSS),
            mss: Bytes(MSS),
            priority,
            carried: None,
            hand_off_to_primary: false,
        }
    }

    /// A report of MI `index` in `epoch`: 8 samples 4 ms apart, RTT rising by `g`.
    fn mi_report(dp: &RecordingDatapath, epoch: u32, index: u32, g: f64, now: u64) -> Vec<u64> {
        let scope = dp.scope(PROGRAM).expect("installed");
        let (mut n, mut ss, mut sr, mut srr, mut sss, mut ssr) = (0u64, 0, 0, 0, 0, 0);
        for i in 0..8u64 {
            let s = (1 << 22) + 4000 * i;
            let r = 30_000 + (g * (4000 * i) as f64) as u64 + (i % 2) * 100;
            n += 1;
            ss += s;
            sr += r;
            sss += s * s;
            ssr += s * r;
            srr += r * r;
        }
        report_fields(
            scope,
            &[
                (report::MI, u64::from(epoch * MI_EPOCH_STRIDE + index)),
                (report::PKTS_SENT, 1000),
                (report::TX_DUR, 30_000),
                (report::ACKED, 8),
                (report::N, n),
                (report::SUM_S, ss),
                (report::SUM_R, sr),
                (report::SUM_SS, sss),
                (report::SUM_SR, ssr),
                (report::SUM_RR, srr),
                (report::MIN_RTT, 30_000),
                (report::NOW, now),
            ],
        )
    }

    fn feed(flow: &mut dyn CcpFlow, dp: &RecordingDatapath, g: f64, now: &mut u64) {
        let epoch = dp
            .last_value(control::MI_BASE)
            .map_or(0, |b| b / MI_EPOCH_STRIDE);
        let len = dp.last_value(control::SCHED_LEN).expect("schedule");
        for i in 0..len {
            *now += 30_000;
            let fields = mi_report(dp, epoch, i, g, *now);
            let uid = dp.scope(PROGRAM).expect("installed").program_uid;
            flow.on_report(&RawReport {
                program_uid: uid,
                fields: &fields,
            })
            .expect("report");
        }
    }

    #[test]
    fn installs_the_schedule_with_the_program() {
        let dp = dp();
        let _flow = ProteusP::default()
            .new_flow(dp.clone(), start(Priority::Primary))
            .expect("flow");
        let installs = dp.installs();
        assert_eq!(installs.len(), 1);
        let (name, fields) = &installs[0];
        assert_eq!(*name, PROGRAM);
        let get = |n: &str| fields.iter().find(|f| f.0 == n).map(|f| f.1);
        // 1.12 Mbit/s = 140,000 bytes/s, one MI, window from the Create.
        assert_eq!(get("rate0"), Some(140_000));
        assert_eq!(get(control::SCHED_LEN), Some(1));
        assert_eq!(get(control::CWND), Some(10 * MSS as u32));
        assert_eq!(get(control::TX_IDX), None);
    }

    #[test]
    fn reports_drive_restarts_and_stale_reports_are_refused() {
        let dp = dp();
        let mut flow = ProteusS::default()
            .new_flow(dp.clone(), start(Priority::Scavenger))
            .expect("flow");
        assert_eq!(flow.metrics().priority, Priority::Scavenger);
        let mut now = 0;
        feed(flow.as_mut(), &dp, 0.0, &mut now);
        assert_eq!(dp.last_value(control::TX_IDX), Some(RESTART));
        // 1.12 Mbit/s × 100/30 after the first RTT of 30 ms.
        assert_eq!(dp.last_value("rate0"), Some(466_666));
        feed(flow.as_mut(), &dp, 0.0, &mut now);
        assert_eq!(dp.last_value("rate0"), Some(933_333));
        let m = flow.metrics();
        assert_eq!(m.state, "starting");
        assert!(m.extra.iter().any(|e| e.0 == "utility"));
        let fields = mi_report(&dp, 0, 0, 0.0, now);
        let stale = RawReport {
            program_uid: 9999,
            fields: &fields,
        };
        assert!(matches!(
            flow.on_report(&stale),
            Err(FlowError::Report(ReportError::Stale { .. }))
        ));
    }

    #[test]
    fn priority_switch_applies_in_place_and_keeps_hybrid_threshold() {
        let dp = dp();
        let h = BytesPerSec::from_mbps(12.0);
        let mut flow = ProteusH::default()
            .new_flow(dp.clone(), start(Priority::Hybrid { threshold: Some(h) }))
            .expect("flow");
        let mut now = 0;
        feed(flow.as_mut(), &dp, 0.0, &mut now);
        feed(flow.as_mut(), &dp, 0.3, &mut now);
        // Probing around ~1.9 Mbit/s, below h: the primary rule, 3 pairs.
        assert_eq!(dp.last_value(control::SCHED_LEN), Some(6));
        let updates = dp.updates().len();
        assert_eq!(
            flow.on_priority(Priority::Scavenger),
            Ok(PriorityOutcome::Applied)
        );
        assert_eq!(dp.updates().len(), updates + 1);
        assert_eq!(dp.last_value(control::SCHED_LEN), Some(4));
        assert_eq!(flow.metrics().priority, Priority::Scavenger);
        // Back to hybrid without a threshold: the old h is kept.
        flow.on_priority(Priority::Hybrid { threshold: None })
            .expect("switch");
        assert_eq!(
            flow.metrics().priority,
            Priority::Hybrid { threshold: Some(h) }
        );
        assert_eq!(dp.last_value(control::SCHED_LEN), Some(6));
        let extra = flow.metrics().extra;
        let th = extra.iter().find(|e| e.0 == "hybrid_threshold_mbps");
        assert_eq!(th.map(|e| e.1), Some(12.0));
    }

    #[test]
    fn a_policy_primary_turns_a_switch_to_primary_into_a_hand_off() {
        let dp = dp();
        let mut flow = ProteusS::default()
            .new_flow(
                dp.clone(),
                FlowStart {
                    hand_off_to_primary: true,
                    ..start(Priority::Scavenger)
                },
            )
            .expect("flow");
        let mut now = 0;
        feed(flow.as_mut(), &dp, 0.0, &mut now);
        let updates = dp.updates().len();
        let Ok(PriorityOutcome::HandOff(carried)) = flow.on_priority(Priority::Primary) else {
            panic!("a switch to primary hands off");
        };
        // The window and rate in force travel; nothing is written to the datapath.
        assert_eq!(
            Some(carried.cwnd.0),
            dp.last_value(control::CWND).map(u64::from)
        );
        assert!(carried.rate.is_some_and(|r| r.0 > 0.0));
        assert_eq!(dp.updates().len(), updates);
        // Other switches stay in place.
        assert_eq!(
            flow.on_priority(Priority::Hybrid { threshold: None }),
            Ok(PriorityOutcome::Applied)
        );
    }

    #[test]
    fn flow_runs_the_priority_it_is_given() {
        // The runtime passes the policy's priority (or the variant's default).
        let dp = dp();
        let flow = ProteusP::default()
            .new_flow(dp.clone(), start(Priority::Scavenger))
            .expect("flow");
        assert_eq!(flow.metrics().priority, Priority::Scavenger);
        let h = BytesPerSec::from_mbps(5.0);
        let alg = ProteusH {
            config: Config::default().with_hybrid_threshold(Some(h)),
        };
        let p = CcpAlgorithm::<RecordingDatapath>::default_priority(&alg);
        assert_eq!(p, Priority::Hybrid { threshold: Some(h) });
        let flow = alg
            .new_flow(dp.clone(), start(Priority::Hybrid { threshold: None }))
            .expect("flow");
        assert_eq!(flow.metrics().priority, p);
        assert_eq!(
            CcpAlgorithm::<RecordingDatapath>::default_priority(&ProteusS::default()),
            Priority::Scavenger
        );
    }

    #[test]
    fn runs_under_plain_portus() {
        use algs_core::ccp::PortusAdapter;
        use portus::ipc::{Blocking, chan::Socket};
        let adapter = PortusAdapter {
            alg: ProteusS::default(),
            priority: Priority::Scavenger,
        };
        type Alg = PortusAdapter<ProteusS>;
        assert_eq!(
            <Alg as portus::CongAlg<Socket<Blocking>>>::name(),
            "proteus-s"
        );
        let programs = portus::CongAlg::<Socket<Blocking>>::datapath_programs(&adapter);
        assert_eq!(programs.len(), 1);
        assert!(programs.contains_key(PROGRAM));
    }

    #[test]
    fn programs_are_shared_and_prefixed() {
        let p = CcpAlgorithm::<RecordingDatapath>::programs(&ProteusP::default());
        let s = CcpAlgorithm::<RecordingDatapath>::programs(&ProteusS::default());
        let h = CcpAlgorithm::<RecordingDatapath>::programs(&ProteusH::default());
        assert_eq!(p, s);
        assert_eq!(p, h);
        assert!(p.iter().all(|(n, _)| n.starts_with("proteus")));
        assert_eq!(<ProteusH as StaticName>::NAME, "proteus-h");
    }
}
