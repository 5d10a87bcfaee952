//! Layout assignment: convolution regions run channels-last (NHWC).
//!
//! XLA's CPU compiler runs a convolution on NHWC activations and HWIO weights. Its layout
//! assignment constrains only the convolution itself: the batch norms, elementwise ops and
//! reductions between two convolutions keep the row-major NCHW layout of their logical shape,
//! so each convolution is wrapped in a transpose copy of its input and of its output (a
//! resnet18 training step at batch 16: about 100 transposes in the forward, as many in the
//! backward). This pass makes the layout logical instead. It grows regions of rank-4 values
//! from the convolutions through the ops whose registry entry has a layout rule
//! (`layout_rules::LayoutRule`: elementwise ops, batch norm, reductions, max pooling), rewrites
//! every op of a region to NHWC (convolutions and pooling by `channels_last`, batch norms by
//! `channel_dim = 3`,
//! reductions by renumbered dims, broadcast operands reshaped to rank 4 and permuted), and
//! puts an `aten.permute` only where a region meets the rest of the graph: its inputs, its
//! outputs and the ops without a rule. Inside a region XLA then sees NHWC everywhere and
//! inserts no copy.
//!
//! Left alone: convolutions the lowering runs as patches times a matmul (they read NCHW
//! patches), graphs over a device mesh (sharding rules name NCHW dims), symbolic shapes.

use super::layout_rules::{layout_rule, LayoutRule};
use super::{Pass, PassDecl, PassError};
use crate::ir::{Attr, Graph, NodeId, OpName, TensorType, Value};
use crate::lower::convolution_runs_as_matmul;
use crate::registry::attrs::{CHANNELS_LAST, CHANNEL_DIM, DIM, DIMS, DIM_LIST, GROUPS, KEEPDIM, SIZE};
use petgraph::unionfind::UnionFind;
use petgraph::visit::NodeIndexable;
use std::collections::{BTreeMap, HashMap, HashSet};

/// NCHW -> NHWC, and back.
const TO_NHWC: [usize; 4] = [0, 2, 3, 1];
const FROM_NHWC: [usize; 4] = [0, 3, 1, 2];
/// Where NCHW dim d sits in NHWC.
const NHWC_POSITION: [i64; 4] = [0, 3, 1, 2];

#[derive(Default)]
pub struct AssignLayouts;

impl PassDecl for AssignLayouts {
    const NAME: &'static str = "assign-layouts";
    const DESCRIPTION: &'static str =
        "run convolutions and the elementwise ops, batch norms, reductions and pooling around them channels-last (NHWC), with transposes only at the region's edges";
}

fn static_dims(g: &Graph, v: Value) -> Option<Vec<i64>> {
    g.value_type(v).static_dims()
}

fn rank4(g: &Graph, v: Value) -> bool {
    g.value_type(v).rank() == 4
}

fn permuted(dims: &[i64], perm: &[usize; 4]) -> Vec<i64> {
    perm.iter().map(|&p| dims[p]).collect()
}

/// The reduced dims of a reduction node over a rank-4 operand, normalised and sorted; None
/// when the attribute is not a list or int (then the node stays out of regions).
fn reduced_dims(g: &Graph, id: NodeId) -> Option<Vec<i64>> {
    let mut dims = match g.node(id).attr(DIM) {
        Some(Attr::IntList(v)) if !v.is_empty() => v.clone(),
        Some(Attr::Int(d)) => vec![*d],
        _ => return None, // every dim (or no attribute): nothing to renumber, but keep it simple
    };
    for d in &mut dims {
        if *d < 0 {
            *d += 4;
        }
        if !(0..4).contains(d) {
            return None;
        }
    }
    dims.sort_unstable();
    dims.dedup();
    Some(dims)
}

/// What a candidate node carries: its layout rule, the operand slots that must be NHWC and
/// the results that become NHWC.
struct Role {
    rule: LayoutRule,
    operands: Vec<u32>,
    results: Vec<u32>,
}

/// Whether `id` can take part in a region, and how.
fn role(g: &Graph, id: NodeId) -> Option<Role> {
    let node = g.node(id);
    let rule = layout_rule(node.op()?)?;
    let all_static = node.operands.iter().all(|&v| static_dims(g, v).is_some())
        && node.results.iter().all(|t| t.static_dims().is_some());
    if !all_static || node.operands.is_empty() {
        return None;
    }
    let x = node.operands[0];
    // Rules that carry result 0 channels-last need it rank 4 (the verifier leaves a
    // convolution's declared result shape to the lowering).
    let result4 = node.results.first().is_some_and(|t| t.rank() == 4);
    match rule {
        LayoutRule::Convolution => {
            let w = *node.operands.get(1)?;
            let (xd, wd) = (static_dims(g, x)?, static_dims(g, w)?);
            let groups = match node.attr(GROUPS) {
                Some(Attr::Int(n)) => *n,
                _ => 1,
            };
            if xd.len() != 4 || wd.len() != 4 || !result4 || node.attr(CHANNELS_LAST).is_some() {
                return None;
            }
            if convolution_runs_as_matmul(&xd[2..], &wd[2..], groups) {
                return None;
            }
            Some(Role { rule, operands: vec![0], results: vec![0] })
        }
        LayoutRule::BatchNorm => (rank4(g, x) && result4 && node.attr(CHANNEL_DIM).is_none()).then(|| Role {
            rule,
            operands: vec![0],
            results: vec![0],
        }),
        LayoutRule::Pool => {
            let results = (0..node.results.len() as u32).filter(|&i| node.results[i as usize].rank() == 4).collect();
            (rank4(g, x) && node.attr(CHANNELS_LAST).is_none()).then(|| Role { rule, operands: vec![0], results })
        }
        LayoutRule::Reduction => {
            if !rank4(g, x) {
                return None;
            }
            let dims = reduced_dims(g, id)?;
            let keepdim = matches!(node.attr(KEEPDIM), Some(Attr::Bool(true)));
            if keepdim {
                return Some(Role { rule, operands: vec![0], results: vec![0] });
            }
            // Without keepdim the result must list the kept dims in the same order either way:
            // not both C and a spatial dim.
            let kept: Vec<i64> = (0..4).filter(|d| !dims.contains(d)).collect();
            let order: Vec<i64> = kept.iter().map(|&d| NHWC_POSITION[d as usize]).collect();
            order.windows(2).all(|w| w[0] < w[1]).then(|| Role { rule, operands: vec![0], results: vec![] })
        }
        LayoutRule::Elementwise => {
            if node.results.len() != 1 || node.results[0].rank() != 4 {
                return None;
            }
            let ranks_fit = node.operands.iter().all(|&v| g.value_type(v).rank() <= 4);
            let operands =
                (0..node.operands.len() as u32).filter(|&s| g.value_type(node.operands[s as usize]).rank() > 0);
            ranks_fit.then(|| Role { rule, operands: operands.collect(), results: vec![0] })
        }
    }
}

fn op(name: &str) -> OpName {
    OpName::new("aten", name, Some("default"))
}

struct Rewriter<'g> {
    g: &'g mut Graph,
    /// A chosen node's carried result -> the rewritten node's, NHWC.
    nhwc: HashMap<Value, Value>,
    /// A chosen node's other results (batch statistics) -> the rewritten node's, unchanged.
    same: HashMap<Value, Value>,
    /// NCHW value -> its NHWC permute, made once.
    entries: HashMap<Value, Value>,
}

impl Rewriter<'_> {
    fn permute(&mut self, v: Value, perm: &[usize; 4]) -> Value {
        let ty = self.g.value_type(v).clone();
        let dims = ty.static_dims().expect("static dims");
        let out = TensorType::fixed(ty.dtype, &permuted(&dims, perm));
        let attrs: BTreeMap<String, Attr> =
            [DIMS.entry(perm.iter().map(|&p| p as i64).collect())].into_iter().collect();
        Value::new(self.g.add_op(op("permute"), vec![v], attrs, vec![out]), 0)
    }

    /// `v` (NCHW, or of lower rank and broadcast against NCHW) as NHWC.
    fn entry(&mut self, v: Value) -> Value {
        if let Some(&e) = self.entries.get(&v) {
            return e;
        }
        let ty = self.g.value_type(v).clone();
        let mut dims = ty.static_dims().expect("static dims");
        let mut x = v;
        if dims.len() < 4 {
            // Broadcasting aligns trailing dims: [C, 1, 1] is [1, C, 1, 1].
            let mut four = vec![1; 4 - dims.len()];
            four.extend(&dims);
            let attrs: BTreeMap<String, Attr> = [SIZE.entry(four.clone())].into_iter().collect();
            x = Value::new(self.g.add_op(op("view"), vec![v], attrs, vec![TensorType::fixed(ty.dtype, &four)]), 0);
            dims = four;
        }
        let e = if dims[1..].iter().all(|&d| d == 1) {
            x // [N, 1, 1, 1] is the same tensor either way
        } else {
            self.permute(x, &TO_NHWC)
        };
        self.entries.insert(v, e);
        e
    }

    fn rewrite(&mut self, id: NodeId, role: &Role) {
        let node = self.g.node(id).clone();
        let mut operands = Vec::with_capacity(node.operands.len());
        for (slot, &v) in node.operands.iter().enumerate() {
            let operand = if let Some(&m) = self.nhwc.get(&v) {
                m
            } else {
                let v = self.same.get(&v).copied().unwrap_or(v);
                if role.operands.contains(&(slot as u32)) {
                    self.entry(v)
                } else {
                    v
                }
            };
            operands.push(operand);
        }
        let mut attrs = node.attrs.clone();
        match role.rule {
            LayoutRule::Convolution | LayoutRule::Pool => {
                CHANNELS_LAST.set(&mut attrs, true);
            }
            LayoutRule::BatchNorm => {
                CHANNEL_DIM.set(&mut attrs, 3);
            }
            LayoutRule::Reduction => {
                let dims = reduced_dims(self.g, id).expect("checked by role");
                let mut renumbered: Vec<i64> = dims.iter().map(|&d| NHWC_POSITION[d as usize]).collect();
                renumbered.sort_unstable();
                DIM_LIST.set(&mut attrs, renumbered);
            }
            LayoutRule::Elementwise => {}
        }
        let results: Vec<TensorType> = node
            .results
            .iter()
            .enumerate()
            .map(|(i, t)| {
                if role.results.contains(&(i as u32)) {
                    TensorType::fixed(t.dtype, &permuted(&t.static_dims().expect("static"), &TO_NHWC))
                } else {
                    t.clone()
                }
            })
            .collect();
        let new = self.g.add_op(node.op().expect("an op").clone(), operands, attrs, results);
        if let Some(loc) = node.loc {
            self.g.set_loc(new, loc);
        }
        for i in 0..node.results.len() as u32 {
            let map = if role.results.contains(&i) { &mut self.nhwc } else { &mut self.same };
            map.insert(Value::new(id, i), Value::new(new, i));
        }
    }
}

impl Pass for AssignLayouts {
    fn run(&self, g: &mut Graph) -> Result<bool, PassError> {
        if g.mesh.is_some() {
            return Ok(false);
        }
        let order = g.topo_order().map_err(|id| PassError(format!("cycle at node {}", id.index())))?;
        let roles: HashMap<NodeId, Role> = order.iter().filter_map(|&id| role(g, id).map(|r| (id, r))).collect();
        if !roles.values().any(|r| r.rule == LayoutRule::Convolution) {
            return Ok(false);
        }
        // Regions: candidates joined where one's carried result is another's layout operand.
        let mut sets = UnionFind::<usize>::new(g.petgraph().node_bound());
        for (&id, r) in &roles {
            for &slot in &r.operands {
                let v = g.node(id).operands[slot as usize];
                if roles.get(&v.node).is_some_and(|p| p.results.contains(&v.result)) {
                    sets.union(id.index(), v.node.index());
                }
            }
        }
        let with_conv: HashSet<usize> = roles
            .iter()
            .filter(|(_, r)| r.rule == LayoutRule::Convolution)
            .map(|(&id, _)| sets.find_mut(id.index()))
            .collect();
        let chosen: Vec<NodeId> = order
            .iter()
            .copied()
            .filter(|id| roles.contains_key(id) && with_conv.contains(&sets.find_mut(id.index())))
            .collect();
        let mut rw = Rewriter { g, nhwc: HashMap::new(), same: HashMap::new(), entries: HashMap::new() };
        for &id in &chosen {
            rw.rewrite(id, &roles[&id]);
        }
        // Everything outside the regions (ops, graph outputs) reads NCHW again.
        let mut exits = Vec::new();
        for &id in chosen.iter().rev() {
            for i in 0..rw.g.node(id).results.len() as u32 {
                let old = Value::new(id, i);
                let back = match rw.nhwc.get(&old).copied() {
                    Some(new) => {
                        let back = rw.permute(new, &FROM_NHWC);
                        exits.push(back.node);
                        back
                    }
                    None => rw.same[&old],
                };
                rw.g.replace_all_uses(old, back);
            }
        }
        // The old nodes now feed only each other (consumers first in reverse order).
        for &id in chosen.iter().rev() {
            rw.g.remove_node(id);
        }
        for id in exits {
            if !rw.g.has_uses(id) && !rw.g.outputs().iter().any(|o| o.node == id) {
                rw.g.remove_node(id);
            }
        }
        Ok(!chosen.is_empty())
    }
}
