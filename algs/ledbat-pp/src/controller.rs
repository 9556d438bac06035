//! The per-flow LEDBAT++ state machine (docs/algorithms/ledbat-pp.md §2, §3, §5.3): one report in, one
//! window out. Time is the datapath's (`Ack.now` of the report), never a clock.

use crate::base_delay::BaseDelayHistory;
use crate::model::{
    avoidance_delta, gain_divisor, libutp_ack_update, next_slowdown, queuing_delay,
    slow_start_delay_exit, slow_start_growth,
};
use crate::params::{
    CWND_LIMITED_SLACK_SEGMENTS, Config, FALLBACK_RTT, HandOffWindow, LIBUTP_LOSS_HOLDOFF,
    LIBUTP_MIN_CWND_BYTES, LIBUTP_MSS_BYTES, LIBUTP_WINDOW_FULL_WITHIN, MIN_CWND_SEGMENTS,
    RECOVERY_MAX_RTTS, RttForTimers, SLOWDOWN_FREEZE_RTTS, SRTT_GAIN,
};
use algs_core::metrics::FlowMetrics;
use algs_core::{Bytes, CarriedState, Decision, Micros, Priority};

/// The MSS assumed when the datapath announces 0 (the default MSS of docs/algorithms/ledbat-pp.md §7).
const FALLBACK_MSS: u64 = 1500;

/// The largest window the datapath's `Cwnd` register can hold (u32 bytes; docs/algorithms/ledbat-pp.md §5.4 item 7).
const MAX_CWND_BYTES: f64 = u32::MAX as f64;

/// The libutp-compat profile replays a report's acked bytes as at most this many MSS-sized
/// ACKs, so that a bogus `acked` cannot stall the agent.
const LIBUTP_MAX_REPLAYED_ACKS: u64 = 4096;

/// One report of the datapath program, typed (fields in `datapath.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Measurement {
    /// Bytes acknowledged during the interval.
    pub acked: Bytes,
    /// Packets the datapath declared lost during the interval.
    pub lost_packets: u64,
    /// The datapath saw a retransmission timeout.
    pub timeout: bool,
    /// Smallest valid RTT sample of the interval (feeds the base history; docs/algorithms/ledbat-pp.md §1.2 REC).
    pub min_rtt: Option<Micros>,
    /// Current delay: the minimum of the last 4 (libutp profile: 3) valid samples, kept by
    /// the datapath across intervals (docs/algorithms/ledbat-pp.md §1.3).
    pub cur_delay: Option<Micros>,
    /// The last valid RTT sample (for the smoothed RTT).
    pub last_rtt: Option<Micros>,
    /// Largest bytes in flight at an ACK of the interval (cwnd-limited test, docs/algorithms/ledbat-pp.md §2.3).
    pub max_flight: Bytes,
}

/// Where the flow is; each state carries the times it needs (docs/algorithms/ledbat-pp.md §3.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Initial, GAIN-scaled slow start with the 3/4·T delay exit.
    SlowStart,
    /// Congestion avoidance; the next slowdown is due at `next_slowdown`.
    Avoidance { next_slowdown: Micros },
    /// Slowdown, W held at the minimum until `until`; `entry` starts the duration D.
    Freeze { entry: Micros, until: Micros },
    /// Slowdown, slow start back to the saved window (ssthresh).
    Ramp { entry: Micros, ramp_start: Micros },
    /// Slow start after a retransmission timeout, without the delay exit; treated as a
    /// slowdown that began at `rto_at` (docs/algorithms/ledbat-pp.md §2.5 REC).
    RtoSlowStart { rto_at: Micros },
}

impl State {
    /// The name used in the flow trace.
    pub fn name(&self) -> &'static str {
        match self {
            State::SlowStart => "slow_start",
            State::Avoidance { .. } => "avoidance",
            State::Freeze { .. } => "slowdown_freeze",
            State::Ramp { .. } => "slowdown_ramp",
            State::RtoSlowStart { .. } => "rto_slow_start",
        }
    }
}

/// One flow's LEDBAT++ controller.
#[derive(Debug, Clone)]
pub struct Controller {
    cfg: Config,
    /// Sender MSS, bytes.
    mss: f64,
    /// Minimum window, bytes (2 MSS; libutp profile 3000 B).
    min_cwnd: f64,
    /// Congestion window W, bytes (f64 so that small increments are not lost; docs/algorithms/ledbat-pp.md §5.4).
    w: f64,
    /// Slow-start threshold, bytes; during a slowdown the saved pre-slowdown window.
    ssthresh: f64,
    state: State,
    /// Base delay history (minimum RTT per minute).
    base: BaseDelayHistory,
    /// Smallest RTT seen over the flow's life (libutp's GAIN and timers).
    lifetime_min_rtt: Option<Micros>,
    /// Smoothed RTT, µs.
    srtt_us: Option<f64>,
    /// Current delay from the last report that had one.
    cur_delay: Option<Micros>,
    /// Time of the last loss or timeout reduction.
    last_cut: Option<Micros>,
    /// Bytes of the flight at the last loss cut not yet acked or declared lost: losses
    /// before they are resolved belong to the same congestion event.
    recovery_left: f64,
    /// Last time the window was found full (libutp profile's increase rule).
    last_window_full: Option<Micros>,
    /// Datapath time of the latest report (of the hand-off for a flow started from a
    /// carried state; 0 before either): the time of a hand-off that has none of its own.
    now: Micros,
    /// The latest report's measurement, for the trace (why the window did or did not grow).
    last: Measurement,
    /// The priority the application asked for last, for the trace (the flow stays a
    /// scavenger whatever it is; hand-offs are the glue's).
    priority: Priority,
}

impl Controller {
    /// A new flow: W = 2 packets, initial slow start (draft §4.1).
    pub fn new(cfg: Config, priority: Priority, mss: Bytes) -> Self {
        let mss = if mss.0 == 0 { FALLBACK_MSS } else { mss.0 } as f64;
        let min_cwnd = if cfg.is_libutp() {
            LIBUTP_MIN_CWND_BYTES.max(MIN_CWND_SEGMENTS * mss)
        } else {
            MIN_CWND_SEGMENTS * mss
        };
        Controller {
            cfg,
            mss,
            min_cwnd,
            w: min_cwnd,
            ssthresh: f64::INFINITY,
            state: State::SlowStart,
            base: BaseDelayHistory::new(cfg.base_history()),
            lifetime_min_rtt: None,
            srtt_us: None,
            cur_delay: None,
            last_cut: None,
            recovery_left: 0.0,
            last_window_full: None,
            now: Micros::ZERO,
            last: Measurement::default(),
            priority,
        }
    }

    /// A flow handed over from a primary (docs/algorithms/ledbat-pp.md §6, REC): avoidance with the primary's window,
    /// its RTT knowledge, no new initial slow start, and a slowdown soon (2 RTT) so that the
    /// queue the primary built is measured.
    pub fn start_from(cfg: Config, priority: Priority, mss: Bytes, carried: &CarriedState) -> Self {
        let mut c = Controller::new(cfg, priority, mss);
        c.now = carried.at;
        c.w = (carried.cwnd.0 as f64).clamp(c.min_cwnd, MAX_CWND_BYTES);
        c.ssthresh = carried
            .ssthresh
            .map_or(c.w, |s| (s.0 as f64).clamp(c.min_cwnd, MAX_CWND_BYTES));
        if let Some(min_rtt) = carried.min_rtt.filter(|r| r.0 > 0) {
            c.base.update(carried.at, min_rtt);
            c.lifetime_min_rtt = Some(min_rtt);
        }
        c.srtt_us = carried.srtt.filter(|r| r.0 > 0).map(|r| r.0 as f64);
        c.state = State::Avoidance {
            next_slowdown: carried.at + rtts(c.timer_rtt(), SLOWDOWN_FREEZE_RTTS),
        };
        c
    }

    /// Runs the state machine on one report (docs/algorithms/ledbat-pp.md §5.3).
    pub fn on_report(&mut self, now: Micros, m: &Measurement) -> Decision {
        self.now = now;
        self.last = *m;
        self.update_delays(now, m);
        if m.timeout {
            self.enter_rto(now);
            return self.decision();
        }
        // Whether the flight of the last cut was still unresolved when this report's interval
        // began: its losses may then be drops of that flight, revealed late.
        let in_recovery = self.recovery_left > 0.0;
        let resolved = m.acked.0 as f64 + m.lost_packets as f64 * self.mss;
        self.recovery_left = (self.recovery_left - resolved).max(0.0);
        if m.lost_packets > 0 {
            // A repeat loss of the same event is ignored; no growth either way.
            if !self.check_loss_holdoff(now, in_recovery) {
                let flight = if m.max_flight.0 > 0 {
                    m.max_flight.0 as f64
                } else {
                    self.w
                };
                self.enter_loss(now);
                self.recovery_left = flight;
            }
            return self.decision();
        }
        let growth_allowed = self.check_window_used(now, m);
        let (Some(q), Some(gain)) = (self.queuing_delay(), self.gain()) else {
            return self.decision();
        };
        match self.state {
            State::SlowStart => self.update_initial_slow_start(now, m, q, gain, growth_allowed),
            State::RtoSlowStart { rto_at } => {
                self.update_slow_start(m, q, gain, growth_allowed);
                if self.w >= self.ssthresh {
                    self.w = self.ssthresh;
                    let next = if self.cfg.is_libutp() {
                        self.in_rtts(now, SLOWDOWN_FREEZE_RTTS)
                    } else {
                        next_slowdown(now, now.since(rto_at))
                    };
                    self.state = State::Avoidance {
                        next_slowdown: next,
                    };
                }
            }
            State::Freeze { entry, until } => {
                if now >= until {
                    self.state = State::Ramp {
                        entry,
                        ramp_start: now,
                    };
                }
            }
            State::Ramp { entry, ramp_start } => {
                self.update_slow_start(m, q, gain, growth_allowed);
                if self.w >= self.ssthresh {
                    self.w = self.ssthresh;
                    let duration = if self.cfg.is_libutp() {
                        now.since(ramp_start)
                    } else {
                        now.since(entry)
                    };
                    self.state = State::Avoidance {
                        next_slowdown: next_slowdown(now, duration),
                    };
                }
            }
            State::Avoidance { next_slowdown } => {
                self.update_avoidance(m, q, gain, growth_allowed);
                self.check_slowdown(now, next_slowdown);
            }
        }
        self.decision()
    }

    /// The state a primary takes over (docs/algorithms/ledbat-pp.md §6), at the datapath time
    /// of the latest report (the inverse of [`Controller::start_from`]). During a slowdown the
    /// saved window is carried unless the strict reading is configured.
    pub fn carried_state(&self) -> CarriedState {
        let in_slowdown = matches!(self.state, State::Freeze { .. } | State::Ramp { .. });
        let w = match self.cfg.hand_off_window() {
            HandOffWindow::RestoreSaved if in_slowdown => self.w.max(self.ssthresh),
            _ => self.w,
        };
        let cwnd = Bytes(w.min(MAX_CWND_BYTES).floor() as u64);
        CarriedState {
            cwnd,
            ssthresh: Some(cwnd),
            rate: None,
            srtt: self.srtt(),
            min_rtt: self.base.base().or(self.lifetime_min_rtt),
            at: self.now,
        }
    }

    /// The window the datapath should apply.
    pub fn decision(&self) -> Decision {
        Decision {
            cwnd: Some(self.cwnd()),
            rate: None,
        }
    }

    /// W, whole bytes (the published value is the floor; docs/algorithms/ledbat-pp.md §7).
    pub fn cwnd(&self) -> Bytes {
        Bytes(self.w.floor() as u64)
    }

    /// W as kept, bytes.
    pub fn cwnd_exact(&self) -> f64 {
        self.w
    }

    /// Slow-start threshold (the saved window during a slowdown); +∞ before the first exit.
    pub fn ssthresh(&self) -> f64 {
        self.ssthresh
    }

    pub fn state(&self) -> State {
        self.state
    }

    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// Datapath time of the latest report (of the hand-off for a flow started from a carried
    /// state).
    pub fn now(&self) -> Micros {
        self.now
    }

    /// The priority the application asked for last.
    pub fn priority(&self) -> Priority {
        self.priority
    }

    /// The application changed the flow's priority (only the trace shows it here: the glue
    /// decides whether the flow is handed to a primary).
    pub fn on_priority_change(&mut self, priority: Priority) {
        self.priority = priority;
    }

    /// The controller's state for the flow trace.
    pub fn metrics(&self) -> FlowMetrics {
        let mut extra = Vec::with_capacity(9);
        let us = |m: Option<Micros>| m.map(|m| m.0 as f64);
        for (name, value) in [
            ("datapath_time_us", Some(self.now.0 as f64)),
            ("base_delay_us", us(self.base_delay())),
            ("current_delay_us", us(self.current_delay())),
            // Spelled as the flow trace documents it (src/trace.rs).
            ("queueing_delay_us", us(self.queuing_delay())),
            ("gain", self.gain()),
            ("srtt_us", us(self.srtt())),
            (
                "ssthresh_bytes",
                Some(self.ssthresh()).filter(|s| s.is_finite()),
            ),
            ("acked_bytes", Some(self.last.acked.0 as f64)),
            ("max_flight_bytes", Some(self.last.max_flight.0 as f64)),
        ] {
            if let Some(v) = value {
                extra.push((name, v));
            }
        }
        FlowMetrics {
            priority: self.priority,
            cwnd_bytes: Some(self.cwnd().0),
            rate_bytes_per_sec: None,
            state: self.state().name(),
            extra,
        }
    }

    pub fn base_delay(&self) -> Option<Micros> {
        self.base.base()
    }

    pub fn current_delay(&self) -> Option<Micros> {
        self.cur_delay
    }

    pub fn srtt(&self) -> Option<Micros> {
        self.srtt_us.map(|s| Micros(s.round() as u64))
    }

    /// q = current − base, once both are known.
    pub fn queuing_delay(&self) -> Option<Micros> {
        Some(queuing_delay(self.cur_delay?, self.base.base()?))
    }

    /// GAIN = 1/F from the base delay (libutp profile: from the lifetime minimum RTT).
    pub fn gain(&self) -> Option<f64> {
        let base = if self.cfg.is_libutp() {
            self.lifetime_min_rtt?
        } else {
            self.base.base()?
        };
        gain_divisor(self.cfg.target(), base).map(|f| 1.0 / f as f64)
    }

    fn update_delays(&mut self, now: Micros, m: &Measurement) {
        if let Some(min_rtt) = m.min_rtt {
            self.base.update(now, min_rtt);
            self.lifetime_min_rtt = Some(self.lifetime_min_rtt.map_or(min_rtt, |l| l.min(min_rtt)));
            // The last sample only moves when the interval had one.
            if let Some(last) = m.last_rtt {
                let s = last.0 as f64;
                self.srtt_us = Some(
                    self.srtt_us
                        .map_or(s, |old| (1.0 - SRTT_GAIN) * old + SRTT_GAIN * s),
                );
            }
        }
        if m.cur_delay.is_some() {
            self.cur_delay = m.cur_delay;
        }
    }

    /// The RTT that times freezes and slowdown delays (docs/algorithms/ledbat-pp.md §3.2).
    fn timer_rtt(&self) -> Micros {
        let rtt = match self.cfg.rtt_for_timers() {
            RttForTimers::Srtt => self.srtt().or(self.lifetime_min_rtt),
            RttForTimers::MinRtt => self.lifetime_min_rtt.or(self.srtt()),
        };
        rtt.unwrap_or(FALLBACK_RTT)
    }

    fn in_rtts(&self, now: Micros, n: u64) -> Micros {
        now + rtts(self.timer_rtt(), n)
    }

    /// Whether growth is allowed: the window was used (REC, docs/algorithms/ledbat-pp.md §2.3); in the libutp
    /// profile, full within the last second (DEV(libutp)).
    fn check_window_used(&mut self, now: Micros, m: &Measurement) -> bool {
        if !self.cfg.cwnd_limited_check() {
            return true;
        }
        let used = m.max_flight.0 as f64 + CWND_LIMITED_SLACK_SEGMENTS * self.mss >= self.w;
        if !self.cfg.is_libutp() {
            return used;
        }
        if used {
            self.last_window_full = Some(now);
        }
        self.last_window_full
            .is_some_and(|t| now.since(t) < LIBUTP_WINDOW_FULL_WITHIN)
    }

    /// Whether a loss belongs to the event of the last cut (docs/algorithms/ledbat-pp.md §2.5: at most one cut per
    /// RTT). The draft profile treats losses as one event while the flight outstanding at
    /// the cut is not yet acked or declared lost (as TCP's recovery does; one srtt is too
    /// short when the drops of a burst are revealed by the first ACK after the sender's
    /// pause), and for at least one srtt, at most `RECOVERY_MAX_RTTS` srtt; libutp uses a
    /// fixed 100 ms.
    fn check_loss_holdoff(&self, now: Micros, in_recovery: bool) -> bool {
        let Some(last_cut) = self.last_cut else {
            return false;
        };
        let since = now.since(last_cut);
        if self.cfg.is_libutp() {
            return since < LIBUTP_LOSS_HOLDOFF;
        }
        let srtt = self.srtt().unwrap_or(Micros::ZERO);
        since < srtt || (in_recovery && since < rtts(srtt, RECOVERY_MAX_RTTS))
    }

    fn update_initial_slow_start(
        &mut self,
        now: Micros,
        m: &Measurement,
        q: Micros,
        gain: f64,
        growth_allowed: bool,
    ) {
        let exit = slow_start_delay_exit(q, self.cfg.target());
        // The draft profile does not grow on the exit report (docs/algorithms/ledbat-pp.md §2.1 REC); libutp adds
        // the ACK first and then exits.
        if !exit || self.cfg.is_libutp() {
            self.update_slow_start(m, q, gain, growth_allowed);
        }
        if exit || self.w >= self.ssthresh {
            self.ssthresh = self.ssthresh.min(self.w);
            self.w = self.w.min(self.ssthresh);
            self.state = State::Avoidance {
                next_slowdown: self.in_rtts(now, SLOWDOWN_FREEZE_RTTS),
            };
        }
    }

    /// Slow-start growth for one report: `W += G·min(acked, W)` (libutp: doubling, or its
    /// avoidance step if that is larger).
    fn update_slow_start(&mut self, m: &Measurement, q: Micros, gain: f64, growth_allowed: bool) {
        if self.cfg.is_libutp() {
            let before = self.w;
            let grown = if growth_allowed {
                before + m.acked.0 as f64
            } else {
                before
            };
            self.update_avoidance(m, q, gain, growth_allowed);
            self.w = self.w.max(grown).min(MAX_CWND_BYTES);
            return;
        }
        if growth_allowed {
            // At most one window per report: a datapath that ran ahead of W (its own initial
            // window, a late report) must not multiply the growth.
            let a = (m.acked.0 as f64).min(self.w);
            self.w = (self.w + slow_start_growth(gain, a)).min(MAX_CWND_BYTES);
        }
    }

    /// The avoidance step (docs/algorithms/ledbat-pp.md §2.3–§2.4), per report; libutp profile per replayed ACK.
    fn update_avoidance(&mut self, m: &Measurement, q: Micros, gain: f64, growth_allowed: bool) {
        let target = self.cfg.target();
        let acked = m.acked.0 as f64;
        if self.cfg.is_libutp() {
            let a = acked.min(self.w);
            let acks = ((a / self.mss).ceil() as u64).clamp(1, LIBUTP_MAX_REPLAYED_ACKS);
            let per_ack = a / acks as f64;
            if per_ack <= 0.0 {
                return;
            }
            for _ in 0..acks {
                self.w = libutp_ack_update(
                    self.w,
                    per_ack,
                    q,
                    target,
                    gain,
                    LIBUTP_MSS_BYTES,
                    growth_allowed,
                )
                .max(self.min_cwnd);
            }
            return;
        }
        let delta = avoidance_delta(self.w, self.mss, acked, gain, q, target, growth_allowed);
        self.w = (self.w + delta).clamp(self.min_cwnd, MAX_CWND_BYTES);
    }

    /// A due slowdown starts unless W is already at the minimum, in which case it is
    /// postponed by 2 RTT (docs/algorithms/ledbat-pp.md §3.2; TV-8).
    fn check_slowdown(&mut self, now: Micros, due: Micros) {
        if now < due {
            return;
        }
        if self.w <= self.min_cwnd {
            self.state = State::Avoidance {
                next_slowdown: self.in_rtts(now, SLOWDOWN_FREEZE_RTTS),
            };
            return;
        }
        self.ssthresh = self.w;
        self.w = self.min_cwnd;
        self.state = State::Freeze {
            entry: now,
            until: self.in_rtts(now, SLOWDOWN_FREEZE_RTTS),
        };
    }

    /// Loss: halve at most once per RTT, per phase as in docs/algorithms/ledbat-pp.md §2.5 (REC table); libutp
    /// profile: halve, leave slow start, and move any slowdown to 2·minRTT from now.
    fn enter_loss(&mut self, now: Micros) {
        self.last_cut = Some(now);
        if self.cfg.is_libutp() {
            self.w = (self.w / 2.0).max(self.min_cwnd);
            self.ssthresh = self.w;
            self.state = State::Avoidance {
                next_slowdown: self.in_rtts(now, SLOWDOWN_FREEZE_RTTS),
            };
            return;
        }
        let next = match self.state {
            State::Freeze { .. } => {
                // The congestion happened at the saved window; the freeze goes on.
                self.ssthresh = (self.ssthresh / 2.0).max(self.min_cwnd);
                return;
            }
            State::Avoidance { next_slowdown } => next_slowdown,
            State::SlowStart => self.in_rtts(now, SLOWDOWN_FREEZE_RTTS),
            State::Ramp { entry, .. } => next_slowdown(now, now.since(entry)),
            State::RtoSlowStart { rto_at } => next_slowdown(now, now.since(rto_at)),
        };
        self.w = (self.w / 2.0).max(self.min_cwnd);
        self.ssthresh = self.w;
        self.state = State::Avoidance {
            next_slowdown: next,
        };
    }

    /// Retransmission timeout (docs/algorithms/ledbat-pp.md §2.5 REC): ssthresh from the effective window, W to the
    /// minimum, slow start without the delay exit; any slowdown is cancelled. libutp keeps
    /// ssthresh.
    fn enter_rto(&mut self, now: Micros) {
        self.last_cut = Some(now);
        // A timeout declares everything outstanding lost: nothing is left to recover.
        self.recovery_left = 0.0;
        if !self.cfg.is_libutp() {
            let w_eff = match self.state {
                State::Freeze { .. } => self.ssthresh,
                _ => self.w,
            };
            self.ssthresh = (w_eff / 2.0).max(self.min_cwnd);
        }
        self.w = self.min_cwnd;
        self.state = State::RtoSlowStart { rto_at: now };
    }
}

/// `n` RTTs as a duration, saturating.
fn rtts(rtt: Micros, n: u64) -> Micros {
    Micros(rtt.0.saturating_mul(n))
}

#[cfg(test)]
#[path = "controller_tests.rs"]
mod tests;
