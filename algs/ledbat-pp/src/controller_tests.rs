//! Controller scenarios and the test vectors that need the state machine
//! (docs/algorithms/ledbat-pp.md §7). Units: MSS 1500 B, T 60 ms, reports one RTT long with
//! `acked = W` unless a test says otherwise.

use super::*;
use proptest::prelude::*;

const MSS: u64 = 1500;

fn ms(x: f64) -> Micros {
    Micros((x * 1000.0).round() as u64)
}

/// A controller whose base delay is `base_ms` and smoothed RTT `srtt_ms`, in `state` with W
/// and ssthresh as given.
fn primed(
    cfg: Config,
    base_ms: f64,
    srtt_ms: f64,
    w: f64,
    ssthresh: f64,
    state: State,
) -> Controller {
    let mut c = Controller::new(cfg, Priority::Scavenger, Bytes(MSS));
    c.base.update(Micros(0), ms(base_ms));
    c.lifetime_min_rtt = Some(ms(base_ms));
    c.srtt_us = Some(srtt_ms * 1000.0);
    c.cur_delay = Some(ms(base_ms));
    c.w = w;
    c.ssthresh = ssthresh;
    c.state = state;
    c
}

/// A one-RTT report acking the whole (published) window at queueing delay `q_ms` over `base_ms`, with
/// no new RTT sample for the base history (so srtt and base stay as primed).
fn rtt_report(c: &Controller, base_ms: f64, q_ms: f64) -> Measurement {
    Measurement {
        acked: Bytes(c.w as u64),
        cur_delay: Some(ms(base_ms + q_ms)),
        max_flight: Bytes(c.w as u64),
        ..Measurement::default()
    }
}

fn loss_report(c: &Controller) -> Measurement {
    Measurement {
        lost_packets: 1,
        ..rtt_report(c, 30.0, 0.0)
    }
}

fn assert_close(got: f64, want: f64, tol: f64) {
    assert!((got - want).abs() <= tol, "got {got}, want {want} ± {tol}");
}

// ------------------------------------------------------------- the page's test vectors

/// TV-2: the datapath's min-of-4 filter (modelled register by register as the program
/// shifts them) and the base history give the vectors' q; q = 50 ends the initial slow start.
#[test]
fn tv2_filters_give_queueing_delay_and_trigger_the_exit() {
    /// The program's s1..s4 shift registers and the interval minimum.
    struct Fold {
        s: [u64; 4],
        min: u64,
    }
    impl Fold {
        fn ack(&mut self, rtt_ms: u64) {
            self.s = [rtt_ms * 1000, self.s[0], self.s[1], self.s[2]];
            self.min = self.min.min(rtt_ms * 1000);
        }
        fn report(&mut self) -> Measurement {
            let cur = *self.s.iter().min().expect("four registers");
            let m = Measurement {
                acked: Bytes(3000),
                min_rtt: Some(Micros(self.min)),
                cur_delay: Some(Micros(cur)),
                last_rtt: Some(Micros(self.s[0])),
                max_flight: Bytes(3000),
                ..Measurement::default()
            };
            self.min = u64::MAX;
            m
        }
    }
    let mut fold = Fold {
        s: [u64::MAX; 4],
        min: u64::MAX,
    };
    let mut c = Controller::new(Config::default(), Priority::Scavenger, Bytes(MSS));
    for s in [31, 30, 33, 35] {
        fold.ack(s);
    }
    c.on_report(ms(100.0), &fold.report());
    assert_eq!(c.base_delay(), Some(ms(30.0)));
    assert_eq!(c.current_delay(), Some(ms(30.0)));
    assert_eq!(c.queuing_delay(), Some(Micros(0)));
    assert_eq!(c.state(), State::SlowStart);

    for s in [80, 95, 92, 97] {
        fold.ack(s);
    }
    let m = fold.report();
    assert_eq!(m.cur_delay, Some(ms(80.0)));
    c.on_report(ms(200.0), &m);
    assert_eq!(c.queuing_delay(), Some(ms(50.0)));
    assert!(
        matches!(c.state(), State::Avoidance { .. }),
        "q = 50 > 45 ends slow start"
    );

    fold.ack(91);
    let m = fold.report();
    c.on_report(ms(300.0), &m);
    assert_eq!(c.current_delay(), Some(ms(91.0)));
    assert_eq!(c.queuing_delay(), Some(ms(61.0)));
}

/// TV-4 through the controller: per report +G·MSS below, at and under the target.
#[test]
fn tv4_avoidance_adds_gain_mss_per_rtt() {
    for q in [20.0, 45.0, 60.0] {
        let mut c = primed(
            Config::default(),
            30.0,
            30.0,
            150_000.0,
            150_000.0,
            State::Avoidance {
                next_slowdown: Micros(u64::MAX),
            },
        );
        let m = rtt_report(&c, 30.0, q);
        c.on_report(ms(1000.0), &m);
        assert_close(c.cwnd_exact(), 150_375.0, 1e-9);
    }
}

/// TV-5 through the controller, with the 2-MSS floor cases.
#[test]
fn tv5_decrease_is_capped_at_half_and_floored_at_two_packets() {
    for (w, q, after) in [
        (150_000.0, 61.2, 147_375.0),
        (150_000.0, 75.0, 112_875.0),
        (150_000.0, 90.0, 75_375.0),
        (150_000.0, 120.0, 75_000.0),
        (150_000.0, 600.0, 75_000.0),
        (4500.0, 150.0, 3000.0),
        (3000.0, 90.0, 3000.0),
    ] {
        let mut c = primed(
            Config::default(),
            30.0,
            30.0,
            w,
            w,
            State::Avoidance {
                next_slowdown: Micros(u64::MAX),
            },
        );
        let m = rtt_report(&c, 30.0, q);
        c.on_report(ms(1000.0), &m);
        assert_close(c.cwnd_exact(), after, 1e-6);
    }
}

/// TV-6: GAIN-scaled slow start, exit on q = 46 ms with no growth, first slowdown 2·srtt
/// later; q = 45.0 exactly does not exit.
#[test]
fn tv6_initial_slow_start_grows_by_gain_and_exits_without_growth() {
    let mut c = primed(
        Config::default(),
        30.0,
        76.0,
        3000.0,
        f64::INFINITY,
        State::SlowStart,
    );
    let mut t = ms(0.0);
    let published: Vec<u64> = (0..4)
        .map(|i| {
            t = ms(30.0 * (i + 1) as f64);
            let m = rtt_report(&c, 30.0, 10.0);
            c.on_report(t, &m).cwnd.expect("cwnd").0
        })
        .collect();
    assert_eq!(published, [3750, 4687, 5859, 7324]);
    // The spec acks the fractional W; a datapath acks whole bytes (the published floor), so
    // each step may fall short by up to G·1 B.
    assert_close(c.cwnd_exact(), 7324.21875, 1.0);

    let m = rtt_report(&c, 30.0, 45.0);
    c.on_report(ms(150.0), &m);
    assert_eq!(
        c.state(),
        State::SlowStart,
        "q = 45.0 ms is not above 3/4·T"
    );
    let w = c.cwnd_exact();

    let m = rtt_report(&c, 30.0, 46.0);
    c.on_report(ms(180.0), &m);
    assert_close(c.cwnd_exact(), w, 0.0);
    assert_close(c.ssthresh(), w, 0.0);
    assert_eq!(
        c.state(),
        State::Avoidance {
            next_slowdown: ms(180.0 + 152.0)
        }
    );
}

/// The libutp profile grows by acked bytes (doubling) in slow start, without GAIN.
#[test]
fn libutp_slow_start_doubles() {
    let mut c = primed(
        Config::libutp_compat(),
        30.0,
        30.0,
        3000.0,
        f64::INFINITY,
        State::SlowStart,
    );
    for (i, want) in [6000.0, 12_000.0, 24_000.0].into_iter().enumerate() {
        let m = rtt_report(&c, 30.0, 10.0);
        c.on_report(ms(30.0 * (i + 1) as f64), &m);
        assert_close(c.cwnd_exact(), want, 0.0);
    }
}

/// Drives a slowdown from its entry report to its end with one report per 30 ms; returns
/// (time of the end, number of growth reports).
fn run_slowdown(c: &mut Controller, base_ms: f64, t0: Micros) -> (Micros, u32) {
    let mut growth = 0;
    let mut t = t0;
    for _ in 0..1000 {
        t = t + ms(30.0);
        let before = c.cwnd_exact();
        let m = rtt_report(c, base_ms, 0.0);
        c.on_report(t, &m);
        if matches!(c.state(), State::Ramp { .. }) && c.cwnd_exact() > before {
            growth += 1;
        }
        if let State::Avoidance { .. } = c.state() {
            return (t, growth + 1);
        }
    }
    panic!("slowdown never ended: {:?}", c.state());
}

/// TV-7: entry at t0, a 2-RTT freeze, the ramp from the report that ends the freeze, 18
/// GAIN-1/4 growth reports, D = 600 ms and the next slowdown at t0 + 6000 ms (10 % duty).
#[test]
fn tv7_slowdown_timing_and_duty_cycle() {
    let t0 = ms(10_000.0);
    let mut c = primed(
        Config::default(),
        30.0,
        30.0,
        150_000.0 - 375.0,
        f64::INFINITY,
        State::Avoidance { next_slowdown: t0 },
    );
    let m = rtt_report(&c, 30.0, 20.0);
    c.on_report(t0, &m);
    assert_close(c.ssthresh(), 150_000.0, 1e-9);
    assert_close(c.cwnd_exact(), 3000.0, 0.0);
    assert_eq!(
        c.state(),
        State::Freeze {
            entry: t0,
            until: t0 + ms(60.0)
        }
    );

    let m = rtt_report(&c, 30.0, 0.0);
    c.on_report(t0 + ms(30.0), &m);
    assert!(matches!(c.state(), State::Freeze { .. }));
    let m = rtt_report(&c, 30.0, 0.0);
    c.on_report(t0 + ms(60.0), &m);
    assert_eq!(
        c.state(),
        State::Ramp {
            entry: t0,
            ramp_start: t0 + ms(60.0)
        }
    );
    assert_close(c.cwnd_exact(), 3000.0, 0.0);

    for n in 1..=17 {
        let m = rtt_report(&c, 30.0, 0.0);
        c.on_report(t0 + ms(60.0 + 30.0 * n as f64), &m);
    }
    // Whole acked bytes: at most 1 B short per growth report of the vectors' fractional value.
    assert_close(c.cwnd_exact(), 133_226.8, 17.0);
    let m = rtt_report(&c, 30.0, 0.0);
    c.on_report(t0 + ms(600.0), &m);
    assert_close(c.cwnd_exact(), 150_000.0, 0.0);
    assert_eq!(
        c.state(),
        State::Avoidance {
            next_slowdown: t0 + ms(6000.0)
        }
    );
}

/// TV-7, libutp profile: freeze 2·minRTT, doubling ramp of 6 RTTs, next = exit + 9·ramp,
/// period 1860 ms.
#[test]
fn tv7_libutp_slowdown_counts_only_the_ramp() {
    let t0 = ms(10_000.0);
    let mut c = primed(
        Config::libutp_compat(),
        30.0,
        30.0,
        150_000.0,
        150_000.0,
        State::Freeze {
            entry: t0,
            until: t0 + ms(60.0),
        },
    );
    c.w = 3000.0;
    let (end, growth) = run_slowdown(&mut c, 30.0, t0);
    assert_eq!(growth, 6);
    assert_eq!(end, t0 + ms(240.0));
    assert_eq!(
        c.state(),
        State::Avoidance {
            next_slowdown: t0 + ms(1860.0)
        }
    );
}

/// TV-7's ramp lengths from 2 to 100 MSS for each GAIN.
#[test]
fn tv7_ramp_length_per_gain() {
    for (base_ms, rtts) in [
        (120.0, 6),
        (60.0, 10),
        (30.0, 18),
        (20.0, 26),
        (10.0, 49),
        (7.5, 65),
    ] {
        let mut c = primed(
            Config::default(),
            base_ms,
            30.0,
            3000.0,
            150_000.0,
            State::Ramp {
                entry: Micros(0),
                ramp_start: Micros(0),
            },
        );
        let (_, growth) = run_slowdown(&mut c, base_ms, Micros(0));
        assert_eq!(growth, rtts, "base {base_ms} ms");
    }
}

/// TV-8: a slowdown due while W is at the minimum is postponed by 2 RTT.
#[test]
fn tv8_slowdown_at_minimum_window_is_postponed() {
    let now = ms(5000.0);
    let mut c = primed(
        Config::default(),
        30.0,
        90.0,
        3000.0,
        40_000.0,
        State::Avoidance {
            next_slowdown: ms(4000.0),
        },
    );
    let m = rtt_report(&c, 30.0, 90.0);
    c.on_report(now, &m);
    assert_close(c.cwnd_exact(), 3000.0, 0.0);
    assert_close(c.ssthresh(), 40_000.0, 0.0);
    assert_eq!(
        c.state(),
        State::Avoidance {
            next_slowdown: now + ms(180.0)
        }
    );
}

/// TV-9: loss halves once per RTT, floors at 2 MSS, and during a freeze halves the saved
/// window instead.
#[test]
fn tv9_loss_halves_once_per_rtt() {
    let next = ms(99_000.0);
    let ca = State::Avoidance {
        next_slowdown: next,
    };
    let mut c = primed(Config::default(), 30.0, 90.0, 150_000.0, 200_000.0, ca);
    let m = loss_report(&c);
    c.on_report(ms(1000.0), &m);
    assert_close(c.cwnd_exact(), 75_000.0, 0.0);
    assert_close(c.ssthresh(), 75_000.0, 0.0);
    assert_eq!(c.state(), ca, "the pending slowdown is kept");

    let mut m = loss_report(&c);
    m.acked = Bytes(75_000);
    c.on_report(ms(1010.0), &m);
    assert_close(c.cwnd_exact(), 75_000.0, 0.0);

    let mut c = primed(Config::default(), 30.0, 90.0, 4000.0, 4000.0, ca);
    let m = loss_report(&c);
    c.on_report(ms(1000.0), &m);
    assert_close(c.cwnd_exact(), 3000.0, 0.0);

    let freeze = State::Freeze {
        entry: ms(900.0),
        until: ms(1080.0),
    };
    let mut c = primed(Config::default(), 30.0, 90.0, 3000.0, 150_000.0, freeze);
    let m = loss_report(&c);
    c.on_report(ms(1000.0), &m);
    assert_close(c.cwnd_exact(), 3000.0, 0.0);
    assert_close(c.ssthresh(), 75_000.0, 0.0);
    assert_eq!(c.state(), freeze);
}

/// A loss after the flight of the last cut was resolved, and at least one RTT later, is a
/// new event.
#[test]
fn loss_after_the_cut_flight_is_resolved_cuts_again() {
    let ca = State::Avoidance {
        next_slowdown: Micros(u64::MAX),
    };
    let mut c = primed(Config::default(), 30.0, 90.0, 150_000.0, 150_000.0, ca);
    let m = loss_report(&c);
    c.on_report(ms(1000.0), &m);
    for t in [1040.0, 1070.0] {
        let m = rtt_report(&c, 30.0, 0.0);
        c.on_report(ms(t), &m);
    }
    let w = c.cwnd_exact();
    let m = loss_report(&c);
    c.on_report(ms(1090.0), &m);
    assert_close(c.cwnd_exact(), w / 2.0, 1e-9);
}

/// Regression: drops of one burst revealed more than an RTT after the first were taken as
/// a second event and halved W twice (seen on the test datapath with a 0.5 BDP buffer).
#[test]
fn drops_revealed_over_more_than_an_rtt_are_one_event() {
    let ca = State::Avoidance {
        next_slowdown: Micros(u64::MAX),
    };
    let mut c = primed(Config::default(), 30.0, 43.0, 272_000.0, 272_000.0, ca);
    let m = loss_report(&c);
    c.on_report(ms(1000.0), &m);
    assert_close(c.cwnd_exact(), 136_000.0, 0.0);
    // The old flight is acked except the dropped packets...
    let m = Measurement {
        acked: Bytes(266_000),
        ..rtt_report(&c, 30.0, 10.0)
    };
    c.on_report(ms(1045.0), &m);
    // ...which the first ACK of new data reveals, more than an srtt after the cut.
    let m = Measurement {
        acked: Bytes(1500),
        lost_packets: 4,
        ..loss_report(&c)
    };
    c.on_report(ms(1053.0), &m);
    assert_close(c.cwnd_exact(), 136_000.0, 400.0);
}

/// A datapath whose counts never resolve the flight still sees a new loss event after
/// 4 srtt.
#[test]
fn unresolved_recovery_ends_after_four_srtt() {
    let ca = State::Avoidance {
        next_slowdown: Micros(u64::MAX),
    };
    let mut c = primed(Config::default(), 30.0, 43.0, 272_000.0, 272_000.0, ca);
    let m = loss_report(&c);
    c.on_report(ms(1000.0), &m);
    let lone_loss = |c: &Controller| Measurement {
        acked: Bytes(0),
        ..loss_report(c)
    };
    let m = lone_loss(&c);
    c.on_report(ms(1100.0), &m);
    assert_close(c.cwnd_exact(), 136_000.0, 0.0);
    let m = lone_loss(&c);
    c.on_report(ms(1000.0 + 4.0 * 43.0), &m);
    assert_close(c.cwnd_exact(), 68_000.0, 0.0);
}

/// A loss in the initial slow start ends it and schedules the first slowdown 2 RTT later.
#[test]
fn loss_in_initial_slow_start_schedules_the_first_slowdown() {
    let mut c = primed(
        Config::default(),
        30.0,
        40.0,
        60_000.0,
        f64::INFINITY,
        State::SlowStart,
    );
    let m = loss_report(&c);
    c.on_report(ms(1000.0), &m);
    assert_close(c.cwnd_exact(), 30_000.0, 0.0);
    assert_eq!(
        c.state(),
        State::Avoidance {
            next_slowdown: ms(1080.0)
        }
    );
}

/// A loss in the ramp ends the slowdown and schedules the next one 9·(now − entry) later.
#[test]
fn loss_in_ramp_ends_the_slowdown() {
    let ramp = State::Ramp {
        entry: ms(1000.0),
        ramp_start: ms(1060.0),
    };
    let mut c = primed(Config::default(), 30.0, 30.0, 40_000.0, 150_000.0, ramp);
    let m = loss_report(&c);
    c.on_report(ms(1200.0), &m);
    assert_close(c.cwnd_exact(), 20_000.0, 0.0);
    assert_close(c.ssthresh(), 20_000.0, 0.0);
    assert_eq!(
        c.state(),
        State::Avoidance {
            next_slowdown: ms(1200.0 + 9.0 * 200.0)
        }
    );
}

/// libutp profile: a loss during a freeze leaves the flow at the minimum in avoidance, and
/// the next slowdown 2·minRTT away (DEV(libutp), docs/algorithms/ledbat-pp.md §2.5).
#[test]
fn libutp_loss_during_freeze_reschedules() {
    let freeze = State::Freeze {
        entry: ms(900.0),
        until: ms(960.0),
    };
    let mut c = primed(
        Config::libutp_compat(),
        30.0,
        50.0,
        3000.0,
        150_000.0,
        freeze,
    );
    let m = loss_report(&c);
    c.on_report(ms(1000.0), &m);
    assert_close(c.cwnd_exact(), 3000.0, 0.0);
    assert_eq!(
        c.state(),
        State::Avoidance {
            next_slowdown: ms(1060.0)
        }
    );
    // Its hold-off is 100 ms, not one RTT.
    let m = loss_report(&c);
    c.on_report(ms(1101.0), &m);
    assert_close(c.ssthresh(), 3000.0, 0.0);
}

/// TV-10: a timeout drops W to 2 MSS, halves ssthresh, cancels the slowdown, and the
/// following slow start has no delay exit.
#[test]
fn tv10_timeout_restarts_slow_start_without_delay_exit() {
    let ca = State::Avoidance {
        next_slowdown: ms(1100.0),
    };
    let mut c = primed(Config::default(), 30.0, 30.0, 150_000.0, 150_000.0, ca);
    let m = Measurement {
        timeout: true,
        ..rtt_report(&c, 30.0, 0.0)
    };
    c.on_report(ms(1000.0), &m);
    assert_close(c.cwnd_exact(), 3000.0, 0.0);
    assert_close(c.ssthresh(), 75_000.0, 0.0);
    assert_eq!(c.state(), State::RtoSlowStart { rto_at: ms(1000.0) });

    let m = rtt_report(&c, 30.0, 50.0);
    c.on_report(ms(1200.0), &m);
    assert_close(c.cwnd_exact(), 3750.0, 1e-9);
    assert!(matches!(c.state(), State::RtoSlowStart { .. }));
}

/// The RTO slow start ends at ssthresh and counts as a slowdown for the schedule.
#[test]
fn rto_recovery_schedules_next_slowdown_from_its_length() {
    let mut c = primed(
        Config::default(),
        30.0,
        30.0,
        3000.0,
        4000.0,
        State::RtoSlowStart { rto_at: ms(1000.0) },
    );
    let m = rtt_report(&c, 30.0, 0.0);
    c.on_report(ms(1100.0), &m);
    assert_close(c.cwnd_exact(), 3750.0, 1e-9);
    let m = rtt_report(&c, 30.0, 0.0);
    c.on_report(ms(1130.0), &m);
    assert_close(c.cwnd_exact(), 4000.0, 0.0);
    assert_eq!(
        c.state(),
        State::Avoidance {
            next_slowdown: ms(1130.0 + 9.0 * 130.0)
        }
    );
}

/// A timeout during a freeze halves the saved window, not the 2-packet one.
#[test]
fn timeout_during_freeze_uses_saved_window() {
    let freeze = State::Freeze {
        entry: ms(900.0),
        until: ms(960.0),
    };
    let mut c = primed(Config::default(), 30.0, 30.0, 3000.0, 150_000.0, freeze);
    let m = Measurement {
        timeout: true,
        ..rtt_report(&c, 30.0, 0.0)
    };
    c.on_report(ms(950.0), &m);
    assert_close(c.ssthresh(), 75_000.0, 0.0);
}

/// TV-12 through the controller: the libutp profile applies its per-ACK rule to a report's
/// acked bytes replayed as MSS-sized ACKs (here one ACK of 1435 B).
#[test]
fn tv12_libutp_profile_uses_per_ack_rule() {
    let ca = State::Avoidance {
        next_slowdown: Micros(u64::MAX),
    };
    for (q, after) in [(20.0, 150_003.0), (90.0, 149_286.0), (200.0, 149_282.0)] {
        let mut c = primed(
            Config::libutp_compat(),
            30.0,
            30.0,
            150_000.0,
            150_000.0,
            ca,
        );
        let m = Measurement {
            acked: Bytes(1435),
            ..rtt_report(&c, 30.0, q)
        };
        c.on_report(ms(1000.0), &m);
        assert_close(c.cwnd_exact(), after, 0.0);
    }
}

// ---------------------------------------------------------------- scenarios

#[test]
fn no_growth_before_the_first_rtt_sample() {
    let mut c = Controller::new(Config::default(), Priority::Scavenger, Bytes(MSS));
    let m = Measurement {
        acked: Bytes(3000),
        max_flight: Bytes(3000),
        ..Measurement::default()
    };
    assert_eq!(c.on_report(ms(10.0), &m).cwnd, Some(Bytes(3000)));
    assert_eq!(c.gain(), None);
}

/// Slow start grows by at most G·W per report, even when the datapath acked more than W
/// (its own initial window applied before ours).
#[test]
fn slow_start_growth_is_at_most_gain_times_window() {
    let mut c = primed(
        Config::default(),
        30.0,
        30.0,
        3000.0,
        f64::INFINITY,
        State::SlowStart,
    );
    let m = Measurement {
        acked: Bytes(15_000),
        max_flight: Bytes(15_000),
        ..rtt_report(&c, 30.0, 0.0)
    };
    c.on_report(ms(30.0), &m);
    assert_close(c.cwnd_exact(), 3750.0, 0.0);
}

#[test]
fn an_unused_window_does_not_grow() {
    let ca = State::Avoidance {
        next_slowdown: Micros(u64::MAX),
    };
    let mut c = primed(Config::default(), 30.0, 30.0, 150_000.0, 150_000.0, ca);
    let m = Measurement {
        max_flight: Bytes(100_000),
        ..rtt_report(&c, 30.0, 10.0)
    };
    c.on_report(ms(1000.0), &m);
    assert_close(c.cwnd_exact(), 150_000.0, 0.0);

    let mut c = primed(
        Config::default(),
        30.0,
        30.0,
        30_000.0,
        f64::INFINITY,
        State::SlowStart,
    );
    let m = Measurement {
        max_flight: Bytes(10_000),
        ..rtt_report(&c, 30.0, 10.0)
    };
    c.on_report(ms(1000.0), &m);
    assert_close(c.cwnd_exact(), 30_000.0, 0.0);
}

/// Regression: with an MSS that does not divide libutp's 3000 B minimum (1448 B), the
/// profile's "window full" test never held and the flow never grew.
#[test]
fn libutp_profile_grows_from_its_minimum_window_with_any_mss() {
    let mut c = Controller::new(Config::libutp_compat(), Priority::Scavenger, Bytes(1448));
    let report = || Measurement {
        acked: Bytes(1448),
        min_rtt: Some(ms(30.0)),
        cur_delay: Some(ms(30.0)),
        last_rtt: Some(ms(30.0)),
        max_flight: Bytes(1448),
        ..Measurement::default()
    };
    c.on_report(ms(30.0), &report());
    c.on_report(ms(60.0), &report());
    assert!(c.cwnd_exact() > 3000.0, "{}", c.cwnd_exact());
    // Not used for more than a second: no growth.
    let idle = Measurement {
        max_flight: Bytes(0),
        ..report()
    };
    let w = c.cwnd_exact();
    c.on_report(ms(1100.0), &idle);
    c.on_report(ms(1200.0), &idle);
    assert_close(c.cwnd_exact(), w, 0.0);
}

#[test]
fn the_window_check_can_be_turned_off() {
    let ca = State::Avoidance {
        next_slowdown: Micros(u64::MAX),
    };
    let cfg = Config::default().with_cwnd_limited_check(false);
    let mut c = primed(cfg, 30.0, 30.0, 150_000.0, 150_000.0, ca);
    let m = Measurement {
        max_flight: Bytes(0),
        ..rtt_report(&c, 30.0, 10.0)
    };
    c.on_report(ms(1000.0), &m);
    assert_close(c.cwnd_exact(), 150_375.0, 1e-9);
}

/// A larger target moves the decrease threshold: q = 75 ms is within a 100 ms target.
#[test]
fn target_is_configurable() {
    let ca = State::Avoidance {
        next_slowdown: Micros(u64::MAX),
    };
    let cfg = Config::default().with_target(ms(100.0));
    let mut c = primed(cfg, 30.0, 30.0, 150_000.0, 150_000.0, ca);
    assert_eq!(c.gain(), Some(1.0 / 7.0));
    let m = rtt_report(&c, 30.0, 75.0);
    c.on_report(ms(1000.0), &m);
    assert!(c.cwnd_exact() > 150_000.0);
}

/// Timers use the smoothed RTT, or the minimum RTT when configured (docs/algorithms/ledbat-pp.md §3.2).
#[test]
fn freeze_length_follows_the_configured_rtt() {
    for (rtt, until) in [(RttForTimers::Srtt, 1200.0), (RttForTimers::MinRtt, 1060.0)] {
        let cfg = Config::default().with_rtt_for_timers(rtt);
        let mut c = primed(
            cfg,
            30.0,
            100.0,
            150_000.0,
            150_000.0,
            State::Avoidance {
                next_slowdown: ms(1000.0),
            },
        );
        let m = rtt_report(&c, 30.0, 0.0);
        c.on_report(ms(1000.0), &m);
        assert_eq!(
            c.state(),
            State::Freeze {
                entry: ms(1000.0),
                until: ms(until)
            }
        );
    }
}

/// The smoothed RTT follows the reports' last samples with weight 1/8.
#[test]
fn srtt_is_an_ewma_of_reported_samples() {
    let mut c = Controller::new(Config::default(), Priority::Scavenger, Bytes(MSS));
    let sample = |rtt: f64| Measurement {
        min_rtt: Some(ms(rtt)),
        cur_delay: Some(ms(rtt)),
        last_rtt: Some(ms(rtt)),
        ..Measurement::default()
    };
    c.on_report(ms(1.0), &sample(80.0));
    assert_eq!(c.srtt(), Some(ms(80.0)));
    c.on_report(ms(2.0), &sample(40.0));
    assert_eq!(c.srtt(), Some(ms(75.0)));
}

/// Primary → LEDBAT++ (docs/algorithms/ledbat-pp.md §6): avoidance with the carried window, no initial slow start,
/// a slowdown 2 RTT later.
#[test]
fn flow_from_a_primary_starts_in_avoidance() {
    let carried = CarriedState {
        cwnd: Bytes(90_000),
        ssthresh: None,
        rate: None,
        srtt: Some(ms(50.0)),
        min_rtt: Some(ms(30.0)),
        at: ms(7000.0),
    };
    let c = Controller::start_from(Config::default(), Priority::Scavenger, Bytes(MSS), &carried);
    assert_eq!(c.cwnd(), Bytes(90_000));
    // Handed on again before any report: at the time it was handed over.
    assert_eq!(c.carried_state().at, ms(7000.0));
    assert_eq!(c.base_delay(), Some(ms(30.0)));
    assert_eq!(
        c.state(),
        State::Avoidance {
            next_slowdown: ms(7100.0)
        }
    );
}

/// TV-13 (the LEDBAT++ side): a hand-off carries W outside a slowdown, and the saved window
/// during one (strict mode: the literal W).
#[test]
fn tv13_hand_off_carries_the_window() {
    let ca = State::Avoidance {
        next_slowdown: Micros(u64::MAX),
    };
    let c = primed(Config::default(), 30.0, 40.0, 120_000.0, 120_000.0, ca);
    let s = c.carried_state();
    assert_eq!(s.cwnd, Bytes(120_000));
    assert_eq!(s.ssthresh, Some(Bytes(120_000)));
    assert_eq!(s.srtt, Some(ms(40.0)));
    assert_eq!(s.min_rtt, Some(ms(30.0)));

    let freeze = State::Freeze {
        entry: Micros(0),
        until: ms(80.0),
    };
    let c = primed(Config::default(), 30.0, 40.0, 3000.0, 150_000.0, freeze);
    assert_eq!(c.carried_state().cwnd, Bytes(150_000));
    let strict = Config::default().with_hand_off_window(HandOffWindow::Strict);
    let c = primed(strict, 30.0, 40.0, 3000.0, 150_000.0, freeze);
    assert_eq!(c.carried_state().cwnd, Bytes(3000));
}

/// A whole flow on a fixed-delay path with a queue that grows with W: the window settles
/// where q is near T, and slowdowns recur.
#[test]
fn closed_loop_settles_near_target_and_slows_down() {
    // 10 MB/s bottleneck, 30 ms base RTT: q = (W − BDP)/rate when W > BDP.
    let rate = 10_000_000.0;
    let base = 30_000.0;
    let bdp = rate * base / 1e6;
    let mut c = Controller::new(Config::default(), Priority::Scavenger, Bytes(MSS));
    let mut t = 0.0;
    let mut freeze_time = 0.0;
    let mut q_samples = Vec::new();
    for _ in 0..20_000 {
        let w = c.cwnd_exact();
        let q = ((w - bdp) / rate * 1e6).max(0.0);
        let rtt = base + q;
        t += rtt;
        let m = Measurement {
            acked: Bytes(w as u64),
            min_rtt: Some(Micros(rtt as u64)),
            cur_delay: Some(Micros(rtt as u64)),
            last_rtt: Some(Micros(rtt as u64)),
            max_flight: Bytes(w as u64),
            ..Measurement::default()
        };
        c.on_report(Micros(t as u64), &m);
        match c.state() {
            State::Freeze { .. } | State::Ramp { .. } => freeze_time += rtt,
            State::Avoidance { .. } if t > 60e6 => q_samples.push(q),
            _ => {}
        }
    }
    q_samples.sort_by(f64::total_cmp);
    let median = q_samples[q_samples.len() / 2];
    assert!((median - 60_000.0).abs() < 10_000.0, "median q {median} µs");
    let share = freeze_time / t;
    assert!((0.03..0.15).contains(&share), "slowdown share {share}");
}

// ---------------------------------------------------------------- properties

#[derive(Debug, Clone)]
enum Op {
    Report {
        dt_us: u64,
        acked: u64,
        rtt_us: u64,
        q_us: u64,
        inflight_frac: f64,
        lost: u64,
    },
    Timeout {
        dt_us: u64,
    },
    Idle {
        days: u64,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => (0u64..500_000, 0u64..10_000_000, 0u64..2_000_000, 0u64..500_000, 0.0f64..1.5, prop_oneof![4 => Just(0u64), 1 => 1u64..50])
            .prop_map(|(dt_us, acked, rtt_us, q_us, inflight_frac, lost)| Op::Report { dt_us, acked, rtt_us, q_us, inflight_frac, lost }),
        1 => (0u64..1_000_000).prop_map(|dt_us| Op::Timeout { dt_us }),
        1 => (1u64..4000).prop_map(|days| Op::Idle { days }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Whatever the reports, W stays finite, at least the minimum window and within the u32
    /// Cwnd register, and no arithmetic overflows even after years idle.
    #[test]
    fn window_stays_valid(
        libutp in any::<bool>(),
        mss in 500u64..9000,
        ops in proptest::collection::vec(op(), 1..300),
    ) {
        let cfg = if libutp { Config::libutp_compat() } else { Config::default() };
        let mut c = Controller::new(cfg, Priority::Scavenger, Bytes(mss));
        let min = if libutp { 3000f64.max(2.0 * mss as f64) } else { 2.0 * mss as f64 };
        let mut t = Micros(0);
        for op in ops {
            let m = match op {
                Op::Report { dt_us, acked, rtt_us, q_us, inflight_frac, lost } => {
                    t = t + Micros(dt_us);
                    let valid = (rtt_us > 0).then_some(Micros(rtt_us));
                    Measurement {
                        acked: Bytes(acked),
                        lost_packets: lost,
                        timeout: false,
                        min_rtt: valid,
                        cur_delay: valid.map(|r| r + Micros(q_us)),
                        last_rtt: valid,
                        max_flight: Bytes((c.cwnd_exact() * inflight_frac) as u64),
                    }
                }
                Op::Timeout { dt_us } => {
                    t = t + Micros(dt_us);
                    Measurement { timeout: true, ..Measurement::default() }
                }
                Op::Idle { days } => {
                    t = t + Micros(days * 86_400 * 1_000_000);
                    Measurement::default()
                }
            };
            let d = c.on_report(t, &m);
            let w = c.cwnd_exact();
            prop_assert!(w.is_finite());
            prop_assert!(w >= min, "W {} below minimum {}", w, min);
            prop_assert!(w <= u32::MAX as f64);
            prop_assert_eq!(d.cwnd, Some(Bytes(w.floor() as u64)));
            prop_assert!(c.ssthresh() >= min || c.ssthresh().is_infinite());
            prop_assert!(c.gain().is_none_or(|g| (1.0 / 16.0..=1.0).contains(&g)));
        }
        let carried = c.carried_state();
        prop_assert!(carried.cwnd.0 as f64 >= min.floor());
        // Every op was a report: the hand-off is at the latest one's time.
        prop_assert_eq!(carried.at, t);
    }

    /// A slowdown never hands a primary less than the pre-slowdown window (REC policy).
    #[test]
    fn hand_off_never_carries_the_probe_window(saved in 3000.0f64..1e7, w in 3000.0f64..1e7) {
        let state = State::Ramp { entry: Micros(0), ramp_start: Micros(0) };
        let c = primed(Config::default(), 30.0, 30.0, w.min(saved), saved, state);
        prop_assert_eq!(c.carried_state().cwnd, Bytes(saved.floor() as u64));
    }
}
