//! The model's built-in Reno-like cross traffic (NewReno in spirit, RFC 5681 / RFC 6582):
//! slow start up to `ssthresh`, then one MSS per RTT; one halving per loss event (losses of
//! packets sent before the previous reduction do not reduce again); one MSS after a timeout.
//! It is the "primary" that scavenger tests measure harm against, so it stays deliberately
//! plain.

/// Window state of one AIMD flow, all in bytes.
#[derive(Debug, Clone)]
pub(crate) struct Aimd {
    mss: u64,
    /// Congestion window, bytes.
    pub(crate) cwnd: u64,
    /// Slow-start threshold, bytes.
    ssthresh: u64,
    /// Packets with a sequence number below this were sent before the last reduction; their
    /// losses belong to the loss event already answered.
    recover_seq: u64,
}

/// The smallest window after a loss, in segments (RFC 5681 §3.1: max(FlightSize/2, 2*SMSS)).
const MIN_SSTHRESH_SEGMENTS: u64 = 2;

impl Aimd {
    pub(crate) fn new(mss: u64, init_cwnd: u64) -> Self {
        Aimd {
            mss,
            cwnd: init_cwnd.max(mss),
            ssthresh: u64::MAX,
            recover_seq: 0,
        }
    }

    /// One ACK: `acked` bytes newly acknowledged, `highest_lost` the highest sequence number
    /// this ACK revealed as lost, `next_seq` the next sequence number the sender will use.
    pub(crate) fn on_ack(&mut self, acked: u64, highest_lost: Option<u64>, next_seq: u64) {
        match highest_lost {
            Some(lost) if lost >= self.recover_seq => {
                self.reduce();
                self.recover_seq = next_seq;
            }
            Some(_) => {}
            None if self.cwnd < self.ssthresh => {
                self.cwnd = self.cwnd.saturating_add(acked);
            }
            None => {
                // +1 MSS per window of ACKed bytes (RFC 5681 eq. 3), at least 1 byte.
                let inc = (self.mss * acked / self.cwnd.max(1)).max(1);
                self.cwnd = self.cwnd.saturating_add(inc);
            }
        }
    }

    /// A retransmission timeout: everything outstanding is lost.
    pub(crate) fn on_timeout(&mut self, next_seq: u64) {
        self.reduce();
        self.cwnd = self.mss;
        self.recover_seq = next_seq;
    }

    fn reduce(&mut self) {
        self.ssthresh = (self.cwnd / 2).max(MIN_SSTHRESH_SEGMENTS * self.mss);
        self.cwnd = self.ssthresh;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slow_start_doubles_per_window_then_grows_one_mss_per_window() {
        let mut a = Aimd::new(1000, 10_000);
        a.on_ack(10_000, None, 10);
        assert_eq!(a.cwnd, 20_000);
        a.ssthresh = 20_000;
        for _ in 0..20 {
            a.on_ack(1000, None, 10);
        }
        // 20 ACKs of 1000 B on a 20-21 kB window add just under one MSS.
        assert!((20_900..=21_000).contains(&a.cwnd), "{}", a.cwnd);
    }

    #[test]
    fn halves_once_per_loss_event() {
        let mut a = Aimd::new(1000, 40_000);
        a.on_ack(1000, Some(5), 50);
        assert_eq!(a.cwnd, 20_000);
        // A second loss of a packet sent before the reduction is the same event.
        a.on_ack(1000, Some(30), 51);
        assert_eq!(a.cwnd, 20_000);
        // A loss of a packet sent after it is a new event.
        a.on_ack(1000, Some(50), 60);
        assert_eq!(a.cwnd, 10_000);
    }

    #[test]
    fn timeout_collapses_to_one_mss_and_never_below_two_mss_threshold() {
        let mut a = Aimd::new(1000, 3000);
        a.on_timeout(4);
        assert_eq!(a.cwnd, 1000);
        assert_eq!(a.ssthresh, 2000);
    }
}
