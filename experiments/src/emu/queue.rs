//! The bottleneck queue: Mahimahi's `infinite`, `droptail` and `drophead` disciplines with
//! limits in bytes and/or packets (docs/mahimahi.md §4).

use std::collections::VecDeque;

/// Queue discipline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Discipline {
    /// No limit.
    Infinite,
    /// Drop the arriving packet when it would exceed a limit.
    DropTail,
    /// Accept the arriving packet, then drop from the head until within the limits.
    DropHead,
}

/// Queue configuration: discipline and limits (sizes include the 4-byte TUN header).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueConfig {
    /// Which packet to drop on overflow.
    pub discipline: Discipline,
    /// Byte limit, or none.
    pub bytes: Option<u64>,
    /// Packet limit, or none.
    pub packets: Option<u64>,
}

/// Why queue options were refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum QueueError {
    #[error("unknown queue type {0:?} (infinite, droptail, drophead)")]
    UnknownType(String),
    #[error("bad queue argument {0:?} (expected bytes=N and/or packets=N)")]
    BadArg(String),
    #[error("{0} queue needs bytes=N or packets=N")]
    NoLimit(&'static str),
}

impl QueueConfig {
    /// An unlimited queue.
    pub const INFINITE: Self = Self {
        discipline: Discipline::Infinite,
        bytes: None,
        packets: None,
    };

    /// Builds a configuration from Mahimahi's `--*-queue=T` and `--*-queue-args=A` values.
    pub fn from_mahimahi(kind: &str, args: &str) -> Result<Self, QueueError> {
        let discipline = match kind {
            "infinite" => Discipline::Infinite,
            "droptail" => Discipline::DropTail,
            "drophead" => Discipline::DropHead,
            other => return Err(QueueError::UnknownType(other.to_string())),
        };
        let mut cfg = Self {
            discipline,
            bytes: None,
            packets: None,
        };
        for arg in args.split(',').map(str::trim).filter(|a| !a.is_empty()) {
            let (key, value) = arg
                .split_once('=')
                .ok_or_else(|| QueueError::BadArg(arg.to_string()))?;
            let n: u64 = value
                .parse()
                .map_err(|_| QueueError::BadArg(arg.to_string()))?;
            match key {
                "bytes" => cfg.bytes = Some(n),
                "packets" => cfg.packets = Some(n),
                _ => return Err(QueueError::BadArg(arg.to_string())),
            }
        }
        match discipline {
            Discipline::Infinite => Ok(Self::INFINITE),
            Discipline::DropTail if cfg.bytes.is_none() && cfg.packets.is_none() => {
                Err(QueueError::NoLimit("droptail"))
            }
            Discipline::DropHead if cfg.bytes.is_none() && cfg.packets.is_none() => {
                Err(QueueError::NoLimit("drophead"))
            }
            _ => Ok(cfg),
        }
    }

    /// Mahimahi-style description for the log header, e.g. `droptail [bytes=720000]`.
    pub fn describe(&self) -> String {
        let name = match self.discipline {
            Discipline::Infinite => return "infinite".to_string(),
            Discipline::DropTail => "droptail",
            Discipline::DropHead => "drophead",
        };
        let mut args = Vec::new();
        if let Some(b) = self.bytes {
            args.push(format!("bytes={b}"));
        }
        if let Some(p) = self.packets {
            args.push(format!("packets={p}"));
        }
        format!("{name} [{}]", args.join(", "))
    }

    fn within(&self, bytes: u64, packets: u64) -> bool {
        self.bytes.is_none_or(|b| bytes <= b) && self.packets.is_none_or(|p| packets <= p)
    }
}

/// A queued packet and its arrival time (µs since link start).
#[derive(Debug)]
pub struct Queued<P> {
    /// Arrival time, µs.
    pub arrival_us: u64,
    /// Size in bytes (including the 4-byte TUN header).
    pub size: u64,
    /// The packet itself.
    pub packet: P,
}

/// A FIFO with a drop discipline. Generic over the packet type so tests use plain markers.
#[derive(Debug)]
pub struct PacketQueue<P> {
    cfg: QueueConfig,
    items: VecDeque<Queued<P>>,
    bytes: u64,
}

impl<P> PacketQueue<P> {
    /// An empty queue.
    pub fn new(cfg: QueueConfig) -> Self {
        Self {
            cfg,
            items: VecDeque::new(),
            bytes: 0,
        }
    }

    /// Enqueues a packet; returns the packets dropped (the arriving one for droptail, head
    /// packets for drophead). Afterwards the queue is within its limits.
    pub fn enqueue(&mut self, item: Queued<P>) -> Vec<Queued<P>> {
        let mut dropped = Vec::new();
        match self.cfg.discipline {
            Discipline::Infinite => self.push(item),
            Discipline::DropTail => {
                let fits = self
                    .cfg
                    .within(self.bytes + item.size, self.items.len() as u64 + 1);
                if fits {
                    self.push(item);
                } else {
                    dropped.push(item);
                }
            }
            Discipline::DropHead => {
                self.push(item);
                while !self.cfg.within(self.bytes, self.items.len() as u64) {
                    match self.dequeue() {
                        Some(head) => dropped.push(head),
                        None => break,
                    }
                }
            }
        }
        dropped
    }

    fn push(&mut self, item: Queued<P>) {
        self.bytes += item.size;
        self.items.push_back(item);
    }

    /// Removes the head packet.
    pub fn dequeue(&mut self) -> Option<Queued<P>> {
        let item = self.items.pop_front()?;
        self.bytes -= item.size;
        Some(item)
    }

    /// Bytes queued.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Packets queued.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// True when nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn q(arrival_us: u64, size: u64) -> Queued<u64> {
        Queued {
            arrival_us,
            size,
            packet: arrival_us,
        }
    }

    #[test]
    fn parses_mahimahi_arguments() {
        let c = QueueConfig::from_mahimahi("droptail", "bytes=720000").expect("valid");
        assert_eq!(c.bytes, Some(720_000));
        assert_eq!(c.describe(), "droptail [bytes=720000]");
        let c = QueueConfig::from_mahimahi("drophead", "packets=10, bytes=5000").expect("valid");
        assert_eq!((c.packets, c.bytes), (Some(10), Some(5000)));
        assert_eq!(
            QueueConfig::from_mahimahi("droptail", ""),
            Err(QueueError::NoLimit("droptail"))
        );
        assert!(QueueConfig::from_mahimahi("codel", "").is_err());
        assert!(QueueConfig::from_mahimahi("droptail", "bytes=x").is_err());
    }

    #[test]
    fn droptail_drops_the_arriving_packet() {
        let cfg = QueueConfig::from_mahimahi("droptail", "bytes=3008").expect("valid");
        let mut queue = PacketQueue::new(cfg);
        assert!(queue.enqueue(q(1, 1504)).is_empty());
        assert!(queue.enqueue(q(2, 1504)).is_empty());
        let dropped = queue.enqueue(q(3, 1504));
        assert_eq!(dropped.len(), 1);
        assert_eq!(dropped[0].packet, 3);
        // A small packet still fits.
        let dropped = queue.enqueue(q(4, 56));
        assert_eq!(dropped.len(), 1, "3008 + 56 exceeds 3008");
        assert_eq!(queue.dequeue().map(|p| p.packet), Some(1));
    }

    #[test]
    fn drophead_drops_the_oldest_packets() {
        let cfg = QueueConfig::from_mahimahi("drophead", "packets=2").expect("valid");
        let mut queue = PacketQueue::new(cfg);
        queue.enqueue(q(1, 100));
        queue.enqueue(q(2, 100));
        let dropped = queue.enqueue(q(3, 100));
        assert_eq!(dropped.iter().map(|p| p.packet).collect::<Vec<_>>(), [1]);
        assert_eq!(queue.dequeue().map(|p| p.packet), Some(2));
    }

    proptest! {
        #[test]
        fn never_exceeds_its_limits_and_conserves_packets(
            head in any::<bool>(),
            limit_bytes in proptest::option::of(1u64..20_000),
            limit_packets in proptest::option::of(1u64..20),
            ops in proptest::collection::vec((any::<bool>(), 40u64..1505), 1..300),
        ) {
            prop_assume!(limit_bytes.is_some() || limit_packets.is_some());
            let cfg = QueueConfig {
                discipline: if head { Discipline::DropHead } else { Discipline::DropTail },
                bytes: limit_bytes,
                packets: limit_packets,
            };
            let mut queue = PacketQueue::new(cfg);
            let (mut arrived, mut left, mut dropped) = (0usize, 0usize, 0usize);
            for (i, (is_enqueue, size)) in ops.into_iter().enumerate() {
                if is_enqueue {
                    arrived += 1;
                    dropped += queue.enqueue(q(i as u64, size)).len();
                } else if queue.dequeue().is_some() {
                    left += 1;
                }
                prop_assert!(limit_bytes.is_none_or(|b| queue.bytes() <= b));
                prop_assert!(limit_packets.is_none_or(|p| queue.len() as u64 <= p));
                prop_assert_eq!(arrived, left + dropped + queue.len());
            }
        }
    }
}
