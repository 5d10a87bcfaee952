//! Elementwise/reduction region formation: groups connected elementwise ops of one shape (and
//! the reduction that consumes such a group) into regions, marked with a `region = N`
//! attribute on each member. A producer joins its consumer's region only when that consumer is
//! its sole user, so a region can run as one loop without recomputing or materialising any
//! member for outside readers. Lowering ignores the mark (XLA forms its own fusions, and a
//! marked graph lowers to the same StableHLO); it is the grouping the eager DeferAndFuse mode
//! is to reuse, and `torchtpu-opt --pass-pipeline=form-regions` shows it.

use super::{Pass, PassDecl, PassError};
use crate::ir::{Attr, Graph, NodeId, NodeKind};
use crate::registry::attrs::REGION;
use crate::registry::{self, Traits};
use petgraph::unionfind::UnionFind;
use petgraph::visit::NodeIndexable;
use std::collections::{HashMap, HashSet};

#[derive(Default)]
pub struct FormRegions;

impl PassDecl for FormRegions {
    const NAME: &'static str = "form-regions";
    const DESCRIPTION: &'static str =
        "mark connected single-use elementwise chains (and the reduction ending them) as regions";
}

/// `Some(false)` for an elementwise op, `Some(true)` for a reduction (the registry's traits),
/// `None` for anything else.
fn kind(g: &Graph, id: NodeId) -> Option<bool> {
    let node = g.node(id);
    let op = node.op()?;
    if node.results.len() != 1 || node.operands.is_empty() {
        return None;
    }
    let def = registry::lookup(op)?;
    if def.traits.contains(Traits::ELEMENTWISE) {
        Some(false)
    } else if def.traits.contains(Traits::REDUCTION) {
        Some(true)
    } else {
        None
    }
}

impl Pass for FormRegions {
    fn run(&self, g: &mut Graph) -> Result<bool, PassError> {
        let order = g.topo_order().map_err(|_| PassError("graph has a cycle".into()))?;
        let candidates: HashSet<NodeId> = order.iter().copied().filter(|&id| kind(g, id).is_some()).collect();
        let mut sets = UnionFind::<usize>::new(g.petgraph().node_bound());
        for &id in &order {
            let Some(is_reduction) = kind(g, id) else { continue };
            let node = g.node(id);
            let shape =
                if is_reduction { g.value_type(node.operands[0]).shape.clone() } else { node.results[0].shape.clone() };
            for v in node.operands.clone() {
                let p = v.node;
                // The producer must be elementwise, of this loop's shape, and read only here.
                if kind(g, p) != Some(false) || g.node(p).results[0].shape != shape || g.is_output(v) {
                    continue;
                }
                let users = g.uses(v);
                if users.iter().any(|(u, _)| *u != id) {
                    continue;
                }
                sets.union(p.index(), id.index());
            }
        }
        // Number regions of two or more members in canonical order.
        let mut members: HashMap<usize, Vec<NodeId>> = HashMap::new();
        for &id in &order {
            if candidates.contains(&id) {
                members.entry(sets.find_mut(id.index())).or_default().push(id);
            }
        }
        let mut next = 0i64;
        let mut numbered: HashMap<usize, i64> = HashMap::new();
        let mut changed = false;
        for &id in &order {
            if !matches!(g.node(id).kind, NodeKind::Op(_)) || !candidates.contains(&id) {
                continue;
            }
            let root = sets.find_mut(id.index());
            if members[&root].len() < 2 {
                continue;
            }
            let n = *numbered.entry(root).or_insert_with(|| {
                next += 1;
                next - 1
            });
            let attrs = g.node_attrs_mut(id);
            if attrs.get(REGION.name) != Some(&Attr::Int(n)) {
                REGION.set(attrs, n);
                changed = true;
            }
        }
        Ok(changed)
    }
}
