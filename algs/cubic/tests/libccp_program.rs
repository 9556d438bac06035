//! The CUBIC datapath program run by the real libccp (the C code every CCP datapath embeds):
//! installed and driven with portus' own serializer, fed synthetic ACKs, every report read
//! back by field name. Checks what unit tests of the program text cannot: per-ACK slow start
//! in the fold, urgent reports, the ssthresh register, and the pitfalls of
//! docs/datapaths.md §4 (missing RTT samples, a `Cwnd` of 0, the per-RTT timer).
//!
//! One test function: libccp keeps state that concurrent tests would share.

use alg_cubic::datapath::{
    ACKED_BYTES, CWND_BYTES, CWND_REG, LAST_RTT_US, LOST_PACKETS, MAX_FLIGHT_BYTES, MIN_RTT_US,
    NO_SAMPLE, NOW_US, SSTHRESH_REG, TIMEOUT, program,
};
use alg_cubic::params::REPORT_FLOOR_US;
use libccp::{CongestionOps, Connection, DatapathBuilder, DatapathOps, FlowInfo, Primitives};
use portus::lang::{Reg, Scope, compile};
use portus::serialize::{changeprog, install, serialize, update_field};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const MSS: u32 = 1448;
/// Long enough that no per-RTT report fires between the ACKs of a phase, even on a loaded
/// machine.
const RTT_US: u64 = 1_000_000;
const MEASURE: u16 = 1;
const CREATE: u16 = 0;

type Sent = Arc<Mutex<Vec<Vec<u8>>>>;

struct Ops(Sent);

impl DatapathOps for Ops {
    fn send_msg(&mut self, msg: &[u8]) {
        self.0.lock().expect("not poisoned").push(msg.to_vec());
    }
}

/// The sender's window as libccp sets it.
struct Window {
    cwnd: u32,
}

impl CongestionOps for Window {
    fn set_cwnd(&mut self, cwnd: u32) {
        self.cwnd = cwnd;
    }

    fn set_rate_abs(&mut self, _rate: u32) {}
}

fn msg_type(m: &[u8]) -> u16 {
    u16::from_le_bytes([m[0], m[1]])
}

fn u32_at(m: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(m[at..at + 4].try_into().expect("4 bytes"))
}

/// The Measure messages sent since the last call, as (program uid, fields).
fn take_reports(sent: &Sent) -> Vec<(u32, Vec<u64>)> {
    let mut sent = sent.lock().expect("not poisoned");
    let reports = sent
        .iter()
        .filter(|m| msg_type(m) == MEASURE)
        .map(|m| {
            let n = u32_at(m, 12) as usize;
            let fields = (0..n)
                .map(|i| u64::from_le_bytes(m[16 + 8 * i..24 + 8 * i].try_into().expect("8")))
                .collect();
            (u32_at(m, 8), fields)
        })
        .collect();
    sent.clear();
    reports
}

fn field(scope: &Scope, fields: &[u64], name: &str) -> u64 {
    match scope.get(name) {
        Some(Reg::Report(i, _, _)) => fields[usize::from(*i)],
        other => panic!("{name}: {other:?}"),
    }
}

fn reg(scope: &Scope, name: &str) -> Reg {
    scope.get(name).cloned().expect("register exists")
}

/// One ACK as a kernel datapath would describe it: the window read back in whole packets.
fn ack(
    conn: &mut Connection<'_, Window>,
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
    let sent: Sent = Arc::default();
    let dp = DatapathBuilder::default()
        .with_ops(Ops(sent.clone()))
        .with_id(1)
        .init()
        .expect("datapath");

    let (bin, scope) =
        compile(program(REPORT_FLOOR_US, true).as_bytes(), &[]).expect("program compiles");
    let mut buf = serialize(&install::Msg {
        sid: 0,
        program_uid: scope.program_uid,
        num_events: bin.events.len() as u32,
        num_instrs: bin.instrs.len() as u32,
        instrs: bin,
    })
    .expect("install serializes");
    dp.recv_msg(&mut buf).expect("install accepted");

    let mut conn = Connection::start(
        &dp,
        Window { cwnd: 10 * MSS },
        FlowInfo::default()
            .with_init_cwnd(10 * MSS)
            .with_mss(MSS)
            .with_four_tuple(1, 2, 3, 4),
    )
    .expect("connection");
    let sid = {
        let sent = sent.lock().expect("not poisoned");
        let create = sent
            .iter()
            .find(|m| msg_type(m) == CREATE)
            .expect("Create sent");
        u32_at(create, 4)
    };
    let mut buf = serialize(&changeprog::Msg {
        sid,
        program_uid: scope.program_uid,
        num_fields: 1,
        fields: vec![(reg(&scope, CWND_REG), u64::from(10 * MSS))],
    })
    .expect("changeprog serializes");
    dp.recv_msg(&mut buf).expect("changeprog accepted");
    take_reports(&sent);

    // Slow start in the fold: every acked byte is added to the window, ACK by ACK.
    for i in 1..=10 {
        let before = conn.cwnd;
        ack(&mut conn, MSS, RTT_US, before - MSS, 0, false);
        assert_eq!(conn.cwnd, before + MSS, "ACK {i}");
    }
    assert_eq!(conn.cwnd, 20 * MSS);

    // An ACK without an RTT sample (the datapath reads 4294967295) does not become a
    // minimum or the latest RTT.
    ack(&mut conn, MSS, NO_SAMPLE, 20 * MSS, 0, false);

    // A loss is reported at once, with the whole interval's counts.
    ack(&mut conn, MSS, RTT_US - 1_000, 20 * MSS, 2, false);
    let reports = take_reports(&sent);
    let (uid, fields) = reports.last().expect("urgent report on loss");
    assert_eq!(*uid, scope.program_uid);
    let f = |name| field(&scope, fields, name);
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
    let mut buf = serialize(&update_field::Msg {
        sid,
        num_fields: 2,
        fields: vec![
            (reg(&scope, CWND_REG), u64::from(cut)),
            (reg(&scope, SSTHRESH_REG), u64::from(cut)),
        ],
    })
    .expect("update serializes");
    dp.recv_msg(&mut buf).expect("update accepted");
    for _ in 0..5 {
        ack(&mut conn, MSS, RTT_US, cut - MSS, 0, false);
        assert_eq!(conn.cwnd, cut);
    }

    // A timeout is reported at once (and starts a new interval: the largest flight
    // restarts from zero).
    take_reports(&sent);
    ack(&mut conn, 0, NO_SAMPLE, 0, 0, true);
    let reports = take_reports(&sent);
    let (_, fields) = reports.last().expect("urgent report on timeout");
    assert_eq!(field(&scope, fields, TIMEOUT), 1);

    // Below ssthresh again but application-limited (little in flight): no growth.
    let mut buf = serialize(&update_field::Msg {
        sid,
        num_fields: 1,
        fields: vec![(reg(&scope, SSTHRESH_REG), u64::from(u32::MAX))],
    })
    .expect("update serializes");
    dp.recv_msg(&mut buf).expect("update accepted");
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
    assert_eq!(field(&scope, fields, LOST_PACKETS), 0);
    assert_eq!(field(&scope, fields, TIMEOUT), 0);
    // Everything acked since the timeout report: 5 + 1 + 1 segments.
    assert_eq!(field(&scope, fields, ACKED_BYTES), u64::from(7 * MSS));
    // Volatile fields start afresh after a report.
    assert_eq!(field(&scope, fields, MIN_RTT_US), RTT_US);
}
