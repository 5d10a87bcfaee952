//! Canonicalize: local rewrites to simpler equivalent forms, applied until nothing changes.
//!
//! - no-op aliases and copies (`alias`, `detach`, `clone`/`contiguous` without a layout change,
//!   `_to_copy` to the same type, `expand`/`slice`/`squeeze`/`unsqueeze`/reshapes/`permute`
//!   that leave the type unchanged) are bypassed;
//! - a reshape of a reshape reads the original tensor;
//! - `permute(permute(x))` composes into one permute; `transpose`/`t` pairs cancel;
//! - `x * 1`, `1 * x`, `x / 1`, `x - 0` and `x + 0` become `x` when the result has `x`'s type.
//!   For floats `x + 0.0` is kept (it turns -0.0 into +0.0) and only `x + (-0.0)` folds, and
//!   `x - 0` folds only for +0; so every rewrite is exact, signed zeros and NaNs included.
//!
//! Nodes the rewrites leave dead are erased, as MLIR's canonicalizer does.

use super::dce::remove_dead_nodes;
use super::patterns::{splat_value, Scalar};
use super::{Pass, PassDecl, PassError};
use crate::ir::verifier::{normalize_dim, normalize_permutation};
use crate::ir::{Attr, Graph, NodeId, NodeKind, Value};
use crate::registry::attrs::{ALPHA, DIM0, DIM1, DIMS, MEMORY_FORMAT, OTHER, ROUNDING_MODE, STEP};

#[derive(Default)]
pub struct Canonicalize;

impl PassDecl for Canonicalize {
    const NAME: &'static str = "canonicalize";
    const DESCRIPTION: &'static str =
        "simplify algebraic identities (x*1, x+0, ...), double transposes, reshape chains and no-op views";
}

/// How a node is rewritten.
enum Rewrite {
    /// Every use of the node's (single) result reads this value instead.
    Forward(Value),
    /// Operand 0 now reads this value (the node's own attributes are still valid).
    SetInput(Value),
    /// Operand 0 reads this value and the `dims` attribute becomes this permutation.
    Permute(Value, Vec<i64>),
}

/// Bounds the local fixpoint on one node (each rewrite shortens a chain, so few are needed).
const MAX_REWRITES_PER_NODE: usize = 16;

impl Pass for Canonicalize {
    fn run(&self, g: &mut Graph) -> Result<bool, PassError> {
        // One sweep in canonical order suffices: a rewrite only redirects uses to values
        // defined earlier, so producers are already simplified when a node is visited and its
        // users are visited after it. A node is rewritten until it stops changing.
        let order = g.topo_order().map_err(|_| PassError("graph has a cycle".into()))?;
        let mut changed = false;
        for id in order {
            for _ in 0..MAX_REWRITES_PER_NODE {
                let Some(rw) = rewrite_for(g, id) else { break };
                let forwarded = matches!(rw, Rewrite::Forward(_));
                apply(g, id, rw);
                changed = true;
                if forwarded {
                    break;
                }
            }
        }
        changed |= remove_dead_nodes(g) > 0;
        Ok(changed)
    }
}

fn apply(g: &mut Graph, id: NodeId, rw: Rewrite) {
    match rw {
        Rewrite::Forward(v) => g.replace_all_uses(Value::new(id, 0), v),
        Rewrite::SetInput(v) => g.set_operand(id, 0, v),
        Rewrite::Permute(v, dims) => {
            g.set_operand(id, 0, v);
            DIMS.set(g.node_attrs_mut(id), dims);
        }
    }
}

const RESHAPES: [&str; 3] = ["view", "reshape", "_unsafe_view"];
const SHAPE_ONLY: [&str; 5] = ["view", "reshape", "_unsafe_view", "squeeze", "unsqueeze"];

/// Memory-format attributes that do not change the value's layout.
fn keeps_layout(a: Option<&Attr>) -> bool {
    match a {
        None | Some(Attr::None) => true,
        Some(Attr::Str(s)) => matches!(s.as_str(), "torch.preserve_format" | "torch.contiguous_format"),
        _ => false,
    }
}

fn rewrite_for(g: &Graph, id: NodeId) -> Option<Rewrite> {
    let node = g.node(id);
    let NodeKind::Op(op) = &node.kind else { return None };
    if op.namespace != "aten" || node.results.len() != 1 || node.operands.is_empty() {
        return None;
    }
    let name = op.name.as_str();
    let result = &node.results[0];
    let x = node.operands[0];
    let same_type_as = |v: Value| g.value_type(v) == result;
    let producer = |v: Value| g.node(v.node).op().filter(|o| o.namespace == "aten").map(|o| o.name.as_str());

    match name {
        "alias" | "detach" | "lift_fresh" if same_type_as(x) => return Some(Rewrite::Forward(x)),
        "clone" | "contiguous" if same_type_as(x) && keeps_layout(node.attr(MEMORY_FORMAT)) => {
            return Some(Rewrite::Forward(x))
        }
        "_to_copy" if same_type_as(x) && keeps_layout(node.attr(MEMORY_FORMAT)) => return Some(Rewrite::Forward(x)),
        "expand" | "slice" | "squeeze" | "unsqueeze" | "view" | "reshape" | "_unsafe_view" if same_type_as(x) => {
            let unit_step = node.attr(STEP).and_then(Attr::as_int).unwrap_or(1) == 1;
            if name != "slice" || unit_step {
                return Some(Rewrite::Forward(x));
            }
        }
        _ => {}
    }

    if SHAPE_ONLY.contains(&name) && producer(x).is_some_and(|p| SHAPE_ONLY.contains(&p)) {
        let inner = g.node(x.node).operands[0];
        if same_type_as(inner) {
            return Some(Rewrite::Forward(inner));
        }
        if RESHAPES.contains(&name) && g.value_type(inner).dtype == result.dtype {
            return Some(Rewrite::SetInput(inner));
        }
    }

    match name {
        "permute" => {
            let rank = result.rank();
            let outer = normalize_permutation(node.attr(DIMS)?.as_int_list()?, rank)?;
            if outer.iter().enumerate().all(|(i, &p)| i == p) && same_type_as(x) {
                return Some(Rewrite::Forward(x));
            }
            if producer(x) == Some("permute") {
                let inner_node = g.node(x.node);
                let inner = normalize_permutation(inner_node.attr(DIMS)?.as_int_list()?, rank)?;
                // out[i] = mid[outer[i]] = in[inner[outer[i]]]
                let composed: Vec<i64> = outer.iter().map(|&o| inner[o] as i64).collect();
                let source = inner_node.operands[0];
                if composed.iter().enumerate().all(|(i, &p)| i as i64 == p) && same_type_as(source) {
                    return Some(Rewrite::Forward(source));
                }
                return Some(Rewrite::Permute(source, composed));
            }
            None
        }
        "transpose" => {
            let rank = result.rank();
            let dims = |n: &crate::ir::Node| {
                let a = normalize_dim(n.attr(DIM0)?.as_int()?, rank)?;
                let b = normalize_dim(n.attr(DIM1)?.as_int()?, rank)?;
                Some(if a <= b { (a, b) } else { (b, a) })
            };
            let (a, b) = dims(node)?;
            if a == b && same_type_as(x) {
                return Some(Rewrite::Forward(x));
            }
            if producer(x) == Some("transpose") && dims(g.node(x.node)) == Some((a, b)) {
                let source = g.node(x.node).operands[0];
                return same_type_as(source).then_some(Rewrite::Forward(source));
            }
            None
        }
        "t" => {
            if result.rank() < 2 && same_type_as(x) {
                return Some(Rewrite::Forward(x));
            }
            if producer(x) == Some("t") {
                let source = g.node(x.node).operands[0];
                return same_type_as(source).then_some(Rewrite::Forward(source));
            }
            None
        }
        "mul" | "div" | "add" | "sub" => identity_operand(g, id),
        _ => None,
    }
}

/// `x * 1`, `1 * x`, `x / 1`, `x + 0`, `0 + x`, `x - 0` -> `x`, exactly.
fn identity_operand(g: &Graph, id: NodeId) -> Option<Rewrite> {
    let node = g.node(id);
    let name = node.op()?.name.as_str();
    let result = &node.results[0];
    let alpha_is_one = node.attr(ALPHA).is_none_or(|a| a.as_number() == Some(1.0));
    if !alpha_is_one {
        return None;
    }
    if name == "div" && !node.attr(ROUNDING_MODE).is_none_or(Attr::is_none) {
        return None;
    }
    // The constant side: the second operand, or the `other` attribute of the scalar form.
    let other_of = |i: usize| -> Option<Scalar> {
        match node.operands.len() {
            1 if i == 1 => Scalar::from_attr(node.attr(OTHER)?),
            2 => splat_value(g, node.operands[i]),
            _ => None,
        }
    };
    let float = result.dtype.is_float() || result.dtype.is_complex();
    let neutral = |s: Scalar, first: bool| match name {
        "mul" => s.is_one(),
        "div" => !first && s.is_one(),
        // x + 0.0 maps -0.0 to +0.0, so only -0.0 is neutral for floats.
        "add" => s.is_zero() && (!float || s.is_negative_zero()),
        // x - (+0) is exact; x - (-0.0) is x + 0.0, which is not.
        "sub" => !first && s.is_zero() && !s.is_negative_zero(),
        _ => false,
    };
    // The constant must not broadcast `x` to a bigger shape or change its dtype.
    let candidates: &[(usize, usize)] = if node.operands.len() == 2 { &[(0, 1), (1, 0)] } else { &[(0, 1)] };
    for &(keep, constant) in candidates {
        let x = node.operands[keep];
        if g.value_type(x) != result {
            continue;
        }
        if let Some(s) = other_of(constant) {
            if neutral(s, constant == 0) {
                return Some(Rewrite::Forward(x));
            }
        }
    }
    None
}
