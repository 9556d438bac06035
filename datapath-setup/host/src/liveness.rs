//! Whether the agent is there, for any CCP agent and any datapath.
//!
//! `ccp-agent` echoes SYNC (type 0x21, `datapath-setup/wire`); a stock portus agent drops
//! it as an unknown message. So any message from the agent is a sign of life; silence
//! counts against an agent only once it has echoed a SYNC (a stock agent with idle flows
//! has nothing to say); and an agent that never echoes is lost only when a send to it
//! fails (its socket is gone, or its queue stays full for `outbox::STALL_NS`; a full queue
//! alone only delays messages).
//!
//! ```text
//!  Alive ──send failed, or SYNC-echoing agent silent > silence window──► Lost
//!  Alive ──"no Ready from you" answer to a probe sent after the resync──► Lost (Forgot)
//!  Lost ──any message from the agent────────────────────────────────────► Alive (resync)
//!  Lost ──a probe reached the socket (loss was a failed send)────────────► Alive (resync)
//! ```
//! A silent agent is found again only by a message: its socket still takes probes while
//! it hangs, so a successful send proves nothing about it.
//!
//! Every time is in ns on one monotonic clock of the datapath's choosing. The datapath
//! keeps the side effects: its fallback on a loss, Ready and the Creates on a resync.

use crate::outbox::Flushed;

/// What a flush to the agent's socket says about the agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterFlush {
    /// Nothing new.
    Unchanged,
    /// The send failed: the caller loses the agent (`Loss::SendFailed`).
    Lost,
    /// A probe reached the socket of an agent lost by a failed send: found, resync.
    Found,
}

/// The datapath's windows, ns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    /// How often the agent is probed with SYNC.
    pub probe_interval_ns: u64,
    /// An agent that echoes SYNC and has said nothing for this long is gone.
    pub silence_ns: u64,
}

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

/// A datapath's view of its agent.
#[derive(Debug, Clone)]
pub struct Liveness {
    timing: Timing,
    /// `None` while the agent is believed alive.
    lost: Option<Loss>,
    /// When the agent was last found (start or resync).
    found_ns: u64,
    /// When the agent last sent anything.
    last_heard_ns: u64,
    /// The current agent has echoed at least one SYNC.
    echoes_sync: bool,
    /// When the next probe interval starts.
    next_probe_ns: u64,
    /// The last probe's token.
    probe_token: u64,
    /// The last probe sent before the last resync: "unknown datapath" answers to it and
    /// earlier ones predate the Ready that resync sent.
    resync_token: u64,
    /// A probe was queued and has not reached the agent's socket yet.
    probe_waiting: bool,
}

impl Liveness {
    /// At start the agent is presumed alive, as libccp sends Ready at once; the first
    /// probe interval starts now.
    pub fn new(now_ns: u64, timing: Timing) -> Self {
        Liveness {
            timing,
            lost: None,
            found_ns: now_ns,
            last_heard_ns: now_ns,
            echoes_sync: false,
            next_probe_ns: now_ns,
            probe_token: 0,
            resync_token: 0,
            probe_waiting: false,
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

    /// A flush of everything queued for the agent (on every socket the datapath has)
    /// ended so. While the agent is lost the queues hold nothing but probes, so an emptied
    /// queue after a probe is how an agent whose socket had gone is found again, also one
    /// that never speaks first (a stock portus agent).
    pub fn flushed(&mut self, now_ns: u64, outcome: Flushed) -> AfterFlush {
        match outcome {
            Flushed::Lost => {
                // The probe went with the lost queue: an empty queue next time proves nothing.
                self.probe_waiting = false;
                AfterFlush::Lost
            }
            Flushed::All if std::mem::take(&mut self.probe_waiting) => {
                if self.lost == Some(Loss::SendFailed) {
                    self.found(now_ns);
                    AfterFlush::Found
                } else {
                    AfterFlush::Unchanged
                }
            }
            Flushed::All | Flushed::Some => AfterFlush::Unchanged,
        }
    }

    fn found(&mut self, now_ns: u64) {
        self.lost = None;
        self.found_ns = now_ns;
        self.last_heard_ns = now_ns;
        self.resync_token = self.probe_token;
    }

    /// Whether a probe interval has ended; the next one starts now.
    pub fn probe_due(&mut self, now_ns: u64) -> bool {
        let due = now_ns >= self.next_probe_ns;
        if due {
            self.next_probe_ns = now_ns + self.timing.probe_interval_ns;
        }
        due
    }

    /// The token of a SYNC probe to queue now, if one should go out: to a lost agent (to
    /// find it), to one that echoes them, and to a newly found one until it has had the
    /// silence window to echo one. A stock agent is not probed after that, so it does not
    /// log unknown messages forever.
    pub fn probe(&mut self, now_ns: u64) -> Option<u64> {
        let wanted =
            !self.alive() || self.echoes_sync || now_ns < self.found_ns + self.timing.silence_ns;
        wanted.then(|| {
            self.probe_token += 1;
            self.probe_waiting = true;
            self.probe_token
        })
    }

    /// Whether a SYNC answer says that the agent at the address has no Ready from this
    /// datapath: a new agent that must be lost (`Loss::Forgot`) and resynced at once.
    /// Answers to probes sent before the last resync may still say so, and are ignored.
    pub fn forgot_by(&self, sid: u32, token: u64) -> bool {
        sid == ccp_wire::SYNC_SID_UNKNOWN_DATAPATH && token > self.resync_token
    }

    /// Whether a SYNC-echoing agent has been silent too long.
    pub fn silent(&self, now_ns: u64) -> bool {
        self.alive() && self.echoes_sync && now_ns > self.last_heard_ns + self.timing.silence_ns
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
    use ccp_wire::SYNC_SID_UNKNOWN_DATAPATH;

    const MS: u64 = 1_000_000;
    const SILENCE: u64 = 500 * MS;
    const TIMING: Timing = Timing {
        probe_interval_ns: 100 * MS,
        silence_ns: SILENCE,
    };

    #[test]
    fn a_stock_agent_that_never_echoes_stays_alive_and_is_probed_only_at_first() {
        let mut l = Liveness::new(0, TIMING);
        assert_eq!(l.probe(100 * MS), Some(1));
        // It answers a Create with an Install, never a SYNC.
        l.heard(50 * MS, false);
        for t in (0..60).map(|i| i * 100 * MS) {
            assert!(!l.silent(t), "declared lost at {t} ns");
        }
        assert!(l.alive() && !l.echoes_sync());
        assert_eq!(l.probe(SILENCE + MS), None);
    }

    #[test]
    fn an_echoing_agent_is_lost_after_the_silence_window_and_found_by_its_next_message() {
        let mut l = Liveness::new(0, TIMING);
        l.heard(100 * MS, true);
        assert!(l.probe(10_000 * MS).is_some());
        assert!(!l.silent(100 * MS + SILENCE));
        assert!(l.silent(101 * MS + SILENCE));
        l.lose(Loss::Silence);
        // Its socket still takes probes while it hangs: that does not find it.
        assert!(l.probe(700 * MS).is_some());
        assert_eq!(l.flushed(700 * MS, Flushed::All), AfterFlush::Unchanged);
        assert!(!l.alive());
        assert!(l.heard(800 * MS, true) && l.alive());
        // Found: the silence window starts again.
        assert!(!l.silent(800 * MS + SILENCE));
    }

    #[test]
    fn after_a_failed_send_the_next_probe_that_reaches_a_socket_finds_the_agent() {
        let mut l = Liveness::new(0, TIMING);
        l.heard(10 * MS, true);
        l.lose(Loss::SendFailed);
        assert!(!l.alive() && l.probe(20 * MS).is_some() && !l.echoes_sync());
        // Messages still wait behind the probe: nothing is known yet.
        assert_eq!(l.flushed(25 * MS, Flushed::Some), AfterFlush::Unchanged);
        assert_eq!(l.flushed(30 * MS, Flushed::All), AfterFlush::Found);
        assert!(l.alive());
        // The new agent must show again that it speaks SYNC before silence counts.
        assert!(!l.silent(30 * MS + 2 * SILENCE));
        assert!(l.probe(40 * MS).is_some());
        assert_eq!(
            l.flushed(40 * MS, Flushed::All),
            AfterFlush::Unchanged,
            "an alive agent is not found twice"
        );
    }

    #[test]
    fn a_probe_lost_with_its_queue_does_not_find_the_agent_at_the_next_empty_queue() {
        let mut l = Liveness::new(0, TIMING);
        l.lose(Loss::SendFailed);
        assert!(l.probe(10 * MS).is_some());
        assert_eq!(l.flushed(10 * MS, Flushed::Lost), AfterFlush::Lost);
        assert_eq!(l.flushed(20 * MS, Flushed::All), AfterFlush::Unchanged);
        assert!(!l.alive());
        // The next probe that gets through does.
        assert!(l.probe(110 * MS).is_some());
        assert_eq!(l.flushed(110 * MS, Flushed::All), AfterFlush::Found);
    }

    #[test]
    fn probe_intervals_start_at_once_and_then_every_interval() {
        let mut l = Liveness::new(5 * MS, TIMING);
        assert!(l.probe_due(5 * MS));
        assert!(!l.probe_due(104 * MS));
        assert!(l.probe_due(105 * MS));
    }

    #[test]
    fn a_new_agent_at_the_old_address_is_told_by_answers_to_probes_after_the_resync() {
        let mut l = Liveness::new(0, TIMING);
        let before = l.probe(0).expect("a first probe");
        assert!(!l.forgot_by(ccp_wire::SYNC_SID_READS_BATCHES, before));
        assert!(l.forgot_by(SYNC_SID_UNKNOWN_DATAPATH, before));
        l.lose(Loss::Forgot);
        assert!(l.heard(MS, true), "its answer finds it at once");
        // The answer to a probe that left before the Ready of that resync says the same.
        assert!(!l.forgot_by(SYNC_SID_UNKNOWN_DATAPATH, before));
        let after = l.probe(2 * MS).expect("probed");
        assert!(l.forgot_by(SYNC_SID_UNKNOWN_DATAPATH, after));
    }
}
