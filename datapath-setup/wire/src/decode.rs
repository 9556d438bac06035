//! Bounds-checked decoding of datapath → agent messages.

use crate::{
    CreateMsg, HEADER_LEN, MAX_MEASURE_FIELDS, MeasureMsg, PriorityClass, PriorityMsg, msg_len,
    msg_type,
};
use thiserror::Error;

/// The common 8-byte header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub typ: u16,
    /// Whole message length, header included.
    pub len: u16,
    pub sid: u32,
}

/// One decoded datapath → agent message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DatapathMsg {
    Create(CreateMsg),
    Measure(MeasureMsg),
    Ready { datapath_id: u32 },
    Priority(PriorityMsg),
    Sync { sid: u32, token: u64 },
}

/// Why bytes were not a valid datapath → agent message.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum DecodeError {
    #[error("{got} bytes is shorter than the {HEADER_LEN}-byte header")]
    ShortHeader { got: usize },
    #[error("header says {claimed} bytes but {available} are there")]
    LengthMismatch { claimed: usize, available: usize },
    #[error("header length {claimed} is below the {HEADER_LEN}-byte header")]
    LengthBelowHeader { claimed: usize },
    #[error("message type {typ} has {got} bytes, expected {expected}")]
    WrongSize {
        typ: u16,
        got: usize,
        expected: usize,
    },
    #[error("measure claims {claimed} fields but carries room for {room}")]
    FieldCount { claimed: u32, room: usize },
    #[error("measure has {0} fields, more than libccp can send")]
    TooManyFields(usize),
    #[error("type {0} is sent by the agent, never by a datapath")]
    AgentOnlyType(u16),
    #[error("unknown message type {0}")]
    UnknownType(u16),
    #[error("algorithm name in Create is not UTF-8")]
    NameNotUtf8,
    #[error("unknown priority class {0}")]
    UnknownPriority(u32),
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

/// Reads the header without looking at the rest.
pub fn peek_header(buf: &[u8]) -> Result<Header, DecodeError> {
    if buf.len() < HEADER_LEN {
        return Err(DecodeError::ShortHeader { got: buf.len() });
    }
    Ok(Header {
        typ: u16_at(buf, 0),
        len: u16_at(buf, 2),
        sid: u32_at(buf, 4),
    })
}

fn expect_len(typ: u16, msg: &[u8], expected: usize) -> Result<(), DecodeError> {
    if msg.len() == expected {
        Ok(())
    } else {
        Err(DecodeError::WrongSize {
            typ,
            got: msg.len(),
            expected,
        })
    }
}

/// Decodes exactly one message; `buf` must hold exactly the header's length.
pub fn decode(buf: &[u8]) -> Result<DatapathMsg, DecodeError> {
    let hdr = peek_header(buf)?;
    let len = usize::from(hdr.len);
    if len < HEADER_LEN {
        return Err(DecodeError::LengthBelowHeader { claimed: len });
    }
    if len != buf.len() {
        return Err(DecodeError::LengthMismatch {
            claimed: len,
            available: buf.len(),
        });
    }
    match hdr.typ {
        msg_type::CREATE => {
            expect_len(hdr.typ, buf, msg_len::CREATE)?;
            let name = &buf[32..32 + msg_len::CONG_ALG];
            let end = name.iter().position(|&c| c == 0).unwrap_or(name.len());
            let name = std::str::from_utf8(&name[..end]).map_err(|_| DecodeError::NameNotUtf8)?;
            Ok(DatapathMsg::Create(CreateMsg {
                sid: hdr.sid,
                init_cwnd: u32_at(buf, 8),
                mss: u32_at(buf, 12),
                src_ip: u32_at(buf, 16),
                src_port: u32_at(buf, 20),
                dst_ip: u32_at(buf, 24),
                dst_port: u32_at(buf, 28),
                cong_alg: (!name.is_empty()).then(|| name.to_owned()),
            }))
        }
        msg_type::MEASURE => {
            if len < msg_len::MEASURE_BASE {
                return Err(DecodeError::WrongSize {
                    typ: hdr.typ,
                    got: len,
                    expected: msg_len::MEASURE_BASE,
                });
            }
            let claimed = u32_at(buf, 12);
            let room = (len - msg_len::MEASURE_BASE) / 8;
            if usize::try_from(claimed).ok() != Some(room) || (len - msg_len::MEASURE_BASE) % 8 != 0
            {
                return Err(DecodeError::FieldCount { claimed, room });
            }
            if room > MAX_MEASURE_FIELDS {
                return Err(DecodeError::TooManyFields(room));
            }
            let fields = (0..room)
                .map(|i| u64_at(buf, msg_len::MEASURE_BASE + 8 * i))
                .collect();
            Ok(DatapathMsg::Measure(MeasureMsg {
                sid: hdr.sid,
                program_uid: u32_at(buf, 8),
                fields,
            }))
        }
        msg_type::READY => {
            expect_len(hdr.typ, buf, msg_len::READY)?;
            Ok(DatapathMsg::Ready {
                datapath_id: u32_at(buf, 8),
            })
        }
        msg_type::PRIORITY => {
            expect_len(hdr.typ, buf, msg_len::PRIORITY)?;
            let code = u32_at(buf, 8);
            let class = PriorityClass::from_code(code).ok_or(DecodeError::UnknownPriority(code))?;
            Ok(DatapathMsg::Priority(PriorityMsg {
                sid: hdr.sid,
                class,
                flags: u32_at(buf, 12),
                hybrid_threshold_bytes_per_sec: u64_at(buf, 16),
            }))
        }
        msg_type::SYNC => {
            expect_len(hdr.typ, buf, msg_len::SYNC)?;
            Ok(DatapathMsg::Sync {
                sid: hdr.sid,
                token: u64_at(buf, 8),
            })
        }
        msg_type::INSTALL | msg_type::UPDATE_FIELDS | msg_type::CHANGE_PROG => {
            Err(DecodeError::AgentOnlyType(hdr.typ))
        }
        other => Err(DecodeError::UnknownType(other)),
    }
}

/// Splits a datagram into its messages by their header lengths. A datagram normally
/// carries one message; a bad length ends the iteration with one error, since nothing
/// after it can be trusted.
#[derive(Debug)]
pub struct Frames<'a> {
    rest: &'a [u8],
}

impl<'a> Frames<'a> {
    pub fn new(datagram: &'a [u8]) -> Self {
        Frames { rest: datagram }
    }
}

impl<'a> Iterator for Frames<'a> {
    type Item = Result<&'a [u8], DecodeError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        let hdr = match peek_header(self.rest) {
            Ok(h) => h,
            Err(e) => {
                self.rest = &[];
                return Some(Err(e));
            }
        };
        let len = usize::from(hdr.len);
        if len < HEADER_LEN {
            self.rest = &[];
            return Some(Err(DecodeError::LengthBelowHeader { claimed: len }));
        }
        if len > self.rest.len() {
            let available = self.rest.len();
            self.rest = &[];
            return Some(Err(DecodeError::LengthMismatch {
                claimed: len,
                available,
            }));
        }
        let (frame, rest) = self.rest.split_at(len);
        self.rest = rest;
        Some(Ok(frame))
    }
}
