//! What libccp sends: passed on to the agent, Creates remembered.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;

use ccp_wire::{msg_len, msg_type, peek_header};

/// How a datapath's messages reach the agent (a unix socket, netlink, a QUIC stream, a
/// test's list): one whole CCP message per call, from libccp or from the datapath itself.
pub trait ToAgent: 'static {
    fn send(&mut self, msg: &[u8]);
}

/// The host's record of what libccp sent, and the datapath's [`ToAgent`].
#[derive(Debug)]
pub(crate) struct Outgoing<S> {
    pub(crate) to_agent: S,
    /// Create bytes of every live flow, by sid.
    creates: BTreeMap<u32, Vec<u8>>,
    /// The sid of the last Create sent, until taken.
    last_create_sid: Option<u32>,
}

impl<S: ToAgent> Outgoing<S> {
    pub(crate) fn new(to_agent: S) -> Self {
        Outgoing {
            to_agent,
            creates: BTreeMap::new(),
            last_create_sid: None,
        }
    }

    pub(crate) fn take_create_sid(&mut self) -> Option<u32> {
        self.last_create_sid.take()
    }

    pub(crate) fn live_creates(&self) -> Vec<Vec<u8>> {
        self.creates.values().cloned().collect()
    }

    pub(crate) fn live_flows(&self) -> usize {
        self.creates.len()
    }

    fn note_and_send(&mut self, msg: &[u8]) {
        if let Ok(h) = peek_header(msg) {
            match h.typ {
                msg_type::CREATE => {
                    self.creates.insert(h.sid, msg.to_vec());
                    self.last_create_sid = Some(h.sid);
                }
                // A Measure with no fields is libccp's close; the sid is free again.
                msg_type::MEASURE if msg.len() == msg_len::MEASURE_BASE => {
                    self.creates.remove(&h.sid);
                }
                _ => {}
            }
        }
        self.to_agent.send(msg);
    }
}

/// libccp's `DatapathOps`, sending through the host.
pub(crate) struct Ops<S>(pub(crate) Rc<RefCell<Outgoing<S>>>);

impl<S: ToAgent> libccp::DatapathOps for Ops<S> {
    fn send_msg(&mut self, msg: &[u8]) {
        self.0.borrow_mut().note_and_send(msg);
    }
}
