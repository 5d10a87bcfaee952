//! Softmax pattern fusion: softmax and log-softmax written out by hand become the fused
//! `aten._softmax` / `aten._log_softmax`, whose lowering subtracts the row maximum first.
//!
//!   exp(x) / sum(exp(x), d, keepdim)              -> _softmax(x, d)      (stable: no overflow)
//!   exp(x - amax(x, d)) / sum(that, d, keepdim)   -> _softmax(x, d)      (same numbers, fewer ops)
//!   x - log(sum(exp(x), d, keepdim))              -> _log_softmax(x, d)  (stable)
//!
//! The naive forms overflow to inf/inf = NaN once a row holds a value above ~88 (f32); the
//! fused forms do not, so on such rows the result differs from eager's NaN - by being right.
//! Other patterns (layer norm, RMS norm, GELU, attention) are not fused: their fused lowering
//! would emit the same StableHLO the decomposed ops do, and XLA fuses those loops itself
//! (docs/passes.md).

use super::{Pass, PassDecl, PassError};
use crate::ir::{Attr, Graph, NodeId, OpName, Value};
use crate::registry::attrs::{ALPHA, DIM, DTYPE, HALF_TO_FLOAT, KEEPDIM};
use std::collections::BTreeMap;

#[derive(Default)]
pub struct FuseSoftmax;

impl PassDecl for FuseSoftmax {
    const NAME: &'static str = "fuse-softmax";
    const DESCRIPTION: &'static str = "rewrite hand-written softmax / log-softmax into the fused, max-subtracted ops";
}

fn is_op(g: &Graph, v: Value, base: &str) -> Option<NodeId> {
    let node = g.node(v.node);
    (v.result == 0 && node.op().is_some_and(|o| o.base() == base)).then_some(v.node)
}

/// The single reduced dim of a keepdim sum/amax node, normalised.
fn keepdim_dim(g: &Graph, id: NodeId) -> Option<i64> {
    let node = g.node(id);
    if !matches!(node.attr(KEEPDIM), Some(Attr::Bool(true))) {
        return None;
    }
    if node.attr(DTYPE).is_some_and(|a| !a.is_none()) {
        return None;
    }
    let rank = g.value_type(node.operands[0]).rank() as i64;
    let d = match node.attr(DIM)? {
        Attr::IntList(v) if v.len() == 1 => v[0],
        Attr::Int(d) => *d,
        _ => return None,
    };
    Some(if d < 0 { d + rank } else { d })
}

/// `sum(exp(x'), d, keepdim)` -> (exp node, x', d).
fn sum_of_exp(g: &Graph, v: Value) -> Option<(NodeId, Value, i64)> {
    let s = is_op(g, v, "aten.sum")?;
    let d = keepdim_dim(g, s)?;
    let e = is_op(g, g.node(s).operands[0], "aten.exp")?;
    Some((e, g.node(e).operands[0], d))
}

/// x' = x - amax(x, d, keepdim) -> x (when the amax is over the same dim).
fn minus_row_max(g: &Graph, v: Value, d: i64) -> Option<Value> {
    let sub = is_op(g, v, "aten.sub")?;
    let node = g.node(sub);
    if node.operands.len() != 2 || node.attr(ALPHA).is_some_and(|a| !matches!(a, Attr::Int(1))) {
        return None;
    }
    let m = is_op(g, node.operands[1], "aten.amax")?;
    (keepdim_dim(g, m)? == d && g.node(m).operands[0] == node.operands[0]).then_some(node.operands[0])
}

fn fused(g: &mut Graph, name: &str, x: Value, d: i64, replace: NodeId) {
    let ty = g.node(replace).results[0].clone();
    let attrs: BTreeMap<String, Attr> = [DIM.entry(d), HALF_TO_FLOAT.entry(false)].into_iter().collect();
    let id = g.add_op(OpName::new("aten", name, Some("default")), vec![x], attrs, vec![ty]);
    g.replace_all_uses(Value::new(replace, 0), Value::new(id, 0));
    g.remove_node(replace);
}

impl Pass for FuseSoftmax {
    fn run(&self, g: &mut Graph) -> Result<bool, PassError> {
        let order = g.topo_order().map_err(|_| PassError("graph has a cycle".into()))?;
        let mut changed = false;
        for id in order {
            if !g.contains(id) {
                continue;
            }
            let node = g.node(id);
            let Some(op) = node.op() else { continue };
            let base = op.base();
            if node.operands.len() != 2 || node.results.len() != 1 || !node.results[0].dtype.is_float() {
                continue;
            }
            let (a, b) = (node.operands[0], node.operands[1]);
            if g.value_type(a) != &node.results[0] {
                continue;
            }
            match base.as_str() {
                // e / sum(e): e = exp(x) or exp(x - amax(x)).
                "aten.div" => {
                    let Some((e, inner, d)) = sum_of_exp(g, b) else { continue };
                    if a != Value::new(e, 0) {
                        continue;
                    }
                    let x = minus_row_max(g, inner, d).unwrap_or(inner);
                    fused(g, "_softmax", x, d, id);
                    changed = true;
                }
                // x - log(sum(exp(x))).
                "aten.sub" if node.attr(ALPHA).is_none_or(|al| matches!(al, Attr::Int(1))) => {
                    let Some(l) = is_op(g, b, "aten.log") else { continue };
                    let Some((_, inner, d)) = sum_of_exp(g, g.node(l).operands[0]) else { continue };
                    if inner != a {
                        continue;
                    }
                    fused(g, "_log_softmax", a, d, id);
                    changed = true;
                }
                _ => {}
            }
        }
        if changed {
            // The exp/sum/log/amax nodes left without users go away with dce.
            super::Dce.run(g)?;
        }
        Ok(changed)
    }
}
