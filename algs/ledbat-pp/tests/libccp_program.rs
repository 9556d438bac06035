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
    ACKED, CUR_DELAY, CUR_DELAY_3, LAST_RTT, LOST, MAX_FLIGHT, MIN_RTT, NOW, PROGRAM, TIMEOUT,
};
use algs_core::register::INFINITY_REGISTER;
use ccp_test_support::libccp_host::{Knobs, Outbox, ProgramFlow, start_program_flow};
use ccp_test_support::program::report_field;
use libccp::{Connection, Primitives};
use portus::lang::Scope;

const MSS: u32 = 1448;

/// A report's fields by name.
struct Report<'a> {
    scope: &'a Scope,
    fields: Vec<u64>,
}

impl Report<'_> {
    fn get(&self, name: &str) -> u64 {
        report_field(self.scope, &self.fields, name)
    }
}

/// One ACK; `rtt_us` 0 or 4294967295 means "no sample".
fn ack(conn: &mut Connection<'_, Knobs>, rtt_us: u64, in_flight: u32, lost: u32, timeout: bool) {
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
    // What `new_flow` sends: the program with a 2-packet window.
    let ProgramFlow {
        sent,
        host: _host,
        scope,
        mut conn,
        sid: _,
    } = start_program_flow(PROGRAM, MSS, 10 * MSS, "Cwnd", 2 * MSS);

    let last = |sent: &Outbox| -> Vec<u64> {
        let report = sent.take_reports().pop().expect("a report");
        assert_eq!(report.program_uid, scope.program_uid);
        report.fields
    };

    // Volatile sums over one interval (RTT samples of seconds: no timer report fires).
    for (rtt_s, inflight) in [(3, 10), (2, 14), (4, 12)] {
        ack(&mut conn, rtt_s * 1_000_000, inflight * MSS, 0, false);
    }
    assert_eq!(
        conn.cwnd,
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
        r.get(MAX_FLIGHT),
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
