//! A tiny stand-in for `ccp-agent`, for testing the datapath side of the lock-step: it
//! echoes SYNC, installs one portus-compiled program on Ready, starts every flow on it with
//! a ChangeProg setting Cwnd, and answers every report with an UpdateFields of Cwnd.

#![allow(dead_code)]

use ccp_test_support::processes::RawSocket;
use portus::lang::{Reg, Scope};
use portus::serialize::{changeprog, install, serialize, update_field};
use std::os::unix::net::UnixDatagram;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

/// Tests in one binary share the virtual clock: one at a time.
pub fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// A unique socket name for this process.
pub fn unique(prefix: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    format!(
        "{prefix}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// Reports every `report_us` of `Micros`: the bytes acked, `Ack.now`, and the last RTT.
pub const PROGRAM: &str = "
(def (Report (volatile acked 0) (volatile now 0) (volatile rtt 0) (volatile lost 0)) (reportUs 10000))
(when true
  (:= Report.acked (+ Report.acked Ack.bytes_acked))
  (:= Report.lost (+ Report.lost Ack.lost_pkts_sample))
  (:= Report.now Ack.now)
  (:= Report.rtt Flow.rtt_sample_us)
  (fallthrough))
(when (> Micros reportUs)
  (report)
  (:= Micros 0))
";

/// How the fake agent answers.
#[derive(Debug, Clone, Copy)]
pub struct Behaviour {
    /// Cwnd in the ChangeProg that starts a flow.
    pub start_cwnd: u64,
    /// Cwnd in the UpdateFields after report n is `report_cwnd + n`; 0 = no UpdateFields.
    pub report_cwnd: u64,
    /// Report period, µs of `Micros`.
    pub report_us: u32,
    /// Stop echoing SYNC after this many echoes (None = always echo).
    pub echo_limit: Option<u64>,
}

impl Default for Behaviour {
    fn default() -> Self {
        Behaviour {
            start_cwnd: 20_000,
            report_cwnd: 30_000,
            report_us: 10_000,
            echo_limit: None,
        }
    }
}

/// What the fake agent received, in order: (type, sid, payload after the header).
pub type Received = Vec<(u16, u32, Vec<u8>)>;

pub struct FakeAgent {
    pub name: String,
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<Received>>,
}

impl FakeAgent {
    pub fn start(b: Behaviour) -> FakeAgent {
        let name = unique("testdp-fake-agent");
        let socket = RawSocket::bind(&name);
        socket
            .sock
            .set_read_timeout(Some(Duration::from_millis(50)))
            .expect("timeout");
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = Arc::clone(&stop);
        let handle = std::thread::spawn(move || {
            // The socket is dropped, and its file removed, when serving ends.
            serve(&socket.sock, b, &stop2)
        });
        FakeAgent {
            name,
            stop,
            handle: Some(handle),
        }
    }

    /// Stops the agent and returns what it received.
    pub fn finish(mut self) -> Received {
        self.stop.store(true, Ordering::Release);
        self.handle
            .take()
            .expect("running")
            .join()
            .expect("fake agent thread")
    }
}

impl Drop for FakeAgent {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
    }
}

fn reg(scope: &Scope, name: &str) -> Reg {
    scope
        .get(name)
        .cloned()
        .unwrap_or_else(|| panic!("no {name}"))
}

/// The Install message, program uid and Cwnd register for a report period; compiled once
/// per process and period, so that repeated runs see the same uid (portus numbers scopes
/// from a process-wide counter).
fn compiled(report_us: u32) -> (Vec<u8>, u32, Reg) {
    /// (report period, Install bytes, program uid, Cwnd register).
    type Compiled = (u32, Vec<u8>, u32, Reg);
    static CACHE: Mutex<Vec<Compiled>> = Mutex::new(Vec::new());
    let mut cache = CACHE.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, m, uid, r)) = cache.iter().find(|c| c.0 == report_us) {
        return (m.clone(), *uid, r.clone());
    }
    let (bin, scope) =
        portus::lang::compile(PROGRAM.as_bytes(), &[("reportUs", report_us)]).expect("compiles");
    let uid = scope.program_uid;
    let msg = serialize(&install::Msg {
        sid: 0,
        program_uid: uid,
        num_events: bin.events.len() as u32,
        num_instrs: bin.instrs.len() as u32,
        instrs: bin,
    })
    .expect("serializes");
    let cwnd = reg(&scope, "Cwnd");
    cache.push((report_us, msg.clone(), uid, cwnd.clone()));
    (msg, uid, cwnd)
}

fn serve(sock: &UnixDatagram, b: Behaviour, stop: &AtomicBool) -> Received {
    let (install_msg, uid, cwnd) = compiled(b.report_us);
    let mut received = Vec::new();
    let mut echoes = 0u64;
    let mut reports = 0u64;
    let mut buf = vec![0u8; 65_536];
    loop {
        // Stop only once the queue is empty: a close sent just before `finish` must count.
        let Ok((n, from)) = sock.recv_from(&mut buf) else {
            if stop.load(Ordering::Acquire) {
                break;
            }
            continue;
        };
        let Some(from) = from.as_pathname().map(PathBuf::from) else {
            continue;
        };
        if n < 8 {
            continue;
        }
        let typ = u16::from_le_bytes([buf[0], buf[1]]);
        let sid = u32::from_le_bytes([buf[4], buf[5], buf[6], buf[7]]);
        received.push((typ, sid, buf[8..n].to_vec()));
        let reply: Option<Vec<u8>> = match typ {
            0x21 => {
                echoes += 1;
                if b.echo_limit.is_some_and(|l| echoes > l) {
                    None
                } else {
                    Some(buf[..n].to_vec())
                }
            }
            5 => Some(install_msg.clone()),
            0 => Some(
                serialize(&changeprog::Msg {
                    sid,
                    program_uid: uid,
                    num_fields: 1,
                    fields: vec![(cwnd.clone(), b.start_cwnd)],
                })
                .expect("serializes"),
            ),
            1 if n > 16 && b.report_cwnd > 0 => {
                reports += 1;
                Some(
                    serialize(&update_field::Msg {
                        sid,
                        num_fields: 1,
                        fields: vec![(cwnd.clone(), b.report_cwnd + reports)],
                    })
                    .expect("serializes"),
                )
            }
            _ => None,
        };
        if let Some(r) = reply {
            let _ = sock.send_to(&r, &from);
        }
    }
    received
}
