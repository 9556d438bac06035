//! Any bytes through the frame splitter and the decoder: errors, never panics, and every
//! message that decodes encodes back to the same bytes.
#![no_main]

use ccp_wire::{DatapathMsg, Frames, decode};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    for frame in Frames::new(data).flatten() {
        let Ok(msg) = decode(frame) else { continue };
        let again = match &msg {
            DatapathMsg::Priority(p) => ccp_wire::encode_priority(p),
            DatapathMsg::Sync { sid, token } => ccp_wire::encode_sync(*sid, *token),
            DatapathMsg::Ready { datapath_id } => ccp_wire::encode_ready(*datapath_id),
            DatapathMsg::Measure(m) => ccp_wire::encode_measure(m.sid, m.program_uid, &m.fields),
            // Create's name is cut at its NUL, so bytes after it do not round-trip.
            DatapathMsg::Create(_) => continue,
        };
        assert_eq!(again, frame);
    }
});
