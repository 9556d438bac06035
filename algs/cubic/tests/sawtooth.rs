//! Trace simulation: one CUBIC flow through a fixed-capacity path (bandwidth-delay product plus
//! buffer of `w_cap` segments, RTT fixed), one report per RTT, a loss whenever the window
//! exceeds the path. Checks the steady-state sawtooth against RFC 9438: cut to β·W, back to W
//! after K = ∛(W(1-β)/C) seconds, fast convergence, and the Reno-friendly region on a small
//! path.
//!
//! `CUBIC_TRACE=1 cargo test -p alg-cubic --test sawtooth -- --nocapture` prints the trace
//! (time s, cwnd segments, state) for plotting.

use alg_cubic::{Config, Controller, Measurement, State};
use algs_core::{Bytes, Micros};

const MSS: u64 = 1000;

struct Trace {
    /// (time s, window segments) at every cut, before the cut.
    cuts: Vec<(f64, f64)>,
    /// (time s, window segments) after every report.
    windows: Vec<(f64, f64)>,
}

fn simulate(config: Config, w_cap: u64, rtt: Micros, duration_s: f64) -> Trace {
    let print = std::env::var_os("CUBIC_TRACE").is_some();
    let mut c = Controller::new(config, Bytes(MSS), Bytes(10 * MSS));
    let mut now = Micros(0);
    // What the datapath's per-ACK slow start would have done during the last RTT.
    let mut datapath_cwnd = c.cwnd().0;
    // The flight of the previous RTT: what this RTT's ACKs acknowledge.
    let mut prev_flight = datapath_cwnd;
    let mut trace = Trace {
        cuts: vec![],
        windows: vec![],
    };
    while now.as_secs_f64() < duration_s {
        now = now + rtt;
        let w = c.cwnd().0;
        let flight = if matches!(c.state(), State::SlowStart { .. }) {
            // Every acked byte added, up to ssthresh.
            let grown = datapath_cwnd.saturating_mul(2);
            datapath_cwnd = c.ssthresh().map_or(grown, |s| grown.min(s.0));
            datapath_cwnd
        } else {
            w
        };
        let lost = flight > w_cap * MSS;
        let m = Measurement {
            acked: Bytes(prev_flight.min(w_cap * MSS)),
            lost_packets: u64::from(lost),
            min_rtt: Some(rtt),
            last_rtt: Some(rtt),
            max_flight: Bytes(flight),
            cwnd: Some(Bytes(flight)),
            ..Measurement::default()
        };
        prev_flight = flight;
        let before = c.state().name();
        let d = c.on_report(now, &m);
        if lost && c.state().name() == "recovery" && before != "recovery" {
            trace
                .cuts
                .push((now.as_secs_f64(), flight as f64 / MSS as f64));
        }
        if let Some(w) = d.cwnd {
            datapath_cwnd = w.0;
        }
        let seg = c.cwnd().0 as f64 / MSS as f64;
        trace.windows.push((now.as_secs_f64(), seg));
        if print {
            println!("{:.3} {seg:.2} {}", now.as_secs_f64(), c.state().name());
        }
    }
    trace
}

#[test]
fn steady_sawtooth_period_is_k() {
    // 1000 segments, 100 ms: K = ∛(1000 * 0.3 / 0.4) = ∛750 = 9.09 s. Without fast
    // convergence every stage starts at 0.7 of a window just above the cap and climbs back to
    // it: once the window at the cut settles next to the cap, the period is K, plus one RTT
    // of recovery, minus the RTT the target looks ahead, plus up to one RTT until the loss is
    // seen at a report, minus ∛(δ/C) when the cut window was δ above the cap.
    let rtt = Micros(100_000);
    let t = simulate(
        Config::default().with_fast_convergence(false),
        1000,
        rtt,
        120.0,
    );
    assert!(t.cuts.len() >= 10, "{} cuts", t.cuts.len());
    let k = (1000.0f64 * 0.3 / 0.4).cbrt();
    let steady = &t.cuts[5..];
    let rtt_s = rtt.as_secs_f64();
    for pair in steady.windows(2) {
        let period = pair[1].0 - pair[0].0;
        assert!(
            period >= k - rtt_s && period <= k + 3.0 * rtt_s,
            "period {period:.2} s vs K {k:.2} s"
        );
        // Each cut happens just above the cap: the curve is flat near its plateau.
        assert!(pair[1].1 > 1000.0 && pair[1].1 < 1002.0, "{:?}", pair[1]);
    }
    // Right after each cut the window is β times the window at the cut.
    for &(at, w) in steady {
        let after = t
            .windows
            .iter()
            .find(|(s, _)| *s >= at)
            .map_or(f64::NAN, |&(_, x)| x);
        assert!((after - 0.7 * w).abs() < 1.0, "{after} vs 0.7 * {w}");
    }
}

#[test]
fn fast_convergence_alternates_long_and_short_stages() {
    // With fast convergence a cut below the previous W_max lowers the plateau to 0.85 of the
    // window, so the next stage creeps up the convex side of a lower curve (longer than K);
    // the cut that ends it is above that plateau, so the stage after it has the full plateau
    // just above the cap and crosses the cap before K.
    let rtt = Micros(100_000);
    let t = simulate(Config::default(), 1000, rtt, 120.0);
    let k = (1000.0f64 * 0.3 / 0.4).cbrt();
    let steady = &t.cuts[2..];
    assert!(steady.len() >= 6);
    let mut seen = (0, 0);
    for w in steady.windows(3) {
        let (prev, cut, next) = (w[0], w[1], w[2]);
        let period = next.0 - cut.0;
        if cut.1 < prev.1 {
            assert!(period > k, "after a fast-convergence cut: {period:.2} s");
            seen.0 += 1;
        } else {
            assert!(period < k, "after a plain cut: {period:.2} s");
            seen.1 += 1;
        }
    }
    assert!(seen.0 >= 2 && seen.1 >= 2, "{seen:?}");
}

#[test]
fn small_path_grows_like_reno_friendly_estimate() {
    // 20 segments, 10 ms: K = ∛(20 * 0.3 / 0.4) = 2.47 s, but W_est regains the 6 segments
    // at 0.53 per RTT in about 11 RTTs; the sawtooth period is then set by W_est.
    let rtt = Micros(10_000);
    let t = simulate(Config::linux(), 20, rtt, 30.0);
    let steady: Vec<_> = t.cuts[3..].to_vec();
    assert!(steady.len() > 10);
    for pair in steady.windows(2) {
        let period = pair[1].0 - pair[0].0;
        let rtts = period / rtt.as_secs_f64();
        // 6 segments at α = 0.529 per RTT: 11.3 RTTs, plus the recovery RTT; well below K.
        assert!((9.0..=16.0).contains(&rtts), "{rtts:.1} RTTs");
    }
}
