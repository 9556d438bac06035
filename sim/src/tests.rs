//! Behaviour of the model, checked against what a bottleneck must do.

use super::*;
use algs_core::{AckPrimitives, Bytes, BytesPerSec, Decision};
use proptest::prelude::*;

/// A link of `rate_mbps`, `rtt_ms` and a buffer of `buffer_bdp` BDPs, run for `duration_s`.
pub(crate) fn link(rate_mbps: f64, rtt_ms: f64, buffer_bdp: f64, duration_s: f64) -> LinkSpec {
    LinkSpec::with_bdp_buffer(rate_mbps, rtt_ms, buffer_bdp, duration_s)
}

fn aimd(name: &str, start_s: f64, stop_s: Option<f64>) -> CrossSpec {
    CrossSpec::Aimd {
        name: name.into(),
        start_s,
        stop_s,
        init_cwnd_pkts: None,
    }
}

fn ccp(name: &str) -> CcpFlowSpec {
    CcpFlowSpec::new(name, "test", 0.0)
}

fn scenario(link: LinkSpec) -> Scenario {
    Scenario {
        name: None,
        link,
        flows: vec![],
        cross: vec![],
        reports: vec![],
        bin_ms: DEFAULT_BIN_MS,
    }
}

fn window(from_s: f64, to_s: f64) -> ReportWindow {
    ReportWindow {
        name: None,
        from_s,
        to_s,
    }
}

/// Runs a scenario without CCP flows.
fn run_cross(s: &Scenario) -> Summary {
    struct NoCcp;
    impl Controller for NoCcp {
        fn on_ack(&mut self, _: FlowId, _: &AckSample) -> Decision {
            Decision::default()
        }
    }
    harness::run(s, &mut NoCcp).expect("model invariants hold")
}

/// A fixed window and/or rate, recording every sample's primitives and time.
#[derive(Default)]
struct Fixed {
    decision: Decision,
    samples: Vec<AckPrimitives>,
    at_us: Vec<u64>,
}

impl Fixed {
    /// A fixed window of `bytes`, not paced.
    fn window(bytes: u64) -> Self {
        Fixed {
            decision: Decision {
                cwnd: Some(Bytes(bytes)),
                rate: None,
            },
            ..Fixed::default()
        }
    }

    /// Paced at `mbps` under a window (1 MB) that never binds.
    fn paced(mbps: f64) -> Self {
        Fixed {
            decision: Decision {
                cwnd: Some(Bytes(1_000_000)),
                rate: Some(BytesPerSec::from_mbps(mbps)),
            },
            ..Fixed::default()
        }
    }
}

impl Controller for Fixed {
    fn on_start(&mut self, _: FlowId, _: u64) -> Decision {
        self.decision
    }
    fn on_ack(&mut self, _: FlowId, sample: &AckSample) -> Decision {
        self.samples.push(sample.prims);
        self.at_us.push(sample.now_us);
        self.decision
    }
}

#[test]
fn one_aimd_flow_fills_the_link_with_one_bdp_of_buffer() {
    let mut s = scenario(link(50.0, 30.0, 1.0, 30.0));
    s.cross.push(aimd("reno", 0.0, None));
    s.reports.push(window(5.0, 30.0));
    let sum = run_cross(&s);
    let w = &sum.windows[0];
    // Reno halves to one BDP when the BDP-sized buffer overflows: the link never idles.
    assert!(w.utilization > 0.99, "utilization {}", w.utilization);
    assert!(sum.drops > 0, "the sawtooth must overflow the buffer");
    // Queueing delay stays within the buffer: 1 BDP = one base RTT.
    assert!(
        sum.queue_delay.max_ms <= 30.0 + 0.3,
        "{:?}",
        sum.queue_delay
    );
    assert!(
        w.queue_delay.p50_ms > 5.0,
        "a standing queue: {:?}",
        w.queue_delay
    );
}

#[test]
fn aimd_on_a_long_path_leaves_slow_start_by_a_loss_not_a_spurious_timeout() {
    // 200 ms: the first ACK comes after the 200-ms minimum timeout; before the first RTT
    // sample the timeout is 1 s, so slow start runs until the buffer overflows and the
    // flow fills the link within a few seconds of joining.
    let mut s = scenario(link(24.0, 200.0, 2.0, 30.0));
    s.cross.push(aimd("late", 10.0, None));
    let sum = run_cross(&s);
    let f = sum.flow("late").expect("late");
    assert_eq!(f.timeouts, 0, "{f:?}");
    let after = sum.mbps("late", 20.0, 30.0).expect("late");
    assert!(after > 0.95 * 24.0, "{after}");
}

#[test]
fn aimd_with_a_tenth_of_a_bdp_leaves_capacity_unused() {
    // The classic result the model must reproduce: with B << BDP, halving empties the pipe.
    let mut s = scenario(link(50.0, 30.0, 0.1, 30.0));
    s.cross.push(aimd("reno", 0.0, None));
    s.reports.push(window(5.0, 30.0));
    let w = run_cross(&s).windows[0].utilization;
    assert!((0.70..0.95).contains(&w), "utilization {w}");
}

#[test]
fn queue_never_exceeds_the_buffer_and_every_drop_is_counted() {
    let mut s = scenario(LinkSpec {
        buffer_bytes: Some(20_000),
        buffer_bdp: None,
        ..link(24.0, 20.0, 0.0, 10.0)
    });
    s.cross.push(aimd("a", 0.0, None));
    s.cross.push(aimd("b", 1.0, Some(8.0)));
    s.cross.push(CrossSpec::Constant {
        name: "cbr".into(),
        rate_mbps: 5.0,
        start_s: 2.0,
        stop_s: Some(6.0),
    });
    let sum = run_cross(&s);
    assert!(sum.max_queue_bytes <= 20_000);
    assert!(
        sum.max_queue_bytes > 20_000 - 2 * u64::from(DEFAULT_MSS),
        "the buffer filled up"
    );
    let per_flow: u64 = sum.flows.iter().map(|f| f.drops).sum();
    assert_eq!(per_flow, sum.drops);
    for f in &sum.flows {
        let departed = f.bytes / u64::from(DEFAULT_MSS);
        assert!(departed + f.drops <= f.packets_sent, "{}", f.name);
        // Everything sent departed, was dropped, or was still queued at the end.
        assert!(
            f.packets_sent - departed - f.drops <= 20_000 / 1448 + 1,
            "{}",
            f.name
        );
    }
    // Window flows detect the drops (the last window's may still be undetected).
    let a = sum.flow("a").expect("flow a");
    assert!(
        a.losses_detected <= a.drops && a.losses_detected + 40 >= a.drops,
        "{a:?}"
    );
}

#[test]
fn constant_rate_traffic_gets_its_rate() {
    let mut s = scenario(link(50.0, 30.0, 1.0, 10.0));
    s.cross.push(CrossSpec::Constant {
        name: "cbr".into(),
        rate_mbps: 10.0,
        start_s: 1.0,
        stop_s: Some(9.0),
    });
    s.reports.push(window(2.0, 8.0));
    let sum = run_cross(&s);
    let cbr = sum.flow("cbr").expect("cbr");
    assert!((cbr.mean_mbps - 10.0).abs() < 0.01, "{}", cbr.mean_mbps);
    assert!((sum.windows[0].mbps("cbr").expect("cbr") - 10.0).abs() < 0.01);
    assert_eq!(sum.drops, 0);
    assert_eq!(sum.queue_delay.max_ms, 0.0, "a slower stream never queues");
}

#[test]
fn constant_rate_traffic_beside_aimd_keeps_nearly_its_rate() {
    let mut s = scenario(link(50.0, 30.0, 1.0, 20.0));
    s.cross.push(CrossSpec::Constant {
        name: "cbr".into(),
        rate_mbps: 10.0,
        start_s: 0.0,
        stop_s: None,
    });
    s.cross.push(aimd("reno", 0.0, None));
    s.reports.push(window(5.0, 20.0));
    let sum = run_cross(&s);
    let w = &sum.windows[0];
    let cbr = w.mbps("cbr").expect("cbr");
    assert!(cbr > 9.5 && cbr <= 10.01, "cbr {cbr}");
    assert!(w.mbps("reno").expect("reno") > 38.0, "{w:?}");
}

#[test]
fn same_scenario_twice_gives_identical_results() {
    let mut s = scenario(link(30.0, 40.0, 0.5, 8.0));
    s.cross.push(aimd("a", 0.0, None));
    s.cross.push(aimd("b", 0.5, None));
    s.cross.push(CrossSpec::Constant {
        name: "c".into(),
        rate_mbps: 3.0,
        start_s: 1.0,
        stop_s: None,
    });
    s.flows.push(ccp("x"));
    let run = || {
        let mut ctl = Fixed {
            decision: Decision {
                cwnd: Some(Bytes(60_000)),
                rate: Some(BytesPerSec::from_mbps(9.0)),
            },
            ..Fixed::default()
        };
        let sum = harness::run(&s, &mut ctl).expect("runs");
        (sum, ctl.samples)
    };
    let (a, sa) = run();
    let (b, sb) = run();
    assert_eq!(a, b);
    assert_eq!(sa, sb);
    assert!(sa.len() > 1000);
}

#[test]
fn ack_samples_carry_libccp_primitives() {
    let mut s = scenario(link(50.0, 30.0, 1.0, 1.0));
    s.flows.push(ccp("x"));
    let mut ctl = Fixed::default();
    harness::run(&s, &mut ctl).expect("runs");
    // 1448 B at 50 Mbit/s take 231.68 µs; the initial window of 10 leaves at t = 0, so the
    // k-th packet waits k serializations and comes back after base RTT + (k+1) x 231.68 µs.
    let first: Vec<_> = ctl.samples.iter().take(10).collect();
    for (k, a) in first.iter().enumerate() {
        let expect = 30_000.0 + (k as f64 + 1.0) * 231.68;
        assert!((a.rtt_sample_us as f64 - expect).abs() <= 1.0, "{k}: {a:?}");
        assert_eq!(a.bytes_acked, 1448);
        assert_eq!(a.packets_acked, 1);
        assert_eq!(a.lost_pkts_sample, 0);
        assert_eq!(a.snd_cwnd, 14_480);
    }
    // The first ACK frees room for one packet, sent at once: 9 + 1 in flight after it.
    assert_eq!(first[0].packets_in_flight, 9);
    assert_eq!(first[0].bytes_in_flight, 9 * 1448);
    // Rate samples (tcp_rate.c): none before a send interval exists; then a 10-packet
    // window per 30.23 ms RTT, about 479 kB/s, whether measured over sends or ACKs.
    assert_eq!(first[0].rate_outgoing, 0);
    let later = &ctl.samples[20];
    let expect = 14_480.0 / 0.030_232;
    assert!(
        (later.rate_outgoing as f64 - expect).abs() < 0.01 * expect,
        "{later:?}"
    );
    assert!(
        (later.rate_incoming as f64 - expect).abs() < 0.01 * expect,
        "{later:?}"
    );
}

#[test]
fn stretch_acks_hand_over_one_sample_per_n_packets_and_losses_at_once() {
    let mut s = scenario(link(50.0, 30.0, 1.0, 5.0));
    s.flows.push(CcpFlowSpec {
        ack_every: Some(4),
        ..ccp("x")
    });
    // A window of 300 kB beside 30 Mbit/s of constant traffic needs more than the buffer:
    // drops every round trip from 2 s to 3 s, and no timeout (the ACK clock never stops).
    s.cross.push(CrossSpec::Constant {
        name: "cbr".into(),
        rate_mbps: 30.0,
        start_s: 2.0,
        stop_s: Some(3.0),
    });
    let mut ctl = Fixed::window(300_000);
    let sum = harness::run(&s, &mut ctl).expect("runs");
    let acked: u64 = ctl.samples.iter().map(|a| u64::from(a.packets_acked)).sum();
    for a in &ctl.samples {
        assert_eq!(a.bytes_acked, a.packets_acked * 1448, "{a:?}");
        // Four packets per sample, fewer only when the sample reports a loss.
        if a.lost_pkts_sample == 0 && !a.was_timeout {
            assert_eq!(a.packets_acked, 4, "{a:?}");
        } else {
            assert!(a.packets_acked <= 4, "{a:?}");
        }
    }
    assert!(ctl.samples.iter().any(|a| a.lost_pkts_sample > 0));
    // Every delivered packet is reported, but those whose ACK is still on its way at the end
    // (at most one BDP, 130 packets) and the last group, still held.
    let x = sum.flow("x").expect("x");
    assert_eq!(x.timeouts, 0);
    let delivered = x.bytes / 1448;
    assert!(
        acked <= delivered && acked + 130 + 4 > delivered,
        "{acked} of {delivered}"
    );
    assert_eq!(x.acks, ctl.samples.len() as u64);
}

#[test]
fn random_loss_takes_its_share_on_the_link_and_is_detected() {
    let run = |loss: f64, seed: u64| {
        let mut s = scenario(LinkSpec {
            random_loss: loss,
            loss_seed: seed,
            ..link(50.0, 30.0, 1.0, 10.0)
        });
        s.flows.push(ccp("x"));
        s.reports.push(window(1.0, 10.0));
        let mut ctl = Fixed::window(187_500 + 2 * 1448);
        let sum = harness::run(&s, &mut ctl).expect("model invariants hold");
        (sum, ctl.samples)
    };
    let (lossless, _) = run(0.0, 0);
    assert_eq!(lossless.link_losses, 0);
    let (sum, samples) = run(0.02, 1);
    let x = sum.flow("x").expect("x");
    let share = x.link_losses as f64 / x.packets_sent as f64;
    assert!((share - 0.02).abs() < 0.004, "{share}");
    // The link stays busy (lost packets used it), the flow delivers the rest.
    let w = &sum.windows[0];
    assert!(w.utilization > 0.99, "{}", w.utilization);
    let got = w.mbps("x").expect("x");
    assert!((got - 50.0 * 0.98).abs() < 0.5, "{got}");
    // Every loss (on the link, or a drop of the first window's burst) but the last round
    // trip's is detected by a later ACK.
    let detected: u64 = samples.iter().map(|a| u64::from(a.lost_pkts_sample)).sum();
    let lost = x.link_losses + x.drops;
    assert!(
        detected <= lost && detected + 10 >= lost,
        "{detected} of {lost}"
    );
    // The same seed gives the same run; another seed another one.
    assert_eq!(run(0.02, 1).0, sum);
    assert_ne!(run(0.02, 2).0.link_losses, sum.link_losses);
}

#[test]
fn a_late_aimd_flow_measured_over_a_window_chosen_after_the_run() {
    // An AIMD flow joins a running one at 10 s; Summary::mbps reads both over 20-40 s.
    let mut s = scenario(link(24.0, 50.0, 2.0, 40.0));
    s.cross.push(aimd("first", 0.0, None));
    s.cross.push(aimd("late", 10.0, None));
    s.reports.push(window(20.0, 40.0));
    let sum = run_cross(&s);
    let late = sum.flow("late").expect("late");
    assert!(late.throughput_mbps[..100].iter().all(|&m| m == 0.0));
    for name in ["first", "late"] {
        let after = sum.mbps(name, 20.0, 40.0).expect("flow");
        let window = sum.windows[0].mbps(name).expect("flow");
        assert!((after - window).abs() < 1e-9, "{name}: {after} vs {window}");
    }
    let both =
        sum.mbps("first", 20.0, 40.0).expect("first") + sum.mbps("late", 20.0, 40.0).expect("late");
    assert!(both > 0.95 * 24.0, "{both}");
    assert_eq!(sum.trace(1.0).len(), 40);
}

#[test]
fn a_paced_flow_gets_its_rate_without_a_queue() {
    let mut s = scenario(link(50.0, 30.0, 1.0, 10.0));
    s.flows.push(ccp("x"));
    s.reports.push(window(2.0, 10.0));
    let mut ctl = Fixed::paced(25.0);
    let sum = harness::run(&s, &mut ctl).expect("runs");
    let got = sum.windows[0].mbps("x").expect("x");
    assert!((got - 25.0).abs() < 0.05, "{got}");
    assert!(
        sum.windows[0].queue_delay.max_ms < 0.3,
        "{:?}",
        sum.windows[0].queue_delay
    );
    assert_eq!(sum.flow("x").expect("x").rate_bytes_per_sec[50], 3_125_000);
}

#[test]
fn whole_ms_delivery_delivers_at_the_end_of_each_millisecond() {
    // A flow paced at half the link never queues: alone its RTT is the base RTT plus one
    // packet's serialization; delivered at whole milliseconds, up to 1 ms more.
    let run = |whole_ms_delivery: bool| {
        let mut s = scenario(LinkSpec {
            whole_ms_delivery,
            ..link(50.0, 30.0, 1.0, 5.0)
        });
        s.flows.push(ccp("x"));
        let mut ctl = Fixed::paced(25.0);
        harness::run(&s, &mut ctl).expect("runs");
        let rtts: Vec<u64> = ctl.samples.iter().map(|p| p.rtt_sample_us).collect();
        let (lo, hi) = (rtts.iter().min().copied(), rtts.iter().max().copied());
        let mean = rtts.iter().sum::<u64>() / rtts.len() as u64;
        (ctl.at_us, lo.expect("samples"), hi.expect("samples"), mean)
    };
    let (_, lo, hi, _) = run(false);
    assert!(hi - lo <= 1, "{lo}..{hi}");
    let (at_us, lo, hi, mean) = run(true);
    assert!(at_us.iter().all(|t| t % 1_000 == 0), "ACKs at whole ms");
    // 231 µs of serialization, then 0-1 ms to the end of the millisecond.
    assert!(lo >= 30_230 && hi <= 31_232 && hi - lo >= 900, "{lo}..{hi}");
    assert!((30_531..=30_931).contains(&mean), "{mean}");
}

#[test]
fn whole_ms_delivery_keeps_a_milliseconds_packets_in_the_buffer() {
    // 45 Mbit/s paced into a 50 Mbit/s link with a three-packet buffer: serialized packet by
    // packet nothing ever waits; held until the end of each millisecond, as at Mahimahi's
    // links, the fourth packet of a millisecond finds the buffer full.
    let drops = |whole_ms_delivery: bool| {
        let mut s = scenario(LinkSpec {
            whole_ms_delivery,
            buffer_bytes: Some(4_500),
            buffer_bdp: None,
            ..link(50.0, 30.0, 1.0, 5.0)
        });
        s.flows.push(ccp("x"));
        let mut ctl = Fixed::paced(45.0);
        harness::run(&s, &mut ctl).expect("runs").drops
    };
    assert_eq!(drops(false), 0);
    let held = drops(true);
    // 3.9 packets a millisecond of which three fit: 0.9 dropped a millisecond, 5 s.
    assert!((4_000..=4_750).contains(&held), "{held}");
}

#[test]
fn a_window_of_one_bdp_fills_the_link_with_no_standing_queue() {
    let mut s = scenario(link(50.0, 30.0, 1.0, 10.0));
    s.flows.push(ccp("x"));
    s.reports.push(window(2.0, 10.0));
    let bdp = 6.25e6 * 0.030;
    let mut ctl = Fixed::window(bdp as u64 + 2 * 1448);
    let sum = harness::run(&s, &mut ctl).expect("runs");
    let w = &sum.windows[0];
    assert!(w.utilization > 0.995, "{}", w.utilization);
    assert!(w.queue_delay.p95_ms < 1.0, "{:?}", w.queue_delay);
    // With the pipe full, delivery-rate samples read the link rate (6.25 MB/s).
    let last = ctl.samples.last().expect("samples");
    for r in [last.rate_incoming, last.rate_outgoing] {
        assert!((r as f64 - 6.25e6).abs() < 0.01 * 6.25e6, "{last:?}");
    }
}

#[test]
fn a_flow_starved_by_overload_times_out_and_recovers() {
    // 100 Mbit/s of unresponsive traffic on a 50 Mbit/s link for a second keeps the queue
    // full; the CCP flow loses its whole window and hears nothing for the timeout.
    let mut s = scenario(link(50.0, 30.0, 1.0, 6.0));
    s.flows.push(ccp("x"));
    s.cross.push(CrossSpec::Constant {
        name: "flood".into(),
        rate_mbps: 100.0,
        start_s: 1.0,
        stop_s: Some(3.0),
    });
    let mut ctl = Fixed::window(100_000);
    let sum = harness::run(&s, &mut ctl).expect("runs");
    let timeouts: Vec<_> = ctl.samples.iter().filter(|a| a.was_timeout).collect();
    assert!(!timeouts.is_empty());
    for t in &timeouts {
        assert!(
            t.lost_pkts_sample > 0 && t.bytes_in_flight == 0 && t.rtt_sample().is_none(),
            "{t:?}"
        );
    }
    assert_eq!(sum.flow("x").expect("x").timeouts, timeouts.len() as u64);
    // Back to a full window's worth of throughput after the flood.
    let x = sum.flow("x").expect("x");
    let after: f64 = x.throughput_mbps[45..60].iter().sum::<f64>() / 15.0;
    assert!(after > 20.0, "{after}");
}

#[test]
fn priority_changes_reach_the_driver_in_time_order() {
    let mut s = scenario(link(10.0, 20.0, 1.0, 3.0));
    let mut f = ccp("x");
    f.start_s = 0.5;
    f.stop_s = Some(2.5);
    f.priority = vec![
        PriorityChange {
            at_s: 2.0,
            class: PriorityClassName::Primary,
            threshold_mbps: None,
        },
        PriorityChange {
            at_s: 0.0,
            class: PriorityClassName::Scavenger,
            threshold_mbps: None,
        },
    ];
    s.flows.push(f);
    let mut sim = Sim::new(&s).expect("valid");
    let mut seen = Vec::new();
    while let Some(ev) = sim.next_event() {
        match ev {
            SimEvent::Ack { .. } => {}
            other => seen.push((sim.now_us(), other)),
        }
    }
    assert_eq!(
        seen,
        vec![
            (500_000, SimEvent::Start { flow: 0 }),
            // Asked for before the start: delivered right after it.
            (
                500_000,
                SimEvent::Priority {
                    flow: 0,
                    priority: algs_core::Priority::Scavenger
                }
            ),
            (
                2_000_000,
                SimEvent::Priority {
                    flow: 0,
                    priority: algs_core::Priority::Primary
                }
            ),
            (2_500_000, SimEvent::Stop { flow: 0 }),
        ]
    );
}

#[test]
fn harness_refuses_a_window_that_libccp_cannot_hold() {
    let mut s = scenario(link(10.0, 20.0, 1.0, 1.0));
    s.flows.push(ccp("x"));
    let mut ctl = Fixed {
        decision: Decision {
            cwnd: None,
            rate: Some(BytesPerSec(f64::INFINITY)),
        },
        ..Fixed::default()
    };
    assert!(matches!(
        harness::run(&s, &mut ctl),
        Err(HarnessError::Invariant {
            violation: InvariantViolation::Decision { .. },
            ..
        })
    ));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Random links, random cross traffic and a CCP flow answering with random decisions:
    /// the queue stays within the buffer, packets are conserved, the run ends.
    #[test]
    fn invariants_hold_on_random_scenarios(
        rate_mbps in 1.0f64..100.0,
        rtt_ms in 1.0f64..150.0,
        buffer_bdp in 0.0f64..4.0,
        n_aimd in 0usize..3,
        cbr_mbps in proptest::option::of(0.5f64..80.0),
        decisions in proptest::collection::vec((1u64..400_000, proptest::option::of(10_000u32..20_000_000)), 1..50),
    ) {
        let mut s = scenario(link(rate_mbps, rtt_ms, buffer_bdp, 2.0));
        for i in 0..n_aimd {
            s.cross.push(aimd(&format!("a{i}"), 0.1 * i as f64, None));
        }
        if let Some(r) = cbr_mbps {
            s.cross.push(CrossSpec::Constant { name: "c".into(), rate_mbps: r, start_s: 0.3, stop_s: Some(1.5) });
        }
        s.flows.push(ccp("x"));
        struct Cycle(Vec<(u64, Option<u32>)>, usize);
        impl Controller for Cycle {
            fn on_ack(&mut self, _: FlowId, _: &AckSample) -> Decision {
                self.1 += 1;
                let (c, r) = self.0[self.1 % self.0.len()];
                Decision { cwnd: Some(Bytes(c)), rate: r.map(|r| BytesPerSec(f64::from(r))) }
            }
        }
        let sum = harness::run(&s, &mut Cycle(decisions, 0)).expect("invariants hold");
        prop_assert!(sum.max_queue_bytes <= sum.buffer_bytes);
        prop_assert!(sum.utilization <= 1.0 + 1e-9);
        let per_flow: u64 = sum.flows.iter().map(|f| f.drops).sum();
        prop_assert_eq!(per_flow, sum.drops);
    }
}
