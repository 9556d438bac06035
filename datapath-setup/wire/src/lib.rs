//! The CCP wire format as datapaths send it, decoded without trusting a byte of it.
//!
//! Every CCP message starts with an 8-byte little-endian header: `u16 type`, `u16 len`
//! (whole message, header included), `u32 sid` (docs/datapaths.md §1.1). This crate decodes the
//! messages a datapath sends to the agent (Create 0, Measure 1, Ready 5) and the two this
//! project adds:
//!
//! * **PRIORITY (`0x20`)**, datapath → agent: an application changed a flow's priority.
//!   Payload `u32 priority` (0 primary, 1 scavenger, 2 hybrid), `u32 flags` (0),
//!   `u64 hybrid_threshold` (bytes/s, 0 = none); 24 bytes in all. See docs/wire.md.
//! * **SYNC (`0x21`)**, both ways: a datapath sends a `u64` token and the agent echoes it
//!   after handling every message that came before it on the same socket. Datapaths use it
//!   to check that an agent is alive, and the test datapath uses it to run in lock-step
//!   with the agent on simulated time.
//!
//! The agent → datapath messages (Install, UpdateFields, ChangeProg) are built with portus'
//! own serializers; only their header is looked at here, so that a datapath sending one of
//! them back (which panics portus' own runtime) is refused with a typed error.
//!
//! Nothing here panics on input: every length is checked before it is used.

mod decode;
mod encode;

pub use decode::{DatapathMsg, DecodeError, Frames, Header, decode, peek_header};
pub use encode::{
    encode_close, encode_create, encode_measure, encode_priority, encode_ready, encode_sync,
};

/// Length of the common header.
pub const HEADER_LEN: usize = 8;

/// The sid of a SYNC from a datapath that reads several messages per datagram (docs/wire.md):
/// the agent may then send it batches. Other senders of SYNC use other sids.
pub const SYNC_SID_READS_BATCHES: u32 = u32::MAX;

/// The sid of the agent's answer to a SYNC from a datapath that has not said Ready to it
/// (the agent restarted, or the Ready was lost): the token is echoed, and the datapath
/// should send Ready and its flows' Creates again. Stock agents never send it.
pub const SYNC_SID_UNKNOWN_DATAPATH: u32 = u32::MAX - 1;

/// Largest datagram of several messages either side sends: far below the default unix
/// socket buffers, within the 64 KiB receive buffers of the agent and the eBPF datapath.
pub const MAX_BATCH_BYTES: usize = 16 * 1024;

/// Message types (docs/datapaths.md §1.2), plus this project's extensions.
pub mod msg_type {
    pub const CREATE: u16 = 0;
    pub const MEASURE: u16 = 1;
    pub const INSTALL: u16 = 2;
    pub const UPDATE_FIELDS: u16 = 3;
    pub const CHANGE_PROG: u16 = 4;
    pub const READY: u16 = 5;
    /// Application priority change (this project). Below 256 because portus truncates the
    /// type to a byte, and not 255, which portus uses for garbage.
    pub const PRIORITY: u16 = 0x20;
    /// Liveness and lock-step barrier (this project).
    pub const SYNC: u16 = 0x21;
}

/// Fixed sizes of the fixed-size messages.
pub mod msg_len {
    /// Create: header, six u32, 64-byte algorithm name.
    pub const CREATE: usize = 96;
    /// Ready: header and a u32 datapath id.
    pub const READY: usize = 12;
    /// PRIORITY: header, u32 priority, u32 flags, u64 threshold.
    pub const PRIORITY: usize = 24;
    /// SYNC: header and a u64 token.
    pub const SYNC: usize = 16;
    /// Measure header part: header, u32 program uid, u32 field count.
    pub const MEASURE_BASE: usize = 16;
    /// Bytes of the algorithm name in Create, NUL included.
    pub const CONG_ALG: usize = 64;
}

/// libccp refuses reports of more than 110 fields (docs/datapaths.md §5.3).
pub const MAX_MEASURE_FIELDS: usize = 110;

/// The priority classes an application can ask for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PriorityClass {
    /// Competes for its fair share (Proteus-P, CUBIC).
    Primary,
    /// Uses spare capacity only and yields to primaries (Proteus-S, LEDBAT++).
    Scavenger,
    /// Primary below a rate threshold, scavenger above it (Proteus-H).
    Hybrid,
}

impl PriorityClass {
    /// The on-wire code.
    pub fn code(self) -> u32 {
        match self {
            PriorityClass::Primary => 0,
            PriorityClass::Scavenger => 1,
            PriorityClass::Hybrid => 2,
        }
    }

    /// The class for an on-wire code, if it is one.
    pub fn from_code(code: u32) -> Option<Self> {
        match code {
            0 => Some(PriorityClass::Primary),
            1 => Some(PriorityClass::Scavenger),
            2 => Some(PriorityClass::Hybrid),
            _ => None,
        }
    }
}

/// A flow's Create, as the datapath announced it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreateMsg {
    pub sid: u32,
    /// Initial window; bytes for ccp-kernel and libccp datapaths (units differ across
    /// datapaths, docs/datapaths.md §1.3).
    pub init_cwnd: u32,
    pub mss: u32,
    /// Addresses and ports as the datapath wrote them (ccp-kernel: network byte order).
    pub src_ip: u32,
    pub src_port: u32,
    pub dst_ip: u32,
    pub dst_port: u32,
    /// Requested algorithm; `None` when the name is empty.
    pub cong_alg: Option<String>,
}

/// A report (or, with no fields, a close) from a flow's datapath program.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MeasureMsg {
    pub sid: u32,
    pub program_uid: u32,
    pub fields: Vec<u64>,
}

impl MeasureMsg {
    /// libccp closes a flow with a Measure of no fields (docs/datapaths.md §1.2).
    pub fn is_close(&self) -> bool {
        self.fields.is_empty()
    }
}

/// An application's priority change for one flow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PriorityMsg {
    pub sid: u32,
    pub class: PriorityClass,
    /// Reserved; 0.
    pub flags: u32,
    /// Hybrid threshold in bytes per second; 0 means "keep the configured one".
    pub hybrid_threshold_bytes_per_sec: u64,
}
