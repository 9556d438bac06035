//! Whether the agent is there, for any CCP agent.
//!
//! `ccp-agent` echoes SYNC (type 0x21, `datapath-setup/wire`); a stock portus agent drops
//! it as an unknown message. So any message from the agent is a sign of life; silence
//! counts against an agent only once it has echoed a SYNC (a stock agent with idle flows
//! has nothing to say); and an agent that never echoes is lost only when a send to it
//! fails (its socket is gone, or its queue stays full for `outbox::STALL_NS`; a full queue
//! alone only delays messages).
//!
//! ```text
//!  Alive ──send failed, or SYNC-echoing agent silent > AGENT_SILENCE_NS──► Lost
//!  Lost ──any message from the agent──────────────────────────────────────► Alive (resync)
//!  Lost ──a probe reached the socket (loss was not silence)───────────────► Alive (resync)
//! ```
//! A silent agent is found again only by a message: its socket still takes probes while
//! it hangs, so a successful send proves nothing about it.

/// How often the agent is probed with SYNC.
pub const PROBE_INTERVAL_NS: u64 = 100_000_000;
/// An agent that echoes SYNC and has said nothing for this long is gone.
pub const AGENT_SILENCE_NS: u64 = 500_000_000;

/// Why the agent was declared lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Loss {
    /// A send failed: nobody is bound at its address or it stopped reading.
    SendFailed,
    /// It echoed SYNC before and then went silent.
    Silence,
    /// It answered that it has no Ready from this datapath: a new agent at the old address.
    Forgot,
}

/// The daemon's view of its agent; every time is CLOCK_MONOTONIC in ns.
#[derive(Debug, Clone)]
pub struct Liveness {
    /// `None` while the agent is believed alive.
    lost: Option<Loss>,
    /// When the agent was last found (start or resync).
    found_ns: u64,
    /// When the agent last sent anything.
    last_heard_ns: u64,
    /// The current agent has echoed at least one SYNC.
    echoes_sync: bool,
}

impl Liveness {
    /// At start the agent is presumed alive, as libccp sends Ready at once.
    pub fn new(now_ns: u64) -> Self {
        Liveness {
            lost: None,
            found_ns: now_ns,
            last_heard_ns: now_ns,
            echoes_sync: false,
        }
    }

    pub fn alive(&self) -> bool {
        self.lost.is_none()
    }

    pub fn echoes_sync(&self) -> bool {
        self.echoes_sync
    }

    /// A message from the agent (`sync_echo`: it was a SYNC). True when this finds a
    /// lost agent again, so the caller resyncs.
    pub fn heard(&mut self, now_ns: u64, sync_echo: bool) -> bool {
        self.last_heard_ns = now_ns;
        self.echoes_sync |= sync_echo;
        let found = self.lost.is_some();
        if found {
            self.found(now_ns);
        }
        found
    }

    /// A probe reached the agent's socket. True when that finds a lost agent again.
    pub fn reached(&mut self, now_ns: u64) -> bool {
        let found = self.lost == Some(Loss::SendFailed);
        if found {
            self.found(now_ns);
        }
        found
    }

    fn found(&mut self, now_ns: u64) {
        self.lost = None;
        self.found_ns = now_ns;
        self.last_heard_ns = now_ns;
    }

    /// Whether a SYNC probe should go out: to a lost agent (to find it), to one that echoes
    /// them, and to a newly found one until it has had the silence window to echo one. A
    /// stock agent is not probed after that, so it does not log unknown messages forever.
    pub fn wants_probe(&self, now_ns: u64) -> bool {
        !self.alive() || self.echoes_sync || now_ns < self.found_ns + AGENT_SILENCE_NS
    }

    /// Whether a SYNC-echoing agent has been silent too long.
    pub fn silent(&self, now_ns: u64) -> bool {
        self.alive() && self.echoes_sync && now_ns > self.last_heard_ns + AGENT_SILENCE_NS
    }

    /// Declares the agent lost. A later agent may be another program, so whether it echoes
    /// SYNC is found out again (except after silence, which only an echo can end).
    pub fn lose(&mut self, why: Loss) {
        self.lost = Some(why);
        if why == Loss::SendFailed {
            self.echoes_sync = false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn a_stock_agent_that_never_echoes_stays_alive_and_is_probed_only_at_first() {
        let mut l = Liveness::new(0);
        assert!(l.wants_probe(100 * MS));
        // It answers a Create with an Install, never a SYNC.
        l.heard(50 * MS, false);
        for t in (0..60).map(|i| i * 100 * MS) {
            assert!(!l.silent(t), "declared lost at {t} ns");
        }
        assert!(l.alive() && !l.echoes_sync());
        assert!(!l.wants_probe(AGENT_SILENCE_NS + MS));
    }

    #[test]
    fn an_echoing_agent_is_lost_after_the_silence_window_and_found_by_its_next_message() {
        let mut l = Liveness::new(0);
        l.heard(100 * MS, true);
        assert!(l.wants_probe(10_000 * MS));
        assert!(!l.silent(100 * MS + AGENT_SILENCE_NS));
        assert!(l.silent(101 * MS + AGENT_SILENCE_NS));
        l.lose(Loss::Silence);
        // Its socket still takes probes while it hangs: that does not find it.
        assert!(!l.reached(700 * MS) && !l.alive());
        assert!(l.heard(800 * MS, true) && l.alive());
        // Found: the silence window starts again.
        assert!(!l.silent(800 * MS + AGENT_SILENCE_NS));
    }

    #[test]
    fn after_a_failed_send_the_next_probe_that_reaches_a_socket_finds_the_agent() {
        let mut l = Liveness::new(0);
        l.heard(10 * MS, true);
        l.lose(Loss::SendFailed);
        assert!(!l.alive() && l.wants_probe(20 * MS) && !l.echoes_sync());
        assert!(l.reached(30 * MS) && l.alive());
        // The new agent must show again that it speaks SYNC before silence counts.
        assert!(!l.silent(30 * MS + 2 * AGENT_SILENCE_NS));
        assert!(!l.reached(40 * MS), "an alive agent is not found twice");
    }
}
