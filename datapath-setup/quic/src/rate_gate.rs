//! The agent's pacing rate, enforced by the window.
//!
//! quinn paces at 1.25 × window / smoothed RTT and lets at most the window be in flight, so
//! the plain translation of a rate into a window is `rate × srtt`. That holds on paths of
//! some milliseconds but not below: on loopback (srtt 50–500 µs) `rate × srtt` is under two
//! datagrams for most rates, a window that small keeps one datagram in flight, the peer
//! delays its ACK of a lone datagram (up to its max_ack_delay, 25 ms by default), and the
//! flow runs at a fraction of the rate (measured: 2 Mbit/s when the agent asked for 50).
//!
//! So a rate is a token bucket instead: tokens accrue at the rate, every datagram sent takes
//! its bytes, and the window is what is in flight plus the tokens. The bucket holds
//! `BURST` worth of the rate, enough to bridge a delayed ACK without losing the time it
//! waited. With nothing in flight the window always admits a datagram, since quinn looks
//! at the window again only when an ACK or a timer arrives and nothing in flight means
//! neither will.

use std::time::{Duration, Instant};

/// How much of the rate the bucket holds: the peer's ACK delay (RFC 9000 §18.2,
/// max_ack_delay default 25 ms), so that waiting for a delayed ACK costs no throughput.
pub const BURST: Duration = Duration::from_millis(25);

/// Tokens of one flow; bytes, negative after the datagram an idle flow may always send.
#[derive(Debug, Clone)]
pub struct RateGate {
    tokens: i64,
    /// When `tokens` was last brought up to date.
    last: Instant,
}

const NANOS_PER_SEC: u128 = 1_000_000_000;

fn capacity(rate_bytes_per_sec: u32, mtu: u16) -> i64 {
    let burst = u128::from(rate_bytes_per_sec) * BURST.as_nanos() / NANOS_PER_SEC;
    i64::try_from(burst)
        .unwrap_or(i64::MAX)
        .max(2 * i64::from(mtu))
}

impl RateGate {
    pub fn new(now: Instant) -> Self {
        RateGate {
            tokens: 0,
            last: now,
        }
    }

    /// Tokens at `now` for a rate of `rate_bytes_per_sec`.
    fn available(&self, now: Instant, rate_bytes_per_sec: u32, mtu: u16) -> i64 {
        let dt = now.saturating_duration_since(self.last).as_nanos();
        let earned = u128::from(rate_bytes_per_sec) * dt / NANOS_PER_SEC;
        let earned = i64::try_from(earned).unwrap_or(i64::MAX);
        self.tokens
            .saturating_add(earned)
            .min(capacity(rate_bytes_per_sec, mtu))
    }

    /// `bytes` left at `now`.
    pub fn on_sent(&mut self, now: Instant, bytes: u64, rate_bytes_per_sec: u32, mtu: u16) {
        let tokens = self.available(now, rate_bytes_per_sec, mtu);
        self.tokens = tokens.saturating_sub(i64::try_from(bytes).unwrap_or(i64::MAX));
        self.last = now;
    }

    /// The window that lets the tokens go out, given `in_flight` bytes.
    pub fn window(&self, now: Instant, in_flight: u64, rate_bytes_per_sec: u32, mtu: u16) -> u64 {
        let tokens = u64::try_from(self.available(now, rate_bytes_per_sec, mtu)).unwrap_or(0);
        if in_flight == 0 {
            // quinn sends while in flight + datagram < window.
            tokens.max(2 * u64::from(mtu))
        } else {
            in_flight.saturating_add(tokens)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MTU: u16 = 1200;
    /// 10 MB/s: 10 bytes per µs.
    const RATE: u32 = 10_000_000;

    #[test]
    fn tokens_accrue_at_the_rate_and_sending_spends_them() {
        let t0 = Instant::now();
        let mut g = RateGate::new(t0);
        let t1 = t0 + Duration::from_millis(1);
        assert_eq!(g.window(t1, 5000, RATE, MTU), 5000 + 10_000);
        g.on_sent(t1, 6000, RATE, MTU);
        assert_eq!(g.window(t1, 11_000, RATE, MTU), 11_000 + 4000);
    }

    #[test]
    fn the_bucket_holds_one_burst_of_the_rate() {
        let t0 = Instant::now();
        let g = RateGate::new(t0);
        let later = t0 + Duration::from_secs(10);
        // 25 ms of 10 MB/s.
        assert_eq!(g.window(later, 1, RATE, MTU), 1 + 250_000);
    }

    #[test]
    fn an_idle_flow_may_always_send_a_datagram_and_pays_for_it_later() {
        let t0 = Instant::now();
        let mut g = RateGate::new(t0);
        assert_eq!(g.window(t0, 0, RATE, MTU), 2400);
        g.on_sent(t0, 1200, RATE, MTU);
        // In debt: nothing more until 120 µs have paid for it.
        assert_eq!(g.window(t0, 1200, RATE, MTU), 1200);
        let t1 = t0 + Duration::from_micros(120);
        assert_eq!(g.window(t1, 1200, RATE, MTU), 1200);
        let t2 = t0 + Duration::from_micros(240);
        assert_eq!(g.window(t2, 1200, RATE, MTU), 1200 + 1200);
    }
}
