use crate::units::BytesPerSec;
use serde::Serialize;

/// What an application asked a flow to be (docs/architecture.md §8).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Default)]
#[serde(tag = "class", rename_all = "lowercase")]
pub enum Priority {
    /// Competes for its fair share.
    #[default]
    Primary,
    /// Uses spare capacity and yields to primary flows.
    Scavenger,
    /// Primary below `threshold`, scavenger above it (Proteus-H, docs/algorithms/proteus.md §1.4).
    /// `None` until the policy or the application gives one.
    Hybrid { threshold: Option<BytesPerSec> },
}

impl Priority {
    /// The short name used in logs, traces and policy files.
    pub fn name(self) -> &'static str {
        match self {
            Priority::Primary => "primary",
            Priority::Scavenger => "scavenger",
            Priority::Hybrid { .. } => "hybrid",
        }
    }
}
