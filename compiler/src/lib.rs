//! torchtpu's compiler: the graph IR and its text form, the verifier, and the pass manager.
//! Lowering to StableHLO comes in `lower/` (see docs/architecture.md).

pub mod analysis;
pub mod ir;
pub mod lower;
pub mod passes;
