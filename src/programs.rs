//! Compiling and checking every datapath program before the agent serves anyone.
//!
//! portus accepts programs that libccp silently miscomputes or loops on (docs/datapaths.md §4.5,
//! docs/datapaths.md §4.7), so each program is compiled once at start and refused unless
//! it fits libccp's real limits. The Install messages are serialized here once and replayed
//! to every datapath that says Ready.
//!
//! Compiling here must be the first thing in the process that creates a portus `Scope`:
//! libccp wipes its program table only when a program with uid 1 arrives, so the first
//! program must get uid 1 or the table fills up across agent restarts (docs/datapaths.md §1.6).

use portus::lang::{Bin, Reg, Scope};
use std::collections::HashMap;
use thiserror::Error;

/// libccp has 8 temporary registers; a statement that needs a 9th silently computes 0.
pub const MAX_TMP_REGISTERS: usize = 8;
/// libccp loops forever at 256 instructions (u8 index); stay well below.
pub const MAX_INSTRUCTIONS: usize = 240;
/// libccp's program table has 10 slots of which 9 are usable.
pub const MAX_PROGRAMS: usize = 9;
/// portus serializes at most 16 report and 16 control registers.
pub const MAX_REPORT_REGISTERS: usize = 16;
pub const MAX_CONTROL_REGISTERS: usize = 16;

/// Why a program was refused.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum ProgramError {
    #[error("program {name}: does not compile: {reason}")]
    Compile { name: String, reason: String },
    #[error(
        "program {name}: a statement needs {needed} temporaries, libccp has {MAX_TMP_REGISTERS} \
         (split the expression; more silently computes 0)"
    )]
    TooManyTemporaries { name: String, needed: usize },
    #[error(
        "program {name}: {count} instructions, the limit is {MAX_INSTRUCTIONS} \
         (libccp hangs at 256)"
    )]
    TooManyInstructions { name: String, count: usize },
    #[error("program {name}: {count} {kind} registers, portus serializes at most 16")]
    TooManyRegisters {
        name: String,
        kind: &'static str,
        count: usize,
    },
    #[error("{count} programs in all, libccp's table holds {MAX_PROGRAMS}")]
    TooManyPrograms { count: usize },
    #[error("program name {name} is used twice")]
    DuplicateName { name: String },
    #[error("program {name}: serialization failed: {reason}")]
    Serialize { name: String, reason: String },
}

/// One compiled, checked program.
#[derive(Debug, Clone)]
pub struct Program {
    pub name: &'static str,
    pub scope: Scope,
    /// The serialized Install message (sid 0).
    pub install: Vec<u8>,
    /// Instruction count, DEFs included.
    pub instructions: usize,
}

/// Every program of every registered algorithm, compiled.
#[derive(Debug, Clone, Default)]
pub struct ProgramSet {
    programs: Vec<Program>,
    by_name: HashMap<&'static str, usize>,
}

impl ProgramSet {
    /// Compiles and checks all programs, in order.
    pub fn compile(sources: &[(&'static str, String)]) -> Result<Self, Vec<ProgramError>> {
        let mut set = ProgramSet::default();
        let mut errors = Vec::new();
        if sources.len() > MAX_PROGRAMS {
            errors.push(ProgramError::TooManyPrograms {
                count: sources.len(),
            });
        }
        for (name, src) in sources {
            if set.by_name.contains_key(name) {
                errors.push(ProgramError::DuplicateName {
                    name: (*name).to_owned(),
                });
                continue;
            }
            match compile_one(name, src) {
                Ok(p) => {
                    set.by_name.insert(name, set.programs.len());
                    set.programs.push(p);
                }
                Err(e) => errors.push(e),
            }
        }
        if errors.is_empty() {
            Ok(set)
        } else {
            Err(errors)
        }
    }

    pub fn get(&self, name: &str) -> Option<&Program> {
        self.by_name.get(name).map(|&i| &self.programs[i])
    }

    pub fn iter(&self) -> impl Iterator<Item = &Program> {
        self.programs.iter()
    }

    pub fn len(&self) -> usize {
        self.programs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.programs.is_empty()
    }

    /// Whether the first program got uid 1, which is what makes libccp clear its table.
    pub fn starts_at_uid_one(&self) -> bool {
        self.programs
            .first()
            .is_none_or(|p| p.scope.program_uid == 1)
    }
}

fn compile_one(name: &'static str, src: &str) -> Result<Program, ProgramError> {
    // portus' compiler panics on some well-formed-looking programs (a bool as a `when`
    // condition, an unbound `if`: docs/datapaths.md §4.6); turn that into a refusal.
    let compiled = std::panic::catch_unwind(|| portus::lang::compile(src.as_bytes(), &[]));
    let (bin, scope) = match compiled {
        Ok(Ok(v)) => v,
        Ok(Err(e)) => {
            return Err(ProgramError::Compile {
                name: name.into(),
                reason: e.0,
            });
        }
        Err(_) => {
            return Err(ProgramError::Compile {
                name: name.into(),
                reason: "the portus compiler panicked on it".into(),
            });
        }
    };
    check_limits(name, &bin)?;
    let install = portus::serialize::install::Msg {
        sid: 0,
        program_uid: scope.program_uid,
        num_events: bin.events.len() as u32,
        num_instrs: bin.instrs.len() as u32,
        instrs: bin.clone(),
    };
    let serialized = std::panic::catch_unwind(|| portus::serialize::serialize(&install));
    let install = match serialized {
        Ok(Ok(bytes)) => bytes,
        Ok(Err(e)) => {
            return Err(ProgramError::Serialize {
                name: name.into(),
                reason: e.0,
            });
        }
        Err(_) => {
            return Err(ProgramError::Serialize {
                name: name.into(),
                reason: "the portus serializer panicked on it".into(),
            });
        }
    };
    Ok(Program {
        name,
        scope,
        install,
        instructions: bin.instrs.len(),
    })
}

fn check_limits(name: &str, bin: &Bin) -> Result<(), ProgramError> {
    let count = bin.instrs.len();
    if count > MAX_INSTRUCTIONS {
        return Err(ProgramError::TooManyInstructions {
            name: name.into(),
            count,
        });
    }
    let regs = || bin.instrs.iter().flat_map(|i| [&i.res, &i.left, &i.right]);
    let needed = regs()
        .filter_map(|r| match r {
            Reg::Tmp(idx, _) => Some(usize::from(*idx) + 1),
            _ => None,
        })
        .max()
        .unwrap_or(0);
    if needed > MAX_TMP_REGISTERS {
        return Err(ProgramError::TooManyTemporaries {
            name: name.into(),
            needed,
        });
    }
    for (kind, limit) in [
        ("report", MAX_REPORT_REGISTERS),
        ("control", MAX_CONTROL_REGISTERS),
    ] {
        let count = regs()
            .filter_map(|r| match (kind, r) {
                ("report", Reg::Report(idx, _, _)) | ("control", Reg::Control(idx, _, _)) => {
                    Some(usize::from(*idx) + 1)
                }
                _ => None,
            })
            .max()
            .unwrap_or(0);
        if count > limit {
            return Err(ProgramError::TooManyRegisters {
                name: name.into(),
                kind,
                count,
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nested_sum(depth: usize) -> String {
        let mut expr = "Ack.bytes_acked".to_owned();
        for _ in 0..depth {
            expr = format!("(+ {expr} 1)");
        }
        format!("(def (Report (volatile x 0))) (when true (:= Report.x {expr}) (report))")
    }

    #[test]
    fn eight_operations_fit_nine_do_not() {
        assert!(ProgramSet::compile(&[("t_ok", nested_sum(8))]).is_ok());
        let err = ProgramSet::compile(&[("t_bad", nested_sum(9))]).expect_err("refused");
        assert!(
            matches!(err[0], ProgramError::TooManyTemporaries { needed: 9, .. }),
            "{err:?}"
        );
    }

    #[test]
    fn compiler_panics_become_errors() {
        // A bool report variable as a `when` condition panics portus' compiler.
        let src = "(def (Report (volatile b false))) (when Report.b (report))";
        let err = ProgramSet::compile(&[("t_panic", src.to_owned())]).expect_err("refused");
        assert!(matches!(err[0], ProgramError::Compile { .. }), "{err:?}");
    }

    #[test]
    fn too_many_programs_and_duplicates_are_refused() {
        let ok = nested_sum(1);
        let names = ["a", "b", "c", "d", "e", "f", "g", "h", "i", "j"];
        let many: Vec<_> = names.iter().map(|n| (*n, ok.clone())).collect();
        let err = ProgramSet::compile(&many).expect_err("refused");
        assert_eq!(err[0], ProgramError::TooManyPrograms { count: 10 });
        let dup = ProgramSet::compile(&[("a", ok.clone()), ("a", ok)]).expect_err("refused");
        assert_eq!(dup[0], ProgramError::DuplicateName { name: "a".into() });
    }

    #[test]
    fn long_programs_are_refused() {
        let body: String = (0..130).map(|_| "(:= Report.x (+ Report.x 1)) ").collect();
        let src = format!("(def (Report (volatile x 0))) (when true {body} (report))");
        let err = ProgramSet::compile(&[("t_long", src)]).expect_err("refused");
        assert!(
            matches!(err[0], ProgramError::TooManyInstructions { .. }),
            "{err:?}"
        );
    }
}
