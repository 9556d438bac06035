//! Encoders for the datapath → agent messages, used by datapaths written in Rust (the test
//! datapath, the eBPF daemon) and by tests and fuzzers that need well-formed bytes.

use crate::{CreateMsg, HEADER_LEN, PriorityMsg, msg_len, msg_type};

fn header(buf: &mut Vec<u8>, typ: u16, len: usize, sid: u32) {
    // Callers only pass lengths of bounded messages; a wrapped u16 would be a bug here.
    debug_assert!(len <= usize::from(u16::MAX));
    buf.extend_from_slice(&typ.to_le_bytes());
    buf.extend_from_slice(&(len as u16).to_le_bytes());
    buf.extend_from_slice(&sid.to_le_bytes());
}

/// PRIORITY (0x20): 24 bytes.
pub fn encode_priority(msg: &PriorityMsg) -> Vec<u8> {
    let mut buf = Vec::with_capacity(msg_len::PRIORITY);
    header(&mut buf, msg_type::PRIORITY, msg_len::PRIORITY, msg.sid);
    buf.extend_from_slice(&msg.class.code().to_le_bytes());
    buf.extend_from_slice(&msg.flags.to_le_bytes());
    buf.extend_from_slice(&msg.hybrid_threshold_bytes_per_sec.to_le_bytes());
    buf
}

/// SYNC (0x21) with its token: 16 bytes. The agent's echo has the same layout.
pub fn encode_sync(sid: u32, token: u64) -> Vec<u8> {
    let mut buf = Vec::with_capacity(msg_len::SYNC);
    header(&mut buf, msg_type::SYNC, msg_len::SYNC, sid);
    buf.extend_from_slice(&token.to_le_bytes());
    buf
}

/// Ready (5): 12 bytes.
pub fn encode_ready(datapath_id: u32) -> Vec<u8> {
    let mut buf = Vec::with_capacity(msg_len::READY);
    header(&mut buf, msg_type::READY, msg_len::READY, 0);
    buf.extend_from_slice(&datapath_id.to_le_bytes());
    buf
}

/// Create (0): 96 bytes; the algorithm name is cut to 63 bytes.
pub fn encode_create(msg: &CreateMsg) -> Vec<u8> {
    let mut buf = Vec::with_capacity(msg_len::CREATE);
    header(&mut buf, msg_type::CREATE, msg_len::CREATE, msg.sid);
    for v in [
        msg.init_cwnd,
        msg.mss,
        msg.src_ip,
        msg.src_port,
        msg.dst_ip,
        msg.dst_port,
    ] {
        buf.extend_from_slice(&v.to_le_bytes());
    }
    let mut name = [0u8; msg_len::CONG_ALG];
    if let Some(alg) = &msg.cong_alg {
        let n = alg.len().min(msg_len::CONG_ALG - 1);
        name[..n].copy_from_slice(&alg.as_bytes()[..n]);
    }
    buf.extend_from_slice(&name);
    buf
}

/// Measure (1) with the given fields.
pub fn encode_measure(sid: u32, program_uid: u32, fields: &[u64]) -> Vec<u8> {
    let len = msg_len::MEASURE_BASE + 8 * fields.len();
    let mut buf = Vec::with_capacity(len);
    header(&mut buf, msg_type::MEASURE, len, sid);
    buf.extend_from_slice(&program_uid.to_le_bytes());
    buf.extend_from_slice(&(fields.len() as u32).to_le_bytes());
    for f in fields {
        buf.extend_from_slice(&f.to_le_bytes());
    }
    buf
}

/// The close libccp sends when a connection ends: a Measure with uid 0 and no fields.
pub fn encode_close(sid: u32) -> Vec<u8> {
    encode_measure(sid, 0, &[])
}

const _: () = assert!(msg_len::SYNC == HEADER_LEN + 8);
