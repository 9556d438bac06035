//! A datapath's messages to the agent that its socket could not take yet.
//!
//! The agent's receive queue holds `net.unix.max_dgram_qlen` datagrams (10 by default), so
//! under load a non-blocking send finds it full (EAGAIN). That is back-pressure, not a lost
//! agent: the message waits here and goes out once the agent has read (the datapath flushes
//! every loop turn). Nothing that changes the agent's flow table is ever dropped (Ready,
//! Create, close, PRIORITY). Once `MERGE_REPORTS_AT` messages wait, a flow's new report
//! replaces its older one still waiting, so the queue grows by at most one report per flow
//! beyond that. Only a socket that is gone, or a queue that has not moved for `STALL_NS`,
//! means the agent is lost; from then on only SYNC probes are kept, until a resync queues
//! what the next agent needs (Ready and the live Creates).
//!
//! Agents that echo SYNC (`ccp-agent`) read several messages per datagram and get batches of
//! up to `MAX_BATCH_BYTES`; a stock portus agent reads one message per datagram and gets that.

use std::collections::VecDeque;
use std::io;
use std::os::unix::net::UnixDatagram;
use std::path::Path;

use ccp_wire::{HEADER_LEN, MAX_BATCH_BYTES, msg_type};

/// Waiting messages above which a flow's new report replaces its waiting one.
pub const MERGE_REPORTS_AT: usize = 256;
/// A queue that has not moved for this long means the agent stopped reading.
pub const STALL_NS: u64 = 1_000_000_000;

/// What a send to the agent's socket did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sent {
    Yes,
    /// The agent's queue is full (or the kernel short of buffers): try again later.
    Full,
    /// Nobody is bound at the agent's address, or it refuses us.
    Gone,
}

impl Sent {
    /// Only a full queue or a transient shortage is worth retrying; ENOENT, ECONNREFUSED
    /// and the rest mean there is no agent to wait for.
    pub fn from_error(e: &io::Error) -> Self {
        match e.raw_os_error() {
            Some(libc::EAGAIN | libc::ENOBUFS | libc::ENOMEM | libc::EINTR) => Sent::Full,
            _ => Sent::Gone,
        }
    }
}

/// How a message may be treated while it waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Class {
    /// A report with fields: a newer one of the same flow may replace it.
    Report,
    /// A SYNC probe: one waiting is enough.
    Probe,
    /// Everything else changes the agent's state and is never dropped.
    Keep,
}

#[derive(Debug)]
struct Entry {
    class: Class,
    sid: u32,
    bytes: Vec<u8>,
}

/// Counts since the datapath started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OutboxStats {
    /// Datagrams that went out.
    pub datagrams: u64,
    /// Messages that went out (more than datagrams when batched).
    pub messages: u64,
    /// Sends that found the agent's queue full and were retried later.
    pub deferred: u64,
    /// Waiting reports replaced by a newer one of the same flow.
    pub merged: u64,
    /// Most messages ever waiting at once.
    pub max_waiting: usize,
}

/// What a flush to the agent's socket left. Ordered from best to worst, so the flushes of
/// several sockets (the eBPF datapath's shards) combine with `max`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Flushed {
    /// Nothing waits.
    All,
    /// Messages wait for room in the agent's queue.
    Some,
    /// The agent is gone or stopped reading: it is lost.
    Lost,
}

/// The waiting messages, oldest first, and whether the agent they are for is lost.
#[derive(Debug, Default)]
pub struct Outbox {
    queue: VecDeque<Entry>,
    /// The agent is lost: only probes are worth keeping until the next resync.
    lost: bool,
    /// When a send last found the queue full with no send going out since.
    blocked_since_ns: Option<u64>,
    /// Reused to build batch datagrams.
    scratch: Vec<u8>,
    pub stats: OutboxStats,
}

fn classify(msg: &[u8]) -> (Class, u32) {
    if msg.len() < HEADER_LEN {
        return (Class::Keep, 0);
    }
    let typ = u16::from_le_bytes([msg[0], msg[1]]);
    let sid = u32::from_le_bytes([msg[4], msg[5], msg[6], msg[7]]);
    let class = match typ {
        msg_type::SYNC => Class::Probe,
        // A Measure with no fields is libccp's close, which must arrive.
        msg_type::MEASURE if msg.len() > ccp_wire::msg_len::MEASURE_BASE => Class::Report,
        _ => Class::Keep,
    };
    (class, sid)
}

impl Outbox {
    pub fn len(&self) -> usize {
        self.queue.len()
    }

    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// Queue a message behind those waiting. While the agent is lost only probes are kept:
    /// the resync sends whatever a found agent needs.
    pub fn push(&mut self, msg: &[u8]) {
        let (class, sid) = classify(msg);
        match class {
            Class::Report | Class::Keep if self.lost => return,
            Class::Probe if self.queue.iter().any(|e| e.class == Class::Probe) => return,
            Class::Report if self.queue.len() >= MERGE_REPORTS_AT => {
                // Only the flow's last waiting message may be replaced: anything after it
                // (a close, a new Create for a reused sid) must stay after the report.
                let last = self
                    .queue
                    .iter()
                    .rposition(|e| e.sid == sid && e.class != Class::Probe);
                if let Some(i) = last.filter(|&i| self.queue[i].class == Class::Report) {
                    self.queue.remove(i);
                    self.stats.merged += 1;
                }
            }
            _ => {}
        }
        self.queue.push_back(Entry {
            class,
            sid,
            bytes: msg.to_vec(),
        });
        self.stats.max_waiting = self.stats.max_waiting.max(self.queue.len());
    }

    pub fn lost(&self) -> bool {
        self.lost
    }

    /// The agent is lost: what waits was meant for it, and a resync sends what the next
    /// one needs.
    pub fn mark_lost(&mut self) {
        self.lost = true;
        self.clear();
    }

    /// The agent answered after being lost. It may be a new one, and Ready makes any agent
    /// forget the datapath's flows, so `ready` and every live flow's Create are queued
    /// again (nothing else: what the lost agent missed means nothing now). They leave at
    /// the agent's pace, not into a full queue.
    pub fn resync(&mut self, ready: &[u8], creates: &[Vec<u8>]) {
        self.lost = false;
        self.clear();
        self.push(ready);
        for create in creates {
            self.push(create);
        }
    }

    fn clear(&mut self) {
        self.queue.clear();
        self.blocked_since_ns = None;
    }

    /// `flush` through a non-blocking `sock` to the agent's address. A gone agent, or one
    /// whose queue has not moved for `STALL_NS`, is lost.
    pub fn flush_to(
        &mut self,
        now_ns: u64,
        batch: bool,
        sock: &UnixDatagram,
        agent: &Path,
    ) -> Flushed {
        let result = self.flush(now_ns, batch, |d| match sock.send_to(d, agent) {
            Ok(_) => Sent::Yes,
            Err(e) => Sent::from_error(&e),
        });
        if result == Sent::Gone || self.stalled(now_ns) {
            self.mark_lost();
            return Flushed::Lost;
        }
        if result == Sent::Yes {
            Flushed::All
        } else {
            Flushed::Some
        }
    }

    /// Sends what waits, oldest first, until the queue is empty or `send` stops taking
    /// datagrams; `batch` packs several messages into each. Returns `Sent::Yes` when the
    /// queue is empty, `Full` when messages still wait, `Gone` when the agent is.
    fn flush(&mut self, now_ns: u64, batch: bool, mut send: impl FnMut(&[u8]) -> Sent) -> Sent {
        while let Some(first) = self.queue.front() {
            let mut count = 1;
            let result = if batch && self.queue.len() > 1 {
                self.scratch.clear();
                self.scratch.extend_from_slice(&first.bytes);
                for e in self.queue.iter().skip(1) {
                    if self.scratch.len() + e.bytes.len() > MAX_BATCH_BYTES {
                        break;
                    }
                    self.scratch.extend_from_slice(&e.bytes);
                    count += 1;
                }
                send(&self.scratch)
            } else {
                send(&first.bytes)
            };
            match result {
                Sent::Yes => {
                    self.queue.drain(..count);
                    self.blocked_since_ns = None;
                    self.stats.datagrams += 1;
                    self.stats.messages += count as u64;
                }
                Sent::Full => {
                    self.blocked_since_ns.get_or_insert(now_ns);
                    self.stats.deferred += 1;
                    return Sent::Full;
                }
                Sent::Gone => return Sent::Gone,
            }
        }
        self.blocked_since_ns = None;
        Sent::Yes
    }

    /// Whether the agent has taken nothing for `STALL_NS` while messages waited.
    fn stalled(&self, now_ns: u64) -> bool {
        self.blocked_since_ns
            .is_some_and(|t| now_ns.saturating_sub(t) > STALL_NS)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ccp_wire::{encode_close, encode_measure, encode_ready, encode_sync};

    const MS: u64 = 1_000_000;

    /// Everything a flush hands to the socket, split back into messages.
    fn flush_all(o: &mut Outbox, batch: bool) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        let r = o.flush(0, batch, |d| {
            let mut at = 0;
            while at < d.len() {
                let len = usize::from(u16::from_le_bytes([d[at + 2], d[at + 3]]));
                out.push(d[at..at + len].to_vec());
                at += len;
            }
            Sent::Yes
        });
        assert_eq!(r, Sent::Yes);
        out
    }

    fn fill_with_reports(o: &mut Outbox, from_sid: u32) {
        for sid in from_sid..from_sid + MERGE_REPORTS_AT as u32 {
            o.push(&encode_measure(sid, 1, &[1]));
        }
    }

    #[test]
    fn a_full_agent_queue_defers_messages_in_order_and_never_drops_them() {
        let mut o = Outbox::default();
        let msgs = [encode_ready(0), encode_measure(1, 1, &[5]), encode_close(1)];
        for m in &msgs {
            o.push(m);
        }
        let mut room = 1;
        let r = o.flush(10 * MS, false, |_| {
            if room == 0 {
                return Sent::Full;
            }
            room -= 1;
            Sent::Yes
        });
        assert_eq!((r, o.len(), o.stats.deferred), (Sent::Full, 2, 1));
        assert_eq!(flush_all(&mut o, false), msgs[1..].to_vec());
        assert_eq!(o.len(), 0);
    }

    #[test]
    fn under_pressure_a_flows_new_report_replaces_its_waiting_one_but_never_a_close() {
        let mut o = Outbox::default();
        o.push(&encode_measure(7, 1, &[1]));
        fill_with_reports(&mut o, 100);
        o.push(&encode_measure(7, 1, &[2]));
        assert_eq!((o.len(), o.stats.merged), (MERGE_REPORTS_AT + 1, 1));
        // A close (and a reused sid's report) after a report: nothing is merged across it.
        o.push(&encode_close(7));
        o.push(&encode_measure(7, 1, &[3]));
        assert_eq!(o.stats.merged, 1);
        let out = flush_all(&mut o, true);
        let of_7: Vec<_> = out
            .iter()
            .filter(|m| m[4..8] == 7u32.to_le_bytes())
            .cloned()
            .collect();
        assert_eq!(
            of_7,
            vec![
                encode_measure(7, 1, &[2]),
                encode_close(7),
                encode_measure(7, 1, &[3])
            ]
        );
    }

    #[test]
    fn below_the_merge_threshold_every_report_is_kept() {
        let mut o = Outbox::default();
        for v in 0..10 {
            o.push(&encode_measure(3, 1, &[v]));
        }
        assert_eq!((o.len(), o.stats.merged), (10, 0));
    }

    #[test]
    fn one_waiting_probe_is_enough() {
        let mut o = Outbox::default();
        o.push(&encode_sync(0, 1));
        o.push(&encode_sync(0, 2));
        assert_eq!(o.len(), 1);
    }

    #[test]
    fn batches_stay_within_the_datagram_limit_and_unbatched_sends_are_single() {
        let mut o = Outbox::default();
        // 100-field reports (816 bytes): about 20 fit in a batch.
        for sid in 0..MERGE_REPORTS_AT as u32 {
            o.push(&encode_measure(sid, 1, &[7; 100]));
        }
        let mut sizes = Vec::new();
        o.flush(0, true, |d| {
            sizes.push(d.len());
            Sent::Yes
        });
        assert!(sizes.len() > 10 && sizes.iter().all(|&s| s <= MAX_BATCH_BYTES));
        assert_eq!(o.stats.messages, MERGE_REPORTS_AT as u64);
        fill_with_reports(&mut o, 0);
        let before = o.stats.datagrams;
        flush_all(&mut o, false);
        assert_eq!(o.stats.datagrams - before, MERGE_REPORTS_AT as u64);
    }

    #[test]
    fn only_a_queue_that_does_not_move_for_the_stall_window_is_a_lost_agent() {
        let mut o = Outbox::default();
        o.push(&encode_ready(0));
        o.push(&encode_ready(1));
        assert_eq!(o.flush(0, false, |_| Sent::Full), Sent::Full);
        assert!(!o.stalled(STALL_NS));
        // One datagram taken: the agent reads, slowly; the window starts again.
        let mut first = true;
        o.flush(STALL_NS / 2, false, |_| {
            if std::mem::take(&mut first) {
                Sent::Yes
            } else {
                Sent::Full
            }
        });
        assert!(!o.stalled(STALL_NS + MS));
        assert!(o.stalled(STALL_NS / 2 + STALL_NS + MS));
        assert_eq!(o.flush(0, false, |_| Sent::Gone), Sent::Gone);
    }

    #[test]
    fn a_lost_agent_gets_only_probes_until_the_resync_queues_ready_and_the_creates() {
        let mut o = Outbox::default();
        o.push(&encode_measure(1, 1, &[5]));
        o.mark_lost();
        o.push(&encode_measure(1, 1, &[6]));
        o.push(&encode_close(1));
        o.push(&encode_sync(0, 3));
        assert_eq!(flush_all(&mut o, false), vec![encode_sync(0, 3)]);
        let create = ccp_wire::encode_create(&ccp_wire::CreateMsg {
            sid: 2,
            init_cwnd: 14_480,
            mss: 1448,
            src_ip: 0,
            src_port: 0,
            dst_ip: 0,
            dst_port: 0,
            cong_alg: None,
        });
        o.resync(&encode_ready(9), std::slice::from_ref(&create));
        assert!(!o.lost());
        o.push(&encode_close(2));
        assert_eq!(
            flush_all(&mut o, true),
            vec![encode_ready(9), create, encode_close(2)]
        );
    }

    #[test]
    fn a_socket_nobody_is_bound_at_loses_the_agent() {
        let nobody = std::env::temp_dir().join(format!("ccp-host-nobody-{}", std::process::id()));
        let sock = UnixDatagram::unbound().expect("socket");
        sock.set_nonblocking(true).expect("non-blocking");
        let mut o = Outbox::default();
        o.push(&encode_ready(0));
        let flushed = o.flush_to(0, false, &sock, &nobody);
        assert_eq!((flushed, o.lost(), o.len()), (Flushed::Lost, true, 0));
    }

    #[test]
    fn send_errors_that_mean_wait_are_told_from_those_that_mean_gone() {
        for code in [libc::EAGAIN, libc::ENOBUFS] {
            assert_eq!(
                Sent::from_error(&io::Error::from_raw_os_error(code)),
                Sent::Full
            );
        }
        for code in [libc::ENOENT, libc::ECONNREFUSED, libc::EPERM] {
            assert_eq!(
                Sent::from_error(&io::Error::from_raw_os_error(code)),
                Sent::Gone
            );
        }
    }
}
