//! Layout ops of SPMD programs: `tpu.reshard` (inserted by `propagate-sharding`) and
//! `tpu.sharding_constraint` (a user's pin) become `sdy.sharding_constraint`, which makes
//! Shardy give the value that layout. Without a decided layout (no mesh, the pass did not
//! run) they are the identity.

use super::{Emitter, NodeCtx, RuleResult, Tv};
use crate::ir::Sharding;
use crate::lower::error::RuleError;
use crate::lower::names::sdy;
use crate::lower::sdy::ShardingAttr;
use crate::registry::attrs::SHARDING;
pub use crate::sharding::is_layout_op;

pub fn sharding_constraint<'c, 'a>(e: &Emitter<'c, 'a>, n: &NodeCtx<'c, 'a, '_>) -> RuleResult<Vec<Tv<'c, 'a>>> {
    let x = n.arg(0)?;
    match n.get_or(SHARDING, "")? {
        "" => Ok(vec![x.clone()]),
        dims => {
            let layout = ShardingAttr::from_layout(dims).map_err(|err| RuleError::Bad(format!("sharding: {err}")))?;
            Ok(vec![constrain(e, x, &layout)?])
        }
    }
}

/// `x` constrained to layout `s` (the propagation's decision for it).
pub fn pin<'c, 'a>(e: &Emitter<'c, 'a>, x: Tv<'c, 'a>, s: &Sharding) -> RuleResult<Tv<'c, 'a>> {
    constrain(e, &x, &ShardingAttr::of(s))
}

fn constrain<'c, 'a>(e: &Emitter<'c, 'a>, x: &Tv<'c, 'a>, layout: &ShardingAttr) -> RuleResult<Tv<'c, 'a>> {
    let sharding = layout.build(e.ctx);
    e.op(sdy::SHARDING_CONSTRAINT, &[x], x.dtype, &x.dims.clone(), &[("sharding", sharding)])
}
