//! A trace-driven link: Mahimahi's `mm-link` semantics for one direction.
//!
//! Each trace line is one delivery opportunity of 1504 bytes at a whole millisecond. At an
//! opportunity the link sends up to 1504 bytes from the head of its queue; a packet larger than
//! what is left continues in the next opportunity (it has left the queue and is "in transit"),
//! and bytes of an opportunity that find the queue empty are lost, not banked. Every
//! opportunity, arrival, departure and drop is reported to a sink that writes Mahimahi's log.
//!
//! With [`Timing::Serial`] a millisecond's opportunities are spread evenly over it instead
//! (the j-th of n at j/n ms), as on a link that sends packets one after another at its rate
//! (a router's port, Emulab's shaped links): a queue of a few packets then drains between two
//! arrivals instead of only at the next whole millisecond.
//!
//! Time is µs since the emulator started; the trace's t = 0 is the link's `origin_us`.
//! Opportunities are processed lazily: `advance(now)` catches up on every opportunity at or
//! before `now`, in order, before the caller enqueues packets that arrived at `now`. So the
//! result does not depend on when the event loop happens to wake up, only on the arrival
//! times it reads.

use super::queue::{PacketQueue, QueueConfig, Queued};
use super::trace::{MICROS_PER_MILLI, OPPORTUNITY_BYTES, SpreadOffsets, Trace};

/// When inside its millisecond the link serves an opportunity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Timing {
    /// At the millisecond's start, all of them, as Mahimahi does.
    #[default]
    WholeMs,
    /// Spread evenly over the millisecond, as a link that serializes packets at its rate.
    Serial,
}

/// Something the log records (times in µs since the emulator started).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkEvent {
    /// A delivery opportunity of 1504 bytes (used or not).
    Opportunity { t_us: u64 },
    /// A packet arrived at the queue.
    Arrival { t_us: u64, size: u64 },
    /// A packet left the link after `delay_us` in it.
    Departure { t_us: u64, size: u64, delay_us: u64 },
    /// Packets were dropped by the queue.
    Drop { t_us: u64, packets: u64, bytes: u64 },
}

/// Receives the link's events and departing packets.
pub trait LinkSink<P> {
    /// A log event.
    fn event(&mut self, event: LinkEvent);
    /// A packet left the link at `t_us` (the opportunity's time, not the wake-up time).
    fn deliver(&mut self, t_us: u64, packet: P);
}

/// Running counters, for the end-of-run statistics.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct LinkStats {
    /// Packets that arrived.
    pub arrivals: u64,
    /// Packets that left.
    pub departures: u64,
    /// Packets dropped by the queue.
    pub drops: u64,
    /// Bytes dropped by the queue.
    pub dropped_bytes: u64,
    /// Bytes delivered.
    pub delivered_bytes: u64,
    /// Largest queue occupancy seen after any enqueue, bytes.
    pub max_queue_bytes: u64,
    /// Largest queue occupancy seen after any enqueue, packets.
    pub max_queue_packets: u64,
}

/// One direction of a trace-driven link.
#[derive(Debug)]
pub struct Link<P> {
    trace: Trace,
    /// Offsets inside the millisecond ([`Timing::Serial`]), or none (whole ms).
    spread: Option<SpreadOffsets>,
    queue: PacketQueue<P>,
    /// Trace t = 0, µs since the emulator started.
    origin_us: u64,
    /// Index of the next opportunity not yet processed.
    next_opp: u64,
    /// The packet being sent across opportunities, and its bytes still to send.
    in_transit: Option<(Queued<P>, u64)>,
    /// Report idle opportunities (needed for the log); without a log they are skipped in O(1).
    record_idle: bool,
    stats: LinkStats,
}

impl<P> Link<P> {
    /// A link starting at `origin_us`.
    pub fn new(
        trace: Trace,
        timing: Timing,
        queue: QueueConfig,
        origin_us: u64,
        record_idle: bool,
    ) -> Self {
        let next_opp = trace.first_at_or_after(0);
        let spread = (timing == Timing::Serial).then(|| SpreadOffsets::of(&trace));
        Self {
            trace,
            spread,
            queue: PacketQueue::new(queue),
            origin_us,
            next_opp,
            in_transit: None,
            record_idle,
            stats: LinkStats::default(),
        }
    }

    fn opportunity_us(&self, k: u64) -> u64 {
        let offset = self.spread.as_ref().map_or(0, |s| s.at(k));
        self.origin_us + self.trace.opportunity_ms(k) * MICROS_PER_MILLI + offset
    }

    fn busy(&self) -> bool {
        self.in_transit.is_some() || !self.queue.is_empty()
    }

    /// Processes every opportunity at or before `now_us`.
    pub fn advance(&mut self, now_us: u64, sink: &mut impl LinkSink<P>) {
        loop {
            if !self.busy() && !self.record_idle {
                // Jump over idle opportunities: nothing to send and nothing to log.
                let rel_ms = now_us.saturating_sub(self.origin_us) / MICROS_PER_MILLI;
                let mut skip_to = self.trace.first_at_or_after(rel_ms);
                while self.opportunity_us(skip_to) <= now_us {
                    skip_to += 1;
                }
                self.next_opp = self.next_opp.max(skip_to);
                return;
            }
            let t_us = self.opportunity_us(self.next_opp);
            if t_us > now_us {
                return;
            }
            self.next_opp += 1;
            self.use_opportunity(t_us, sink);
        }
    }

    fn use_opportunity(&mut self, t_us: u64, sink: &mut impl LinkSink<P>) {
        sink.event(LinkEvent::Opportunity { t_us });
        let mut budget = OPPORTUNITY_BYTES;
        while budget > 0 {
            let (item, left) = match self.in_transit.take() {
                Some(x) => x,
                None => match self.queue.dequeue() {
                    Some(item) => {
                        let size = item.size;
                        (item, size)
                    }
                    None => return,
                },
            };
            let sent = budget.min(left);
            budget -= sent;
            if left > sent {
                self.in_transit = Some((item, left - sent));
                return;
            }
            self.stats.departures += 1;
            self.stats.delivered_bytes += item.size;
            sink.event(LinkEvent::Departure {
                t_us,
                size: item.size,
                delay_us: t_us.saturating_sub(item.arrival_us),
            });
            sink.deliver(t_us, item.packet);
        }
    }

    /// A packet of `size` bytes arrives at `now_us`. Call [`Link::advance`] up to `now_us`
    /// first (this does it) so earlier opportunities do not serve it.
    pub fn enqueue(&mut self, now_us: u64, size: u64, packet: P, sink: &mut impl LinkSink<P>) {
        self.advance(now_us, sink);
        self.stats.arrivals += 1;
        sink.event(LinkEvent::Arrival { t_us: now_us, size });
        let dropped = self.queue.enqueue(Queued {
            arrival_us: now_us,
            size,
            packet,
        });
        if !dropped.is_empty() {
            let bytes: u64 = dropped.iter().map(|d| d.size).sum();
            self.stats.drops += dropped.len() as u64;
            self.stats.dropped_bytes += bytes;
            sink.event(LinkEvent::Drop {
                t_us: now_us,
                packets: dropped.len() as u64,
                bytes,
            });
        }
        self.stats.max_queue_bytes = self.stats.max_queue_bytes.max(self.queue.bytes());
        self.stats.max_queue_packets = self.stats.max_queue_packets.max(self.queue.len() as u64);
    }

    /// When the link next needs the event loop: the next opportunity if it has something to
    /// send, else none (idle opportunities are caught up lazily).
    pub fn next_wakeup_us(&self) -> Option<u64> {
        self.busy().then(|| self.opportunity_us(self.next_opp))
    }

    /// Counters so far.
    pub fn stats(&self) -> LinkStats {
        self.stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Default)]
    struct Rec {
        events: Vec<LinkEvent>,
        out: Vec<(u64, u32)>,
    }
    impl LinkSink<u32> for Rec {
        fn event(&mut self, event: LinkEvent) {
            self.events.push(event);
        }
        fn deliver(&mut self, t_us: u64, packet: u32) {
            self.out.push((t_us, packet));
        }
    }

    fn link(trace: &str, queue: QueueConfig, idle: bool) -> Link<u32> {
        let trace = Trace::parse(trace).expect("valid");
        Link::new(trace, Timing::WholeMs, queue, 0, idle)
    }

    #[test]
    fn a_saturated_link_delivers_exactly_the_trace_rate() {
        // 48 Mbps: four 1504-byte opportunities per ms.
        let mut l = link("1\n1\n1\n1\n", QueueConfig::INFINITE, false);
        let mut rec = Rec::default();
        for i in 0..10_000u32 {
            l.enqueue(0, 1504, i, &mut rec);
        }
        l.advance(1_000_000, &mut rec);
        assert_eq!(rec.out.len(), 4000, "one second at 4 packets per ms");
        assert_eq!(rec.out[0], (1000, 0));
        assert_eq!(rec.out[3999].0, 1_000_000);
    }

    #[test]
    fn an_idle_packet_waits_for_the_next_opportunity_only() {
        let mut l = link("1\n", QueueConfig::INFINITE, false);
        let mut rec = Rec::default();
        l.advance(5_300, &mut rec);
        l.enqueue(5_300, 100, 7, &mut rec);
        assert_eq!(l.next_wakeup_us(), Some(6_000));
        l.advance(6_000, &mut rec);
        assert_eq!(rec.out, [(6_000, 7)]);
        assert!(rec.events.contains(&LinkEvent::Departure {
            t_us: 6_000,
            size: 100,
            delay_us: 700
        }));
    }

    #[test]
    fn small_packets_share_an_opportunity_and_large_ones_span_two() {
        let mut l = link("1\n", QueueConfig::INFINITE, false);
        let mut rec = Rec::default();
        // 1000 + 500 fit in one 1504-byte opportunity; the next 1000 needs 4 bytes of this
        // one... which are used, then 996 of the next one.
        l.enqueue(0, 1000, 1, &mut rec);
        l.enqueue(0, 500, 2, &mut rec);
        l.enqueue(0, 1000, 3, &mut rec);
        l.advance(1_000, &mut rec);
        assert_eq!(rec.out, [(1_000, 1), (1_000, 2)]);
        l.advance(2_000, &mut rec);
        assert_eq!(rec.out[2], (2_000, 3));
    }

    #[test]
    fn unused_opportunity_bytes_are_not_banked() {
        let mut l = link("1\n", QueueConfig::INFINITE, false);
        let mut rec = Rec::default();
        l.advance(10_000, &mut rec);
        for i in 0..3 {
            l.enqueue(10_000, 1504, i, &mut rec);
        }
        l.advance(12_000, &mut rec);
        assert_eq!(rec.out, [(11_000, 0), (12_000, 1)]);
    }

    #[test]
    fn idle_opportunities_are_logged_when_recording() {
        let mut l = link("1\n1\n", QueueConfig::INFINITE, true);
        let mut rec = Rec::default();
        l.advance(3_500, &mut rec);
        let opps = rec
            .events
            .iter()
            .filter(|e| matches!(e, LinkEvent::Opportunity { .. }))
            .count();
        assert_eq!(opps, 6);
    }

    #[test]
    fn drops_are_reported_and_counted() {
        let q = QueueConfig::from_mahimahi("droptail", "packets=2").expect("valid");
        let mut l = link("1\n", q, false);
        let mut rec = Rec::default();
        for i in 0..5 {
            l.enqueue(0, 1504, i, &mut rec);
        }
        let drops: u64 = rec
            .events
            .iter()
            .filter_map(|e| match e {
                LinkEvent::Drop { packets, .. } => Some(*packets),
                _ => None,
            })
            .sum();
        assert_eq!(drops, 3);
        assert_eq!(l.stats().drops, 3);
        assert_eq!(l.stats().max_queue_packets, 2);
    }

    #[test]
    fn a_serial_link_drains_a_small_queue_between_arrivals() {
        // 48 Mbit/s, a queue of two packets, one packet every 250 µs (the link's rate): with
        // whole-ms opportunities four arrive before the next one and two are dropped; with
        // opportunities 250 µs apart each leaves before the next arrives, in order, at the
        // rate.
        let q = QueueConfig::from_mahimahi("droptail", "packets=2").expect("valid");
        for (timing, drops) in [(Timing::WholeMs, 2000), (Timing::Serial, 0)] {
            let mut l = Link::new(
                Trace::parse("1\n1\n1\n1\n").expect("valid"),
                timing,
                q,
                0,
                false,
            );
            let mut rec = Rec::default();
            for i in 0..4000u32 {
                l.enqueue(1_001 + u64::from(i) * 250, 1504, i, &mut rec);
            }
            l.advance(2_000_000, &mut rec);
            assert_eq!(l.stats().drops, drops, "{timing:?}");
            if timing == Timing::Serial {
                assert!(
                    rec.out
                        .windows(2)
                        .all(|w| w[0].1 < w[1].1 && w[1].0 - w[0].0 == 250)
                );
                assert_eq!(
                    rec.out[0],
                    (1_250, 0),
                    "the first opportunity after its arrival"
                );
            }
        }
    }
}
