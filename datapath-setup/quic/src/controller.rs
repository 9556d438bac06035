//! quinn's congestion controller for a CCP flow.
//!
//! The window is the agent's when the host thread has a fresh decision for the flow,
//! NewReno's ([`crate::fallback`]) otherwise. An agent's decision is a window (`Cwnd`,
//! bytes) and/or a pacing rate (`Rate`, bytes/s). quinn has no rate of its own to set (it
//! paces from the window and the smoothed RTT), so a rate is enforced through the window
//! by a token bucket ([`crate::rate_gate`]); with both, the smaller window wins, as a
//! kernel flow is held by both its window and its pacing rate.

use std::any::Any;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use quinn::congestion::{Controller, ControllerFactory, ControllerMetrics};
use quinn_proto::RttEstimator;

use crate::fallback::{self, NewReno};
use algs_core::AckPrimitives;
use algs_core::register::{INFINITY_REGISTER, clamp_to_register};

use crate::flow::{AckSample, Event, FlowLease, Leases};
use crate::rate_gate::RateGate;

/// The window for the agent's decision: its window `cwnd_bytes` (0: none; never below
/// `minimum`) and the window that lets its rate through, `paced` (`None`: no rate).
/// `None` when the agent decided neither.
pub fn agent_window(cwnd_bytes: u32, paced: Option<u64>, minimum: u64) -> Option<u64> {
    let cwnd = (cwnd_bytes > 0).then(|| u64::from(cwnd_bytes).max(minimum));
    match (cwnd, paced) {
        (Some(c), Some(p)) => Some(c.min(p)),
        (c, p) => c.or(p),
    }
}

/// Bytes counted in segments of the flow's MSS, the size its Create told the agent.
/// quinn's datagrams grow once it has discovered the path's MTU (1200 bytes at first, up
/// to 1452 on an Ethernet path), but the agent keeps the Create's MSS, and algorithms turn
/// packet counts back into bytes with it: counted in datagrams, a flow sending at its
/// rate looked 17 % slower to Proteus. Whole segments only; the rest carries over.
#[derive(Debug, Clone, Copy, Default)]
struct Segments {
    bytes: u64,
    counted: u64,
}

impl Segments {
    fn add(&mut self, bytes: u64) {
        self.bytes = self.bytes.saturating_add(bytes);
    }

    /// Whole segments of `mss` bytes added since the last call.
    fn take(&mut self, mss: u64) -> u32 {
        let whole = self.bytes / mss;
        let new = whole.saturating_sub(self.counted);
        self.counted = whole;
        clamp_to_register(new)
    }
}

/// What this controller accumulated since its last event to the host thread.
#[derive(Debug, Clone, Copy, Default)]
struct Batch {
    /// Bytes of acknowledged datagrams.
    bytes_acked: u64,
    /// Persistent congestion was declared (RFC 9002 §7.6).
    persistent: bool,
    /// RTT of the newest acknowledged datagram.
    rtt: Option<Duration>,
}

/// One connection's controller; clones (quinn makes one for a new path, and for
/// `Connection::congestion_state`) share the flow.
#[derive(Debug, Clone)]
pub struct CcpController {
    /// The flow, shared with the clones and the application's handle.
    lease: Arc<FlowLease>,
    /// The window without the agent.
    fallback: NewReno,
    /// Datagram size, bytes.
    mtu: u16,
    /// The MSS of the flow's Create: quinn's datagram size when the connection began.
    mss: u16,
    /// Acknowledged and lost bytes, in segments of `mss` for libccp.
    acked: Segments,
    lost: Segments,
    /// Tokens for the agent's rate.
    gate: RateGate,
    /// The window was the agent's at the last event.
    steered: bool,
    /// The last window in force, bytes.
    last_window: u64,
    /// What the next event to the host thread carries.
    batch: Batch,
    /// Bytes in flight: quinn's count at the last ACK frame, kept up to date by what was
    /// sent, acknowledged and lost since.
    in_flight: u64,
}

impl CcpController {
    pub(crate) fn new(lease: Arc<FlowLease>, mtu: u16) -> Self {
        let fallback = NewReno::new(mtu);
        CcpController {
            lease,
            last_window: fallback.window(),
            fallback,
            mtu,
            mss: mtu,
            acked: Segments::default(),
            lost: Segments::default(),
            gate: RateGate::new(Instant::now()),
            steered: false,
            batch: Batch::default(),
            in_flight: 0,
        }
    }

    /// The MSS for the flow's Create, which every packet count libccp sees is in.
    pub(crate) fn mss(&self) -> u16 {
        self.mss
    }

    /// The flow this controller belongs to.
    pub(crate) fn lease(&self) -> &Arc<FlowLease> {
        &self.lease
    }

    /// The agent's window if it steers the flow now.
    fn steered_window(&self, now: Instant) -> Option<u64> {
        if !self.lease.clock.steers(now) {
            return None;
        }
        let (cwnd, rate) = self.lease.decision.get();
        let paced = (rate > 0).then(|| self.gate.window(now, self.in_flight, rate, self.mtu));
        agent_window(cwnd, paced, fallback::minimum_window(self.mtu))
    }

    /// Notes who steers now; control that falls back resumes from the agent's last window.
    fn update_steering(&mut self, now: Instant) -> u64 {
        let (window, steered) = match self.steered_window(now) {
            Some(w) => (w, true),
            None => {
                if self.steered {
                    self.fallback.resume_from(self.last_window);
                }
                (self.fallback.window(), false)
            }
        };
        self.steered = steered;
        self.last_window = window;
        self.lease.window_bytes.store(window, Ordering::Relaxed);
        self.lease.steered.store(steered, Ordering::Relaxed);
        window
    }

    /// Sends what accumulated to the host thread: one libccp `invoke`.
    fn flush(&mut self, now: Instant) {
        let window = self.update_steering(now);
        let b = std::mem::take(&mut self.batch);
        // Taken with the batch, so that what was counted before the flow joined CCP goes
        // with it.
        let mss = u64::from(self.mss.max(1));
        let (packets_acked, lost_packets) = (self.acked.take(mss), self.lost.take(mss));
        if !self.lease.is_attached() {
            return;
        }
        let sample = AckSample {
            prims: AckPrimitives {
                bytes_acked: clamp_to_register(b.bytes_acked),
                packets_acked,
                lost_pkts_sample: lost_packets,
                was_timeout: b.persistent,
                rtt_sample_us: b.rtt.map_or(INFINITY_REGISTER, |r| {
                    u64::try_from(r.as_micros()).unwrap_or(u64::MAX)
                }),
                bytes_in_flight: clamp_to_register(self.in_flight),
                packets_in_flight: clamp_to_register(self.in_flight.div_ceil(mss)),
                snd_cwnd: clamp_to_register(window),
                ..AckPrimitives::default()
            },
            in_fallback: !self.steered,
        };
        self.lease.send(Event::Ack {
            id: self.lease.id,
            sample,
        });
    }
}

impl Controller for CcpController {
    fn on_sent(&mut self, now: Instant, bytes: u64, _last_packet_number: u64) {
        self.in_flight = self.in_flight.saturating_add(bytes);
        let (_, rate) = self.lease.decision.get();
        if rate > 0 && self.lease.clock.steers(now) {
            self.gate.on_sent(now, bytes, rate, self.mtu);
        } else {
            // Tokens start afresh when a rate takes over.
            self.gate = RateGate::new(now);
        }
    }

    fn on_ack(
        &mut self,
        now: Instant,
        sent: Instant,
        bytes: u64,
        app_limited: bool,
        _rtt: &RttEstimator,
    ) {
        self.in_flight = self.in_flight.saturating_sub(bytes);
        self.batch.bytes_acked += bytes;
        self.acked.add(bytes);
        // The newest packet of the frame gives the RTT sample, ACK delay included as in
        // TCP's (quinn keeps its own latest sample private).
        let sample = now.saturating_duration_since(sent);
        self.batch.rtt = Some(self.batch.rtt.map_or(sample, |r| r.min(sample)));
        self.lease.acked_bytes.fetch_add(bytes, Ordering::Relaxed);
        if !self.steered {
            self.fallback.on_ack(sent, bytes, app_limited);
        }
    }

    fn on_end_acks(
        &mut self,
        now: Instant,
        in_flight: u64,
        _app_limited: bool,
        _largest_packet_num_acked: Option<u64>,
    ) {
        self.in_flight = in_flight;
        self.flush(now);
    }

    fn on_congestion_event(
        &mut self,
        now: Instant,
        sent: Instant,
        is_persistent_congestion: bool,
        lost_bytes: u64,
    ) {
        self.lost.add(lost_bytes);
        self.batch.persistent |= is_persistent_congestion;
        self.in_flight = self.in_flight.saturating_sub(lost_bytes);
        self.lease
            .lost_bytes
            .fetch_add(lost_bytes, Ordering::Relaxed);
        self.fallback
            .on_congestion(now, sent, is_persistent_congestion);
        // Losses found by a timer come without an ACK frame: libccp hears of them now.
        self.flush(now);
    }

    fn on_mtu_update(&mut self, new_mtu: u16) {
        self.mtu = new_mtu;
        self.fallback.on_mtu_update(new_mtu);
    }

    fn window(&self) -> u64 {
        self.steered_window(Instant::now())
            .unwrap_or_else(|| self.fallback.window())
    }

    fn metrics(&self) -> ControllerMetrics {
        let mut m = ControllerMetrics::default();
        m.congestion_window = self.window();
        let (_, rate) = self.lease.decision.get();
        if self.steered && rate > 0 {
            m.pacing_rate = Some(u64::from(rate) * 8);
        }
        m
    }

    fn clone_box(&self) -> Box<dyn Controller> {
        Box::new(self.clone())
    }

    fn initial_window(&self) -> u64 {
        fallback::initial_window(self.mtu)
    }

    fn into_any(self: Box<Self>) -> Box<dyn Any> {
        self
    }
}

/// Builds a [`CcpController`] for every new connection of an endpoint; the connection
/// joins CCP when the application attaches it (`QuicDatapath::attach`), and runs the
/// fallback until then.
#[derive(Debug)]
pub struct CcpControllerFactory {
    /// Where each new controller's flow comes from.
    pub(crate) leases: Leases,
}

impl ControllerFactory for CcpControllerFactory {
    fn build(self: Arc<Self>, _now: Instant, current_mtu: u16) -> Box<dyn Controller> {
        Box::new(CcpController::new(self.leases.new_lease(), current_mtu))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: u64 = 2400;

    #[test]
    fn with_a_window_and_a_rate_the_smaller_window_wins() {
        assert_eq!(agent_window(100_000, Some(250_000), MIN), Some(100_000));
        assert_eq!(agent_window(1_000_000, Some(250_000), MIN), Some(250_000));
        assert_eq!(agent_window(0, Some(250_000), MIN), Some(250_000));
    }

    #[test]
    fn a_window_alone_is_used_as_is_and_nothing_means_no_decision() {
        assert_eq!(agent_window(50_000, None, MIN), Some(50_000));
        assert_eq!(agent_window(0, None, MIN), None);
    }

    #[test]
    fn a_tiny_window_keeps_two_datagrams() {
        assert_eq!(agent_window(100, None, MIN), Some(MIN));
    }

    #[test]
    fn packets_are_counted_in_segments_of_the_creates_mss_whatever_the_datagram_size() {
        let mut acked = Segments::default();
        // Ten datagrams of 1452 bytes after MTU discovery, the Create's MSS 1200.
        acked.add(10 * 1452);
        assert_eq!(acked.take(1200), 12);
        // The 240 bytes left over count with the next ones.
        acked.add(1452);
        assert_eq!(acked.take(1200), 1);
        acked.add(3 * 1452);
        assert_eq!(acked.take(1200), 3);
        // Over the whole run the count is the bytes' own.
        assert_eq!(acked.counted, 14 * 1452 / 1200);
        assert_eq!(acked.take(1200), 0);
    }
}
