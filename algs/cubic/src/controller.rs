//! The per-flow CUBIC state machine: typed measurements in, window decisions out. Pure: time
//! is an argument (datapath time from the reports), nothing is logged.

use crate::model;
use crate::params::{
    CWND_LIMITED_SLACK_SEGMENTS, Config, DEFAULT_INIT_CWND_SEGMENTS, HYSTART_LOW_WINDOW_SEGMENTS,
    LOSS_WINDOW_SEGMENTS, MAX_CWND_BYTES, MAX_TARGET_FACTOR, MIN_CWND_SEGMENTS, SRTT_GAIN,
};
use algs_core::metrics::FlowMetrics;
use algs_core::{Bytes, CarriedState, Decision, Micros, Priority};

/// One report of the datapath program, decoded (datapath.rs names the fields).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Measurement {
    /// Bytes newly acknowledged since the previous report.
    pub acked: Bytes,
    /// Packets marked lost since the previous report.
    pub lost_packets: u64,
    /// Packets acknowledged with ECN-Echo since the previous report.
    pub ecn_packets: u64,
    /// A retransmission timeout happened since the previous report.
    pub timeout: bool,
    /// Smallest RTT sample of the interval, if it had one.
    pub min_rtt: Option<Micros>,
    /// Latest RTT sample of the flow, if there was one yet.
    pub last_rtt: Option<Micros>,
    /// Largest flight of the interval (bytes in flight just before an ACK).
    pub max_flight: Bytes,
    /// The datapath's window at the report, if it announced one.
    pub cwnd: Option<Bytes>,
}

impl Measurement {
    /// A loss or an ECN mark: a congestion event of RFC 9438 §4.6.
    fn is_congestion_event(&self) -> bool {
        self.lost_packets > 0 || self.ecn_packets > 0
    }
}

/// Holds off further multiplicative decreases until the data in flight at a cut has been
/// acknowledged and one RTT has passed (RFC 9438 §4.6: at most one reduction per congestion
/// event; the kernel's `high_seq`, approximated in bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Guard {
    /// Datapath time before which no cut happens, µs.
    pub until: Micros,
    /// Bytes still to be acknowledged of the flight at the cut.
    pub remaining: Bytes,
}

impl Guard {
    /// Counts `acked` bytes; true once the guard has expired.
    fn advance(&mut self, now: Micros, acked: Bytes) -> bool {
        self.remaining = Bytes(self.remaining.0.saturating_sub(acked.0));
        self.remaining.0 == 0 && now >= self.until
    }
}

/// One congestion-avoidance stage (RFC 9438 §4.2).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Epoch {
    /// `t_epoch`: when the stage began, datapath µs (moved forward over application-limited
    /// intervals).
    pub start: Micros,
    /// `K`, seconds.
    pub k: f64,
    /// The plateau `W_max` of this stage, bytes.
    pub w_max: f64,
    /// `W_est`, the Reno-friendly estimate, bytes (RFC 9438 §4.3).
    pub w_est: f64,
}

/// Where the flow is in its life.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum State {
    /// Window below ssthresh: the datapath program adds every acked byte to it (per ACK);
    /// the controller follows the window the reports carry. After a timeout the guard keeps
    /// the losses of the old flight from cutting again.
    SlowStart { guard: Option<Guard> },
    /// Following the cubic curve or the Reno-friendly estimate, whichever is larger.
    Avoidance(Epoch),
    /// After a multiplicative decrease: the window stays at ssthresh until the guard expires.
    Recovery(Guard),
}

impl State {
    pub fn name(&self) -> &'static str {
        match self {
            State::SlowStart { .. } => "slow_start",
            State::Avoidance(_) => "avoidance",
            State::Recovery(_) => "recovery",
        }
    }

    fn guard(&self) -> Option<Guard> {
        match *self {
            State::SlowStart { guard } => guard,
            State::Recovery(g) => Some(g),
            State::Avoidance(_) => None,
        }
    }
}

/// A CUBIC flow's controller.
#[derive(Debug, Clone)]
pub struct Controller {
    config: Config,
    /// Segment size, bytes (> 0).
    mss: f64,
    /// Congestion window, bytes, kept fractional so small increments add up.
    cwnd: f64,
    /// Slow-start threshold, bytes; `None` is infinite (before the first congestion event).
    ssthresh: Option<f64>,
    /// `W_max` set at the last congestion event, bytes (after fast convergence); `None`
    /// after a timeout (RFC 9438 §4.8) or before any event.
    w_max: Option<f64>,
    /// `cwnd_prior`: the window when ssthresh was last set by a congestion event, bytes
    /// (RFC 9438 §4.3, for the `α_cubic` switch).
    cwnd_prior: Option<f64>,
    state: State,
    /// Smoothed RTT (RFC 6298 gain, once per report).
    srtt: Option<Micros>,
    /// Smallest RTT seen by the flow.
    min_rtt: Option<Micros>,
    /// Datapath time of the latest report or hand-off.
    last_now: Option<Micros>,
}

impl Controller {
    /// A new flow in slow start with the datapath's initial window (10 segments if it
    /// announced none).
    pub fn new(config: Config, mss: Bytes, init_cwnd: Bytes) -> Self {
        let mss = mss.0.max(1) as f64;
        let init = if init_cwnd.0 == 0 {
            DEFAULT_INIT_CWND_SEGMENTS as f64 * mss
        } else {
            init_cwnd.as_f64()
        };
        let mut c = Controller {
            config,
            mss,
            cwnd: init,
            ssthresh: None,
            w_max: None,
            cwnd_prior: None,
            state: State::SlowStart { guard: None },
            srtt: None,
            min_rtt: None,
            last_now: None,
        };
        c.cwnd = c.clamp_cwnd(init);
        c
    }

    /// A flow handed over from another algorithm (docs/algorithms/ledbat-pp.md §6, TV-13): congestion
    /// avoidance at once, with `cwnd = ssthresh = W_max` = the carried window and the epoch
    /// starting at the hand-off (K = 0). The carried ssthresh is not used: the hand-off rule
    /// puts the whole carried window in force.
    pub fn start_from(config: Config, mss: Bytes, carried: &CarriedState) -> Self {
        let mut c = Controller::new(config, mss, carried.cwnd);
        let w = c.cwnd;
        c.ssthresh = Some(w);
        c.w_max = Some(w);
        c.srtt = carried.srtt;
        c.min_rtt = carried.min_rtt;
        c.last_now = Some(carried.at);
        c.enter_avoidance(carried.at);
        c
    }

    /// The window the datapath should have, bytes: at least 2 segments, at most a u32.
    pub fn cwnd(&self) -> Bytes {
        Bytes(self.cwnd as u64)
    }

    /// The slow-start threshold, bytes; `None` while infinite.
    pub fn ssthresh(&self) -> Option<Bytes> {
        self.ssthresh.map(|s| Bytes(s as u64))
    }

    pub fn state(&self) -> &State {
        &self.state
    }

    pub fn srtt(&self) -> Option<Micros> {
        self.srtt
    }

    pub fn min_rtt(&self) -> Option<Micros> {
        self.min_rtt
    }

    /// Datapath time of the latest report (or of the hand-off).
    pub fn last_now(&self) -> Option<Micros> {
        self.last_now
    }

    /// The state another algorithm continues from (the inverse of [`Controller::start_from`]).
    pub fn carried_state(&self) -> CarriedState {
        CarriedState {
            cwnd: self.cwnd(),
            ssthresh: self.ssthresh(),
            rate: None,
            srtt: self.srtt,
            min_rtt: self.min_rtt,
            at: self.last_now.unwrap_or(Micros::ZERO),
        }
    }

    /// A report of the datapath program at datapath time `now`.
    pub fn on_report(&mut self, now: Micros, m: &Measurement) -> Decision {
        let interval = self.last_now.map_or(Micros::ZERO, |prev| now.since(prev));
        self.last_now = Some(now);
        self.update_rtt(m);

        if m.timeout {
            return self.on_timeout(now);
        }
        if let State::SlowStart { .. } = self.state {
            // The datapath owns the window in slow start (it grows it per ACK).
            if let Some(w) = m.cwnd.filter(|w| w.0 > 0) {
                self.cwnd = self.clamp_cwnd(w.as_f64());
            }
        }
        if self.check_guard(now, m.acked) {
            return self.hold();
        }
        if m.is_congestion_event() && self.state.guard().is_none() {
            self.enter_recovery(now, m);
            return self.hold();
        }
        match self.state {
            State::SlowStart { .. } => self.update_slow_start(now, m),
            State::Recovery(_) => self.hold(),
            State::Avoidance(_) => {
                self.update_avoidance(now, interval, m);
                self.hold()
            }
        }
    }

    /// A retransmission timeout (RFC 9438 §4.8): ssthresh as for any congestion event unless
    /// the flow is still recovering from one (then this is the same episode, or a backed-off
    /// timeout, and Linux keeps ssthresh too); the window restarts at the loss window, in slow
    /// start, and the next avoidance stage starts with K = 0.
    pub fn on_timeout(&mut self, now: Micros) -> Decision {
        self.last_now = Some(self.last_now.map_or(now, |prev| prev.max(now)));
        let guard = match self.state.guard() {
            Some(g) => g,
            None => {
                self.set_ssthresh_for_event();
                Guard {
                    until: now + self.guard_rtt(None),
                    remaining: self.cwnd(),
                }
            }
        };
        // Linux `bictcp_reset` on entering TCP_CA_Loss forgets W_max.
        self.w_max = None;
        self.cwnd = self.clamp_cwnd(LOSS_WINDOW_SEGMENTS as f64 * self.mss);
        self.state = State::SlowStart { guard: Some(guard) };
        self.hold()
    }

    /// The controller's state for the flow trace.
    pub fn metrics(&self) -> FlowMetrics {
        let mut extra = Vec::with_capacity(7);
        let w_max = match self.state {
            State::Avoidance(e) => Some(e.w_max),
            _ => self.w_max,
        };
        if let Some(w) = w_max {
            extra.push(("w_max_bytes", w));
        }
        if let State::Avoidance(e) = self.state {
            extra.push(("k_s", e.k));
            extra.push(("w_est_bytes", e.w_est));
        }
        if let Some(s) = self.ssthresh {
            extra.push(("ssthresh_bytes", s));
        }
        if let Some(r) = self.srtt {
            extra.push(("srtt_us", r.0 as f64));
        }
        if let Some(r) = self.min_rtt {
            extra.push(("min_rtt_us", r.0 as f64));
        }
        FlowMetrics {
            priority: Priority::Primary,
            cwnd_bytes: Some(self.cwnd().0),
            rate_bytes_per_sec: None,
            state: self.state.name(),
            extra,
        }
    }

    fn hold(&self) -> Decision {
        Decision {
            cwnd: Some(self.cwnd()),
            rate: None,
        }
    }

    fn clamp_cwnd(&self, bytes: f64) -> f64 {
        let floor = MIN_CWND_SEGMENTS as f64 * self.mss;
        if bytes.is_nan() {
            return floor;
        }
        bytes.clamp(floor, MAX_CWND_BYTES as f64)
    }

    fn update_rtt(&mut self, m: &Measurement) {
        if let Some(sample) = m.last_rtt {
            self.srtt = Some(match self.srtt {
                None => sample,
                Some(s) => {
                    let s = s.0 as f64;
                    Micros((s + SRTT_GAIN * (sample.0 as f64 - s)).round() as u64)
                }
            });
        }
        if let Some(sample) = m.min_rtt {
            self.min_rtt = Some(self.min_rtt.map_or(sample, |r| r.min(sample)));
        }
    }

    /// The RTT a guard lasts: the larger of srtt and the latest sample (the queue is at its
    /// fullest when the loss is seen).
    fn guard_rtt(&self, last_rtt: Option<Micros>) -> Micros {
        self.srtt
            .unwrap_or(Micros::ZERO)
            .max(last_rtt.unwrap_or(Micros::ZERO))
    }

    /// Advances the guard of the current state; true if it just expired and the state
    /// changed.
    fn check_guard(&mut self, now: Micros, acked: Bytes) -> bool {
        match &mut self.state {
            State::Recovery(g) => {
                if g.advance(now, acked) {
                    self.enter_avoidance(now);
                    return true;
                }
            }
            State::SlowStart { guard } => {
                if guard.as_mut().is_some_and(|g| g.advance(now, acked)) {
                    *guard = None;
                }
            }
            State::Avoidance(_) => {}
        }
        false
    }

    fn set_ssthresh_for_event(&mut self) {
        let beta = self.config.beta_cubic();
        let segs = self.cwnd / self.mss;
        self.cwnd_prior = Some(self.cwnd);
        let ss = model::ssthresh_after_event(segs, beta, MIN_CWND_SEGMENTS as f64) * self.mss;
        self.ssthresh = Some(self.clamp_cwnd(ss));
    }

    /// Multiplicative decrease with fast convergence (RFC 9438 §4.6, §4.7); the window is cut
    /// at once (no PRR: a CCP datapath applies the window it is given).
    fn enter_recovery(&mut self, now: Micros, m: &Measurement) {
        let segs = self.cwnd / self.mss;
        let w_max = model::w_max_after_event(
            segs,
            self.w_max.map(|w| w / self.mss),
            self.config.beta_cubic(),
            self.config.fast_convergence(),
        );
        self.w_max = Some(w_max * self.mss);
        let flight = if m.max_flight.0 > 0 {
            m.max_flight
        } else {
            self.cwnd()
        };
        self.set_ssthresh_for_event();
        self.cwnd = self.ssthresh.unwrap_or(self.cwnd);
        self.state = State::Recovery(Guard {
            until: now + self.guard_rtt(m.last_rtt),
            remaining: flight,
        });
    }

    /// Starts a congestion-avoidance stage at `now` from the current window (RFC 9438 §4.2):
    /// `W_max` is the one remembered from the last congestion event if it lies above the
    /// window, else the window itself (K = 0; RFC 9438 §4.8).
    fn enter_avoidance(&mut self, now: Micros) {
        let w_max = self.w_max.filter(|&w| w > self.cwnd).unwrap_or(self.cwnd);
        let k = model::k(w_max / self.mss, self.cwnd / self.mss, self.config.c());
        self.state = State::Avoidance(Epoch {
            start: now,
            k,
            w_max,
            w_est: self.cwnd,
        });
    }

    /// Slow start ends where the datapath's per-ACK growth stops: at ssthresh (the kernel
    /// rounds the window down to whole segments, so within one segment of it); with HyStart
    /// also when this round's smallest RTT has risen above the flow's by the threshold, with
    /// ssthresh set to the window as Linux does.
    fn update_slow_start(&mut self, now: Micros, m: &Measurement) -> Decision {
        if self.check_hystart(m) {
            self.ssthresh = Some(self.cwnd);
            self.enter_avoidance(now);
            return self.hold();
        }
        match self.ssthresh {
            Some(ss) if self.cwnd + self.mss > ss => {
                self.cwnd = self.clamp_cwnd(ss);
                self.enter_avoidance(now);
                self.hold()
            }
            _ => Decision::default(),
        }
    }

    /// HyStart's delay detection (Linux `hystart_update`, HYSTART_DELAY) on one round: the
    /// report's smallest RTT against the flow's. Linux takes the round's first 8 samples; a
    /// report carries the whole round's minimum, which can only exit later, never earlier.
    fn check_hystart(&self, m: &Measurement) -> bool {
        if !self.config.hystart() || self.cwnd < (HYSTART_LOW_WINDOW_SEGMENTS as f64) * self.mss {
            return false;
        }
        match (m.min_rtt, self.min_rtt) {
            (Some(round), Some(flow)) => {
                round.0 > flow.0 + model::hystart_delay_threshold_us(flow.0)
            }
            _ => false,
        }
    }

    /// One report's worth of growth (RFC 9438 §4.2–§4.3, the per-ACK rules integrated over
    /// the bytes the report acknowledges).
    fn update_avoidance(&mut self, now: Micros, interval: Micros, m: &Measurement) {
        let State::Avoidance(mut epoch) = self.state else {
            return;
        };
        let mss = self.mss;
        let limited =
            m.max_flight.as_f64() + (CWND_LIMITED_SLACK_SEGMENTS as f64) * mss > self.cwnd;
        if self.config.cwnd_limited_only() && !limited {
            // RFC 9438 §5.8: no growth while application-limited, and the time is not
            // counted in t.
            epoch.start = (epoch.start + interval).min(now);
            self.state = State::Avoidance(epoch);
            return;
        }
        let c = self.config.c();
        let beta = self.config.beta_cubic();
        let cwnd = self.cwnd / mss;
        let acked = m.acked.as_f64() / mss;
        let w_max = epoch.w_max / mss;
        let t = now.since(epoch.start).as_secs_f64();
        let rtt = self.srtt.unwrap_or(Micros::ZERO).as_secs_f64();

        let mut next = {
            let target = model::target(
                model::w_cubic(t + rtt, epoch.k, w_max, c),
                cwnd,
                MAX_TARGET_FACTOR,
            );
            // Per ACK: cwnd += (target - cwnd) / cwnd; a report of a whole window or more
            // reaches the target.
            cwnd + (target - cwnd) * (acked / cwnd).min(1.0)
        };
        if self.config.reno_friendly() {
            let reached_prior = self.cwnd_prior.is_some_and(|p| epoch.w_est >= p);
            let alpha = if self.config.alpha_switch() && reached_prior {
                1.0
            } else {
                model::alpha_cubic(beta)
            };
            let w_est = model::w_est(epoch.w_est / mss, alpha, acked, cwnd);
            epoch.w_est = w_est * mss;
            if model::w_cubic(t, epoch.k, w_max, c) < w_est {
                // Reno-friendly region: follow W_est (never shrink, as Linux).
                next = cwnd.max(w_est);
            }
        }
        self.state = State::Avoidance(epoch);
        self.cwnd = self.clamp_cwnd(next * mss);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::params::BETA_CUBIC;
    use proptest::prelude::*;

    const MSS: u64 = 1000;
    const RTT: Micros = Micros(100_000);

    /// `n` RTTs after time zero.
    fn rtts(n: u64) -> Micros {
        Micros(RTT.0 * n)
    }

    fn segs(n: f64) -> f64 {
        n * MSS as f64
    }

    /// A report of one RTT in which the window was fully used and `acked` bytes came back.
    fn full(acked: u64, cwnd: u64) -> Measurement {
        Measurement {
            acked: Bytes(acked),
            min_rtt: Some(RTT),
            last_rtt: Some(RTT),
            max_flight: Bytes(cwnd),
            cwnd: Some(Bytes(cwnd)),
            ..Measurement::default()
        }
    }

    fn loss(cwnd: u64) -> Measurement {
        Measurement {
            lost_packets: 1,
            ..full(0, cwnd)
        }
    }

    /// A controller in avoidance with the given window and plateau, epoch at `start`.
    fn in_avoidance(config: Config, cwnd: f64, w_max: f64, start: Micros) -> Controller {
        let mut c = Controller::new(config, Bytes(MSS), Bytes(cwnd as u64));
        c.cwnd = cwnd;
        c.ssthresh = Some(cwnd);
        c.w_max = Some(w_max);
        c.srtt = Some(RTT);
        c.last_now = Some(start);
        c.enter_avoidance(start);
        c
    }

    #[test]
    fn slow_start_follows_the_datapath_window_which_doubles_per_rtt() {
        let mut c = Controller::new(Config::default(), Bytes(MSS), Bytes(10 * MSS));
        let mut w = 10 * MSS;
        for i in 1..=5u64 {
            // The program adds every acked byte: a window's worth per RTT doubles it.
            let d = c.on_report(rtts(i + 1), &full(w, 2 * w));
            assert_eq!(d.cwnd, None, "slow start leaves the window to the datapath");
            w *= 2;
            assert_eq!(c.cwnd(), Bytes(w));
            assert_eq!(c.state().name(), "slow_start");
        }
    }

    #[test]
    fn loss_cuts_to_beta_and_sets_w_max() {
        let mut c = Controller::new(Config::default(), Bytes(MSS), Bytes(10 * MSS));
        c.on_report(RTT, &full(50 * MSS, 100 * MSS));
        let d = c.on_report(rtts(2), &loss(100 * MSS));
        assert_eq!(d.cwnd, Some(Bytes(70 * MSS)));
        assert_eq!(c.ssthresh(), Some(Bytes(70 * MSS)));
        assert_eq!(c.w_max, Some(segs(100.0)));
        assert_eq!(c.state().name(), "recovery");
    }

    #[test]
    fn ecn_echo_is_a_congestion_event() {
        let mut c = Controller::new(Config::default(), Bytes(MSS), Bytes(100 * MSS));
        let m = Measurement {
            ecn_packets: 3,
            ..full(10 * MSS, 100 * MSS)
        };
        assert_eq!(c.on_report(RTT, &m).cwnd, Some(Bytes(70 * MSS)));
    }

    #[test]
    fn fast_convergence_lowers_w_max_below_the_window_at_loss() {
        let mut c = in_avoidance(Config::default(), segs(80.0), segs(100.0), Micros(0));
        c.on_report(RTT, &loss(80 * MSS));
        // 80 < previous W_max 100: W_max = 80 * (1 + 0.7) / 2 = 68.
        assert!((c.w_max.unwrap_or(0.0) - segs(68.0)).abs() < 1e-6);
        assert_eq!(c.cwnd(), Bytes(56 * MSS));

        let mut plain = in_avoidance(
            Config::default().with_fast_convergence(false),
            segs(80.0),
            segs(100.0),
            Micros(0),
        );
        plain.on_report(RTT, &loss(80 * MSS));
        assert_eq!(plain.w_max, Some(segs(80.0)));
    }

    #[test]
    fn only_one_cut_per_rtt() {
        let mut c = Controller::new(Config::default(), Bytes(MSS), Bytes(100 * MSS));
        c.on_report(RTT, &full(0, 100 * MSS));
        assert_eq!(
            c.on_report(rtts(2), &loss(100 * MSS)).cwnd,
            Some(Bytes(70 * MSS))
        );
        // More losses of the same flight, half an RTT later, with data acked meanwhile.
        let again = Measurement {
            lost_packets: 5,
            ..full(30 * MSS, 70 * MSS)
        };
        assert_eq!(
            c.on_report(rtts(2) + Micros(RTT.0 / 2), &again).cwnd,
            Some(Bytes(70 * MSS))
        );
        // One RTT later but the old flight (100 segments) is not yet acked: still one cut.
        assert_eq!(
            c.on_report(rtts(3) + Micros(1), &again).cwnd,
            Some(Bytes(70 * MSS))
        );
        assert_eq!(c.state().name(), "recovery");
        // Now the old flight is acked: recovery ends, avoidance starts at the cut window.
        let d = c.on_report(rtts(3) + Micros(2), &full(40 * MSS, 70 * MSS));
        assert_eq!(d.cwnd, Some(Bytes(70 * MSS)));
        assert_eq!(c.state().name(), "avoidance");
        // A new loss after recovery cuts again.
        assert_eq!(
            c.on_report(rtts(4), &loss(70 * MSS)).cwnd,
            Some(Bytes(49 * MSS))
        );
    }

    #[test]
    fn concave_then_convex_growth_reaches_w_max_at_k() {
        // After a cut from 100 to 70 segments: K = ∛75 s = 4.217 s. Reports every RTT with a
        // full window acked; srtt = RTT, so the target looks one RTT ahead.
        let config = Config::default().with_reno_friendly(false);
        let mut c = in_avoidance(config, segs(70.0), segs(100.0), Micros(0));
        let k = match c.state() {
            State::Avoidance(e) => e.k,
            other => panic!("{other:?}"),
        };
        assert!((k - 4.217_163).abs() < 1e-5);
        let mut now = Micros(0);
        let mut history = vec![];
        while now.as_secs_f64() < 2.0 * k {
            now = now + RTT;
            let w = c.cwnd().0;
            c.on_report(now, &full(w, w));
            history.push((now.as_secs_f64(), c.cwnd().0 as f64 / MSS as f64));
        }
        let at = |t: f64| {
            history
                .iter()
                .find(|(s, _)| *s >= t)
                .map_or(f64::NAN, |&(_, w)| w)
        };
        // Near t = K the window sits at the plateau (within a segment).
        assert!((at(k) - 100.0).abs() < 1.0, "w(K) = {}", at(k));
        // Concave before K: the first second gains more than the second before K.
        let early = at(1.0) - at(0.1);
        let late = at(k - 0.1) - at(k - 1.0);
        assert!(early > late, "concave: {early} vs {late}");
        // Convex after K: growth accelerates.
        let after1 = at(k + 1.0) - at(k + 0.1);
        let after2 = at(k + 2.0) - at(k + 1.1);
        assert!(after2 > after1, "convex: {after1} vs {after2}");
        // And follows W_cubic(t + RTT) to within a segment.
        let want = model::w_cubic(1.5 + 0.1, k, 100.0, 0.4);
        assert!((at(1.5) - want).abs() < 1.0, "{} vs {want}", at(1.5));
    }

    #[test]
    fn reno_friendly_region_follows_w_est_on_small_windows() {
        // Plateau barely above the window: the cubic curve is nearly flat for K seconds
        // while W_est grows α per RTT. With a 10 ms RTT, 100 RTTs = 1 s.
        let rtt = Micros(10_000);
        let config = Config::linux();
        let mut c = in_avoidance(config, segs(10.0), segs(10.5), Micros(0));
        c.srtt = Some(rtt);
        let mut now = Micros(0);
        for _ in 0..100 {
            now = now + rtt;
            let w = c.cwnd().0;
            c.on_report(
                now,
                &Measurement {
                    last_rtt: Some(rtt),
                    ..full(w, w)
                },
            );
        }
        // 100 RTTs at α = 0.529 per RTT (acked = one window each) ≈ +53 segments, against a
        // cubic curve still below its plateau: K = ∛(0.5 / 0.4) = 1.08 s, W_cubic(1 s) < 10.5.
        let w = c.cwnd().0 as f64 / MSS as f64;
        assert!(w > 40.0 && w < 70.0, "{w}");
    }

    #[test]
    fn alpha_switch_raises_reno_increase_to_one_after_prior_window() {
        let rtt = Micros(10_000);
        let run = |config: Config| {
            let mut c = in_avoidance(config, segs(10.0), segs(10.0), Micros(0));
            c.cwnd_prior = Some(segs(10.0));
            c.srtt = Some(rtt);
            for i in 1..=10 {
                let w = c.cwnd().0;
                c.on_report(Micros(rtt.0 * i), &full(w, w));
            }
            match c.state() {
                State::Avoidance(e) => e.w_est / MSS as f64,
                _ => f64::NAN,
            }
        };
        // 10 RTTs of a whole window acked each.
        assert!((run(Config::default()) - 20.0).abs() < 0.5);
        assert!(
            (run(Config::linux()) - (10.0 + 10.0 * model::alpha_cubic(BETA_CUBIC))).abs() < 0.5
        );
    }

    #[test]
    fn application_limited_intervals_neither_grow_nor_age_the_curve() {
        let mut c = in_avoidance(Config::default(), segs(70.0), segs(100.0), Micros(0));
        let k = 4.217_163;
        // An hour with only 10 segments in flight.
        let idle = Measurement {
            max_flight: Bytes(10 * MSS),
            ..full(10 * MSS, 70 * MSS)
        };
        c.on_report(Micros::from_secs_f64(3600.0), &idle);
        assert_eq!(c.cwnd(), Bytes(70 * MSS));
        // One full RTT afterwards: growth is that of t ≈ 0.1 s, not t = 3600 s.
        let now = Micros::from_secs_f64(3600.1);
        c.on_report(now, &full(70 * MSS, 70 * MSS));
        let want = model::w_cubic(0.2, k, 100.0, 0.4);
        assert!((c.cwnd().0 as f64 / MSS as f64 - want).abs() < 1.0);
    }

    #[test]
    fn timeout_restarts_at_two_segments_with_ssthresh_from_beta() {
        let mut c = in_avoidance(Config::default(), segs(100.0), segs(100.0), Micros(0));
        let d = c.on_report(
            RTT,
            &Measurement {
                timeout: true,
                ..full(0, 100 * MSS)
            },
        );
        assert_eq!(d.cwnd, Some(Bytes(2 * MSS)));
        assert_eq!(c.ssthresh(), Some(Bytes(70 * MSS)));
        assert_eq!(c.w_max, None);
        assert_eq!(c.state().name(), "slow_start");
        // A backed-off second timeout before anything was acked keeps ssthresh.
        c.on_timeout(rtts(4));
        assert_eq!(c.ssthresh(), Some(Bytes(70 * MSS)));
        // Losses of the old flight do not cut again.
        assert_eq!(c.on_report(rtts(5), &loss(4 * MSS)).cwnd, None);
        assert_eq!(c.ssthresh(), Some(Bytes(70 * MSS)));
        // Slow start up to ssthresh, then avoidance with K = 0 from there.
        c.on_report(rtts(6), &full(100 * MSS, 40 * MSS));
        let d = c.on_report(rtts(7), &full(30 * MSS, 70 * MSS));
        assert_eq!(d.cwnd, Some(Bytes(70 * MSS)));
        match c.state() {
            State::Avoidance(e) => {
                assert_eq!(e.k, 0.0);
                assert_eq!(e.w_max, segs(70.0));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn slow_start_ends_within_a_segment_of_ssthresh() {
        let mut c = Controller::new(Config::default(), Bytes(MSS), Bytes(10 * MSS));
        c.ssthresh = Some(segs(30.5));
        // The kernel rounded 30.5 segments down to 30.
        let d = c.on_report(RTT, &full(10 * MSS, 30 * MSS));
        assert_eq!(d.cwnd, Some(Bytes(30_500)));
        assert_eq!(c.state().name(), "avoidance");
    }

    #[test]
    fn hystart_leaves_slow_start_when_the_rtt_rises() {
        let rtt = |ms: u64| Measurement {
            min_rtt: Some(Micros::from_millis(ms)),
            last_rtt: Some(Micros::from_millis(ms)),
            ..full(16 * MSS, 32 * MSS)
        };
        let mut c = Controller::new(Config::linux(), Bytes(MSS), Bytes(10 * MSS));
        assert_eq!(c.on_report(rtts(1), &rtt(40)).cwnd, None);
        // 40 ms base: threshold max(5 ms, 4 ms) = 5 ms. 45 ms is not above it.
        assert_eq!(c.on_report(rtts(2), &rtt(45)).cwnd, None);
        assert_eq!(c.state().name(), "slow_start");
        let d = c.on_report(rtts(3), &rtt(46));
        assert_eq!(d.cwnd, Some(Bytes(32 * MSS)));
        assert_eq!(c.ssthresh(), Some(Bytes(32 * MSS)));
        match c.state() {
            State::Avoidance(e) => assert_eq!(e.k, 0.0),
            other => panic!("{other:?}"),
        }

        // RFC 9438 default: no delay-based exit.
        let mut rfc = Controller::new(Config::default(), Bytes(MSS), Bytes(10 * MSS));
        rfc.on_report(rtts(1), &rtt(40));
        assert_eq!(rfc.on_report(rtts(2), &rtt(100)).cwnd, None);
        assert_eq!(rfc.state().name(), "slow_start");

        // Below 16 segments HyStart does not act.
        let mut small = Controller::new(Config::linux(), Bytes(MSS), Bytes(10 * MSS));
        let at = |ms| Measurement {
            cwnd: Some(Bytes(12 * MSS)),
            ..rtt(ms)
        };
        small.on_report(rtts(1), &at(40));
        assert_eq!(small.on_report(rtts(2), &at(100)).cwnd, None);
    }

    #[test]
    fn hand_off_starts_in_avoidance_at_the_carried_window() {
        // docs/algorithms/ledbat-pp.md §7 TV-13: W = 120000 carried from LEDBAT++.
        let carried = CarriedState {
            cwnd: Bytes(120_000),
            ssthresh: Some(Bytes(150_000)),
            rate: None,
            srtt: Some(Micros(40_000)),
            min_rtt: Some(Micros(30_000)),
            at: Micros(5_000_000),
        };
        let mut c = Controller::start_from(Config::default(), Bytes(1500), &carried);
        assert_eq!(c.cwnd(), Bytes(120_000));
        assert_eq!(c.ssthresh(), Some(Bytes(120_000)));
        match c.state() {
            State::Avoidance(e) => {
                assert_eq!(e.w_max, 120_000.0);
                assert_eq!(e.k, 0.0);
                assert_eq!(e.start, Micros(5_000_000));
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(c.srtt(), Some(Micros(40_000)));
        assert_eq!(c.min_rtt(), Some(Micros(30_000)));
        // It grows from there (convex from the plateau), it does not restart slow start.
        let d = c.on_report(Micros(5_040_000), &full(120_000, 120_000));
        assert!(d.cwnd.is_some_and(|w| w.0 >= 120_000));
        assert_eq!(c.state().name(), "avoidance");
        // And hands back what it has.
        let back = c.carried_state();
        assert_eq!(back.cwnd, c.cwnd());
        assert_eq!(back.ssthresh, Some(Bytes(120_000)));
        assert_eq!(back.at, Micros(5_040_000));
        assert_eq!(back.min_rtt, Some(Micros(30_000)));
    }

    #[test]
    fn metrics_name_the_state_and_the_curve() {
        let c = in_avoidance(Config::default(), segs(70.0), segs(100.0), Micros(0));
        let m = c.metrics();
        assert_eq!(m.state, "avoidance");
        assert_eq!(m.cwnd_bytes, Some(70 * MSS));
        let get = |n: &str| m.extra.iter().find(|(k, _)| *k == n).map(|&(_, v)| v);
        assert_eq!(get("w_max_bytes"), Some(segs(100.0)));
        assert!(get("k_s").is_some_and(|k| (k - 4.217).abs() < 1e-3));
        assert_eq!(get("ssthresh_bytes"), Some(segs(70.0)));
        assert_eq!(get("srtt_us"), Some(100_000.0));
    }

    fn arb_measurement() -> impl Strategy<Value = (u64, Measurement)> {
        (
            prop_oneof![0u64..2_000_000, Just(3 * 86_400_000_000u64)],
            0u64..10_000_000,
            prop_oneof![3 => Just(0u64), 1 => 0u64..100],
            prop_oneof![5 => Just(0u64), 1 => 0u64..10],
            prop::bool::weighted(0.05),
            proptest::option::of(1u64..5_000_000),
            0u64..(u32::MAX as u64 + 10),
            proptest::option::of(0u64..(u32::MAX as u64 + 10)),
        )
            .prop_map(|(dt, acked, lost, ecn, timeout, rtt, flight, cwnd)| {
                (
                    dt,
                    Measurement {
                        acked: Bytes(acked),
                        lost_packets: lost,
                        ecn_packets: ecn,
                        timeout,
                        min_rtt: rtt.map(Micros),
                        last_rtt: rtt.map(Micros),
                        max_flight: Bytes(flight),
                        cwnd: cwnd.map(Bytes),
                    },
                )
            })
    }

    proptest! {
        #[test]
        fn window_stays_within_bounds(
            mss in 1u64..9000,
            carried in proptest::option::of(0u64..u32::MAX as u64),
            steps in proptest::collection::vec(arb_measurement(), 1..200),
        ) {
            let config = Config::default();
            let mut c = match carried {
                Some(w) => Controller::start_from(config, Bytes(mss), &CarriedState {
                    cwnd: Bytes(w), ssthresh: None, rate: None, srtt: None, min_rtt: None,
                    at: Micros(0),
                }),
                None => Controller::new(config, Bytes(mss), Bytes(0)),
            };
            let mut now = Micros(0);
            for (dt, m) in steps {
                now = now + Micros(dt);
                let d = c.on_report(now, &m);
                for w in d.cwnd.into_iter().chain([c.cwnd()]) {
                    prop_assert!(w.0 >= 2 * mss);
                    prop_assert!(w.0 <= MAX_CWND_BYTES);
                }
                prop_assert!(c.cwnd.is_finite());
                if let Some(s) = c.ssthresh {
                    prop_assert!(s.is_finite() && s >= 2.0 * mss as f64);
                }
                if let State::Avoidance(e) = c.state() {
                    prop_assert!(e.k.is_finite() && e.w_max.is_finite() && e.w_est.is_finite());
                }
            }
        }
    }
}
