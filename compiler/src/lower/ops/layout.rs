//! Layout ops of SPMD programs: `tpu.reshard` (inserted by `propagate-sharding`) and
//! `tpu.sharding_constraint` (a user's pin) become `sdy.sharding_constraint`, which makes
//! Shardy give the value that layout. Without a decided layout (no mesh, the pass did not
//! run) they are the identity.

use super::{Emitter, NodeCtx, RuleResult, Tv};
use crate::ir::Sharding;
pub use crate::sharding::is_layout_op;

/// The mesh symbol every sharding of a lowered module refers to.
pub const MESH: &str = "mesh";

/// Shardy's sharding attribute over the module's mesh, for a layout in `sdy_dims` form.
pub fn sdy_sharding(dims: &str) -> String {
    format!("#sdy.sharding<@{MESH}, {dims}>")
}

pub fn sharding_constraint<'c, 'a>(e: &Emitter<'c, 'a>, n: &NodeCtx<'c, 'a, '_>) -> RuleResult<Vec<Tv<'c, 'a>>> {
    let x = n.arg(0)?;
    match n.str_or("sharding", "")? {
        "" => Ok(vec![x.clone()]),
        dims => Ok(vec![constrain(e, x, dims)?]),
    }
}

/// `x` constrained to layout `s` (the propagation's decision for it).
pub fn pin<'c, 'a>(e: &Emitter<'c, 'a>, x: Tv<'c, 'a>, s: &Sharding) -> RuleResult<Tv<'c, 'a>> {
    constrain(e, &x, &s.sdy_dims())
}

fn constrain<'c, 'a>(e: &Emitter<'c, 'a>, x: &Tv<'c, 'a>, dims: &str) -> RuleResult<Tv<'c, 'a>> {
    let sharding = e.attr(&sdy_sharding(dims))?;
    e.op("sdy.sharding_constraint", &[x], x.dtype, &x.dims.clone(), &[("sharding", sharding)])
}
