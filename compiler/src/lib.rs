//! torchtpu's compiler: models in, StableHLO out, no device knowledge (see
//! docs/architecture.md). Module map:
//!
//! - `ir`: the graph IR (petgraph), its text form (printer, parser) and the verifier;
//! - `registry`: the op vocabulary at the IR floor, each op declared once (identity, traits,
//!   verifier signature, decomposition policy); each layer's rules sit in side tables keyed
//!   by `OpId` (`lower::table`, `sharding::table`, `passes::layout_rules`), joined by `catalog`;
//! - `passes`: the pass registry and manager, one file per pass;
//! - `analysis`: analyses that change nothing (liveness, the peak-memory estimate, donation);
//! - `sharding`: layouts, the cost of changing them, the per-family rules and their table;
//! - `lower`: StableHLO through melior, one rule per op family, dispatched by its side table;
//! - `driver`: the one way through the compiler (parse -> verify -> passes -> analyses ->
//!   lower), one result and one error type per compile;
//! - `testing`: `torchtpu-opt`'s `--split-input-file` and `--verify-diagnostics`.

pub mod analysis;
pub mod catalog;
pub mod driver;
pub mod ir;
pub mod lower;
pub mod passes;
pub mod registry;
pub mod sharding;
pub mod target;
pub mod testing;

/// A hash of this build's compiler sources (build.rs): part of every key under which lowered
/// output is cached, since the crate version does not change between development builds.
pub const BUILD_ID: &str = env!("TORCHTPU_COMPILER_BUILD_ID");
