//! What a connection's controller and the host thread share, and what they tell each other.
//!
//! The controller lives on quinn's side (any thread, `Send + Sync`), libccp on the host
//! thread (not `Send`). The controller sends [`Event`]s over a channel; the host thread
//! publishes libccp's decisions in the flow's [`Decision`] atomics and its own liveness in
//! [`HostClock`], which the controller reads on every `window()` call.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::mpsc::Sender;
use std::time::{Duration, Instant};

use algs_core::AckPrimitives;

use crate::priority::Priority;

/// How long a decision counts after the host last heard the agent (or last ran): longer
/// silence hands every flow to its fallback.
pub const AGENT_SILENCE: Duration = Duration::from_millis(200);

/// A flow's number inside this process (libccp's sid is known only on the host thread,
/// once its Create went out).
pub type FlowId = u64;

/// libccp's latest window and rate for a flow, as far as the agent steers it now.
#[derive(Debug, Default)]
pub struct Decision {
    /// Window, bytes; 0: none.
    cwnd_bytes: AtomicU32,
    /// Pacing rate, bytes/s; 0: none.
    rate_bytes_per_sec: AtomicU32,
}

impl Decision {
    pub fn get(&self) -> (u32, u32) {
        (
            self.cwnd_bytes.load(Ordering::Relaxed),
            self.rate_bytes_per_sec.load(Ordering::Relaxed),
        )
    }

    pub fn set(&self, cwnd_bytes: u32, rate_bytes_per_sec: u32) {
        self.cwnd_bytes.store(cwnd_bytes, Ordering::Relaxed);
        self.rate_bytes_per_sec
            .store(rate_bytes_per_sec, Ordering::Relaxed);
    }
}

/// The host thread's promise that decisions are fresh, as a deadline on a shared clock.
#[derive(Debug)]
pub struct HostClock {
    /// Time zero of `steers_until_us`.
    origin: Instant,
    /// Until when (µs after `origin`) published decisions hold; 0: not at all.
    steers_until_us: AtomicU64,
}

impl HostClock {
    pub fn new() -> Self {
        HostClock {
            origin: Instant::now(),
            steers_until_us: AtomicU64::new(0),
        }
    }

    fn micros(&self, t: Instant) -> u64 {
        u64::try_from(t.saturating_duration_since(self.origin).as_micros()).unwrap_or(u64::MAX)
    }

    /// The agent was heard at `heard`: decisions hold until `AGENT_SILENCE` after it.
    pub fn agent_heard(&self, heard: Instant) {
        let until = self.micros(heard + AGENT_SILENCE);
        self.steers_until_us.fetch_max(until, Ordering::Relaxed);
    }

    /// The agent is gone: no decision holds from now on.
    pub fn agent_lost(&self) {
        self.steers_until_us.store(0, Ordering::Relaxed);
    }

    /// Whether the agent's decisions hold at `now`.
    pub fn steers(&self, now: Instant) -> bool {
        self.micros(now) < self.steers_until_us.load(Ordering::Relaxed)
    }
}

impl Default for HostClock {
    fn default() -> Self {
        Self::new()
    }
}

/// What a connection tells libccp when it joins: its Create.
#[derive(Debug, Clone, Copy)]
pub struct FlowStart {
    /// This end of the connection.
    pub local: SocketAddr,
    /// The peer.
    pub remote: SocketAddr,
    /// Datagram size, bytes.
    pub mss_bytes: u32,
    /// The window at attach time, bytes.
    pub init_cwnd_bytes: u32,
}

/// One batch of acknowledgements (one ACK frame).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AckSample {
    /// In libccp's units: bytes and datagrams this frame acknowledged, datagrams declared
    /// lost since the last sample, persistent congestion (RFC 9002 §7.6) as `was_timeout`,
    /// the latest RTT, quinn's bytes in flight after the frame (and in datagrams, rounded
    /// up), the window the controller used.
    pub prims: AckPrimitives,
    /// The window came from the fallback, not from the agent.
    pub in_fallback: bool,
}

/// What a controller or an application tells the host thread.
#[derive(Debug)]
pub enum Event {
    /// A connection joins CCP: start a libccp connection (its Create goes out).
    Attach {
        id: FlowId,
        start: FlowStart,
        decision: Arc<Decision>,
    },
    Ack {
        id: FlowId,
        sample: AckSample,
    },
    Priority {
        id: FlowId,
        priority: Priority,
    },
    /// The connection is gone: libccp sends its close.
    Closed {
        id: FlowId,
    },
    /// The datapath is shutting down.
    Stop,
}

/// A connection's membership in CCP, shared by its controller and the controller's clones.
/// Dropping the last one closes the flow.
#[derive(Debug)]
pub struct FlowLease {
    pub id: FlowId,
    /// The host thread's event queue.
    pub events: Sender<Event>,
    /// libccp's decisions for this flow, written by the host thread.
    pub decision: Arc<Decision>,
    /// The host thread's promise that those decisions are fresh.
    pub clock: Arc<HostClock>,
    /// Set once the application attached the connection: events flow from then on.
    pub attached: AtomicBool,
    /// Bytes of datagrams the peer acknowledged, for applications' statistics.
    pub acked_bytes: AtomicU64,
    /// Bytes of datagrams declared lost.
    pub lost_bytes: AtomicU64,
    /// Window in force, bytes, as last computed by the controller.
    pub window_bytes: AtomicU64,
    /// Whether that window was the agent's.
    pub steered: AtomicBool,
}

/// Makes the lease of each new connection.
#[derive(Debug, Clone)]
pub struct Leases {
    /// The host thread's event queue.
    pub events: Sender<Event>,
    /// The host thread's promise of fresh decisions.
    pub clock: Arc<HostClock>,
    /// The next flow's id.
    pub next_id: Arc<AtomicU64>,
}

impl Leases {
    pub fn new_lease(&self) -> Arc<FlowLease> {
        Arc::new(FlowLease {
            id: self.next_id.fetch_add(1, Ordering::Relaxed),
            events: self.events.clone(),
            decision: Arc::default(),
            clock: self.clock.clone(),
            attached: AtomicBool::new(false),
            acked_bytes: AtomicU64::new(0),
            lost_bytes: AtomicU64::new(0),
            window_bytes: AtomicU64::new(0),
            steered: AtomicBool::new(false),
        })
    }
}

impl FlowLease {
    pub fn is_attached(&self) -> bool {
        self.attached.load(Ordering::Relaxed)
    }

    /// Sends an event to the host thread; a host that has stopped has nothing to steer.
    pub fn send(&self, ev: Event) {
        let _ = self.events.send(ev);
    }
}

impl Drop for FlowLease {
    fn drop(&mut self) {
        if self.is_attached() {
            self.send(Event::Closed { id: self.id });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decisions_hold_for_the_silence_window_after_the_agent_was_heard() {
        let c = HostClock::new();
        let t = Instant::now();
        assert!(!c.steers(t), "nothing holds before the agent was heard");
        c.agent_heard(t);
        assert!(c.steers(t + AGENT_SILENCE - Duration::from_millis(1)));
        assert!(!c.steers(t + AGENT_SILENCE + Duration::from_millis(1)));
        c.agent_lost();
        assert!(!c.steers(t));
    }
}
