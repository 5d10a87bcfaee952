//! torchtpu's compiler: the graph IR and its text form, the verifier, and the pass manager.
//! Lowering to StableHLO comes in `lower/` (see docs/architecture.md).
//!
//! - `registry`: the op registry, what the compiler knows per op (traits, verifier signature,
//!   lowering rule and legality check, decomposition policy, sharding slot), declared once;
//! - `driver`: the one way through the compiler (parse -> verify -> passes -> analyses ->
//!   lower), one result and one error type per compile.

pub mod analysis;
pub mod driver;
pub mod ir;
pub mod lower;
pub mod passes;
pub mod registry;
pub mod testing;

/// A hash of this build's compiler sources (build.rs): part of every key under which lowered
/// output is cached, since the crate version does not change between development builds.
pub const BUILD_ID: &str = env!("TORCHTPU_COMPILER_BUILD_ID");
