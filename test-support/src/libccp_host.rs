//! A libccp datapath hosted in the test's own process (through `ccp-host`, as every
//! datapath of this project hosts it): the real C code every CCP datapath embeds, with
//! portus (the agent's side) serializing the messages it receives.
//!
//! libccp keeps global state: the tests of one binary that use it run one after the other
//! (one test function, or a runner without the test harness).

use crate::program::{install_msg, register};
use algs_core::ccp::{DatapathTrait, resolve_update};
pub use ccp_host::Host;
use ccp_host::ToAgent;
use ccp_wire::{DatapathMsg, MeasureMsg};
use portus::lang::{Reg, Scope};
use portus::serialize::{changeprog, serialize, update_field};
use std::cell::Cell;
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::{Arc, Mutex, MutexGuard};

/// Every message libccp sent, in order, until taken.
#[derive(Debug, Clone, Default)]
pub struct Outbox(Arc<Mutex<Vec<Vec<u8>>>>);

impl Outbox {
    fn lock(&self) -> MutexGuard<'_, Vec<Vec<u8>>> {
        // A test that panicked while holding the lock has failed already.
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The reports (Measures with fields) sent since the last take; everything else is
    /// dropped with them.
    pub fn take_reports(&self) -> Vec<MeasureMsg> {
        std::mem::take(&mut *self.lock())
            .iter()
            .filter_map(|m| match ccp_wire::decode(m) {
                Ok(DatapathMsg::Measure(r)) if !r.is_close() => Some(r),
                _ => None,
            })
            .collect()
    }
}

impl ToAgent for Outbox {
    fn send(&mut self, msg: &[u8]) {
        self.lock().push(msg.to_vec());
    }
}

/// What libccp sets on a connection.
#[derive(Debug, Default)]
pub struct Knobs {
    /// Window, bytes; 0 until the program sets it.
    pub cwnd: u32,
    /// Pacing rate, bytes/s; 0 until the program sets it.
    pub rate: u32,
}

impl libccp::CongestionOps for Knobs {
    fn set_cwnd(&mut self, cwnd: u32) {
        self.cwnd = cwnd;
    }
    fn set_rate_abs(&mut self, rate: u32) {
        self.rate = rate;
    }
}

/// A new libccp datapath whose messages go to `outbox`; a connection's sid is the host's
/// `take_create_sid` after `Connection::start`.
pub fn start_datapath(outbox: &Outbox) -> Host<Outbox> {
    Host::new(1, outbox.clone()).expect("libccp datapath")
}

/// Compiles `program` and installs it in `dp`; its scope names the registers.
pub fn install(dp: &libccp::Datapath, program: &str) -> Scope {
    let (mut buf, scope) = install_msg(program);
    dp.recv_msg(&mut buf).expect("libccp installs the program");
    scope
}

/// One connection on a fresh libccp datapath, running one program: what a program test
/// drives ACK by ACK.
pub struct ProgramFlow {
    /// Every message libccp sent since the program started.
    pub sent: Outbox,
    pub host: Host<Outbox>,
    /// The program's registers by name.
    pub scope: Scope,
    pub conn: libccp::Connection<'static, Knobs>,
    pub sid: u32,
}

impl std::fmt::Debug for ProgramFlow {
    // libccp's handles have no Debug.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProgramFlow")
            .field("sid", &self.sid)
            .field("cwnd", &self.conn.cwnd)
            .field("rate", &self.conn.rate)
            .finish_non_exhaustive()
    }
}

/// Installs `program` in a fresh datapath, starts a connection with a window of `init_cwnd`
/// bytes (also in force in its [`Knobs`]) and segments of `mss`, and starts the program on
/// it with register `cwnd_reg` set to `cwnd` bytes, as an algorithm's first ChangeProg does.
/// The messages sent until then (Create, the first reports) are taken.
pub fn start_program_flow(
    program: &str,
    mss: u32,
    init_cwnd: u32,
    cwnd_reg: &str,
    cwnd: u32,
) -> ProgramFlow {
    let sent = Outbox::default();
    let host = start_datapath(&sent);
    let dp = host.datapath();
    let scope = install(dp, program);
    let conn = libccp::Connection::start(
        dp,
        Knobs {
            cwnd: init_cwnd,
            rate: 0,
        },
        libccp::FlowInfo::default()
            .with_init_cwnd(init_cwnd)
            .with_mss(mss)
            .with_four_tuple(1, 2, 3, 4),
    )
    .expect("connection");
    let sid = host.take_create_sid().expect("libccp sent a Create");
    change_prog(
        dp,
        sid,
        &scope,
        vec![(register(&scope, cwnd_reg), u64::from(cwnd))],
    )
    .expect("changeprog accepted");
    sent.take_reports();
    ProgramFlow {
        sent,
        host,
        scope,
        conn,
        sid,
    }
}

/// Starts the program of `scope` on flow `sid` with those registers set (a ChangeProg).
pub fn change_prog(
    dp: &libccp::Datapath,
    sid: u32,
    scope: &Scope,
    fields: Vec<(Reg, u64)>,
) -> portus::Result<()> {
    let mut buf = serialize(&changeprog::Msg {
        sid,
        program_uid: scope.program_uid,
        num_fields: fields.len() as u32,
        fields,
    })?;
    dp.recv_msg(&mut buf)
        .map_err(|e| portus::Error(format!("{e:?}")))
}

/// Sets registers of flow `sid`'s program (an UpdateFields).
pub fn update_fields(
    dp: &libccp::Datapath,
    sid: u32,
    fields: Vec<(Reg, u64)>,
) -> portus::Result<()> {
    let mut buf = serialize(&update_field::Msg {
        sid,
        num_fields: fields.len() as u8,
        fields,
    })?;
    dp.recv_msg(&mut buf)
        .map_err(|e| portus::Error(format!("{e:?}")))
}

/// The agent side of one flow, for a [`algs_core::ccp::CcpFlow`]: its ChangeProgs and
/// UpdateFields go straight into the hosted datapath.
pub struct LibccpDp {
    dp: &'static libccp::Datapath,
    sid: u32,
    programs: Rc<HashMap<&'static str, Scope>>,
    /// UpdateFields sent so far.
    updates: Cell<u32>,
    /// The UpdateFields to lose (1 = the first), as a socket that drops a datagram would.
    lose_update: Option<u32>,
}

impl std::fmt::Debug for LibccpDp {
    // libccp's datapath handle has no Debug; the flow's own state is what a failure needs.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LibccpDp")
            .field("sid", &self.sid)
            .field("updates", &self.updates)
            .field("lose_update", &self.lose_update)
            .finish_non_exhaustive()
    }
}

impl LibccpDp {
    /// Flow `sid` of `dp`, whose installed programs are `programs` by name.
    pub fn new(
        dp: &'static libccp::Datapath,
        sid: u32,
        programs: Rc<HashMap<&'static str, Scope>>,
    ) -> Self {
        LibccpDp {
            dp,
            sid,
            programs,
            updates: Cell::new(0),
            lose_update: None,
        }
    }

    /// Loses the `n`th UpdateFields (1 = the first).
    pub fn losing_update(self, n: Option<u32>) -> Self {
        LibccpDp {
            lose_update: n,
            ..self
        }
    }
}

impl DatapathTrait for LibccpDp {
    fn get_sock_id(&self) -> u32 {
        self.sid
    }

    fn set_program(
        &mut self,
        name: &'static str,
        fields: Option<&[(&str, u32)]>,
    ) -> portus::Result<Scope> {
        let sc = self
            .programs
            .get(name)
            .cloned()
            .ok_or_else(|| portus::Error(format!("no program {name}")))?;
        let fields = resolve_update(&sc, fields.unwrap_or(&[]))?;
        change_prog(self.dp, self.sid, &sc, fields)?;
        Ok(sc)
    }

    fn update_field(&self, sc: &Scope, update: &[(&str, u32)]) -> portus::Result<()> {
        let fields = resolve_update(sc, update)?;
        let n = self.updates.get() + 1;
        self.updates.set(n);
        if self.lose_update == Some(n) {
            return Ok(());
        }
        update_fields(self.dp, self.sid, fields)
    }
}
