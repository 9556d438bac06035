//! The datapath program (docs/algorithms/ledbat-pp.md §5.2, with the corrections of its
//! §5.5) and its report field names, shared by the program text and `ccp.rs`.
//!
//! Per ACK the program sums acked bytes and losses, keeps the largest flight an ACK found, shifts each
//! valid RTT sample into four persistent registers and reports the minimum of the last 4 (and
//! of the last 3, for the libutp profile). It reports once per RTT (`Micros` beyond the last
//! sample, at least 1 ms) and at once on a loss or a timeout.
//!
//! libccp facts this text respects (docs/datapaths.md §4.7): a missing RTT sample reads
//! 4294967295, so validity is `0 < s < +infinity`; fallthrough is sticky, harmless here
//! because the urgent clause zeroes `Micros` before the timer clause runs; every statement
//! stays far below 8 temporaries; no comments inside `when` bodies.

/// The program's name (prefixed with the algorithm's name: programs of all algorithms share
/// one table).
pub const PROGRAM_NAME: &str = "ledbat++_report";

/// Σ `Ack.bytes_acked` over the interval, bytes.
pub const ACKED: &str = "Report.acked";
/// Σ `Ack.lost_pkts_sample` over the interval, packets.
pub const LOST: &str = "Report.lost";
/// `Flow.was_timeout` of the reporting ACK (0/1).
pub const TIMEOUT: &str = "Report.timeout";
/// Smallest valid RTT sample of the interval, µs; +∞ (4294967295) without one.
pub const MIN_RTT: &str = "Report.minrtt";
/// Largest flight an ACK of the interval found, bytes: `Flow.bytes_in_flight` plus the
/// ACK's own `Ack.bytes_acked`. Datapaths read the flight after the ACK took its data out
/// (Linux in `cong_control`), and a path that delivers in bursts (Mahimahi's 1 ms
/// opportunities) lets one ACK take the whole flight: without the ACK's bytes a small
/// window looked unused and never grew. (The register keeps its name `maxinflight` so the
/// program text the datapath receives is unchanged.)
pub const MAX_FLIGHT: &str = "Report.maxinflight";
/// Minimum of the last 4 valid RTT samples, µs (persistent across reports).
pub const CUR_DELAY: &str = "Report.curdelay";
/// Minimum of the last 3 valid RTT samples, µs (libutp profile).
pub const CUR_DELAY_3: &str = "Report.curdelay3";
/// Last valid RTT sample, µs (persistent).
pub const LAST_RTT: &str = "Report.lastrtt";
/// `Ack.now` of the reporting ACK, datapath µs: the controller's clock.
pub const NOW: &str = "Report.now";

/// Every report field the controller reads.
pub const FIELDS: [&str; 9] = [
    ACKED,
    LOST,
    TIMEOUT,
    MIN_RTT,
    MAX_FLIGHT,
    CUR_DELAY,
    CUR_DELAY_3,
    LAST_RTT,
    NOW,
];

/// The program text.
pub const PROGRAM: &str = "\
(def (Report
        (volatile acked 0)
        (volatile lost 0)
        (volatile timeout false)
        (volatile minrtt +infinity)
        (volatile maxinflight 0)
        (curdelay +infinity)
        (curdelay3 +infinity)
        (lastrtt 0)
        (now 0))
     (s1 +infinity) (s2 +infinity) (s3 +infinity) (s4 +infinity))
(when true
    (:= Report.acked (+ Report.acked Ack.bytes_acked))
    (:= Report.lost (+ Report.lost Ack.lost_pkts_sample))
    (:= Report.timeout Flow.was_timeout)
    (:= Report.maxinflight (max Report.maxinflight (+ Flow.bytes_in_flight Ack.bytes_acked)))
    (:= Report.now Ack.now)
    (fallthrough))
(when (&& (> Flow.rtt_sample_us 0) (< Flow.rtt_sample_us +infinity))
    (:= s4 s3)
    (:= s3 s2)
    (:= s2 s1)
    (:= s1 Flow.rtt_sample_us)
    (:= Report.curdelay3 (min (min s1 s2) s3))
    (:= Report.curdelay (min Report.curdelay3 s4))
    (:= Report.minrtt (min Report.minrtt Flow.rtt_sample_us))
    (:= Report.lastrtt Flow.rtt_sample_us)
    (fallthrough))
(when (|| Report.timeout (> Report.lost 0))
    (report)
    (:= Micros 0))
(when (> Micros (max Report.lastrtt 1000))
    (report)
    (:= Micros 0))
";

#[cfg(test)]
mod tests {
    use super::*;
    use portus::lang::{Bin, Reg, compile, compile_and_serialize};

    /// The agent runtime's limits (docs/datapaths.md §4.5).
    const MAX_INSTRUCTIONS: usize = 240;
    const MAX_TMP_INDEX: u8 = 7;
    const MAX_REPORT: usize = 16;
    const MAX_CONTROL: usize = 16;
    const MAX_LOCALS: usize = 6;

    fn registers(bin: &Bin) -> impl Iterator<Item = Reg> + '_ {
        bin.instrs
            .iter()
            .flat_map(|i| [i.res.clone(), i.left.clone(), i.right.clone()])
    }

    /// Number of registers of one kind used, from the highest index seen.
    fn count(bin: &Bin, pick: fn(&Reg) -> Option<u8>) -> usize {
        registers(bin)
            .filter_map(|r| pick(&r))
            .map(|i| usize::from(i) + 1)
            .max()
            .unwrap_or(0)
    }

    #[test]
    fn program_compiles_serializes_and_meets_the_runtime_limits() {
        let (bin, _) = compile(PROGRAM.as_bytes(), &[]).expect("compiles");
        assert!(
            bin.instrs.len() <= MAX_INSTRUCTIONS,
            "{} instructions",
            bin.instrs.len()
        );
        println!(
            "{} instructions, {} events",
            bin.instrs.len(),
            bin.events.len()
        );
        let tmp = registers(&bin)
            .filter_map(|r| match r {
                Reg::Tmp(i, _) => Some(i),
                _ => None,
            })
            .max()
            .unwrap_or(0);
        assert!(tmp <= MAX_TMP_INDEX, "temporary {tmp}");
        let report = count(&bin, |r| match r {
            Reg::Report(i, _, _) => Some(*i),
            _ => None,
        });
        assert_eq!(report, FIELDS.len());
        assert!(report <= MAX_REPORT);
        let control = count(&bin, |r| match r {
            Reg::Control(i, _, _) => Some(*i),
            _ => None,
        });
        assert_eq!(control, 4, "s1..s4");
        assert!(control <= MAX_CONTROL);
        // A misspelled primitive silently becomes a local (docs/algorithms/ledbat-pp.md §5.5 item 2), so
        // this program must have none.
        let locals = count(&bin, |r| match r {
            Reg::Local(i, _) => Some(*i),
            _ => None,
        });
        assert_eq!(locals, 0);
        assert!(locals <= MAX_LOCALS);
        assert_eq!(bin.events.len(), 4);
        let (bytes, _) = compile_and_serialize(PROGRAM.as_bytes(), &[("Cwnd", 3000)])
            .expect("serializes with an initial Cwnd");
        assert!(!bytes.is_empty());
    }

    #[test]
    fn every_field_the_controller_reads_is_a_report_field() {
        let (_, scope) = compile(PROGRAM.as_bytes(), &[]).expect("compiles");
        for name in FIELDS {
            assert!(
                matches!(scope.get(name), Some(Reg::Report(..))),
                "{name} is not a report field"
            );
        }
        // The four filter registers and the delay fields are persistent across reports;
        // the interval sums are volatile.
        for (name, volatile) in [
            (ACKED, true),
            (MIN_RTT, true),
            (CUR_DELAY, false),
            (LAST_RTT, false),
        ] {
            assert!(
                matches!(scope.get(name), Some(Reg::Report(_, _, v)) if *v == volatile),
                "{name}"
            );
        }
    }

    #[test]
    fn valid_sample_test_excludes_the_missing_sample_value() {
        // libccp reads a missing sample as 4294967295; the program must compare against
        // +infinity (which serializes to that value), not against 0 alone.
        assert!(PROGRAM.contains("(< Flow.rtt_sample_us +infinity)"));
    }
}
