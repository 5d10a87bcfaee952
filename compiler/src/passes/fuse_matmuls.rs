//! Horizontal matmul fusion: independent `mm(x, w_i)` (or `addmm(b_i, x, w_i)`) nodes that
//! share their left operand `x` - the Q/K/V projections of attention, the gate/up projections
//! of a gated MLP - become one matmul against the weights concatenated along their output
//! dim, and each original result becomes a slice of it. One larger GEMM replaces several
//! small ones (better use of the CPU's vector units and one pass over `x`); the price is the
//! concatenation of the weights, which runs on every call when they are graph inputs.

use super::patterns::static2;
use super::{Pass, PassDecl, PassError};
use crate::ir::{Attr, Dim, Graph, NodeId, OpName, TensorType, Value};
use crate::registry::attrs::{DIM, END_INT, START, STEP};
use std::collections::{BTreeMap, HashMap, HashSet};

#[derive(Default)]
pub struct FuseMatmuls;

impl PassDecl for FuseMatmuls {
    const NAME: &'static str = "fuse-matmuls";
    const DESCRIPTION: &'static str =
        "merge independent matmuls that share their left operand into one matmul plus slices";
}

/// One fusible member: the node, its weight operand, its bias (addmm) and output width.
struct Member {
    id: NodeId,
    weight: Value,
    bias: Option<Value>,
    width: i64,
}

/// (group key, member) when `id` is an mm/addmm this pass can merge.
fn candidate(g: &Graph, id: NodeId) -> Option<((Value, bool, String), Member)> {
    let node = g.node(id);
    let op = node.op()?;
    let is_addmm = match op.base().as_str() {
        "aten.mm" => false,
        "aten.addmm" => true,
        _ => return None,
    };
    let (lhs, weight, bias) = match (is_addmm, node.operands.as_slice()) {
        (false, [x, w]) => (*x, *w, None),
        (true, [b, x, w]) => (*x, *w, Some(*b)),
        _ => return None,
    };
    let (_, width) = static2(&node.results[0])?;
    static2(g.value_type(weight))?;
    if let Some(b) = bias {
        // Only a per-column bias can be concatenated alongside the weights.
        if g.value_type(b).shape != vec![Dim::Static(width)] {
            return None;
        }
    }
    // Members must agree on every attribute (beta/alpha) and the result dtype.
    let attrs = format!("{:?}{:?}", node.attrs, node.results[0].dtype);
    Some(((lhs, is_addmm, attrs), Member { id, weight, bias, width }))
}

/// Every node `v` (transitively) depends on.
fn ancestors(g: &Graph, start: &[Value], stop: &HashSet<NodeId>, limit: &mut usize) -> HashSet<NodeId> {
    let mut seen = HashSet::new();
    let mut stack: Vec<NodeId> = start.iter().map(|v| v.node).collect();
    while let Some(id) = stack.pop() {
        if !seen.insert(id) || *limit == 0 {
            continue;
        }
        *limit -= 1;
        if stop.contains(&id) {
            continue;
        }
        stack.extend(g.node(id).operands.iter().map(|v| v.node));
    }
    seen
}

impl Pass for FuseMatmuls {
    fn run(&self, g: &mut Graph) -> Result<bool, PassError> {
        let order = g.topo_order().map_err(|_| PassError("graph has a cycle".into()))?;
        let mut groups: HashMap<(Value, bool, String), Vec<Member>> = HashMap::new();
        let mut keys = Vec::new();
        for id in order {
            if let Some((key, m)) = candidate(g, id) {
                if !groups.contains_key(&key) {
                    keys.push(key.clone());
                }
                groups.entry(key).or_default().push(m);
            }
        }
        let mut changed = false;
        for key in keys {
            let members = groups.remove(&key).unwrap_or_default();
            if members.len() < 2 {
                continue;
            }
            // Independent: no member's weight or bias is computed from another member.
            let ids: HashSet<NodeId> = members.iter().map(|m| m.id).collect();
            let mut budget = 100_000usize;
            let deps: Vec<Value> = members.iter().flat_map(|m| std::iter::once(m.weight).chain(m.bias)).collect();
            if ancestors(g, &deps, &HashSet::new(), &mut budget).iter().any(|a| ids.contains(a)) || budget == 0 {
                continue;
            }
            changed |= fuse(g, &key, &members);
        }
        Ok(changed)
    }
}

/// Fuses the group; false (nothing changed) when the concatenated weights or result would be
/// too large for a type (the verifier's size rule).
fn fuse(g: &mut Graph, key: &(Value, bool, String), members: &[Member]) -> bool {
    let (lhs, is_addmm, _) = key;
    let first = g.node(members[0].id).clone();
    let wt = g.value_type(members[0].weight).clone();
    let k = static2(&wt).map(|(k, _)| k).unwrap_or(0);
    let Some(total) = members.iter().try_fold(0i64, |acc, m| acc.checked_add(m.width)) else { return false };
    let rows = static2(&first.results[0]).map(|(m, _)| m).unwrap_or(0);
    let out_ty = TensorType::fixed(first.results[0].dtype, &[rows, total]);
    if !TensorType::fixed(wt.dtype, &[k, total]).size_fits() || !out_ty.size_fits() {
        return false;
    }
    let dim_attr = |d: i64| -> BTreeMap<String, Attr> { [DIM.entry(d)].into_iter().collect() };
    let cat = OpName::new("aten", "cat", Some("default"));
    let wcat = g.add_op(
        cat.clone(),
        members.iter().map(|m| m.weight).collect(),
        dim_attr(1),
        vec![TensorType::fixed(wt.dtype, &[k, total])],
    );
    let fused = if *is_addmm {
        let bt = g.value_type(members[0].bias.expect("addmm has a bias")).clone();
        let bcat = g.add_op(
            cat,
            members.iter().map(|m| m.bias.expect("addmm has a bias")).collect(),
            dim_attr(0),
            vec![TensorType::fixed(bt.dtype, &[total])],
        );
        g.add_op(
            first.op().expect("an op").clone(),
            vec![Value::new(bcat, 0), *lhs, Value::new(wcat, 0)],
            first.attrs.clone(),
            vec![out_ty],
        )
    } else {
        g.add_op(first.op().expect("an op").clone(), vec![*lhs, Value::new(wcat, 0)], first.attrs.clone(), vec![out_ty])
    };
    let mut start = 0;
    for m in members {
        let attrs: BTreeMap<String, Attr> =
            [DIM.entry(1), START.entry(start), END_INT.entry(start + m.width), STEP.entry(1)].into_iter().collect();
        let ty = g.node(m.id).results[0].clone();
        let slice = g.add_op(OpName::new("aten", "slice", Some("Tensor")), vec![Value::new(fused, 0)], attrs, vec![ty]);
        g.replace_all_uses(Value::new(m.id, 0), Value::new(slice, 0));
        g.remove_node(m.id);
        start += m.width;
    }
    true
}
