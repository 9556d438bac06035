//! The window a connection runs on while the agent does not steer it: NewReno as RFC 9002
//! §7 describes it for QUIC (slow start, congestion avoidance, one halving per recovery
//! period, the minimum window after persistent congestion).
//!
//! Pure: events and their times in, a window out. The controller feeds it only while the
//! agent has no fresh decision for the flow, and seeds it with the agent's last window
//! when control falls back, so a flow neither stalls nor restarts slow start.

use std::time::Instant;

/// Initial window in datagrams (RFC 9002 §7.2: min(10 × size, max(14720, 2 × size))).
const INITIAL_WINDOW_DATAGRAMS: u64 = 10;
/// Floor of the initial window, bytes (RFC 9002 §7.2).
const INITIAL_WINDOW_FLOOR_BYTES: u64 = 14_720;
/// The smallest window, in datagrams (RFC 9002 §7.2, kMinimumWindow).
pub const MINIMUM_WINDOW_DATAGRAMS: u64 = 2;
/// Window reduction on loss, as a fraction num/den (RFC 9002 §7.3.2, kLossReductionFactor).
const LOSS_REDUCTION: (u64, u64) = (1, 2);

/// The smallest window for datagrams of `mtu` bytes.
pub fn minimum_window(mtu: u16) -> u64 {
    MINIMUM_WINDOW_DATAGRAMS * u64::from(mtu)
}

/// RFC 9002 §7.2's initial window for datagrams of `mtu` bytes.
pub fn initial_window(mtu: u16) -> u64 {
    let mtu = u64::from(mtu);
    (INITIAL_WINDOW_DATAGRAMS * mtu).min(INITIAL_WINDOW_FLOOR_BYTES.max(2 * mtu))
}

/// NewReno state of one connection.
#[derive(Debug, Clone)]
pub struct NewReno {
    /// Congestion window, bytes.
    window: u64,
    /// Slow-start threshold, bytes (`u64::MAX` until the first loss).
    ssthresh: u64,
    /// Bytes acknowledged in congestion avoidance since the window last grew.
    acked_in_avoidance: u64,
    /// Losses of packets sent before this instant belong to the current recovery period.
    recovery_start: Option<Instant>,
    /// Datagram size, bytes.
    mtu: u16,
}

impl NewReno {
    pub fn new(mtu: u16) -> Self {
        NewReno {
            window: initial_window(mtu),
            ssthresh: u64::MAX,
            acked_in_avoidance: 0,
            recovery_start: None,
            mtu,
        }
    }

    pub fn window(&self) -> u64 {
        self.window
    }

    /// Bytes of a packet sent at `sent` were acknowledged.
    pub fn on_ack(&mut self, sent: Instant, bytes: u64, app_limited: bool) {
        if app_limited || self.recovery_start.is_some_and(|r| sent <= r) {
            return;
        }
        if self.window < self.ssthresh {
            self.window = self.window.saturating_add(bytes);
            return;
        }
        // One datagram per window of acknowledged bytes (RFC 9002 §7.3.3).
        self.acked_in_avoidance = self.acked_in_avoidance.saturating_add(bytes);
        if self.acked_in_avoidance >= self.window {
            self.acked_in_avoidance -= self.window;
            self.window = self.window.saturating_add(u64::from(self.mtu));
        }
    }

    /// Packets sent at or before `sent` were lost; at most one reduction per recovery period.
    pub fn on_congestion(&mut self, now: Instant, sent: Instant, persistent: bool) {
        if self.recovery_start.is_some_and(|r| sent <= r) && !persistent {
            return;
        }
        self.recovery_start = Some(now);
        let (num, den) = LOSS_REDUCTION;
        self.window = (self.window / den * num).max(minimum_window(self.mtu));
        self.ssthresh = self.window;
        self.acked_in_avoidance = 0;
        if persistent {
            self.window = minimum_window(self.mtu);
        }
    }

    pub fn on_mtu_update(&mut self, mtu: u16) {
        self.mtu = mtu;
        self.window = self.window.max(minimum_window(mtu));
    }

    /// Takes over from another controller whose last window was `window`: congestion
    /// avoidance from there, as after a loss, rather than a new slow start.
    pub fn resume_from(&mut self, window: u64) {
        self.window = window.max(minimum_window(self.mtu));
        self.ssthresh = self.window;
        self.acked_in_avoidance = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    const MTU: u16 = 1200;

    #[test]
    fn the_initial_window_follows_rfc_9002() {
        assert_eq!(initial_window(1200), 12_000);
        assert_eq!(initial_window(1500), 14_720);
        assert_eq!(initial_window(9000), 18_000);
    }

    #[test]
    fn slow_start_doubles_then_avoidance_adds_a_datagram_per_window() {
        let t0 = Instant::now();
        let mut r = NewReno::new(MTU);
        r.on_ack(t0, 12_000, false);
        assert_eq!(r.window(), 24_000);
        r.on_congestion(t0 + Duration::from_millis(1), t0, false);
        assert_eq!(r.window(), 12_000);
        let later = t0 + Duration::from_millis(2);
        r.on_ack(later, 11_999, false);
        assert_eq!(r.window(), 12_000);
        r.on_ack(later, 1, false);
        assert_eq!(r.window(), 12_000 + u64::from(MTU));
    }

    #[test]
    fn losses_of_one_recovery_period_halve_once() {
        let t0 = Instant::now();
        let mut r = NewReno::new(MTU);
        let now = t0 + Duration::from_millis(10);
        r.on_congestion(now, t0, false);
        r.on_congestion(
            now + Duration::from_millis(1),
            t0 + Duration::from_millis(5),
            false,
        );
        assert_eq!(r.window(), 6_000);
        // Acknowledgements of packets sent before recovery began do not grow the window.
        r.on_ack(t0, 100_000, false);
        assert_eq!(r.window(), 6_000);
    }

    #[test]
    fn persistent_congestion_falls_to_the_minimum_window() {
        let t0 = Instant::now();
        let mut r = NewReno::new(MTU);
        r.on_congestion(t0 + Duration::from_secs(1), t0, true);
        assert_eq!(r.window(), minimum_window(MTU));
    }

    #[test]
    fn resuming_keeps_the_window_and_never_goes_below_the_minimum() {
        let mut r = NewReno::new(MTU);
        r.resume_from(500_000);
        assert_eq!(r.window(), 500_000);
        r.on_ack(Instant::now(), 1200, false);
        assert_eq!(r.window(), 500_000, "congestion avoidance, not slow start");
        r.resume_from(10);
        assert_eq!(r.window(), minimum_window(MTU));
    }
}
