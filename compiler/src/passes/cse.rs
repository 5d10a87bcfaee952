//! Common subexpression elimination: a node that repeats an earlier node's op, attributes,
//! operands and result types is replaced by the earlier one. Random and effectful ops are
//! never merged.

use super::{Pass, PassError};
use crate::ir::ops::{has_side_effects, is_nondeterministic};
use crate::ir::{Attr, Graph, NodeKind, OpName, TensorType, Value};
use std::collections::HashMap;

#[derive(Default)]
pub struct Cse;

impl Cse {
    pub const NAME: &'static str = "cse";
    pub const DESCRIPTION: &'static str = "merge nodes that compute the same op on the same operands with the same attributes";
}

#[derive(PartialEq, Eq, Hash)]
struct Key {
    op: OpName,
    operands: Vec<Value>,
    attrs: Vec<(String, Attr)>,
    results: Vec<TensorType>,
}

impl Pass for Cse {
    pass_identity!();
    fn run(&self, g: &mut Graph) -> Result<bool, PassError> {
        let order = g.topo_order().map_err(|_| PassError("graph has a cycle".into()))?;
        let mut seen: HashMap<Key, crate::ir::NodeId> = HashMap::new();
        let mut changed = false;
        // Canonical order visits producers first, so by the time a node is keyed its operands
        // already point at the surviving copies.
        for id in order {
            let node = g.node(id);
            let NodeKind::Op(op) = &node.kind else { continue };
            if has_side_effects(op) || is_nondeterministic(op) {
                continue;
            }
            let key = Key {
                op: op.clone(),
                operands: node.operands.clone(),
                attrs: node.attrs.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
                results: node.results.clone(),
            };
            match seen.get(&key) {
                Some(&original) => {
                    for r in 0..g.node(id).results.len() as u32 {
                        g.replace_all_uses(Value::new(id, r), Value::new(original, r));
                    }
                    g.remove_node(id);
                    changed = true;
                }
                None => {
                    seen.insert(key, id);
                }
            }
        }
        Ok(changed)
    }
}
