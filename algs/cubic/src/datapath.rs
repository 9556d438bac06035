//! The datapath program (one report per RTT, urgent reports on congestion, slow start per
//! ACK) and the names it shares with the glue in `ccp.rs`.
//!
//! Written against what libccp really does (docs/datapaths.md §4.7, §4.6):
//! * fallthrough is sticky, so every clause after the first runs on every ACK; the urgent
//!   clause resets `Micros`, which keeps the timer clause from sending a second report;
//! * a missing RTT sample reads 4294967295, hence `(< Flow.rtt_sample_us +infinity)`;
//! * a bool is never a `when` condition on its own: the timeout becomes a number;
//! * no subtraction at all, so no underflow can abort an ACK's run;
//! * no statement above 5 operations (libccp has 8 temporaries).

/// Name of the program; prefixed with the algorithm so that programs of different algorithms
/// never collide (docs/datapaths.md §1.5).
pub const PROGRAM_NAME: &str = "cubic_per_rtt";

/// Bytes newly acknowledged (cumulatively) during the interval.
pub const ACKED_BYTES: &str = "Report.acked";
/// Packets the datapath marked lost during the interval.
pub const LOST_PACKETS: &str = "Report.lost";
/// Packets acknowledged with ECN-Echo during the interval.
pub const ECN_PACKETS: &str = "Report.ecn";
/// 1 if a retransmission timeout happened during the interval, else 0.
pub const TIMEOUT: &str = "Report.timeout";
/// Smallest RTT sample of the interval, µs; 4294967295 when there was none.
pub const MIN_RTT_US: &str = "Report.minrtt";
/// Latest RTT sample of the flow, µs; 0 before the first (kept across reports).
pub const LAST_RTT_US: &str = "Report.lastrtt";
/// Largest flight of the interval, bytes: in flight plus newly acked at an ACK, i.e. the
/// flight just before that ACK arrived.
pub const MAX_FLIGHT_BYTES: &str = "Report.maxflight";
/// The datapath's window when the report was sent, bytes (grown by the per-ACK slow start).
pub const CWND_BYTES: &str = "Report.cwnd";
/// `Ack.now` of the ACK that sent the report, µs of datapath time.
pub const NOW_US: &str = "Report.now";

/// Every report field, for checks that the program defines each one.
pub const REPORT_FIELDS: [&str; 9] = [
    ACKED_BYTES,
    LOST_PACKETS,
    ECN_PACKETS,
    TIMEOUT,
    MIN_RTT_US,
    LAST_RTT_US,
    MAX_FLIGHT_BYTES,
    CWND_BYTES,
    NOW_US,
];

/// The control register holding the slow-start threshold, bytes; `+infinity` (4294967295)
/// until the first congestion event.
pub const SSTHRESH_REG: &str = "ssthresh";
/// The datapath's window register, bytes.
pub const CWND_REG: &str = "Cwnd";

/// The program text for a report floor of `report_floor_us` µs.
///
/// The per-ACK slow start never touches a `Cwnd` of 0: libccp loads `Cwnd` from the
/// datapath's `snd_cwnd` primitive before each run, and a datapath that leaves it 0 would
/// otherwise get a window of one ACK's bytes. With `cwnd_limited_only`, the per-ACK slow start grows only while the window is less than
/// twice the interval's largest flight (Linux `tcp_is_cwnd_limited` in slow start).
pub fn program(report_floor_us: u64, cwnd_limited_only: bool) -> String {
    let slow_start_condition = if cwnd_limited_only {
        "(&& (&& (> Cwnd 0) (< Cwnd ssthresh)) (< Cwnd (* 2 Report.maxflight)))"
    } else {
        "(&& (> Cwnd 0) (< Cwnd ssthresh))"
    };
    format!(
        "(def
 (Report
  (volatile acked 0)
  (volatile lost 0)
  (volatile ecn 0)
  (volatile timeout 0)
  (volatile minrtt +infinity)
  (volatile maxflight 0)
  (volatile cwnd 0)
  (volatile now 0)
  (lastrtt 0))
 (ssthresh +infinity))
(when true
  (:= Report.acked (+ Report.acked Ack.bytes_acked))
  (:= Report.lost (+ Report.lost Ack.lost_pkts_sample))
  (:= Report.ecn (+ Report.ecn Ack.ecn_packets))
  (:= Report.timeout (if Flow.was_timeout 1))
  (:= Report.maxflight (max Report.maxflight (+ Flow.bytes_in_flight Ack.bytes_acked)))
  (:= Report.now Ack.now)
  (fallthrough))
(when (< Flow.rtt_sample_us +infinity)
  (:= Report.minrtt (min Report.minrtt Flow.rtt_sample_us))
  (:= Report.lastrtt Flow.rtt_sample_us)
  (fallthrough))
(when {slow_start_condition}
  (:= Cwnd (min (+ Cwnd Ack.bytes_acked) ssthresh))
  (fallthrough))
(when true
  (:= Report.cwnd Cwnd)
  (fallthrough))
(when (|| (|| (> Report.timeout 0) (> Report.lost 0)) (> Report.ecn 0))
  (report)
  (:= Micros 0))
(when (> Micros (max Report.lastrtt {report_floor_us}))
  (report)
  (:= Micros 0))
"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::params::REPORT_FLOOR_US;
    use portus::lang::{Reg, compile, compile_and_serialize};

    /// Limits the agent runtime checks every program against (common project rules).
    const MAX_INSTRS: usize = 240;
    const MAX_TMP_INDEX: u8 = 7;
    const MAX_REPORT_REGS: usize = 16;
    const MAX_CONTROL_REGS: usize = 16;

    fn all_variants() -> Vec<String> {
        vec![
            program(REPORT_FLOOR_US, true),
            program(REPORT_FLOOR_US, false),
            program((1 << 31) - 1, true),
        ]
    }

    #[test]
    fn program_compiles_serializes_and_meets_runtime_limits() {
        for src in all_variants() {
            let (bin, scope) = compile(src.as_bytes(), &[]).expect("compiles");
            assert!(
                bin.instrs.len() <= MAX_INSTRS,
                "{} instructions",
                bin.instrs.len()
            );
            let regs = bin
                .instrs
                .iter()
                .flat_map(|i| [&i.res, &i.left, &i.right])
                .collect::<Vec<_>>();
            let max_tmp = regs
                .iter()
                .filter_map(|r| match r {
                    Reg::Tmp(i, _) => Some(*i),
                    _ => None,
                })
                .max()
                .unwrap_or(0);
            assert!(max_tmp <= MAX_TMP_INDEX, "tmp index {max_tmp}");
            let count = |f: fn(&Reg) -> Option<u8>| {
                regs.iter()
                    .filter_map(|r| f(r))
                    .collect::<std::collections::BTreeSet<_>>()
                    .len()
            };
            // At most 6 locals are allowed; a typo on the left of `:=` silently makes one, and
            // this program needs none.
            assert_eq!(
                count(|r| match r {
                    Reg::Local(i, _) => Some(*i),
                    _ => None,
                }),
                0
            );
            assert!(
                count(|r| match r {
                    Reg::Report(i, _, _) => Some(*i),
                    _ => None,
                }) <= MAX_REPORT_REGS
            );
            assert!(
                count(|r| match r {
                    Reg::Control(i, _, _) => Some(*i),
                    _ => None,
                }) <= MAX_CONTROL_REGS
            );
            for name in REPORT_FIELDS {
                assert!(
                    matches!(scope.get(name), Some(Reg::Report(..))),
                    "{name} is not a report field"
                );
            }
            assert!(matches!(scope.get(SSTHRESH_REG), Some(Reg::Control(..))));
            // The serializer enforces portus' own register limits.
            compile_and_serialize(src.as_bytes(), &[]).expect("serializes");
        }
    }

    #[test]
    fn only_last_rtt_survives_a_report() {
        let (_, scope) = compile(program(REPORT_FLOOR_US, true).as_bytes(), &[]).expect("compiles");
        for name in REPORT_FIELDS {
            let volatile = match scope.get(name) {
                Some(Reg::Report(_, _, v)) => *v,
                other => panic!("{name}: {other:?}"),
            };
            assert_eq!(volatile, name != LAST_RTT_US, "{name}");
        }
    }
}
