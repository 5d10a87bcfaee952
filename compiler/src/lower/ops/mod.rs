//! Lowering rules, one module per op family. Each rule lowers one ATen op (all its
//! overloads) to StableHLO through the emitter.

pub mod collective;
pub mod elementwise;
pub mod factory;
pub mod fft;
pub mod host_matmul;
pub mod indexing;
pub mod layout;
pub mod linalg;
pub mod nn;
pub mod polynomial;
pub mod prims;
pub mod quant;
pub mod random;
pub mod reduce;
pub mod shape;
pub mod sort;

use super::emitter::{Emitter, Tv};
use super::error::RuleResult;
use super::node::NodeCtx;

/// The signature of every lowering rule.
pub type RuleFn = for<'c, 'a, 'n> fn(&Emitter<'c, 'a>, &NodeCtx<'c, 'a, 'n>) -> RuleResult<Vec<Tv<'c, 'a>>>;
