//! The agent's side of a datapath program, as portus makes it: compiled, serialized, and its
//! reports read back by field name. No libccp here: the agent's own tests use it too.

use portus::lang::{Reg, Scope};
use portus::serialize::{install, serialize};

/// Compiles `program` with portus and serializes its Install, as an agent sends it; the
/// scope names the program's registers.
pub fn install_msg(program: &str) -> (Vec<u8>, Scope) {
    let (bin, scope) = portus::lang::compile(program.as_bytes(), &[]).expect("program compiles");
    let msg = serialize(&install::Msg {
        sid: 0,
        program_uid: scope.program_uid,
        num_events: bin.events.len() as u32,
        num_instrs: bin.instrs.len() as u32,
        instrs: bin,
    })
    .expect("install serializes");
    (msg, scope)
}

/// The register `name` of a program.
pub fn register(scope: &Scope, name: &str) -> Reg {
    scope.get(name).cloned().expect("register exists")
}

/// The report field `name` of a report of the program of `scope`.
pub fn report_field(scope: &Scope, fields: &[u64], name: &str) -> u64 {
    match scope.get(name) {
        Some(Reg::Report(i, _, _)) => fields[usize::from(*i)],
        other => panic!("{name} is not a report field: {other:?}"),
    }
}
