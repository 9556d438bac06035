//! The data path between the two namespaces, without any I/O: the sender's packets cross the
//! link's uplink and then the delay; the receiver's packets cross the delay and then the
//! link's downlink, like `mm-delay D mm-link UP DOWN` where mm-link is the inner shell.
//!
//! ```text
//! sender --> [uplink queue + trace] --> [delay D] --> receiver
//! sender <-- [downlink queue + trace] <-- [delay D] <-- receiver
//! ```
//! Times are µs since the emulator started. The event loop calls `from_*` for every packet
//! it reads (arrival = the time it read it), then `step(now)`, then sleeps until
//! `next_wakeup_us()` or the next readable packet.

use std::collections::VecDeque;
use std::io::Write;

use super::link::{Link, LinkEvent, LinkSink, LinkStats};
use super::log::LogWriter;
use super::loss::RandomLoss;
use super::trace::MICROS_PER_MILLI;

/// Which namespace a packet leaves the emulator into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// The sender's namespace (downlink output).
    Sender,
    /// The receiver's namespace (uplink output).
    Receiver,
}

/// One direction: an optional link (none = unlimited rate), the record of its events, an
/// optional random loss stage between the link and the delay, and the delay line.
#[derive(Debug)]
pub struct Direction<W: Write> {
    link: Option<Link<Vec<u8>>>,
    record: Record<W>,
    loss: Option<RandomLoss>,
    /// Packets in the delay line and when they leave it, µs; release times never decrease.
    delay_line: VecDeque<(u64, Vec<u8>)>,
}

/// What a direction records of its link's events: the log and the processing lateness.
#[derive(Debug)]
struct Record<W: Write> {
    log: Option<LogWriter<W>>,
    /// First log write error (the run goes on; the caller reports it).
    log_error: Option<std::io::Error>,
    /// Largest lateness of a link departure's processing behind its opportunity, µs.
    max_lateness_us: u64,
    /// Departures processed more than 1 ms after their opportunity (the loop was not run).
    late_over_1ms: u64,
}

impl<W: Write> Direction<W> {
    /// A direction with the given link and log.
    pub fn new(link: Option<Link<Vec<u8>>>, log: Option<LogWriter<W>>) -> Self {
        Self {
            link,
            record: Record {
                log,
                log_error: None,
                max_lateness_us: 0,
                late_over_1ms: 0,
            },
            loss: None,
            delay_line: VecDeque::new(),
        }
    }

    /// The same direction with a random loss stage.
    pub fn with_loss(self, loss: Option<RandomLoss>) -> Self {
        Self { loss, ..self }
    }

    /// Packets the loss stage dropped.
    pub fn random_losses(&self) -> u64 {
        self.loss.as_ref().map_or(0, RandomLoss::lost)
    }

    /// Link counters (zero without a link).
    pub fn stats(&self) -> LinkStats {
        self.link.as_ref().map(Link::stats).unwrap_or_default()
    }

    /// Largest processing lateness behind an opportunity, µs.
    pub fn max_lateness_us(&self) -> u64 {
        self.record.max_lateness_us
    }

    /// Departures processed more than 1 ms after their opportunity.
    pub fn late_over_1ms(&self) -> u64 {
        self.record.late_over_1ms
    }

    /// Flushes the log; returns the first write error of the run, if any.
    pub fn finish(&mut self) -> Result<(), std::io::Error> {
        if let Some(e) = self.record.log_error.take() {
            return Err(e);
        }
        match self.record.log.as_mut() {
            Some(log) => log.flush(),
            None => Ok(()),
        }
    }
}

/// Where a link's departures go.
enum Next<'a> {
    /// Into a delay line, released `delay_us` later.
    Delay(&'a mut VecDeque<(u64, Vec<u8>)>, u64),
    /// Out of the emulator now.
    Out(&'a mut dyn FnMut(Side, Vec<u8>), Side),
}

struct Sink<'a, W: Write> {
    record: &'a mut Record<W>,
    /// The uplink's loss stage, after the link.
    loss: Option<&'a mut RandomLoss>,
    now_us: u64,
    next: Next<'a>,
}

impl<W: Write> LinkSink<Vec<u8>> for Sink<'_, W> {
    fn event(&mut self, event: LinkEvent) {
        let r = &mut *self.record;
        if let Some(log) = r.log.as_mut()
            && let Err(e) = log.write(event)
        {
            r.log_error.get_or_insert(e);
        }
    }

    fn deliver(&mut self, t_us: u64, packet: Vec<u8>) {
        let late = self.now_us.saturating_sub(t_us);
        let r = &mut *self.record;
        r.max_lateness_us = r.max_lateness_us.max(late);
        if late > MICROS_PER_MILLI {
            r.late_over_1ms += 1;
        }
        if self.loss.as_mut().is_some_and(|l| l.drops()) {
            return;
        }
        match &mut self.next {
            Next::Delay(line, delay_us) => line.push_back((t_us + *delay_us, packet)),
            Next::Out(out, side) => out(*side, packet),
        }
    }
}

/// Both directions and the delay.
#[derive(Debug)]
pub struct Pipeline<W: Write> {
    delay_us: u64,
    /// Sender to receiver.
    pub up: Direction<W>,
    /// Receiver to sender.
    pub down: Direction<W>,
}

impl<W: Write> Pipeline<W> {
    /// A pipeline with a one-way delay in ms.
    pub fn new(delay_ms: u64, up: Direction<W>, down: Direction<W>) -> Self {
        Self {
            delay_us: delay_ms * MICROS_PER_MILLI,
            up,
            down,
        }
    }

    /// A packet from the sender's namespace, read at `now_us`.
    pub fn from_sender(&mut self, now_us: u64, packet: Vec<u8>) {
        let d = &mut self.up;
        match d.link.as_mut() {
            Some(link) => {
                let size = packet.len() as u64;
                let mut sink = Sink {
                    record: &mut d.record,
                    loss: d.loss.as_mut(),
                    now_us,
                    next: Next::Delay(&mut d.delay_line, self.delay_us),
                };
                link.enqueue(now_us, size, packet, &mut sink);
            }
            None if d.loss.as_mut().is_some_and(|l| l.drops()) => {}
            None => d.delay_line.push_back((now_us + self.delay_us, packet)),
        }
    }

    /// A packet from the receiver's namespace, read at `now_us`.
    pub fn from_receiver(&mut self, now_us: u64, packet: Vec<u8>) {
        self.down
            .delay_line
            .push_back((now_us + self.delay_us, packet));
    }

    /// Moves everything due at or before `now_us`; packets leaving go to `out`.
    pub fn step(&mut self, now_us: u64, out: &mut dyn FnMut(Side, Vec<u8>)) {
        // Uplink: link departures enter the delay line, due packets leave it.
        let d = &mut self.up;
        if let Some(link) = d.link.as_mut() {
            let mut sink = Sink {
                record: &mut d.record,
                loss: d.loss.as_mut(),
                now_us,
                next: Next::Delay(&mut d.delay_line, self.delay_us),
            };
            link.advance(now_us, &mut sink);
        }
        while d.delay_line.front().is_some_and(|(t, _)| *t <= now_us) {
            if let Some((_, p)) = d.delay_line.pop_front() {
                out(Side::Receiver, p);
            }
        }
        // Downlink: packets leaving the delay line arrive at the link at their due time.
        let d = &mut self.down;
        while d.delay_line.front().is_some_and(|(t, _)| *t <= now_us) {
            let Some((due, p)) = d.delay_line.pop_front() else {
                break;
            };
            // The downlink's loss stage, before the link.
            if d.loss.as_mut().is_some_and(|l| l.drops()) {
                continue;
            }
            match d.link.as_mut() {
                Some(link) => {
                    let size = p.len() as u64;
                    let mut sink = Sink {
                        record: &mut d.record,
                        loss: None,
                        now_us,
                        next: Next::Out(out, Side::Sender),
                    };
                    link.enqueue(due, size, p, &mut sink);
                }
                None => out(Side::Sender, p),
            }
        }
        if let Some(link) = d.link.as_mut() {
            let mut sink = Sink {
                record: &mut d.record,
                loss: None,
                now_us,
                next: Next::Out(out, Side::Sender),
            };
            link.advance(now_us, &mut sink);
        }
    }

    /// The earliest time something is due, if anything is in flight.
    pub fn next_wakeup_us(&self) -> Option<u64> {
        [
            self.up.link.as_ref().and_then(Link::next_wakeup_us),
            self.up.delay_line.front().map(|(t, _)| *t),
            self.down.delay_line.front().map(|(t, _)| *t),
            self.down.link.as_ref().and_then(Link::next_wakeup_us),
        ]
        .into_iter()
        .flatten()
        .min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::emu::link::Timing;
    use crate::emu::queue::QueueConfig;
    use crate::emu::trace::Trace;

    fn pipeline(delay_ms: u64, trace: Option<&str>) -> Pipeline<Vec<u8>> {
        let link = || {
            trace.map(|t| {
                Link::new(
                    Trace::parse(t).expect("valid"),
                    Timing::WholeMs,
                    QueueConfig::INFINITE,
                    0,
                    false,
                )
            })
        };
        Pipeline::new(
            delay_ms,
            Direction::new(link(), None),
            Direction::new(link(), None),
        )
    }

    /// Drives the pipeline like the event loop: wakes at every due time, returns when each
    /// packet left and where.
    fn run(p: &mut Pipeline<Vec<u8>>, until_us: u64) -> Vec<(u64, Side, u8)> {
        let mut got = Vec::new();
        let mut now = 0;
        while now <= until_us {
            p.step(now, &mut |side, pkt| got.push((now, side, pkt[0])));
            match p.next_wakeup_us() {
                Some(t) if t > now => now = t,
                Some(_) => {}
                None => break,
            }
        }
        got
    }

    #[test]
    fn delay_only_round_trip_is_twice_the_delay() {
        let mut p = pipeline(15, None);
        p.from_sender(100, vec![1]);
        let up = run(&mut p, 1_000_000);
        assert_eq!(up, [(15_100, Side::Receiver, 1)]);
        p.from_receiver(15_100, vec![2]);
        let down = run(&mut p, 1_000_000);
        assert_eq!(down, [(30_100, Side::Sender, 2)]);
    }

    #[test]
    fn the_link_adds_the_wait_for_the_next_opportunity() {
        // 12 Mbps: one opportunity per ms. A packet read at 0.3 ms leaves the link at 1 ms,
        // the delay line at 16 ms; the reply read at 16 ms crosses the delay (31 ms) and
        // leaves the downlink at the next opportunity after its arrival, 32 ms (like
        // Mahimahi, an opportunity at the arrival instant has already passed).
        let mut p = pipeline(15, Some("1\n"));
        p.from_sender(300, vec![1]);
        assert_eq!(run(&mut p, 100_000), [(16_000, Side::Receiver, 1)]);
        p.from_receiver(16_000, vec![2]);
        assert_eq!(run(&mut p, 100_000), [(32_000, Side::Sender, 2)]);
    }

    #[test]
    fn random_loss_drops_uplink_packets_after_the_link_and_downlink_packets_before_it() {
        let lossy = |rate| Some(RandomLoss::new(rate, 11).expect("valid"));
        let link = || {
            Link::new(
                Trace::parse("1\n").expect("valid"),
                Timing::WholeMs,
                QueueConfig::INFINITE,
                0,
                false,
            )
        };
        let mut p = Pipeline::new(
            5,
            Direction::new(Some(link()), None).with_loss(lossy(1.0)),
            Direction::new(Some(link()), None).with_loss(lossy(0.0)),
        );
        for i in 0..3 {
            p.from_sender(0, vec![i]);
        }
        assert!(run(&mut p, 100_000).is_empty(), "every uplink packet lost");
        // The link still carried them: lost after it, as behind Mahimahi's mm-link.
        assert_eq!(p.up.stats().departures, 3);
        assert_eq!(p.up.random_losses(), 3);
        p.from_receiver(0, vec![9]);
        assert_eq!(run(&mut p, 100_000), [(6_000, Side::Sender, 9)]);

        let mut p = Pipeline::new(
            5,
            Direction::new(Some(link()), None),
            Direction::new(Some(link()), None).with_loss(lossy(1.0)),
        );
        p.from_receiver(0, vec![1]);
        assert!(run(&mut p, 100_000).is_empty());
        // Lost before the downlink: it never reached the link.
        assert_eq!((p.down.stats().arrivals, p.down.random_losses()), (0, 1));
        // Without a link the stage still applies.
        let mut p: Pipeline<Vec<u8>> = Pipeline::new(
            5,
            Direction::new(None, None).with_loss(lossy(1.0)),
            Direction::new(None, None),
        );
        p.from_sender(0, vec![1]);
        assert!(run(&mut p, 100_000).is_empty());
    }

    #[test]
    fn late_wakeups_do_not_change_departure_times() {
        let mut p = pipeline(10, Some("1\n"));
        for i in 0..5 {
            p.from_sender(0, vec![i]);
        }
        // Wake only once, long after everything was due.
        let mut got = Vec::new();
        p.step(50_000, &mut |side, pkt| got.push((side, pkt[0])));
        assert_eq!(
            got.len(),
            5,
            "all departed (1..5 ms) and left the delay (11..15 ms)"
        );
        assert_eq!(p.up.max_lateness_us(), 49_000);
        assert_eq!(p.up.late_over_1ms(), 5);
    }
}
