//! The pass registry and the pass manager. A pass is declared once, on its type
//! ([`PassDecl`]: name, description, typed options, whether a graph requires it) beside its
//! rewrite ([`Pass::run`]); [`REGISTRY`] lists the types and everything else (pipelines,
//! `--list-passes`, the manager's names, the driver's required passes) reads the declaration.
//! The manager verifies the IR at entry and after each pass that changed it, prints it
//! before/after any pass on request, and times each pass. `torchtpu-opt --pass-pipeline` and the
//! Python boundary both drive it; no pass is reachable any other way.

mod assign_layouts;
mod canonicalize;
mod cse;
mod dce;
mod fold_constants;
mod form_regions;
mod fuse_matmuls;
mod fuse_softmax;
mod host_matmul;
pub mod layout_rules;
mod manager;
pub mod patterns;
mod propagate_sharding;
mod quantized_embedding;
mod quantized_linear;
mod schedule;

pub use assign_layouts::AssignLayouts;
pub use canonicalize::Canonicalize;
pub use cse::Cse;
pub use dce::Dce;
pub use fold_constants::FoldConstants;
pub use form_regions::FormRegions;
pub use fuse_matmuls::FuseMatmuls;
pub use fuse_softmax::FuseSoftmax;
pub use host_matmul::HostMatmul;
pub use manager::{PassManager, PassRun, PipelineError, PipelineOptions, DEFAULT_PIPELINE};
pub use propagate_sharding::PropagateSharding;
pub use quantized_embedding::QuantizedEmbedding;
pub use quantized_linear::QuantizedLinear;
pub use schedule::ScheduleMemory;

use crate::ir::Graph;
use crate::target::Target;
use std::collections::BTreeMap;

/// A pass failed for a reason of its own (not a verifier failure).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct PassError(pub String);

/// A pass's rewrite.
pub trait Pass {
    /// Rewrites the graph; returns whether anything changed (a pass that says no change left
    /// the graph exactly as it was: the manager does not verify after it).
    fn run(&self, g: &mut Graph) -> Result<bool, PassError>;
}

/// What a pass is, declared once on its type (rustc's `declare_passes!` idea: the name comes
/// from the type). The registry entry, pipelines and the manager read it from here.
pub trait PassDecl: Pass + Default + 'static {
    const NAME: &'static str;
    const DESCRIPTION: &'static str;
    /// `(option, meaning)` pairs accepted in `name{option=value}`.
    const OPTIONS: &'static [(&'static str, &'static str)] = &[];

    /// The pass from a pipeline's `name{option=value}` options, each parsed into its typed
    /// field here. Without declared options, any option is an error.
    fn with_options(opts: &PassOptions) -> Result<Self, String> {
        match opts.keys().next() {
            Some(k) => Err(format!("unknown option '{k}'")),
            None => Ok(Self::default()),
        }
    }

    /// `is_required`: the pass a graph needs whatever the pipeline says (built for `target`),
    /// or None. The driver runs it after the pipeline when the pipeline did not.
    fn required(_g: &Graph, _target: &Target) -> Option<Self> {
        None
    }
}

/// Options given in a pipeline as `name{key=value,key=value}`.
pub type PassOptions = BTreeMap<String, String>;

/// One registry entry: a pass type's declaration, type-erased.
#[derive(Clone, Copy)]
pub struct PassInfo {
    pub name: &'static str,
    pub description: &'static str,
    /// `(option, meaning)` pairs accepted in `name{option=value}`.
    pub options: &'static [(&'static str, &'static str)],
    pub create: fn(&PassOptions) -> Result<Box<dyn Pass>, String>,
    pub required: fn(&Graph, &Target) -> Option<Box<dyn Pass>>,
}

impl PassInfo {
    pub const fn of<P: PassDecl>() -> PassInfo {
        PassInfo {
            name: P::NAME,
            description: P::DESCRIPTION,
            options: P::OPTIONS,
            create: create::<P>,
            required: required::<P>,
        }
    }
}

fn create<P: PassDecl>(opts: &PassOptions) -> Result<Box<dyn Pass>, String> {
    Ok(Box::new(P::with_options(opts)?))
}

fn required<P: PassDecl>(g: &Graph, target: &Target) -> Option<Box<dyn Pass>> {
    Some(Box::new(P::required(g, target)?))
}

/// Every pass, in the order `--list-passes` shows them.
pub static REGISTRY: &[PassInfo] = &[
    PassInfo::of::<Canonicalize>(),
    PassInfo::of::<Cse>(),
    PassInfo::of::<Dce>(),
    PassInfo::of::<FoldConstants>(),
    PassInfo::of::<FuseSoftmax>(),
    PassInfo::of::<FuseMatmuls>(),
    PassInfo::of::<QuantizedLinear>(),
    PassInfo::of::<QuantizedEmbedding>(),
    PassInfo::of::<HostMatmul>(),
    PassInfo::of::<FormRegions>(),
    PassInfo::of::<AssignLayouts>(),
    PassInfo::of::<PropagateSharding>(),
    PassInfo::of::<ScheduleMemory>(),
];

pub fn lookup(name: &str) -> Option<&'static PassInfo> {
    REGISTRY.iter().find(|p| p.name == name)
}
