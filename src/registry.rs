//! The algorithms this agent can run, by name and alias.
//!
//! Adding an algorithm: one line in [`builtin`].

use algs_core::ccp::{CcpAlgorithm, DatapathTrait};

/// Tunables of the built-in algorithms that the command line exposes.
#[derive(Debug, Clone, Default)]
pub struct AlgorithmOptions {
    /// Window of the diagnostic `fixed` algorithm.
    pub fixed_cwnd: Option<algs_core::Bytes>,
    /// Pacing rate of the diagnostic `fixed` algorithm.
    pub fixed_rate: Option<algs_core::BytesPerSec>,
    /// LEDBAT++ target delay and profile.
    pub ledbat: alg_ledbat_pp::Config,
    /// Proteus settings (the default hybrid threshold).
    pub proteus: alg_proteus::Config,
}

/// A registry of algorithms for flows driven through handles of type `D`.
pub struct Algorithms<D: DatapathTrait> {
    algs: Vec<Box<dyn CcpAlgorithm<D>>>,
}

impl<D: DatapathTrait> std::fmt::Debug for Algorithms<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.algs.iter().map(|a| a.name()))
            .finish()
    }
}

impl<D: DatapathTrait + 'static> Algorithms<D> {
    pub fn new(algs: Vec<Box<dyn CcpAlgorithm<D>>>) -> Self {
        Algorithms { algs }
    }

    /// Every algorithm this agent ships.
    pub fn builtin(options: &AlgorithmOptions) -> Self {
        Algorithms::new(vec![
            // A flow handed to CUBIC goes back to its scavenger when asked to.
            Box::new(alg_cubic::Cubic::new(
                alg_cubic::Config::default().with_hand_off_on_scavenger(true),
            )),
            Box::new(crate::fixed::Fixed {
                cwnd: options.fixed_cwnd,
                rate: options.fixed_rate,
            }),
            Box::new(alg_ledbat_pp::LedbatPlusPlus::new(options.ledbat)),
            Box::new(alg_proteus::ProteusP {
                config: options.proteus.clone(),
            }),
            Box::new(alg_proteus::ProteusS {
                config: options.proteus.clone(),
            }),
            Box::new(alg_proteus::ProteusH {
                config: options.proteus.clone(),
            }),
        ])
    }

    /// The algorithm registered under `name` or one of its aliases.
    pub fn index_of(&self, name: &str) -> Option<usize> {
        self.algs
            .iter()
            .position(|a| a.name() == name || a.aliases().contains(&name))
    }

    pub fn get(&self, index: usize) -> &dyn CcpAlgorithm<D> {
        self.algs[index].as_ref()
    }

    pub fn iter(&self) -> impl Iterator<Item = &dyn CcpAlgorithm<D>> {
        self.algs.iter().map(|a| a.as_ref())
    }

    /// Every program of every algorithm, in registration order. Variants of one algorithm
    /// may share a program (proteus-p/-s/-h share `proteus-mi`): an identical (name,
    /// source) pair is listed once; the same name with another source stays a duplicate.
    pub fn programs(&self) -> Vec<(&'static str, String)> {
        let mut out: Vec<(&'static str, String)> = Vec::new();
        for p in self.algs.iter().flat_map(|a| a.programs()) {
            if !out.contains(&p) {
                out.push(p);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::{DpHandle, Recorder};

    #[test]
    fn shared_programs_are_listed_once_and_pass_the_checks() {
        let algs = Algorithms::<DpHandle<Recorder>>::builtin(&AlgorithmOptions::default());
        let programs = algs.programs();
        let shared = programs.iter().filter(|p| p.0 == "proteus-mi").count();
        assert_eq!(shared, 1, "proteus-p/-s/-h share one program");
        let set = crate::programs::ProgramSet::compile(&programs).expect("all programs pass");
        assert_eq!(set.len(), programs.len());
    }
}
