//! The monitor-interval datapath program (docs/algorithms/proteus.md §3.3–§3.5, with the
//! corrections of §3.7) and the names shared with `ccp.rs`.
//!
//! Per ACK the program delimits MIs by packet counts and accumulates each MI's sums:
//!
//! * `resolved` counts every packet acked, SACKed or lost since the program started
//!   (`packets_acked` leaves out what a SACK delivered: `packets_misordered` holds it). When MI j
//!   starts sending, B_j = resolved + packets in flight; the packets of MI j are those
//!   resolved after the counter passes B_j and up to B_{j+1} (FIFO delivery).
//! * Send side: MI j+1 starts when MI j has sent for at least `miDur` µs **and** its own
//!   ACK window holds at least 4 RTT samples (UDT's gating, §2.2). `Rate` follows
//!   `rate_j`, then `holdRate` past the schedule.
//! * Receive side: the ACK that passes B_{j+1} closes MI j and reports it. libccp sends
//!   the report after the whole invocation, so that ACK is stashed in locals and added to
//!   MI j+1 at the next ACK (docs/algorithms/proteus.md §3.7 item 3).
//! * Past the schedule nothing is measured. If no new schedule arrives within
//!   4 × `miDur` + 200 ms of the last report, the program sends an idle report (status 2)
//!   and repeats it at that interval: a lost UpdateFields would otherwise leave the flow
//!   at its hold rate for ever, since only reports make the agent act.
//!
//! Registers: 15 report fields, 16 control registers (portus' limit), 6 locals (the limit);
//! 229 instructions with the DEFs (the agent allows 240), at most 7 temporaries.
//!
//! Written from the facts of docs/datapaths.md §4–§5 and docs/algorithms/proteus.md §3.7;
//! where it differs from the program those facts were measured with, on purpose:
//! `closing` is a local (locals persist per connection and are
//! reset by clause 1), which frees a control register for `miBase` (epoch tagging of
//! reports); `bytesAcked` and `rxDur` are not reported (x is the target rate and the loss
//! rate uses packets) and `now` is (the flow's clock); every clause falls through, so the
//! order of evaluation does not hang on libccp's sticky-fallthrough quirk; the idle
//! reminder below is new.
//!
//! libccp semantics respected (docs/datapaths.md §4.7): fallthrough is sticky, so every
//! clause carries `(fallthrough)` and the program means "all clauses, in order" under
//! either reading; `closing` keeps the closing ACK out of the later clauses; MUL overflow
//! wraps silently, so the regressor is clamped before it is squared; `&&` is not
//! short-circuit, so every subtraction is safe on its own (`txStart`/`rxStart` are earlier
//! `Ack.now` values); no statement has more than 8 operations; `Flow.rtt_sample_us` reads
//! 4294967295 when there is no sample, so a valid sample is one below K.

/// Program name; all three Proteus variants share it (prefix `proteus`).
pub const PROGRAM: &str = "proteus-mi";

/// K = 2^22 µs: offset of the send-time regressor s = min(now − rxStart, K) + K − r, so
/// s never underflows (§3.3). Samples of K or more are dropped.
pub const SEND_TIME_OFFSET_US: u64 = 1 << 22;
/// RTT samples must be below this (µs) to count (= K).
pub const MAX_RTT_US: u64 = SEND_TIME_OFFSET_US;
/// The overflow guard reports a window once it holds more samples than this (§3.5:
/// n ≤ 2^17 with s < 2^23 keeps Σs² < 2^64).
pub const MAX_MI_SAMPLES: u64 = (1 << 17) - 1;
/// … or once it is longer than this, µs.
pub const MAX_WINDOW_US: u64 = SEND_TIME_OFFSET_US - 1;
/// `txIdx` value that makes the datapath (re)start the schedule at MI 0.
pub const RESTART: u32 = 7;
/// Most MIs in one schedule (Proteus-P probing: 3 pairs).
pub const MAX_SCHEDULE: usize = 6;
/// Report `mi` = index + epoch·MI_EPOCH_STRIDE, so reports of an aborted schedule are
/// recognised.
pub const MI_EPOCH_STRIDE: u32 = 8;
/// `Report.status`: the report closes an MI.
pub const STATUS_COMPLETE: u64 = 0;
/// `Report.status`: the overflow guard cut the MI's window; the MI goes on.
pub const STATUS_TRUNCATED: u64 = 1;
/// `Report.status`: the schedule is done and no new one came for a while: the agent's
/// update was probably lost (a datagram socket may drop it), so the program reminds it.
pub const STATUS_IDLE: u64 = 2;
/// The reminder comes after this many `miDur` without a new schedule …
pub const IDLE_MI_DURATIONS: u64 = 4;
/// … plus this, µs (the agent answers a final report within milliseconds).
pub const IDLE_FLOOR_US: u64 = 200_000;

/// Report fields.
pub mod report {
    pub const MI: &str = "Report.mi";
    pub const PKTS_SENT: &str = "Report.pktsSent";
    pub const TX_DUR: &str = "Report.txDur";
    pub const ACKED: &str = "Report.acked";
    pub const LOST: &str = "Report.lost";
    pub const N: &str = "Report.n";
    pub const SUM_S: &str = "Report.sumS";
    pub const SUM_R: &str = "Report.sumR";
    pub const SUM_SS: &str = "Report.sumSS";
    pub const SUM_SR: &str = "Report.sumSR";
    pub const SUM_RR: &str = "Report.sumRR";
    pub const MIN_RTT: &str = "Report.minRtt";
    pub const TIMEOUT: &str = "Report.timeout";
    /// [`super::STATUS_COMPLETE`], [`super::STATUS_TRUNCATED`] or [`super::STATUS_IDLE`].
    pub const STATUS: &str = "Report.status";
    pub const NOW: &str = "Report.now";
}

/// Control registers the agent writes.
pub mod control {
    /// Rates of the schedule's MIs, bytes/s.
    pub const RATES: [&str; super::MAX_SCHEDULE] =
        ["rate0", "rate1", "rate2", "rate3", "rate4", "rate5"];
    pub const SCHED_LEN: &str = "schedLen";
    /// Rate after the schedule, bytes/s.
    pub const HOLD_RATE: &str = "holdRate";
    /// Shortest MI, µs.
    pub const MI_DUR: &str = "miDur";
    /// epoch·8, added to the reported MI index.
    pub const MI_BASE: &str = "miBase";
    /// Written with [`super::RESTART`] to start a schedule.
    pub const TX_IDX: &str = "txIdx";
    pub const CWND: &str = "Cwnd";
}

/// The program text. No comments inside `when` bodies (the compiler panics on them).
pub fn program() -> String {
    let k = SEND_TIME_OFFSET_US;
    let max_n = MAX_MI_SAMPLES;
    let max_win = MAX_WINDOW_US;
    let restart = RESTART;
    let truncated = STATUS_TRUNCATED;
    let idle = STATUS_IDLE;
    let idle_mult = IDLE_MI_DURATIONS;
    let idle_floor = IDLE_FLOOR_US;
    format!(
        r#"(def
 (Report
  (volatile mi 0) (volatile pktsSent 0) (volatile txDur 0)
  (volatile acked 0) (volatile lost 0)
  (volatile n 0) (volatile sumS 0) (volatile sumR 0)
  (volatile sumSS 0) (volatile sumSR 0) (volatile sumRR 0)
  (volatile minRtt +infinity) (volatile timeout 0) (volatile status 0) (volatile now 0))
 (rate0 0) (rate1 0) (rate2 0) (rate3 0) (rate4 0) (rate5 0)
 (schedLen 0) (holdRate 0) (miDur 0) (miBase 0)
 (txIdx {restart}) (txStart 0) (bTx 0) (rxIdx 9) (rxStart 0) (resolved 0))
# Every ACK: count resolved packets, flag timeouts, precompute the duration test.
(when true
  (:= resolved (+ resolved (+ (+ Ack.packets_acked Ack.packets_misordered) Ack.lost_pkts_sample)))
  (:= Report.timeout (if Flow.was_timeout 1))
  (:= durOk (> (+ (- Ack.now txStart) 1) miDur))
  (:= closing 0)
  (fallthrough))
# The agent wrote a schedule: MI 0 starts sending, rx waits (9) for its first packet.
(when (== txIdx {restart})
  (:= txIdx 0)
  (:= txStart Ack.now)
  (:= bTx (+ resolved Flow.packets_in_flight))
  (:= rxIdx 9)
  (:= cAcked 0)
  (:= cLost 0)
  (:= cRtt {k})
  (:= Report.mi 0) (:= Report.pktsSent 0) (:= Report.txDur 0)
  (:= Report.acked 0) (:= Report.lost 0) (:= Report.n 0)
  (:= Report.sumS 0) (:= Report.sumR 0) (:= Report.sumSS 0)
  (:= Report.sumSR 0) (:= Report.sumRR 0) (:= Report.minRtt +infinity)
  (:= Report.status 0) (:= Report.now 0)
  (fallthrough))
# Replay the previous ACK, which closed an MI, into the MI it opened.
(when (&& (< rxIdx schedLen) (< cRtt {k}))
  (:= s (- {k} cRtt))
  (:= Report.n (+ Report.n 1))
  (:= Report.sumS (+ Report.sumS s))
  (:= Report.sumR (+ Report.sumR cRtt))
  (:= Report.sumSS (+ Report.sumSS (* s s)))
  (:= Report.sumSR (+ Report.sumSR (* s cRtt)))
  (:= Report.sumRR (+ Report.sumRR (* cRtt cRtt)))
  (:= Report.minRtt (min Report.minRtt cRtt))
  (:= cRtt {k})
  (fallthrough))
(when (< rxIdx schedLen)
  (:= Report.acked (+ Report.acked cAcked))
  (:= Report.lost (+ Report.lost cLost))
  (:= cAcked 0)
  (:= cLost 0)
  (fallthrough))
# The first packet of MI 0 is resolved: rx opens.
(when (&& (== rxIdx 9) (> resolved bTx))
  (:= rxIdx 0)
  (:= rxStart Ack.now)
  (fallthrough))
# The first packet of the next MI is resolved: report this MI, stash this ACK.
(when (&& (< rxIdx txIdx) (> resolved bTx))
  (:= Report.mi (+ rxIdx miBase))
  (:= Report.now Ack.now)
  (report)
  (:= closing 1)
  (:= rxIdx (+ rxIdx 1))
  (:= rxStart Ack.now)
  (:= cAcked (+ Ack.packets_acked Ack.packets_misordered))
  (:= cLost Ack.lost_pkts_sample)
  (:= cRtt (min Flow.rtt_sample_us {k}))
  (fallthrough))
(when (&& (< rxIdx schedLen) (== closing 0))
  (:= Report.acked (+ Report.acked (+ Ack.packets_acked Ack.packets_misordered)))
  (:= Report.lost (+ Report.lost Ack.lost_pkts_sample))
  (fallthrough))
(when (&& (&& (< rxIdx schedLen) (== closing 0)) (< Flow.rtt_sample_us {k}))
  (:= s (- (+ (min (- Ack.now rxStart) {k}) {k}) Flow.rtt_sample_us))
  (:= Report.n (+ Report.n 1))
  (:= Report.sumS (+ Report.sumS s))
  (:= Report.sumR (+ Report.sumR Flow.rtt_sample_us))
  (:= Report.sumSS (+ Report.sumSS (* s s)))
  (:= Report.sumSR (+ Report.sumSR (* s Flow.rtt_sample_us)))
  (:= Report.sumRR (+ Report.sumRR (* Flow.rtt_sample_us Flow.rtt_sample_us)))
  (:= Report.minRtt (min Report.minRtt Flow.rtt_sample_us))
  (fallthrough))
# The sending MI is long enough and has 4 samples of its own: the next one starts.
(when (&& (&& (< txIdx schedLen) (== rxIdx txIdx)) (&& (&& (> Report.n 3) durOk) (== closing 0)))
  (:= Report.txDur (- Ack.now txStart))
  (:= Report.pktsSent (- (max (+ resolved Flow.packets_in_flight) bTx) bTx))
  (:= bTx (max (+ resolved Flow.packets_in_flight) bTx))
  (:= txIdx (+ txIdx 1))
  (:= txStart Ack.now)
  (fallthrough))
# One clause per slot: `if` cannot be bound to Rate.
(when (== txIdx 0) (:= Rate rate0) (fallthrough))
(when (== txIdx 1) (:= Rate rate1) (fallthrough))
(when (== txIdx 2) (:= Rate rate2) (fallthrough))
(when (== txIdx 3) (:= Rate rate3) (fallthrough))
(when (== txIdx 4) (:= Rate rate4) (fallthrough))
(when (== txIdx 5) (:= Rate rate5) (fallthrough))
(when (== txIdx schedLen) (:= Rate holdRate) (fallthrough))
# Overflow guard: report a long or crowded window and start a new one for the same MI.
(when (&& (&& (< rxIdx schedLen) (== closing 0)) (|| (> Report.n {max_n}) (> (- Ack.now rxStart) {max_win})))
  (:= Report.mi (+ rxIdx miBase))
  (:= Report.status {truncated})
  (:= Report.now Ack.now)
  (report)
  (:= rxStart Ack.now)
  (fallthrough))
# Past the schedule for long after its last report: remind the agent.
(when (&& (== rxIdx schedLen) (> (- Ack.now rxStart) (+ (* miDur {idle_mult}) {idle_floor})))
  (:= Report.mi (+ rxIdx miBase))
  (:= Report.status {idle})
  (:= Report.now Ack.now)
  (report)
  (:= rxStart Ack.now)
  (fallthrough))
"#
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use portus::lang::{Reg, Type};

    /// Limits the agent runtime enforces (docs/datapaths.md §4.5).
    const MAX_INSTRUCTIONS: usize = 240;
    const MAX_TMP_INDEX: u8 = 7;
    const MAX_REGS: u8 = 16;
    const MAX_LOCALS: u8 = 6;

    fn regs(instr: &portus::lang::Bin) -> Vec<Reg> {
        instr
            .instrs
            .iter()
            .flat_map(|i| [i.res.clone(), i.left.clone(), i.right.clone()])
            .collect()
    }

    #[test]
    fn compiles_serializes_and_meets_libccp_limits() {
        let (bin, scope) = portus::lang::compile(program().as_bytes(), &[]).expect("compiles");
        assert!(
            bin.instrs.len() <= MAX_INSTRUCTIONS,
            "{} instructions",
            bin.instrs.len()
        );
        let regs = regs(&bin);
        let max = |f: &dyn Fn(&Reg) -> Option<u8>| regs.iter().filter_map(f).max().unwrap_or(0);
        let tmp = max(&|r| match r {
            Reg::Tmp(i, _) => Some(*i),
            _ => None,
        });
        let local = max(&|r| match r {
            Reg::Local(i, _) => Some(*i),
            _ => None,
        });
        let ctl = max(&|r| match r {
            Reg::Control(i, _, _) => Some(*i),
            _ => None,
        });
        let rep = max(&|r| match r {
            Reg::Report(i, _, _) => Some(*i),
            _ => None,
        });
        assert!(tmp <= MAX_TMP_INDEX, "tmp index {tmp}");
        assert!(local < MAX_LOCALS, "local index {local}");
        assert!(
            ctl < MAX_REGS && rep < MAX_REGS,
            "control {ctl}, report {rep}"
        );
        // Exactly the documented register files.
        assert_eq!((ctl + 1, rep + 1, local + 1), (16, 15, 6));
        // Every immediate is below 2^31 or `+infinity` (portus keeps u64::MAX and sends
        // it as u32::MAX).
        for r in &regs {
            if let Reg::ImmNum(v) = r {
                assert!(*v < (1 << 31) || *v == u64::MAX, "immediate {v}");
            }
        }
        bin.serialize()
            .expect("serializes (portus' register limits)");
        // Every name ccp.rs uses exists with the right kind.
        for name in [
            report::MI,
            report::PKTS_SENT,
            report::TX_DUR,
            report::ACKED,
            report::LOST,
            report::N,
            report::SUM_S,
            report::SUM_R,
            report::SUM_SS,
            report::SUM_SR,
            report::SUM_RR,
            report::MIN_RTT,
            report::TIMEOUT,
            report::STATUS,
            report::NOW,
        ] {
            assert!(matches!(scope.get(name), Some(Reg::Report(..))), "{name}");
        }
        for name in control::RATES.iter().chain(&[
            control::SCHED_LEN,
            control::HOLD_RATE,
            control::MI_DUR,
            control::MI_BASE,
            control::TX_IDX,
        ]) {
            assert!(matches!(scope.get(name), Some(Reg::Control(..))), "{name}");
        }
        assert!(matches!(
            scope.get(control::CWND),
            Some(Reg::Implicit(4, Type::Num(_)))
        ));
        println!(
            "proteus-mi: {} events, {} instructions, largest tmp index {tmp}",
            bin.events.len(),
            bin.instrs.len()
        );
    }

    #[test]
    fn sentinels_fit_the_schedule() {
        // rx "waiting" (9) and the restart sentinel must never be valid MI indices, and a
        // reported index must fit below the epoch stride.
        assert!(MAX_SCHEDULE < RESTART as usize && RESTART < 9);
        assert!(MAX_SCHEDULE as u32 <= MI_EPOCH_STRIDE);
    }
}
