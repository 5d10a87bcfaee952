//! Layout ops of SPMD programs: `tpu.reshard` (inserted by `propagate-sharding`) and
//! `tpu.sharding_constraint` (a user's pin) become `sdy.sharding_constraint`, which makes
//! Shardy give the value that layout. Without a decided layout (no mesh, the pass did not
//! run) they are the identity.

use super::{Emitter, NodeCtx, RuleResult, Tv};
use crate::ir::Sharding;
pub use crate::sharding::is_layout_op;

/// The mesh symbol every sharding of a lowered module refers to.
pub const MESH: &str = "mesh";

pub fn sharding_constraint<'c, 'a>(e: &Emitter<'c, 'a>, n: &NodeCtx<'c, 'a, '_>) -> RuleResult<Vec<Tv<'c, 'a>>> {
    let x = n.arg(0)?;
    let dims = n.str_or("sharding", "")?;
    if dims.is_empty() {
        return Ok(vec![x.clone()]);
    }
    let sharding = e.attr(&format!("#sdy.sharding<@{MESH}, {dims}>"))?;
    let dims_out = x.dims.clone();
    Ok(vec![e.op("sdy.sharding_constraint", &[x], x.dtype, &dims_out, &[("sharding", sharding)])?])
}

/// `x` constrained to layout `s` (the propagation's decision for it).
pub fn pin<'c, 'a>(e: &Emitter<'c, 'a>, x: Tv<'c, 'a>, s: &Sharding) -> RuleResult<Tv<'c, 'a>> {
    let sharding = e.attr(&format!("#sdy.sharding<@{MESH}, {}>", s.sdy_dims()))?;
    let dims = x.dims.clone();
    e.op("sdy.sharding_constraint", &[&x], x.dtype, &dims, &[("sharding", sharding)])
}
