//! What the agent sends: split into messages, SYNC echoes taken out (docs/wire.md).

use ccp_wire::{DatapathMsg, DecodeError, Frames, Header, decode, msg_type, peek_header};

/// One message of an agent datagram, before libccp sees it.
#[derive(Debug)]
pub enum AgentMsg<'a> {
    /// A SYNC echo.
    Sync { sid: u32, token: u64 },
    /// Anything else (Install, ChangeProg, UpdateFields): libccp's to judge.
    Other { header: Header, bytes: &'a mut [u8] },
    /// A SYNC of the wrong size; the messages after it still count.
    Malformed(DecodeError),
}

/// What became of one message of an agent datagram.
#[derive(Debug)]
pub enum Incoming {
    /// A SYNC echo (never given to libccp, which refuses unknown types).
    Sync { sid: u32, token: u64 },
    /// Handed to libccp, which took it.
    Delivered(Header),
    /// Handed to libccp, which refused it.
    Refused(Header, libccp::LibccpError),
    /// Not a message; for a bad length, nothing after it in the datagram was read.
    Malformed(DecodeError),
}

/// Splits `datagram` into its messages by their header lengths (`ccp_wire::Frames`),
/// calling `each` on every one in order. A bad length ends the datagram and is returned.
pub fn split(datagram: &mut [u8], mut each: impl FnMut(AgentMsg<'_>)) -> Option<DecodeError> {
    let mut rest = datagram;
    loop {
        let len = match Frames::new(rest).next()? {
            Ok(frame) => frame.len(),
            Err(e) => return Some(e),
        };
        let (bytes, tail) = std::mem::take(&mut rest).split_at_mut(len);
        rest = tail;
        let header = match peek_header(bytes) {
            Ok(h) => h,
            Err(e) => return Some(e),
        };
        each(if header.typ == msg_type::SYNC {
            match decode(bytes) {
                Ok(DatapathMsg::Sync { sid, token }) => AgentMsg::Sync { sid, token },
                // `decode` reads a SYNC header as a SYNC or refuses it.
                other => {
                    AgentMsg::Malformed(other.err().unwrap_or(DecodeError::UnknownType(header.typ)))
                }
            }
        } else {
            AgentMsg::Other { header, bytes }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ccp_wire::{HEADER_LEN, encode_sync};

    fn other(typ: u16, sid: u32, len: u16) -> Vec<u8> {
        let mut m = vec![0u8; usize::from(len)];
        m[0..2].copy_from_slice(&typ.to_le_bytes());
        m[2..4].copy_from_slice(&len.to_le_bytes());
        m[4..8].copy_from_slice(&sid.to_le_bytes());
        m
    }

    fn split_all(datagram: &mut [u8]) -> (Vec<String>, Option<DecodeError>) {
        let mut seen = Vec::new();
        let end = split(datagram, |m| {
            seen.push(match m {
                AgentMsg::Sync { sid, token } => format!("sync {sid} {token}"),
                AgentMsg::Other { header, bytes } => {
                    format!("type {} sid {} len {}", header.typ, header.sid, bytes.len())
                }
                AgentMsg::Malformed(e) => format!("malformed {e}"),
            });
        });
        (seen, end)
    }

    #[test]
    fn a_batch_splits_into_messages_with_the_sync_taken_out() {
        let mut d = other(msg_type::CHANGE_PROG, 7, 20);
        d.extend(encode_sync(u32::MAX, 42));
        d.extend(other(msg_type::UPDATE_FIELDS, 9, 12));
        let (seen, end) = split_all(&mut d);
        assert_eq!(
            seen,
            [
                "type 4 sid 7 len 20",
                "sync 4294967295 42",
                "type 3 sid 9 len 12"
            ]
        );
        assert_eq!(end, None);
    }

    #[test]
    fn a_bad_length_ends_the_datagram_after_what_came_before() {
        let mut d = other(msg_type::INSTALL, 1, 16);
        let mut bad = other(msg_type::UPDATE_FIELDS, 2, 40);
        bad.truncate(20);
        d.extend(bad);
        let (seen, end) = split_all(&mut d);
        assert_eq!(seen, ["type 2 sid 1 len 16"]);
        assert!(matches!(end, Some(DecodeError::LengthMismatch { .. })));
        let (seen, end) = split_all(&mut other(msg_type::INSTALL, 1, 16)[..HEADER_LEN - 1]);
        assert!(seen.is_empty());
        assert!(matches!(end, Some(DecodeError::ShortHeader { .. })));
    }

    #[test]
    fn a_short_sync_is_reported_and_the_rest_still_read() {
        let mut d = other(msg_type::SYNC, 0, 12);
        d.extend(encode_sync(0, 5));
        let (seen, end) = split_all(&mut d);
        assert_eq!(seen.len(), 2);
        assert!(seen[0].starts_with("malformed"));
        assert_eq!(seen[1], "sync 0 5");
        assert_eq!(end, None);
    }
}
