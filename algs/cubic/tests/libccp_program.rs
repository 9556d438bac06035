//! The CUBIC datapath program run by the real libccp (the C code every CCP datapath embeds):
//! installed and driven with portus' own serializer, fed synthetic ACKs, every report read
//! back by field name. Checks what unit tests of the program text cannot: per-ACK slow start
//! in the fold, urgent reports, the ssthresh register, and the pitfalls of
//! docs/datapaths.md §4 (missing RTT samples, a `Cwnd` of 0, the per-RTT timer).
//!
//! One test function: libccp keeps state that concurrent tests would share.

use alg_cubic::datapath::{
    ACKED_BYTES, CWND_BYTES, CWND_REG, LAST_RTT_US, LOST_PACKETS, MAX_FLIGHT_BYTES, MIN_RTT_US,
    NOW_US, SSTHRESH_REG, TIMEOUT, program,
};
use alg_cubic::params::REPORT_FLOOR_US;
use algs_core::register::INFINITY_REGISTER;
use ccp_test_support::libccp_host::{
    Knobs, Outbox, ProgramFlow, start_program_flow, update_fields,
};
use ccp_test_support::program::{register, report_field};
use libccp::{Connection, Primitives};
use std::time::Duration;

const MSS: u32 = 1448;
/// Long enough that no per-RTT report fires between the ACKs of a phase, even on a loaded
/// machine.
const RTT_US: u64 = 1_000_000;

/// The reports sent since the last call, as (program uid, fields).
fn take_reports(sent: &Outbox) -> Vec<(u32, Vec<u64>)> {
    sent.take_reports()
        .into_iter()
        .map(|r| (r.program_uid, r.fields))
        .collect()
}

/// One ACK as a kernel datapath would describe it: the window read back in whole packets.
fn ack(
    conn: &mut Connection<'_, Knobs>,
    acked: u32,
    rtt_us: u64,
    in_flight: u32,
    lost: u32,
    timeout: bool,
) {
    let snd_cwnd = conn.cwnd / MSS * MSS;
    conn.load_primitives(
        Primitives::default()
            .with_bytes_acked(acked)
            .with_packets_acked(acked / MSS)
            .with_rtt_sample_us(rtt_us)
            .with_bytes_in_flight(in_flight)
            .with_packets_in_flight(in_flight / MSS)
            .with_lost_pkts_sample(lost)
            .with_was_timeout(timeout)
            .with_snd_cwnd(snd_cwnd),
    );
    conn.invoke()
        .expect("program runs without arithmetic errors");
}

#[test]
fn program_behaves_in_libccp() {
    let ProgramFlow {
        sent,
        host,
        scope,
        mut conn,
        sid,
    } = start_program_flow(
        &program(REPORT_FLOOR_US, true),
        MSS,
        10 * MSS,
        CWND_REG,
        10 * MSS,
    );
    let dp = host.datapath();

    // Slow start in the fold: every acked byte is added to the window, ACK by ACK.
    for i in 1..=10 {
        let before = conn.cwnd;
        ack(&mut conn, MSS, RTT_US, before - MSS, 0, false);
        assert_eq!(conn.cwnd, before + MSS, "ACK {i}");
    }
    assert_eq!(conn.cwnd, 20 * MSS);

    // An ACK without an RTT sample (the datapath reads 4294967295) does not become a
    // minimum or the latest RTT.
    ack(&mut conn, MSS, INFINITY_REGISTER, 20 * MSS, 0, false);

    // A loss is reported at once, with the whole interval's counts.
    ack(&mut conn, MSS, RTT_US - 1_000, 20 * MSS, 2, false);
    let reports = take_reports(&sent);
    let (uid, fields) = reports.last().expect("urgent report on loss");
    assert_eq!(*uid, scope.program_uid);
    let f = |name| report_field(&scope, fields, name);
    assert_eq!(f(LOST_PACKETS), 2);
    assert_eq!(f(ACKED_BYTES), u64::from(12 * MSS));
    assert_eq!(f(MIN_RTT_US), RTT_US - 1_000);
    assert_eq!(f(LAST_RTT_US), RTT_US - 1_000);
    assert_eq!(f(MAX_FLIGHT_BYTES), u64::from(21 * MSS));
    assert_eq!(f(CWND_BYTES), u64::from(conn.cwnd));
    assert_eq!(f(TIMEOUT), 0);
    assert!(f(NOW_US) > 0);

    // The agent's cut: Cwnd and ssthresh. Slow start stops at ssthresh.
    let cut = 14 * MSS;
    update_fields(
        dp,
        sid,
        vec![
            (register(&scope, CWND_REG), u64::from(cut)),
            (register(&scope, SSTHRESH_REG), u64::from(cut)),
        ],
    )
    .expect("update accepted");
    for _ in 0..5 {
        ack(&mut conn, MSS, RTT_US, cut - MSS, 0, false);
        assert_eq!(conn.cwnd, cut);
    }

    // A timeout is reported at once (and starts a new interval: the largest flight
    // restarts from zero).
    take_reports(&sent);
    ack(&mut conn, 0, INFINITY_REGISTER, 0, 0, true);
    let reports = take_reports(&sent);
    let (_, fields) = reports.last().expect("urgent report on timeout");
    assert_eq!(report_field(&scope, fields, TIMEOUT), 1);

    // Below ssthresh again but application-limited (little in flight): no growth.
    update_fields(
        dp,
        sid,
        vec![(register(&scope, SSTHRESH_REG), u64::from(u32::MAX))],
    )
    .expect("update accepted");
    for _ in 0..5 {
        ack(&mut conn, MSS, RTT_US, 0, 0, false);
        assert_eq!(conn.cwnd, cut);
    }

    // A datapath that does not fill snd_cwnd (reads 0): the fold leaves the window alone
    // instead of setting it to one ACK's bytes.
    conn.load_primitives(
        Primitives::default()
            .with_bytes_acked(MSS)
            .with_rtt_sample_us(RTT_US)
            .with_bytes_in_flight(cut),
    );
    conn.invoke().expect("runs");
    assert_eq!(conn.cwnd, cut);

    // The per-RTT report: the first ACK after one RTT (the latest sample) sends it.
    std::thread::sleep(Duration::from_micros(RTT_US + 50_000));
    ack(&mut conn, MSS, RTT_US, cut, 0, false);
    let reports = take_reports(&sent);
    assert_eq!(reports.len(), 1, "one report per RTT");
    let fields = &reports[0].1;
    assert_eq!(report_field(&scope, fields, LOST_PACKETS), 0);
    assert_eq!(report_field(&scope, fields, TIMEOUT), 0);
    // Everything acked since the timeout report: 5 + 1 + 1 segments.
    assert_eq!(
        report_field(&scope, fields, ACKED_BYTES),
        u64::from(7 * MSS)
    );
    // Volatile fields start afresh after a report.
    assert_eq!(report_field(&scope, fields, MIN_RTT_US), RTT_US);
}
