//! Dispatch tests on a recording transport: what the runtime sends for each datapath message,
//! and that bad input is counted without harming other flows.

use super::*;
use crate::fixed::Fixed;
use algs_core::ccp::{CcpAlgorithm, FlowError, ReportFields};
use algs_core::metrics::FlowMetrics;
use ccp_wire::{
    encode_close, encode_create, encode_measure, encode_priority, encode_ready, encode_sync,
    msg_type,
};

/// A scavenger that cannot become primary: it hands off with its window, like LEDBAT++.
struct Yielding;

struct YieldingFlow {
    cwnd: u64,
    priority: Priority,
}

impl<D: DatapathTrait + 'static> CcpAlgorithm<D> for Yielding {
    fn name(&self) -> &'static str {
        "yielding"
    }
    fn aliases(&self) -> &'static [&'static str] {
        &["yield"]
    }
    fn default_priority(&self) -> Priority {
        Priority::Scavenger
    }
    fn programs(&self) -> Vec<(&'static str, String)> {
        vec![("yielding", "(def (Report (volatile acked 0))) (when true (:= Report.acked Ack.bytes_acked) (report))".into())]
    }
    fn new_flow(&self, mut dp: D, start: FlowStart) -> Result<Box<dyn CcpFlow>, FlowError> {
        dp.set_program("yielding", None)?;
        Ok(Box::new(YieldingFlow {
            cwnd: start.carried.map_or(start.init_cwnd.0, |c| c.cwnd.0),
            priority: start.priority,
        }))
    }
}

use algs_core::ccp::DatapathTrait;

impl CcpFlow for YieldingFlow {
    fn on_report(&mut self, _: &dyn ReportFields) -> Result<(), FlowError> {
        Ok(())
    }
    fn on_priority(&mut self, p: Priority) -> Result<PriorityOutcome, FlowError> {
        match p {
            Priority::Scavenger => Ok(PriorityOutcome::Applied),
            _ => Ok(PriorityOutcome::HandOff(CarriedState {
                cwnd: Bytes(self.cwnd),
                ssthresh: None,
                rate: None,
                srtt: None,
                min_rtt: None,
                at: algs_core::Micros(0),
            })),
        }
    }
    fn metrics(&self) -> FlowMetrics {
        FlowMetrics {
            priority: self.priority,
            cwnd_bytes: Some(self.cwnd),
            rate_bytes_per_sec: None,
            state: "y",
            extra: vec![],
        }
    }
}

fn runtime(policy: &str) -> (Runtime<Recorder>, Rc<Recorder>) {
    let rec = Rc::new(Recorder::default());
    let algorithms: Algorithms<DpHandle<Recorder>> = Algorithms::new(vec![
        Box::new(Fixed {
            cwnd: Some(Bytes(20_000)),
            rate: None,
        }),
        Box::new(Yielding),
    ]);
    let programs = ProgramSet::compile(&algorithms.programs()).expect("programs");
    let policy = Policy::parse(policy, &|n| algorithms.index_of(n).is_some()).expect("policy");
    let config = RuntimeConfig {
        default_algorithm: "fixed".into(),
        primary_algorithm: "fixed".into(),
        tuple_order: TupleOrder::Host,
        accept_unannounced: true,
    };
    (
        Runtime::new(rec.clone(), Rc::new(programs), algorithms, policy, config),
        rec,
    )
}

fn create(sid: u32, alg: Option<&str>, remote_port: u32) -> Vec<u8> {
    encode_create(&CreateMsg {
        sid,
        init_cwnd: 14480,
        mss: 1448,
        src_ip: u32::from(Ipv4Addr::new(10, 0, 0, 1)),
        src_port: 40000,
        dst_ip: u32::from(Ipv4Addr::new(10, 0, 0, 2)),
        dst_port: remote_port,
        cong_alg: alg.map(str::to_owned),
    })
}

/// Types of the messages sent to `to`, in order; forgets them.
fn sent_types(rec: &Recorder, to: u32) -> Vec<u8> {
    let sent: Vec<_> = rec.sent.borrow_mut().drain(..).collect();
    sent.into_iter()
        .filter(|(a, _)| *a == to)
        .map(|(_, m)| m[0])
        .collect()
}

const INSTALL: u8 = msg_type::INSTALL as u8;
const CHANGE: u8 = msg_type::CHANGE_PROG as u8;
const UPDATE: u8 = msg_type::UPDATE_FIELDS as u8;

#[test]
fn ready_installs_every_program() {
    let (mut rt, rec) = runtime("");
    rt.handle_datagram(&encode_ready(0), &1);
    assert_eq!(sent_types(&rec, 1), vec![INSTALL, INSTALL]);
    assert_eq!(rt.counters().installs_sent, 2);
}

#[test]
fn create_selects_by_name_then_policy_then_default() {
    let (mut rt, rec) = runtime("[[rule]]\nremote_port = 873\nalgorithm = \"yielding\"\n");
    rt.handle_datagram(&encode_ready(0), &1);
    sent_types(&rec, 1);
    rt.handle_datagram(&create(1, Some("yield"), 80), &1); // alias
    rt.handle_datagram(&create(2, Some("reno"), 873), &1); // "reno" = no preference → policy
    rt.handle_datagram(&create(3, None, 80), &1); // default
    rt.handle_datagram(&create(4, Some("bbr"), 80), &1); // not registered → default
    let names: Vec<_> = (1..=4)
        .map(|sid| rt.datapaths[&1].flows[&sid].algorithm)
        .collect();
    assert_eq!(names, ["yielding", "yielding", "fixed", "fixed"]);
    assert_eq!(rt.counters().unknown_algorithm, 1);
    // Each new flow switches its datapath to its program.
    assert_eq!(sent_types(&rec, 1), vec![CHANGE; 4]);
}

#[test]
fn create_from_an_unknown_datapath_installs_first() {
    let (mut rt, rec) = runtime("");
    rt.handle_datagram(&create(1, None, 80), &7);
    assert_eq!(sent_types(&rec, 7), vec![INSTALL, INSTALL, CHANGE]);
}

/// Regression: on a unix socket any local process could send Create, Measure or PRIORITY
/// without a Ready first and have it served.
#[test]
fn where_senders_are_not_vouched_for_only_datapaths_that_said_ready_are_served() {
    let (mut rt, rec) = runtime("");
    rt.config.accept_unannounced = false;
    rt.handle_datagram(&create(1, None, 80), &7);
    rt.handle_datagram(&encode_measure(1, 1, &[1, 2, 3]), &7);
    rt.handle_datagram(&encode_close(1), &7);
    assert!(sent_types(&rec, 7).is_empty());
    assert_eq!((rt.flow_count(), rt.counters().unknown_datapath), (0, 3));
    rt.handle_datagram(&encode_ready(0), &7);
    rt.handle_datagram(&create(1, None, 80), &7);
    assert_eq!(sent_types(&rec, 7), vec![INSTALL, INSTALL, CHANGE]);
    assert_eq!(rt.flow_count(), 1);
}

#[test]
fn reports_reach_the_flow_and_an_empty_measure_closes_it() {
    let (mut rt, rec) = runtime("");
    rt.handle_datagram(&create(1, Some("fixed"), 80), &1);
    sent_types(&rec, 1);
    let uid = rt.programs.get("fixed").expect("fixed").scope.program_uid;
    rt.handle_datagram(&encode_measure(1, uid, &[1448, 0, 5]), &1);
    assert_eq!(sent_types(&rec, 1), vec![UPDATE]);
    rt.handle_datagram(&encode_measure(1, uid + 50, &[1448, 0, 5]), &1);
    assert_eq!(rt.counters().stale_reports, 1);
    rt.handle_datagram(&encode_close(1), &1);
    assert_eq!(rt.flow_count(), 0);
    rt.handle_datagram(&encode_measure(1, uid, &[1, 2, 3]), &1);
    assert_eq!(rt.counters().unknown_flow, 1);
}

#[test]
fn sync_is_echoed_after_the_messages_before_it() {
    let (mut rt, rec) = runtime("");
    let mut dgram = encode_ready(0);
    dgram.extend(encode_sync(0, 42));
    rt.handle_datagram(&dgram, &3);
    let sent = rec.sent.borrow();
    let last = &sent.last().expect("echo").1;
    assert_eq!(
        ccp_wire::decode(last),
        Ok(DatapathMsg::Sync { sid: 0, token: 42 })
    );
    assert_eq!(sent.len(), 3);
}

#[test]
fn a_sync_from_a_datapath_without_ready_is_answered_as_unknown_so_it_resyncs() {
    let (mut rt, rec) = runtime("");
    rt.config.accept_unannounced = false;
    let last_echo = |rec: &Recorder| {
        let sent = rec.sent.borrow();
        ccp_wire::decode(&sent.last().expect("an answer").1)
    };
    // A datapath that said Ready to an agent before this one: its probe is answered with
    // the token and the "unknown" sid, and counted as unannounced.
    rt.handle_datagram(&encode_sync(ccp_wire::SYNC_SID_READS_BATCHES, 7), &4);
    assert_eq!(
        last_echo(&rec),
        Ok(DatapathMsg::Sync {
            sid: ccp_wire::SYNC_SID_UNKNOWN_DATAPATH,
            token: 7
        })
    );
    assert_eq!(rt.counters().unknown_datapath, 1);
    // After its Ready the echo is the plain one.
    let mut dgram = encode_ready(0);
    dgram.extend(encode_sync(ccp_wire::SYNC_SID_READS_BATCHES, 8));
    rt.handle_datagram(&dgram, &4);
    assert_eq!(
        last_echo(&rec),
        Ok(DatapathMsg::Sync {
            sid: ccp_wire::SYNC_SID_READS_BATCHES,
            token: 8
        })
    );
}

fn priority(sid: u32, class: PriorityClass) -> Vec<u8> {
    encode_priority(&PriorityMsg {
        sid,
        class,
        flags: 0,
        hybrid_threshold_bytes_per_sec: 0,
    })
}

#[test]
fn priority_to_primary_hands_a_yielding_flow_to_the_primary_and_back() {
    let (mut rt, rec) = runtime("");
    rt.handle_datagram(&create(5, Some("yielding"), 80), &1);
    sent_types(&rec, 1);
    rt.handle_datagram(&priority(5, PriorityClass::Primary), &1);
    let entry = &rt.datapaths[&1].flows[&5];
    assert_eq!(entry.algorithm, "fixed");
    assert_eq!(entry.flow.metrics().priority, Priority::Primary);
    assert_eq!(rt.counters().handoffs, 1);
    assert_eq!(sent_types(&rec, 1), vec![CHANGE]);
    // `fixed` applies scavenger in place (it has no opinion), so the flow stays on it.
    rt.handle_datagram(&priority(5, PriorityClass::Scavenger), &1);
    assert_eq!(rt.datapaths[&1].flows[&5].algorithm, "fixed");
}

#[test]
fn a_rule_that_names_a_primary_makes_the_flow_hand_off_to_it() {
    let policy = "[[rule]]\nremote_port = \"873\"\nalgorithm = \"yielding\"\nprimary = \"fixed\"\n";
    let (mut rt, _) = runtime(policy);
    rt.handle_datagram(&create(3, None, 873), &1);
    rt.handle_datagram(&create(4, Some("yielding"), 80), &1);
    let flag = |rt: &Runtime<Recorder>, sid| rt.datapaths[&1].flows[&sid].hand_off_to_primary;
    assert!(flag(&rt, 3), "the rule named a primary");
    assert!(!flag(&rt, 4), "no rule, the agent's --primary");
    // Kept by the flow's next algorithm, so a flow handed back keeps it too.
    rt.handle_datagram(&priority(3, PriorityClass::Primary), &1);
    assert_eq!(rt.datapaths[&1].flows[&3].algorithm, "fixed");
    assert!(flag(&rt, 3));
}

#[test]
fn priority_before_create_is_kept_for_the_flow() {
    let (mut rt, _) = runtime("");
    rt.handle_datagram(&encode_ready(0), &1);
    rt.handle_datagram(&priority(9, PriorityClass::Scavenger), &1);
    rt.handle_datagram(&create(9, Some("fixed"), 80), &1);
    assert_eq!(
        rt.datapaths[&1].flows[&9].flow.metrics().priority,
        Priority::Scavenger
    );
}

#[test]
fn bad_input_is_counted_and_other_flows_keep_working() {
    let (mut rt, rec) = runtime("");
    rt.handle_datagram(&create(1, Some("fixed"), 80), &1);
    let uid = rt.programs.get("fixed").expect("fixed").scope.program_uid;
    let mut non_utf8 = create(2, Some("xx"), 80);
    non_utf8[32] = 0xff;
    let mut install_from_dp = encode_sync(1, 0);
    install_from_dp[0] = 2;
    let mut update_from_dp = install_from_dp.clone();
    update_from_dp[0] = 3;
    let mut bad_len = encode_measure(1, uid, &[1, 2, 3]);
    bad_len[2] = 200;
    let bad: Vec<Vec<u8>> = vec![
        vec![],
        vec![1, 2, 3],
        install_from_dp,
        update_from_dp,
        non_utf8,
        bad_len,
        encode_measure(1, uid, &[1, 2, 3])[..20].to_vec(),
        vec![0xff; 4000],
    ];
    for b in &bad {
        rt.handle_datagram(b, &1);
    }
    assert_eq!(
        rt.counters().bad_total(),
        7,
        "{:?}",
        rt.counters().bad_messages
    );
    sent_types(&rec, 1);
    rt.handle_datagram(&encode_measure(1, uid, &[1448, 0, 9]), &1);
    assert_eq!(sent_types(&rec, 1), vec![UPDATE], "flow 1 still served");
}

#[test]
fn an_unreachable_datapath_is_forgotten_alone() {
    let (mut rt, rec) = runtime("");
    rt.handle_datagram(&create(1, Some("fixed"), 80), &1);
    rt.handle_datagram(&create(1, Some("fixed"), 80), &2);
    rec.fail_to.borrow_mut().insert(1);
    let uid = rt.programs.get("fixed").expect("fixed").scope.program_uid;
    rt.handle_datagram(&encode_measure(1, uid, &[1448, 0, 9]), &1);
    assert_eq!(rt.counters().datapaths_lost, 1);
    assert_eq!(rt.flow_count(), 1);
    sent_types(&rec, 2);
    rt.handle_datagram(&encode_measure(1, uid, &[1448, 0, 9]), &2);
    assert_eq!(sent_types(&rec, 2), vec![UPDATE]);
}

#[test]
fn ready_again_forgets_old_flows() {
    let (mut rt, _) = runtime("");
    rt.handle_datagram(&create(1, Some("fixed"), 80), &1);
    rt.handle_datagram(&encode_ready(0), &1);
    assert_eq!(rt.flow_count(), 0);
}

#[test]
fn network_order_tuples_are_read_like_ccp_kernel_writes_them() {
    // ccp-kernel copies __be32/__be16 fields into u32s on a little-endian host.
    let c = CreateMsg {
        sid: 1,
        init_cwnd: 0,
        mss: 1448,
        src_ip: u32::from_le_bytes([10, 0, 0, 1]),
        src_port: u32::from(u16::from_le_bytes(5201u16.to_be_bytes())),
        dst_ip: u32::from_le_bytes([192, 0, 2, 7]),
        dst_port: u32::from(u16::from_le_bytes(873u16.to_be_bytes())),
        cong_alg: None,
    };
    let t = TupleOrder::Network.tuple(&c);
    assert_eq!(
        (t.local_addr, t.local_port),
        (Ipv4Addr::new(10, 0, 0, 1), 5201)
    );
    assert_eq!(
        (t.remote_addr, t.remote_port),
        (Ipv4Addr::new(192, 0, 2, 7), 873)
    );
}

#[test]
fn the_trace_has_one_line_per_decision() {
    let dir = std::env::temp_dir().join(format!("ccp-trace-test-{}", std::process::id()));
    let (rt, _) = runtime("");
    let mut rt = rt.with_trace(FlowTrace::create(&dir).expect("trace file"));
    rt.handle_datagram(&create(1, Some("yielding"), 80), &1);
    let uid = rt.programs.get("yielding").expect("prog").scope.program_uid;
    rt.handle_datagram(&encode_measure(1, uid, &[1448]), &1);
    rt.handle_datagram(&priority(1, PriorityClass::Primary), &1);
    rt.handle_datagram(&encode_close(1), &1);
    rt.flush_trace();
    let text = std::fs::read_to_string(&dir).expect("read");
    let _ = std::fs::remove_file(&dir);
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("json"))
        .collect();
    let events: Vec<&str> = lines
        .iter()
        .map(|l| l["event"].as_str().expect("event"))
        .collect();
    assert_eq!(events, ["create", "report", "create", "handoff", "close"]);
    // The flow's create line names its 4-tuple (a shared trace is split by it).
    assert_eq!(
        lines[0]["remote"].as_str().map(|r| r.ends_with(":80")),
        Some(true)
    );
    assert!(lines[0]["local"].is_string());
    // The hand-off line names both ends and the window that was carried over.
    assert_eq!(lines[3]["from"], "yielding");
    assert_eq!(lines[3]["algorithm"], "fixed");
    assert_eq!(lines[3]["carried"]["cwnd"], 14480);
}
