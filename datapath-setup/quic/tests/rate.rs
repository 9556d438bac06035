//! The agent's pacing rate is what a QUIC connection carries (the rate gate, `rate_gate.rs`).

mod common;

use common::*;

#[test]
fn a_fixed_rate_from_the_agent_is_honoured_on_loopback() {
    let _one = serial();
    let name = unique("rate");
    const MBPS: f64 = 50.0;
    let _agent = Agent::start(
        &name,
        &[
            "--default",
            "fixed",
            "--fixed-rate-mbps",
            "50",
            "--fixed-cwnd",
            "100000000",
        ],
    );
    let server = Server::start();
    let r = report(spawn_send(&server, &["--time", "4", "--agent", &name]));
    let mbps = interval_mbps(&r);
    assert!(interval_steered(&r).iter().all(|&s| s), "{r}");
    // The first interval holds the fallback's start before the agent's first answer.
    let steady = &mbps[1..];
    let mean = steady.iter().sum::<f64>() / steady.len() as f64;
    eprintln!("asked {MBPS} Mbit/s, carried {mbps:?} (mean after the first second {mean:.1})");
    assert!(
        (mean - MBPS).abs() < 0.1 * MBPS,
        "asked {MBPS} Mbit/s, carried {mbps:?}"
    );
}
