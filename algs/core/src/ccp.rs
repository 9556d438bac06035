//! The interface between the agent runtime and an algorithm (docs/architecture.md §4).
//!
//! The runtime owns IPC and the flow table; an algorithm owns its datapath programs and
//! per-flow controllers. Flows are generic over `portus::DatapathTrait`, so the same code
//! runs under this project's runtime, under plain `portus::RunBuilder` (through
//! [`PortusAdapter`]) and against a recording datapath in unit tests.
//!
//! Time inside a flow is datapath time: every program reports `Ack.now`, and the flow
//! remembers the last value for events that carry no time of their own (priority changes).

use crate::{CarriedState, Priority, metrics::FlowMetrics, units::Bytes};
use portus::lang::{Reg, Scope};
use thiserror::Error;

pub use portus::DatapathTrait;

/// Why a report could not be read.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ReportError {
    /// The report came from a program the flow has since replaced (normal right after
    /// `set_program`; docs/datapaths.md §4.6).
    #[error("report from program {got}, flow runs program {expected}")]
    Stale { expected: u32, got: u32 },
    #[error("program has no report field {0:?}")]
    UnknownField(String),
    #[error("report carries {len} fields, field {name:?} is number {index}")]
    Missing {
        name: String,
        index: usize,
        len: usize,
    },
}

/// Why a flow could not act.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum FlowError {
    #[error(transparent)]
    Report(#[from] ReportError),
    #[error("datapath refused: {0}")]
    Datapath(String),
}

impl From<portus::Error> for FlowError {
    fn from(e: portus::Error) -> Self {
        FlowError::Datapath(e.0)
    }
}

/// Resolves the fields of a ChangeProg or UpdateFields through a program's scope, as portus'
/// own datapath handle does: only control registers and the implicit Cwnd (4) and Rate (5)
/// may be written, and names starting with `__` are reserved.
pub fn resolve_update(scope: &Scope, fields: &[(&str, u32)]) -> portus::Result<Vec<(Reg, u64)>> {
    fields
        .iter()
        .map(|&(name, value)| {
            if name.starts_with("__") {
                return Err(portus::Error(format!(
                    "cannot update reserved field {name:?}"
                )));
            }
            match scope.get(name) {
                Some(Reg::Control(idx, t, v)) => {
                    Ok((Reg::Control(*idx, t.clone(), *v), u64::from(value)))
                }
                Some(Reg::Implicit(idx, t)) if *idx == 4 || *idx == 5 => {
                    Ok((Reg::Implicit(*idx, t.clone()), u64::from(value)))
                }
                Some(_) => Err(portus::Error(format!("field {name:?} cannot be updated"))),
                None => Err(portus::Error(format!("unknown field {name:?}"))),
            }
        })
        .collect()
}

/// Read access to one report, whoever parsed it.
pub trait ReportFields {
    fn program_uid(&self) -> u32;
    /// The named report field, resolved through the program's scope.
    fn field(&self, scope: &Scope, name: &str) -> Result<u64, ReportError>;
}

/// A report from another program than the flow's current one is stale (normal right after
/// `set_program`; docs/datapaths.md §4.6).
fn check_current(scope: &Scope, program_uid: u32) -> Result<(), ReportError> {
    if scope.program_uid == program_uid {
        Ok(())
    } else {
        Err(ReportError::Stale {
            expected: scope.program_uid,
            got: program_uid,
        })
    }
}

/// A report as this project's runtime receives it: the program uid and the raw fields in
/// register order.
#[derive(Debug, Clone, Copy)]
pub struct RawReport<'a> {
    pub program_uid: u32,
    pub fields: &'a [u64],
}

impl ReportFields for RawReport<'_> {
    fn program_uid(&self) -> u32 {
        self.program_uid
    }

    fn field(&self, scope: &Scope, name: &str) -> Result<u64, ReportError> {
        check_current(scope, self.program_uid)?;
        match scope.get(name) {
            Some(Reg::Report(idx, _, _)) => {
                let index = *idx as usize;
                self.fields
                    .get(index)
                    .copied()
                    .ok_or_else(|| ReportError::Missing {
                        name: name.to_owned(),
                        index,
                        len: self.fields.len(),
                    })
            }
            _ => Err(ReportError::UnknownField(name.to_owned())),
        }
    }
}

impl ReportFields for portus::Report {
    fn program_uid(&self) -> u32 {
        self.program_uid
    }

    fn field(&self, scope: &Scope, name: &str) -> Result<u64, ReportError> {
        check_current(scope, self.program_uid)?;
        self.get_field(name, scope)
            .map_err(|_| ReportError::UnknownField(name.to_owned()))
    }
}

/// Everything a new flow starts from.
#[derive(Debug, Clone, PartialEq)]
pub struct FlowStart {
    pub sid: u32,
    /// Initial window from the Create (bytes; a datapath that sends packets is converted by
    /// the runtime).
    pub init_cwnd: Bytes,
    pub mss: Bytes,
    /// The priority the policy (or an earlier PRIORITY message) gave the flow.
    pub priority: Priority,
    /// Set when the flow is handed over from another algorithm.
    pub carried: Option<CarriedState>,
    /// The policy named a primary for the flow (a rule's `primary`): a switch to primary
    /// hands the flow to it, also where the algorithm could switch in place (Proteus).
    pub hand_off_to_primary: bool,
}

/// What a flow did with a priority change.
#[derive(Debug, Clone, PartialEq)]
pub enum PriorityOutcome {
    /// The flow switched in place (Proteus changes its utility, docs/algorithms/proteus.md §4).
    Applied,
    /// The flow cannot run at this priority; the runtime closes it and starts the policy's
    /// primary for the same sid from this state (LEDBAT++ → CUBIC, docs/algorithms/ledbat-pp.md §6).
    HandOff(CarriedState),
}

/// One flow's controller.
pub trait CcpFlow {
    /// A report from the flow's datapath program. Stale reports are not an error worth
    /// logging loudly; the runtime counts them.
    fn on_report(&mut self, report: &dyn ReportFields) -> Result<(), FlowError>;
    /// An application changed the flow's priority.
    fn on_priority(&mut self, priority: Priority) -> Result<PriorityOutcome, FlowError>;
    /// The controller's state for the flow trace.
    fn metrics(&self) -> FlowMetrics;
    /// The flow ended (or is being handed over).
    fn close(&mut self) {}
}

/// An algorithm as the agent registers it.
pub trait CcpAlgorithm<D: DatapathTrait> {
    /// The name flows ask for in Create and policies name.
    fn name(&self) -> &'static str;
    /// Other names that select it (e.g. "ledbatpp").
    fn aliases(&self) -> &'static [&'static str] {
        &[]
    }
    /// The priority its flows start with when the policy names none.
    fn default_priority(&self) -> Priority {
        Priority::Primary
    }
    /// Its datapath programs, `(name, source)`; names start with the algorithm's name so that
    /// programs of different algorithms never collide (docs/datapaths.md §1.5).
    fn programs(&self) -> Vec<(&'static str, String)>;
    /// A controller for a new (or handed-over) flow.
    fn new_flow(&self, dp: D, start: FlowStart) -> Result<Box<dyn CcpFlow>, FlowError>;
}

/// Runs a [`CcpAlgorithm`] under plain `portus::RunBuilder` (no priority messages there).
///
/// portus wants the name as an associated function, so the wrapped algorithm also
/// implements [`StaticName`].
#[derive(Debug, Clone)]
pub struct PortusAdapter<A> {
    pub alg: A,
    /// Priority every flow starts with.
    pub priority: Priority,
}

/// The algorithm's name known at compile time, for portus' `CongAlg::name`.
pub trait StaticName {
    const NAME: &'static str;
}

/// The flow type [`PortusAdapter`] gives portus.
pub struct AdaptedFlow(Option<Box<dyn CcpFlow>>);

impl std::fmt::Debug for AdaptedFlow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdaptedFlow")
            .field("running", &self.0.is_some())
            .finish()
    }
}

impl portus::Flow for AdaptedFlow {
    fn on_report(&mut self, sock_id: u32, m: portus::Report) {
        if let Some(flow) = self.0.as_mut() {
            if let Err(e) = flow.on_report(&m) {
                tracing::debug!(sid = sock_id, error = %e, "report not used");
            }
        }
    }

    fn close(&mut self) {
        if let Some(flow) = self.0.as_mut() {
            flow.close();
        }
    }
}

impl<I, A> portus::CongAlg<I> for PortusAdapter<A>
where
    I: portus::ipc::Ipc,
    A: CcpAlgorithm<portus::Datapath<I>> + StaticName,
{
    type Flow = AdaptedFlow;

    fn name() -> &'static str {
        A::NAME
    }

    fn datapath_programs(&self) -> std::collections::HashMap<&'static str, String> {
        self.alg.programs().into_iter().collect()
    }

    fn new_flow(&self, control: portus::Datapath<I>, info: portus::DatapathInfo) -> AdaptedFlow {
        let start = FlowStart {
            sid: info.sock_id,
            init_cwnd: Bytes(u64::from(info.init_cwnd)),
            mss: Bytes(u64::from(info.mss)),
            priority: self.priority,
            carried: None,
            hand_off_to_primary: false,
        };
        match self.alg.new_flow(control, start) {
            Ok(flow) => AdaptedFlow(Some(flow)),
            Err(e) => {
                // portus has no way to refuse a flow; leave it on the datapath's own control.
                tracing::warn!(sid = info.sock_id, error = %e, "could not start flow");
                AdaptedFlow(None)
            }
        }
    }
}

/// A datapath that records what a flow asked for, for algorithm unit tests: every program
/// compiled with the real portus compiler, every update kept in order. Clones share the
/// record, so a test keeps one clone and gives another to the flow.
#[derive(Debug, Clone, Default)]
pub struct RecordingDatapath {
    pub sid: u32,
    inner: std::rc::Rc<Recorded>,
}

/// A program switch: the program's name and its initial field values.
pub type RecordedInstall = (&'static str, Vec<(String, u32)>);

#[derive(Debug, Default)]
struct Recorded {
    programs: std::collections::HashMap<&'static str, Scope>,
    installs: std::cell::RefCell<Vec<RecordedInstall>>,
    updates: std::cell::RefCell<Vec<Vec<(String, u32)>>>,
}

impl RecordingDatapath {
    /// Compiles `programs` as the runtime would. Panics on a program that does not compile:
    /// it is meant for tests.
    pub fn new(sid: u32, programs: &[(&'static str, String)]) -> Self {
        let programs = programs
            .iter()
            .map(|(name, src)| {
                let (_, scope) = portus::lang::compile(src.as_bytes(), &[])
                    .unwrap_or_else(|e| panic!("program {name} does not compile: {e:?}"));
                (*name, scope)
            })
            .collect();
        RecordingDatapath {
            sid,
            inner: std::rc::Rc::new(Recorded {
                programs,
                ..Default::default()
            }),
        }
    }

    /// The scope of a compiled program, to build reports for it.
    pub fn scope(&self, name: &str) -> Option<&Scope> {
        self.inner.programs.get(name)
    }

    /// `(program name, initial fields)` per `set_program`, in order.
    pub fn installs(&self) -> Vec<RecordedInstall> {
        self.inner.installs.borrow().clone()
    }

    /// Fields per `update_field`, in order.
    pub fn updates(&self) -> Vec<Vec<(String, u32)>> {
        self.inner.updates.borrow().clone()
    }

    /// The most recent value written to `field` by an install or an update.
    pub fn last_value(&self, field: &str) -> Option<u32> {
        let updates = self.inner.updates.borrow();
        let installs = self.inner.installs.borrow();
        updates
            .iter()
            .rev()
            .flat_map(|u| u.iter().rev())
            .chain(installs.iter().rev().flat_map(|(_, f)| f.iter().rev()))
            .find(|(n, _)| n == field)
            .map(|&(_, v)| v)
    }
}

impl DatapathTrait for RecordingDatapath {
    fn get_sock_id(&self) -> u32 {
        self.sid
    }

    fn set_program(
        &mut self,
        program_name: &'static str,
        fields: Option<&[(&str, u32)]>,
    ) -> portus::Result<Scope> {
        let scope = self
            .inner
            .programs
            .get(program_name)
            .cloned()
            .ok_or_else(|| portus::Error(format!("no program {program_name}")))?;
        resolve_update(&scope, fields.unwrap_or(&[]))?;
        let fields = fields
            .unwrap_or(&[])
            .iter()
            .map(|&(n, v)| (n.to_owned(), v))
            .collect();
        self.inner
            .installs
            .borrow_mut()
            .push((program_name, fields));
        Ok(scope)
    }

    fn update_field(&self, sc: &Scope, update: &[(&str, u32)]) -> portus::Result<()> {
        resolve_update(sc, update)?;
        self.inner
            .updates
            .borrow_mut()
            .push(update.iter().map(|&(n, v)| (n.to_owned(), v)).collect());
        Ok(())
    }
}

/// How many report fields a program's reports carry: every report variable has an initial
/// value, so the scope's definitions list all of them.
pub fn report_len(scope: &Scope) -> usize {
    scope
        .clone()
        .into_iter()
        .filter_map(|instr| match instr.res {
            Reg::Report(idx, _, _) => Some(usize::from(idx) + 1),
            _ => None,
        })
        .max()
        .unwrap_or(0)
}

/// Builds a report for `scope` from named values (unnamed fields are 0), as a datapath
/// would send it. For tests; panics on a name that is not a report field.
pub fn report_fields(scope: &Scope, values: &[(&str, u64)]) -> Vec<u64> {
    let mut fields = vec![0; report_len(scope)];
    for (name, value) in values {
        match scope.get(name) {
            Some(Reg::Report(idx, _, _)) => fields[usize::from(*idx)] = *value,
            _ => panic!("{name} is not a report field of this program"),
        }
    }
    fields
}
