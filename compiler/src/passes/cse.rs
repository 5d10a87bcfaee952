//! Common subexpression elimination: a node that repeats an earlier node's op, attributes,
//! operands and result types is replaced by the earlier one. Random and effectful ops are
//! never merged.

use super::{Pass, PassDecl, PassError};
use crate::ir::{Graph, Node, NodeId, NodeKind, Value};
use crate::registry::{has_side_effects, is_nondeterministic};
use std::collections::hash_map::DefaultHasher;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};

#[derive(Default)]
pub struct Cse;

impl PassDecl for Cse {
    const NAME: &'static str = "cse";
    const DESCRIPTION: &'static str =
        "merge nodes that compute the same op on the same operands with the same attributes";
}

/// Hash of what makes two nodes interchangeable; equal hashes are confirmed with `same`.
fn key_hash(node: &Node) -> u64 {
    let mut h = DefaultHasher::new();
    node.kind.op_hash(&mut h);
    node.operands.hash(&mut h);
    node.attrs.hash(&mut h);
    node.results.hash(&mut h);
    h.finish()
}

fn same(a: &Node, b: &Node) -> bool {
    a.kind == b.kind && a.operands == b.operands && a.attrs == b.attrs && a.results == b.results
}

impl Pass for Cse {
    fn run(&self, g: &mut Graph) -> Result<bool, PassError> {
        let order = g.topo_order().map_err(|_| PassError("graph has a cycle".into()))?;
        // Candidates by hash; nodes are compared in place, nothing is cloned.
        let mut seen: HashMap<u64, Vec<NodeId>> = HashMap::new();
        let mut changed = false;
        // Canonical order visits producers first, so by the time a node is keyed its operands
        // already point at the surviving copies.
        for id in order {
            let node = g.node(id);
            let NodeKind::Op(op) = &node.kind else { continue };
            if has_side_effects(op) || is_nondeterministic(op) {
                continue;
            }
            let h = key_hash(node);
            let candidates = seen.entry(h).or_default();
            match candidates.iter().copied().find(|&o| same(g.node(o), node)) {
                Some(original) => {
                    for r in 0..node.results.len() as u32 {
                        g.replace_all_uses(Value::new(id, r), Value::new(original, r));
                    }
                    g.remove_node(id);
                    changed = true;
                }
                None => candidates.push(id),
            }
        }
        Ok(changed)
    }
}
