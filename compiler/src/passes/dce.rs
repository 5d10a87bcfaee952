//! Dead code elimination: removes op nodes whose results nothing reads.

use super::{Pass, PassDecl, PassError};
use crate::ir::{Graph, NodeKind};
use crate::registry::has_side_effects;

#[derive(Default)]
pub struct Dce;

impl PassDecl for Dce {
    const NAME: &'static str = "dce";
    const DESCRIPTION: &'static str = "remove nodes whose results are unused and that have no side effects";
}

/// Removes dead, effect-free op nodes; one sweep in reverse canonical order also removes
/// whole dead chains. Returns how many nodes were removed.
pub(crate) fn remove_dead_nodes(g: &mut Graph) -> usize {
    let Ok(order) = g.topo_order() else { return 0 };
    let mut removed = 0;
    for id in order.into_iter().rev() {
        let node = g.node(id);
        let NodeKind::Op(op) = &node.kind else { continue };
        if !has_side_effects(op) && !g.has_uses(id) {
            g.remove_node(id);
            removed += 1;
        }
    }
    removed
}

impl Pass for Dce {
    fn run(&self, g: &mut Graph) -> Result<bool, PassError> {
        Ok(remove_dead_nodes(g) > 0)
    }
}
