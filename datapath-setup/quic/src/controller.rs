//! quinn's congestion controller for a CCP flow.
//!
//! The window is the agent's when the host thread has a fresh decision for the flow,
//! NewReno's ([`crate::fallback`]) otherwise. An agent's decision is a window (`Cwnd`,
//! bytes) and/or a pacing rate (`Rate`, bytes/s); quinn paces from the window and the
//! smoothed RTT (1.25 × window / srtt, in bursts of at least 10 datagrams), so a rate
//! becomes the window `rate × srtt` (capped by the agent's window, and never below two
//! datagrams): the flow then carries about `rate` bytes per RTT.

use std::any::Any;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use quinn::congestion::{Controller, ControllerFactory, ControllerMetrics};
use quinn_proto::RttEstimator;

use crate::fallback::{self, NewReno};
use crate::flow::{AckSample, Event, FlowLease, Leases};

/// The window for the agent's decision: `cwnd_bytes` and `rate_bytes_per_sec` (0: none),
/// over a path of smoothed RTT `srtt`; `None` when the agent decided nothing.
pub fn agent_window(
    cwnd_bytes: u32,
    rate_bytes_per_sec: u32,
    srtt: Duration,
    minimum: u64,
) -> Option<u64> {
    let cwnd = u64::from(cwnd_bytes);
    let window = if rate_bytes_per_sec > 0 {
        let per_rtt = u128::from(rate_bytes_per_sec) * srtt.as_nanos() / 1_000_000_000;
        let per_rtt = u64::try_from(per_rtt).unwrap_or(u64::MAX);
        if cwnd > 0 { per_rtt.min(cwnd) } else { per_rtt }
    } else if cwnd > 0 {
        cwnd
    } else {
        return None;
    };
    Some(window.max(minimum))
}

/// What this controller accumulated since its last event to the host thread.
#[derive(Debug, Clone, Copy, Default)]
struct Batch {
    bytes_acked: u64,
    packets_acked: u32,
    lost_packets: u32,
    persistent: bool,
    rtt: Option<Duration>,
}

/// One connection's controller; clones (quinn makes one for a new path, and for
/// `Connection::congestion_state`) share the flow.
#[derive(Debug, Clone)]
pub struct CcpController {
    lease: Arc<FlowLease>,
    fallback: NewReno,
    /// Datagram size, bytes.
    mtu: u16,
    /// Smoothed RTT of the path (quinn's estimate, RFC 9002 §5.3).
    srtt: Duration,
    /// The window was the agent's at the last event.
    steered: bool,
    /// The last window in force, bytes.
    last_window: u64,
    batch: Batch,
    /// Bytes in flight at the last ACK frame.
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
            srtt: Duration::ZERO,
            steered: false,
            batch: Batch::default(),
            in_flight: 0,
        }
    }

    /// Datagram size, bytes.
    pub(crate) fn mtu(&self) -> u16 {
        self.mtu
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
        agent_window(cwnd, rate, self.srtt, fallback::minimum_window(self.mtu))
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
        if !self.lease.is_attached() {
            return;
        }
        let mtu = u64::from(self.mtu.max(1));
        let sample = AckSample {
            bytes_acked: clamp_u32(b.bytes_acked),
            packets_acked: b.packets_acked,
            lost_pkts_sample: b.lost_packets,
            was_timeout: b.persistent,
            rtt_sample_us: b
                .rtt
                .map(|r| u64::try_from(r.as_micros()).unwrap_or(u64::MAX)),
            bytes_in_flight: clamp_u32(self.in_flight),
            packets_in_flight: clamp_u32(self.in_flight.div_ceil(mtu)),
            snd_cwnd: clamp_u32(window),
            in_fallback: !self.steered,
        };
        self.lease.send(Event::Ack {
            id: self.lease.id,
            sample,
        });
    }
}

fn clamp_u32(v: u64) -> u32 {
    u32::try_from(v).unwrap_or(u32::MAX)
}

impl Controller for CcpController {
    fn on_ack(
        &mut self,
        now: Instant,
        sent: Instant,
        bytes: u64,
        app_limited: bool,
        rtt: &RttEstimator,
    ) {
        self.srtt = rtt.get();
        self.batch.bytes_acked += bytes;
        self.batch.packets_acked += 1;
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
        let mtu = u64::from(self.mtu.max(1));
        self.batch.lost_packets = self
            .batch
            .lost_packets
            .saturating_add(clamp_u32(lost_bytes.div_ceil(mtu)));
        self.batch.persistent |= is_persistent_congestion;
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
    fn a_rate_becomes_rate_times_srtt_capped_by_the_window() {
        let srtt = Duration::from_millis(20);
        // 12.5 MB/s (100 Mbit/s) over 20 ms: 250 kB per RTT.
        assert_eq!(agent_window(0, 12_500_000, srtt, MIN), Some(250_000));
        assert_eq!(agent_window(100_000, 12_500_000, srtt, MIN), Some(100_000));
        assert_eq!(
            agent_window(1_000_000, 12_500_000, srtt, MIN),
            Some(250_000)
        );
    }

    #[test]
    fn a_window_alone_is_used_as_is_and_nothing_means_no_decision() {
        let srtt = Duration::from_millis(20);
        assert_eq!(agent_window(50_000, 0, srtt, MIN), Some(50_000));
        assert_eq!(agent_window(0, 0, srtt, MIN), None);
    }

    #[test]
    fn tiny_decisions_keep_two_datagrams_in_flight() {
        assert_eq!(
            agent_window(100, 0, Duration::from_millis(1), MIN),
            Some(MIN)
        );
        assert_eq!(
            agent_window(0, 1000, Duration::from_micros(50), MIN),
            Some(MIN)
        );
    }
}
