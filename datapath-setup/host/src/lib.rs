//! The libccp side of a CCP datapath, written once for every datapath that embeds libccp.
//!
//! A datapath brings two things: how bytes reach the agent ([`ToAgent`]) and, per flow,
//! libccp's `CongestionOps` (what a new window or rate does). The [`Host`] owns the rest:
//!
//! * the libccp datapath itself (which sends Ready when it starts);
//! * **outgoing** ([`outgoing`]): every message libccp sends passes through it on its way
//!   to [`ToAgent`]; the sid of each Create is captured there, because libccp tells a new
//!   connection's sid only on the wire, and the Create bytes of every live flow are kept,
//!   because libccp never sends a Create again (docs/datapaths.md §5.4) and an agent that
//!   comes back needs them;
//! * **incoming** ([`incoming`]): an agent datagram is split into messages through
//!   `ccp-wire`, SYNC echoes (which libccp refuses as an unknown type) are taken out and
//!   reported, everything else is handed to libccp.
//!
//! Whether the agent is alive ([`liveness`]) is one state machine for every datapath that
//! probes it with SYNC, and what a full agent queue could not take yet waits in one
//! [`outbox`]; what a datapath does on a loss or a return stays its own.
//!
//! Every datapath hands libccp one ACK's measurements as `algs_core::AckPrimitives`
//! ([`primitives::to_libccp`]).
//!
//! [`virtual_clock`] is libccp's clock on simulated time, for the datapaths and tests that
//! run libccp on a model.
//!
//! libccp `malloc`s its 1024-slot connection array without zeroing it; [`Host::new`] pins
//! the allocator so that array is always fresh memory (see `zeroed_big_allocations`).

pub mod agent_socket;
pub mod incoming;
pub mod liveness;
pub mod outbox;
pub mod outgoing;
pub mod primitives;
pub mod virtual_clock;

use std::cell::{RefCell, RefMut};
use std::rc::Rc;

pub use agent_socket::{Received, Rejection, receive_credentials, recv_from_agent};
pub use incoming::{AgentMsg, Incoming, split};
pub use liveness::{AfterFlush, Liveness, Loss, Timing};
pub use outbox::{Flushed, Outbox, OutboxStats};
pub use outgoing::ToAgent;

use outgoing::Outgoing;

/// What libccp decided for a flow during one `invoke`: its callbacks record a new window
/// and/or rate here, and the datapath takes them after the call.
#[derive(Debug, Default)]
pub struct Decided {
    pub cwnd_bytes: Option<u32>,
    pub rate_bytes_per_sec: Option<u32>,
}

impl libccp::CongestionOps for Decided {
    fn set_cwnd(&mut self, cwnd: u32) {
        self.cwnd_bytes = Some(cwnd);
    }
    fn set_rate_abs(&mut self, rate: u32) {
        self.rate_bytes_per_sec = Some(rate);
    }
}

/// One libccp datapath and what it sent.
pub struct Host<S: ToAgent> {
    /// Leaked: connections borrow it for `'static`, and a datapath lives as long as its
    /// process.
    dp: &'static libccp::Datapath,
    out: Rc<RefCell<Outgoing<S>>>,
}

impl<S: ToAgent + std::fmt::Debug> std::fmt::Debug for Host<S> {
    // libccp's datapath handle has no Debug.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Host")
            .field("out", &self.out)
            .finish_non_exhaustive()
    }
}

impl<S: ToAgent> Host<S> {
    /// Starts a libccp datapath with id `id` (sent in Ready) whose messages go to `to_agent`.
    pub fn new(id: u32, to_agent: S) -> Result<Self, libccp::LibccpError> {
        zeroed_big_allocations();
        let out = Rc::new(RefCell::new(Outgoing::new(to_agent)));
        let dp = libccp::DatapathBuilder::default()
            .with_id(id)
            .with_ops(outgoing::Ops(Rc::clone(&out)))
            .init()?;
        Ok(Host {
            dp: Box::leak(Box::new(dp)),
            out,
        })
    }

    /// The libccp datapath, for `Connection::start` and messages built by hand.
    pub fn datapath(&self) -> &'static libccp::Datapath {
        self.dp
    }

    /// Starts a connection (libccp sends its Create now, or holds it back when the slot was
    /// freed within 100 ms, docs/datapaths.md §5.4); its sid is then [`take_create_sid`].
    ///
    /// [`take_create_sid`]: Self::take_create_sid
    pub fn start<T: libccp::CongestionOps + 'static>(
        &self,
        ops: T,
        info: libccp::FlowInfo,
    ) -> Result<libccp::Connection<'static, T>, libccp::LibccpError> {
        self.take_create_sid();
        libccp::Connection::start(self.dp, ops, info)
    }

    /// The sid of the last Create libccp sent, once: after [`start`](Self::start), or after
    /// an `invoke` of a connection whose Create was held back.
    pub fn take_create_sid(&self) -> Option<u32> {
        self.out.borrow_mut().take_create_sid()
    }

    /// The Create of every live flow, by sid, for an agent that must learn them again.
    pub fn live_creates(&self) -> Vec<Vec<u8>> {
        self.out.borrow().live_creates()
    }

    /// Live flows (a Create sent, its close not yet).
    pub fn live_flows(&self) -> usize {
        self.out.borrow().live_flows()
    }

    /// The datapath's way to the agent. Not to be held across a call into libccp, which
    /// sends through it.
    pub fn to_agent(&self) -> RefMut<'_, S> {
        RefMut::map(self.out.borrow_mut(), |out| &mut out.to_agent)
    }

    /// Hands one datagram from the agent to libccp, message by message; `each` learns what
    /// became of every message, in order.
    pub fn receive(&self, datagram: &mut [u8], mut each: impl FnMut(Incoming)) {
        let malformed = split(datagram, |msg| {
            each(match msg {
                AgentMsg::Sync { sid, token } => Incoming::Sync { sid, token },
                AgentMsg::Other { header, bytes } => match self.dp.recv_msg(bytes) {
                    Ok(()) => Incoming::Delivered(header),
                    Err(e) => Incoming::Refused(header, e),
                },
                AgentMsg::Malformed(e) => Incoming::Malformed(e),
            });
        });
        if let Some(e) = malformed {
            each(Incoming::Malformed(e));
        }
    }
}

/// Threshold above which glibc serves allocations from fresh (zeroed) mmap pages.
const MMAP_THRESHOLD_BYTES: libc::c_int = 128 * 1024;

/// libccp `malloc`s its 1024-slot connection array (221 KB) without zeroing it and takes a
/// slot whose `index` is 0 as free (docs/datapaths.md §5.1). glibc serves an allocation
/// that size from fresh, zeroed mmap pages only while its mmap threshold is at the default;
/// once any large block has been freed the threshold rises, the array comes from recycled
/// heap memory, and the connections get garbage (seen: sid 565 for the first flow of a
/// second datapath in one process; a time underflow inside libccp in a new eBPF shard).
/// Pinning the threshold keeps the array zeroed.
fn zeroed_big_allocations() {
    // SAFETY: mallopt only tunes the allocator; glibc serializes it against allocation.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES);
    }
}
