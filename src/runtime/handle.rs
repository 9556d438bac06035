//! The per-flow handle algorithms use to control their datapath.
//!
//! portus' own `Datapath` cannot be built outside portus (docs/datapaths.md §3.2), so this is the
//! same contract on this runtime's transport: ChangeProg and UpdateFields built with portus'
//! serializers, fields resolved through the program's scope.

use super::transport::Transport;
use crate::programs::ProgramSet;
use algs_core::ccp::resolve_update;
use portus::lang::Scope;
use portus::{DatapathTrait, Error};
use std::rc::Rc;

/// Controls one flow of one datapath.
pub struct DpHandle<T: Transport> {
    sid: u32,
    addr: T::Addr,
    transport: Rc<T>,
    programs: Rc<ProgramSet>,
}

impl<T: Transport> std::fmt::Debug for DpHandle<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DpHandle")
            .field("sid", &self.sid)
            .field("addr", &self.addr)
            .finish()
    }
}

impl<T: Transport> DpHandle<T> {
    pub fn new(sid: u32, addr: T::Addr, transport: Rc<T>, programs: Rc<ProgramSet>) -> Self {
        DpHandle {
            sid,
            addr,
            transport,
            programs,
        }
    }

    fn send<M: portus::serialize::AsRawMsg>(&self, msg: &M) -> portus::Result<()> {
        let bytes = portus::serialize::serialize(msg)?;
        self.transport.send(&bytes, &self.addr).map_err(Error)
    }
}

impl<T: Transport> DatapathTrait for DpHandle<T> {
    fn get_sock_id(&self) -> u32 {
        self.sid
    }

    fn set_program(
        &mut self,
        program_name: &'static str,
        fields: Option<&[(&str, u32)]>,
    ) -> portus::Result<Scope> {
        let program = self
            .programs
            .get(program_name)
            .ok_or_else(|| Error(format!("no datapath program named {program_name:?}")))?;
        let fields = resolve_update(&program.scope, fields.unwrap_or(&[]))?;
        self.send(&portus::serialize::changeprog::Msg {
            sid: self.sid,
            program_uid: program.scope.program_uid,
            num_fields: fields.len() as u32,
            fields,
        })?;
        Ok(program.scope.clone())
    }

    fn update_field(&self, sc: &Scope, update: &[(&str, u32)]) -> portus::Result<()> {
        let fields = resolve_update(sc, update)?;
        // UpdateFields counts fields in a byte.
        let num_fields = u8::try_from(fields.len()).map_err(|_| {
            Error(format!(
                "{} fields in one update, at most 255",
                fields.len()
            ))
        })?;
        self.send(&portus::serialize::update_field::Msg {
            sid: self.sid,
            num_fields,
            fields,
        })
    }
}
