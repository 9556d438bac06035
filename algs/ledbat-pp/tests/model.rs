//! Closed-loop runs of the LEDBAT++ controller on the project's bottleneck model
//! (`ccp_sim`, docs/architecture.md §11 layer 4), driven by a per-ACK replica of its datapath
//! program. The same claims as `tests/ledbat_behaviour.rs` at the workspace root, which runs
//! the real program in libccp through the agent, plus what only the pure controller can
//! show: the libutp profile's slowdown period and the slowdown share measured per ACK.
//!
//! `LEDBAT_MODEL_TRACE=1 cargo test -p alg-ledbat-pp --test model -- --nocapture` prints every
//! decision (time s, flow, window bytes, state) for plotting.

use alg_ledbat_pp::{Config, Controller, Measurement, State};
use algs_core::register::INFINITY_REGISTER;
use algs_core::{Bytes, Decision, Micros, Priority};
use ccp_sim::{AckSample, FlowId, Scenario, Summary, harness};

/// The datapath program's per-ACK registers (datapath.rs), replayed in Rust.
#[derive(Debug)]
struct Fold {
    acked: u64,
    lost: u64,
    timeout: bool,
    min_rtt: u64,
    max_flight: u64,
    s: [u64; 4],
    last_rtt: u64,
    /// `Ack.now` when `Micros` was last zeroed.
    micros_zero: u64,
}

impl Fold {
    fn new(now_us: u64) -> Self {
        Fold {
            acked: 0,
            lost: 0,
            timeout: false,
            min_rtt: INFINITY_REGISTER,
            max_flight: 0,
            s: [INFINITY_REGISTER; 4],
            last_rtt: 0,
            micros_zero: now_us,
        }
    }

    /// One ACK; the report the program would send, if any.
    fn ack(&mut self, sample: &AckSample) -> Option<Measurement> {
        let a = &sample.prims;
        self.acked += u64::from(a.bytes_acked);
        self.lost += u64::from(a.lost_pkts_sample);
        self.timeout = a.was_timeout;
        self.max_flight = self
            .max_flight
            .max(u64::from(a.bytes_in_flight) + u64::from(a.bytes_acked));
        if let Some(r) = a.rtt_sample() {
            self.s = [r, self.s[0], self.s[1], self.s[2]];
            self.min_rtt = self.min_rtt.min(r);
            self.last_rtt = r;
        }
        let urgent = self.timeout || self.lost > 0;
        let due = sample.now_us - self.micros_zero > self.last_rtt.max(1000);
        if !urgent && !due {
            return None;
        }
        let valid = |v: u64| (v > 0 && v < INFINITY_REGISTER).then_some(Micros(v));
        let m = Measurement {
            acked: Bytes(self.acked),
            lost_packets: self.lost,
            timeout: self.timeout,
            min_rtt: valid(self.min_rtt),
            cur_delay: valid(*self.s.iter().min().expect("four registers")),
            last_rtt: valid(self.last_rtt),
            max_flight: Bytes(self.max_flight),
        };
        self.acked = 0;
        self.lost = 0;
        self.timeout = false;
        self.min_rtt = INFINITY_REGISTER;
        self.max_flight = 0;
        self.micros_zero = sample.now_us;
        Some(m)
    }
}

/// What runs a flow: LEDBAT++, or after a switch to primary a Reno stand-in for the
/// primary started from the carried window.
#[derive(Debug)]
enum Alg {
    Ledbat { ctl: Box<Controller>, fold: Fold },
    Primary { cwnd: f64, last_cut: u64, srtt: u64 },
}

/// Every CCP flow of a scenario, plus per-ACK bookkeeping of flow 0's slowdowns.
struct Flows {
    cfg: Config,
    mss: u64,
    algs: Vec<Option<Alg>>,
    /// Flow 0: times it entered a slowdown, time spent in one, time of its last ACK.
    slowdown_entries: Vec<u64>,
    slowed_us: u64,
    last_ack_us: Option<(u64, bool)>,
    trace: bool,
}

impl Flows {
    fn new(cfg: Config, mss: u32) -> Self {
        Flows {
            cfg,
            mss: u64::from(mss),
            algs: Vec::new(),
            slowdown_entries: Vec::new(),
            slowed_us: 0,
            last_ack_us: None,
            trace: std::env::var_os("LEDBAT_MODEL_TRACE").is_some(),
        }
    }

    fn record_flow0(&mut self, now_us: u64) {
        let Some(Some(Alg::Ledbat { ctl, .. })) = self.algs.first() else {
            return;
        };
        let slowed = matches!(ctl.state(), State::Freeze { .. } | State::Ramp { .. });
        if let Some((t, was)) = self.last_ack_us {
            if was {
                self.slowed_us += now_us - t;
            }
            if slowed && !was {
                self.slowdown_entries.push(now_us);
            }
        }
        self.last_ack_us = Some((now_us, slowed));
    }
}

impl harness::Controller for Flows {
    fn on_start(&mut self, flow: FlowId, now_us: u64) -> Decision {
        if self.algs.len() <= flow {
            self.algs.resize_with(flow + 1, || None);
        }
        let ctl = Controller::new(self.cfg, Priority::Scavenger, Bytes(self.mss));
        let d = ctl.decision();
        self.algs[flow] = Some(Alg::Ledbat {
            ctl: Box::new(ctl),
            fold: Fold::new(now_us),
        });
        d
    }

    fn on_ack(&mut self, flow: FlowId, sample: &AckSample) -> Decision {
        let (a, now_us) = (&sample.prims, sample.now_us);
        let mss = self.mss as f64;
        let d = match self.algs.get_mut(flow).and_then(Option::as_mut) {
            Some(Alg::Ledbat { ctl, fold }) => match fold.ack(sample) {
                Some(m) => ctl.on_report(Micros(now_us), &m),
                None => Decision::default(),
            },
            Some(Alg::Primary {
                cwnd,
                last_cut,
                srtt,
            }) => {
                if let Some(r) = a.rtt_sample() {
                    *srtt = (7 * *srtt + r) / 8;
                }
                if a.lost_pkts_sample > 0 || a.was_timeout {
                    if now_us - *last_cut > *srtt {
                        *last_cut = now_us;
                        *cwnd = (*cwnd / 2.0).max(2.0 * mss);
                    }
                } else {
                    *cwnd += mss * f64::from(a.bytes_acked) / *cwnd;
                }
                Decision {
                    cwnd: Some(Bytes(*cwnd as u64)),
                    rate: None,
                }
            }
            None => Decision::default(),
        };
        if flow == 0 {
            self.record_flow0(now_us);
        }
        if self.trace {
            if let (Some(c), Some(Some(Alg::Ledbat { ctl, .. }))) = (d.cwnd, self.algs.get(flow)) {
                println!(
                    "{:.3} {flow} {} {}",
                    now_us as f64 / 1e6,
                    c.0,
                    ctl.state().name()
                );
            }
        }
        d
    }

    fn on_priority(&mut self, flow: FlowId, priority: Priority, now_us: u64) -> Decision {
        let Some(slot) = self.algs.get_mut(flow) else {
            return Decision::default();
        };
        let Some(Alg::Ledbat { ctl, .. }) = slot else {
            return Decision::default();
        };
        if priority != Priority::Primary {
            return Decision::default();
        }
        let carried = ctl.carried_state();
        *slot = Some(Alg::Primary {
            cwnd: carried.cwnd.0 as f64,
            last_cut: now_us,
            srtt: carried.srtt.map_or(30_000, |s| s.0),
        });
        Decision {
            cwnd: Some(carried.cwnd),
            rate: None,
        }
    }
}

fn scenario(toml_text: &str) -> Scenario {
    let s: Scenario = toml::from_str(toml_text).expect("scenario parses");
    s.validate().expect("scenario is valid");
    s
}

fn run(s: &Scenario, cfg: Config) -> (Summary, Flows) {
    let mut flows = Flows::new(cfg, s.link.mss);
    let summary = harness::run(s, &mut flows).expect("no invariant broken");
    (summary, flows)
}

fn alone(buffer_bdp: f64) -> Scenario {
    scenario(&format!(
        r#"
[link]
rate_mbps = 48.0
rtt_ms = 30.0
buffer_bdp = {buffer_bdp}
duration_s = 120.0
[[flow]]
name = "ledbat"
[[report]]
from_s = 30.0
to_s = 120.0
"#
    ))
}

/// E6/E7: alone on 48 Mbit/s / 30 ms with a 5 BDP buffer the queueing delay settles at the
/// 60 ms target (±10 ms) and slowdowns take about 10 % of the time.
#[test]
fn alone_deep_buffer_holds_target_delay_with_ten_percent_slowdowns() {
    let (s, flows) = run(&alone(5.0), Config::default());
    let w = &s.windows[0];
    let slowed = flows.slowed_us as f64 / (s.duration_s * 1e6);
    println!(
        "median q {:.1} ms, slowed {slowed:.3}, utilization {:.3}",
        w.queue_delay.p50_ms, w.utilization
    );
    assert!(
        (50.0..=70.0).contains(&w.queue_delay.p50_ms),
        "{:?}",
        w.queue_delay
    );
    assert!((0.05..=0.15).contains(&slowed), "slowdown share {slowed}");
    assert!(w.utilization > 0.85, "utilization {}", w.utilization);
}

/// E6: with a buffer below the target (0.5 BDP = 15 ms) the flow is loss-driven and still
/// uses more than 80 % of the link.
#[test]
fn shallow_buffer_keeps_utilization_above_80_percent() {
    let (s, _) = run(&alone(0.5), Config::default());
    let util = s.windows[0].utilization;
    println!("utilization {util:.3}");
    assert!(util > 0.80, "utilization {util}");
}

/// E7: at 48 Mbit/s / 30 ms slowdowns recur about every 10 s with the draft's schedule and
/// several times as often with the libutp profile (9 × ramp only, doubling ramp; ≈ 2.8 s).
#[test]
fn slowdown_period_draft_versus_libutp() {
    let period = |cfg: Config| {
        let (_, flows) = run(&alone(5.0), cfg);
        let e = &flows.slowdown_entries;
        assert!(e.len() >= 3, "{} slowdowns", e.len());
        (e[e.len() - 1] - e[0]) as f64 / 1e6 / (e.len() - 1) as f64
    };
    let draft = period(Config::default());
    let libutp = period(Config::libutp_compat());
    println!("slowdown period: draft {draft:.2} s, libutp profile {libutp:.2} s");
    // 10·D; D runs a little above the 1.0 s estimate of docs/algorithms/ledbat-pp.md §8 E7 because the ramp's RTT grows
    // with the queue it refills.
    assert!((8.0..=15.0).contains(&draft), "draft period {draft} s");
    assert!(libutp < 0.5 * draft, "libutp period {libutp} s");
}

fn versus_aimd(buffer_bdp: f64) -> Scenario {
    scenario(&format!(
        r#"
[link]
rate_mbps = 48.0
rtt_ms = 30.0
buffer_bdp = {buffer_bdp}
duration_s = 90.0
[[flow]]
name = "ledbat"
[[cross]]
kind = "aimd"
name = "reno"
start_s = 10.0
[[report]]
from_s = 30.0
to_s = 90.0
"#
    ))
}

/// (AIMD alone, AIMD with LEDBAT++, LEDBAT++) in Mbit/s from 30 s to 90 s.
fn aimd_ratio(buffer_bdp: f64) -> (f64, f64, f64) {
    let s = versus_aimd(buffer_bdp);
    let (with, _) = run(&s, Config::default());
    let (alone, _) = run(
        &s.without(&["ledbat"]).expect("known flow"),
        Config::default(),
    );
    let get = |sum: &Summary, name| sum.windows[0].mbps(name).expect("flow in window");
    (
        get(&alone, "reno"),
        get(&with, "reno"),
        get(&with, "ledbat"),
    )
}

/// A buffer deeper than the target (5 BDP = 150 ms): an AIMD flow keeps at least 90 % of
/// its alone throughput.
#[test]
fn deep_buffer_yields_to_aimd() {
    let (alone, with, ledbat) = aimd_ratio(5.0);
    println!("reno alone {alone:.2} Mbit/s, with LEDBAT++ {with:.2}, LEDBAT++ {ledbat:.2}");
    assert!(with >= 0.9 * alone, "ratio {}", with / alone);
}

/// A buffer shallower than the target (1 BDP = 30 ms): q never reaches T, LEDBAT++ is
/// loss-driven and does not fully yield (expected, docs/algorithms/ledbat-pp.md §8 E5: about sqrt(G) of Reno's rate).
/// Records the ratio; asserts only that it still takes less than the primary.
#[test]
fn shallow_buffer_records_partial_yield() {
    let (alone, with, ledbat) = aimd_ratio(1.0);
    println!(
        "reno alone {alone:.2} Mbit/s, with LEDBAT++ {with:.2} (ratio {:.3}), LEDBAT++ {ledbat:.2}",
        with / alone
    );
    assert!(ledbat < with, "LEDBAT++ {ledbat} vs primary {with}");
}

/// A switch to primary (the carried window given to a Reno-like primary) against an AIMD
/// flow raises the flow's share.
#[test]
fn hand_off_to_primary_raises_share() {
    let s = scenario(
        r#"
[link]
rate_mbps = 48.0
rtt_ms = 30.0
buffer_bdp = 5.0
duration_s = 80.0
[[flow]]
name = "app"
priority = [{ at_s = 40.0, class = "primary" }]
[[cross]]
kind = "aimd"
name = "reno"
start_s = 5.0
[[report]]
from_s = 20.0
to_s = 40.0
[[report]]
from_s = 60.0
to_s = 80.0
"#,
    );
    let (sum, _) = run(&s, Config::default());
    let before = sum.windows[0].mbps("app").expect("app");
    let after = sum.windows[1].mbps("app").expect("app");
    println!("share before {before:.2} Mbit/s, after hand-off {after:.2} Mbit/s");
    assert!(
        after > 5.0 * before.max(0.1),
        "before {before}, after {after}"
    );
}

/// E11: two LEDBAT++ flows started 30 s apart (50 Mbit/s / 30 ms / 4 BDP) share fairly once
/// slowdowns have shown both the true base delay: Jain's index ≥ 0.9 over 100 s.
#[test]
fn two_flows_converge_to_fair_share() {
    let s = scenario(
        r#"
[link]
rate_mbps = 50.0
rtt_ms = 30.0
buffer_bdp = 4.0
duration_s = 200.0
[[flow]]
name = "first"
[[flow]]
name = "late"
start_s = 30.0
[[report]]
from_s = 100.0
to_s = 200.0
"#,
    );
    let (sum, _) = run(&s, Config::default());
    let x = [
        sum.windows[0].mbps("first").expect("first"),
        sum.windows[0].mbps("late").expect("late"),
    ];
    let jain = algs_core::metrics::jain(&x).expect("the flows moved data");
    println!(
        "first {:.2} Mbit/s, late {:.2} Mbit/s, Jain {jain:.3}",
        x[0], x[1]
    );
    assert!(jain >= 0.9, "Jain index {jain}");
}
