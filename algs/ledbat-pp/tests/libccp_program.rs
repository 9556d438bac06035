//! The LEDBAT++ report program run by the real libccp (the C code every CCP datapath embeds):
//! installed with portus' own serializer, fed ACKs, every report read back by field name.
//! Checks the per-ACK filter of docs/algorithms/ledbat-pp.md §7 TV-2 on the program itself, missing
//! samples (libccp reads them as 4294967295), the urgent reports on loss and timeout, and
//! the window the agent installs.
//!
//! Per-RTT timer reports cannot be ruled out on a loaded machine (the clock is real), so
//! assertions on volatile sums use RTT samples of seconds, and the TV-2 sequence (in ms)
//! checks only the persistent delay fields.
//!
//! One test function: libccp keeps state that concurrent tests would share.

use alg_ledbat_pp::datapath::{
    ACKED, CUR_DELAY, CUR_DELAY_3, INFINITY_REGISTER, LAST_RTT, LOST, MAX_INFLIGHT, MIN_RTT, NOW,
    PROGRAM, TIMEOUT,
};
use libccp::{CongestionOps, Connection, DatapathBuilder, DatapathOps, FlowInfo, Primitives};
use portus::lang::{Reg, Scope, compile};
use portus::serialize::{changeprog, install, serialize};
use std::sync::{Arc, Mutex};

const MSS: u32 = 1448;
const MEASURE: u16 = 1;
const CREATE: u16 = 0;

type Sent = Arc<Mutex<Vec<Vec<u8>>>>;

struct Ops(Sent);

impl DatapathOps for Ops {
    fn send_msg(&mut self, msg: &[u8]) {
        self.0.lock().expect("not poisoned").push(msg.to_vec());
    }
}

/// The window libccp applies.
struct Window(u32);

impl CongestionOps for Window {
    fn set_cwnd(&mut self, cwnd: u32) {
        self.0 = cwnd;
    }

    fn set_rate_abs(&mut self, _rate: u32) {}
}

fn u16_at(m: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([m[at], m[at + 1]])
}

fn u32_at(m: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(m[at..at + 4].try_into().expect("4 bytes"))
}

/// The Measure messages sent since the last call: (program uid, fields).
fn take_reports(sent: &Sent) -> Vec<(u32, Vec<u64>)> {
    let mut sent = sent.lock().expect("not poisoned");
    let reports = sent
        .iter()
        .filter(|m| u16_at(m, 0) == MEASURE)
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

/// A report's fields by name.
struct Report<'a> {
    scope: &'a Scope,
    fields: Vec<u64>,
}

impl Report<'_> {
    fn get(&self, name: &str) -> u64 {
        match self.scope.get(name) {
            Some(Reg::Report(i, _, _)) => self.fields[usize::from(*i)],
            other => panic!("{name}: {other:?}"),
        }
    }
}

/// One ACK; `rtt_us` 0 or 4294967295 means "no sample".
fn ack(conn: &mut Connection<'_, Window>, rtt_us: u64, in_flight: u32, lost: u32, timeout: bool) {
    conn.load_primitives(
        Primitives::default()
            .with_bytes_acked(MSS)
            .with_packets_acked(1)
            .with_rtt_sample_us(rtt_us)
            .with_bytes_in_flight(in_flight)
            .with_packets_in_flight(in_flight / MSS)
            .with_lost_pkts_sample(lost)
            .with_was_timeout(timeout),
    );
    conn.invoke()
        .expect("program runs without arithmetic errors");
}

#[test]
fn program_filters_and_reports_in_libccp() {
    let sent: Sent = Arc::default();
    let dp = DatapathBuilder::default()
        .with_ops(Ops(sent.clone()))
        .with_id(1)
        .init()
        .expect("datapath");
    let (bin, scope) = compile(PROGRAM.as_bytes(), &[]).expect("program compiles");
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
        Window(10 * MSS),
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
            .find(|m| u16_at(m, 0) == CREATE)
            .expect("Create sent");
        u32_at(create, 4)
    };
    // What `new_flow` sends: the program with a 2-packet window.
    let cwnd = scope.get("Cwnd").cloned().expect("Cwnd");
    let mut buf = serialize(&changeprog::Msg {
        sid,
        program_uid: scope.program_uid,
        num_fields: 1,
        fields: vec![(cwnd, u64::from(2 * MSS))],
    })
    .expect("changeprog serializes");
    dp.recv_msg(&mut buf).expect("changeprog accepted");
    take_reports(&sent);

    let last = |sent: &Sent| -> Vec<u64> {
        let reports = take_reports(sent);
        let (uid, fields) = reports.last().cloned().expect("a report");
        assert_eq!(uid, scope.program_uid);
        fields
    };

    // Volatile sums over one interval (RTT samples of seconds: no timer report fires).
    for (rtt_s, inflight) in [(3, 10), (2, 14), (4, 12)] {
        ack(&mut conn, rtt_s * 1_000_000, inflight * MSS, 0, false);
    }
    assert_eq!(
        conn.0,
        2 * MSS,
        "the installed window applies at the first ACK"
    );
    ack(&mut conn, INFINITY_REGISTER, 11 * MSS, 2, false);
    let r = Report {
        scope: &scope,
        fields: last(&sent),
    };
    assert_eq!(r.get(ACKED), u64::from(4 * MSS));
    assert_eq!(r.get(LOST), 2, "a loss is reported at once");
    assert_eq!(r.get(TIMEOUT), 0);
    assert_eq!(r.get(MIN_RTT), 2_000_000);
    assert_eq!(
        r.get(MAX_INFLIGHT),
        u64::from(15 * MSS),
        "the largest flight an ACK found: 14 packets left plus the one it acked"
    );
    assert_eq!(
        r.get(LAST_RTT),
        4_000_000,
        "a missing sample is not the last RTT"
    );
    assert_eq!(r.get(CUR_DELAY), 2_000_000);
    assert_eq!(r.get(CUR_DELAY_3), 2_000_000);
    assert!(r.get(NOW) > 0);

    // An interval without samples: minrtt reads +infinity, the persistent filter stays.
    ack(&mut conn, 0, 10 * MSS, 1, false);
    let r = Report {
        scope: &scope,
        fields: last(&sent),
    };
    assert_eq!(r.get(MIN_RTT), INFINITY_REGISTER);
    assert_eq!(r.get(CUR_DELAY), 2_000_000, "a zero sample is ignored");
    assert_eq!(r.get(ACKED), u64::from(MSS));

    // TV-2 on the program: after 31, 30, 33, 35 ms the current delay is 30; after 80, 95,
    // 92, 97 it is 80; after 91 (last four 95, 92, 97, 91) it is 91.
    for (samples, cur4, cur3) in [
        (&[31u64, 30, 33, 35][..], 30_000, 30_000),
        (&[80, 95, 92, 97][..], 80_000, 92_000),
        (&[91][..], 91_000, 91_000),
    ] {
        for s in samples {
            ack(&mut conn, s * 1_000, 10 * MSS, 0, false);
        }
        ack(&mut conn, INFINITY_REGISTER, 10 * MSS, 1, false);
        let r = Report {
            scope: &scope,
            fields: last(&sent),
        };
        assert_eq!(r.get(CUR_DELAY), cur4, "after {samples:?}");
        assert_eq!(r.get(CUR_DELAY_3), cur3, "after {samples:?}");
        assert_eq!(r.get(LAST_RTT), samples[samples.len() - 1] * 1_000);
    }

    // A timeout is reported at once.
    ack(&mut conn, INFINITY_REGISTER, 0, 0, true);
    let r = Report {
        scope: &scope,
        fields: last(&sent),
    };
    assert_eq!(r.get(TIMEOUT), 1);
}
