//! The pass registry and the pass manager. Every pass has a name, a one-line description and
//! `run(&mut Graph) -> Result<changed>`; the manager verifies the IR after each pass, prints it
//! before/after any pass on request, and times each pass. `torchtpu-opt --pass-pipeline` and the
//! Python boundary both drive it; no pass is reachable any other way.

/// Implements `Pass::name` and `Pass::description` from the pass type's `NAME` and `DESCRIPTION`.
macro_rules! pass_identity {
    () => {
        fn name(&self) -> &'static str {
            Self::NAME
        }
        fn description(&self) -> &'static str {
            Self::DESCRIPTION
        }
    };
}

mod assign_layouts;
mod canonicalize;
mod cse;
mod dce;
mod fold_constants;
mod form_regions;
mod fuse_matmuls;
mod fuse_softmax;
mod manager;
pub mod patterns;
mod propagate_sharding;
mod schedule;

pub use assign_layouts::AssignLayouts;
pub use canonicalize::Canonicalize;
pub use cse::Cse;
pub use dce::Dce;
pub use fold_constants::FoldConstants;
pub use form_regions::FormRegions;
pub use fuse_matmuls::FuseMatmuls;
pub use fuse_softmax::FuseSoftmax;
pub use manager::{PassManager, PassRun, PipelineError, PipelineOptions, DEFAULT_PIPELINE};
pub use propagate_sharding::PropagateSharding;
pub use schedule::ScheduleMemory;

use crate::ir::Graph;
use std::collections::BTreeMap;

/// A pass failed for a reason of its own (not a verifier failure).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct PassError(pub String);

pub trait Pass {
    fn name(&self) -> &'static str;
    fn description(&self) -> &'static str;
    /// Rewrites the graph; returns whether anything changed.
    fn run(&self, g: &mut Graph) -> Result<bool, PassError>;
}

/// Options given in a pipeline as `name{key=value,key=value}`.
pub type PassOptions = BTreeMap<String, String>;

/// One registry entry: how to build a pass from its options.
pub struct PassInfo {
    pub name: &'static str,
    pub description: &'static str,
    /// `(option, meaning)` pairs accepted in `name{option=value}`.
    pub options: &'static [(&'static str, &'static str)],
    pub create: fn(&PassOptions) -> Result<Box<dyn Pass>, String>,
}

fn no_options<P: Pass + Default + 'static>(opts: &PassOptions) -> Result<Box<dyn Pass>, String> {
    match opts.keys().next() {
        Some(k) => Err(format!("unknown option '{k}'")),
        None => Ok(Box::new(P::default())),
    }
}

/// Every pass, in the order `--list-passes` shows them.
pub static REGISTRY: &[PassInfo] = &[
    PassInfo {
        name: Canonicalize::NAME,
        description: Canonicalize::DESCRIPTION,
        options: &[],
        create: no_options::<Canonicalize>,
    },
    PassInfo { name: Cse::NAME, description: Cse::DESCRIPTION, options: &[], create: no_options::<Cse> },
    PassInfo { name: Dce::NAME, description: Dce::DESCRIPTION, options: &[], create: no_options::<Dce> },
    PassInfo {
        name: FoldConstants::NAME,
        description: FoldConstants::DESCRIPTION,
        options: FoldConstants::OPTIONS,
        create: FoldConstants::create,
    },
    PassInfo {
        name: FuseSoftmax::NAME,
        description: FuseSoftmax::DESCRIPTION,
        options: &[],
        create: no_options::<FuseSoftmax>,
    },
    PassInfo {
        name: FuseMatmuls::NAME,
        description: FuseMatmuls::DESCRIPTION,
        options: &[],
        create: no_options::<FuseMatmuls>,
    },
    PassInfo {
        name: FormRegions::NAME,
        description: FormRegions::DESCRIPTION,
        options: &[],
        create: no_options::<FormRegions>,
    },
    PassInfo {
        name: AssignLayouts::NAME,
        description: AssignLayouts::DESCRIPTION,
        options: &[],
        create: no_options::<AssignLayouts>,
    },
    PassInfo {
        name: PropagateSharding::NAME,
        description: PropagateSharding::DESCRIPTION,
        options: PropagateSharding::OPTIONS,
        create: PropagateSharding::create,
    },
    PassInfo {
        name: ScheduleMemory::NAME,
        description: ScheduleMemory::DESCRIPTION,
        options: &[],
        create: no_options::<ScheduleMemory>,
    },
];

pub fn lookup(name: &str) -> Option<&'static PassInfo> {
    REGISTRY.iter().find(|p| p.name == name)
}
