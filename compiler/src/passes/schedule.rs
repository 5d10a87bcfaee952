//! Memory-aware scheduling: reorders independent nodes so the peak of live bytes (the
//! estimate of `analysis::memory`) goes down. A greedy list scheduler: among the nodes whose
//! operands are ready, run the one that frees the most bytes net of what it allocates
//! (ties: the earlier node of the current order). The result is kept only when its estimated
//! peak is lower than the current order's, so the pass never makes the estimate worse.

use super::{Pass, PassDecl, PassError};
use crate::analysis::memory::{assign_buffers, estimate_order};
use crate::ir::{Graph, NodeId, NodeKind};
use petgraph::Direction;
use std::collections::HashMap;

#[derive(Default)]
pub struct ScheduleMemory;

impl PassDecl for ScheduleMemory {
    const NAME: &'static str = "schedule-memory";
    const DESCRIPTION: &'static str = "reorder independent nodes to lower the estimated peak of live bytes";
}

impl Pass for ScheduleMemory {
    fn run(&self, g: &mut Graph) -> Result<bool, PassError> {
        let current = g.topo_order().map_err(|_| PassError("graph has a cycle".into()))?;
        let before = estimate_order(g, &current).map_err(|_| PassError("graph has a cycle".into()))?;
        let order = greedy(g, &current);
        let after = estimate_order(g, &order).map_err(|_| PassError("graph has a cycle".into()))?;
        if after.peak_bytes < before.peak_bytes && order != current {
            g.set_order(&order);
            return Ok(true);
        }
        Ok(false)
    }
}

fn greedy(g: &Graph, current: &[NodeId]) -> Vec<NodeId> {
    let mut sym = false;
    let bufs = assign_buffers(g, current, &mut sym);
    let rank: HashMap<NodeId, usize> = current.iter().enumerate().map(|(i, &id)| (id, i)).collect();
    let pg = g.petgraph();
    // Unscheduled readers left per buffer; outputs and inputs are never freed.
    let mut readers = vec![0usize; bufs.bytes.len()];
    let mut pinned = bufs.is_input.clone();
    for &id in current {
        let mut seen = Vec::new();
        for v in &g.node(id).operands {
            let b = bufs.of_value[v];
            if !seen.contains(&b) {
                seen.push(b);
                readers[b] += 1;
            }
        }
    }
    for v in g.outputs() {
        pinned[bufs.of_value[v]] = true;
    }
    let mut indegree: HashMap<NodeId, usize> =
        current.iter().map(|&id| (id, pg.edges_directed(id, Direction::Incoming).count())).collect();
    let mut ready: Vec<NodeId> = current.iter().copied().filter(|id| indegree[id] == 0).collect();
    let mut allocated = vec![false; bufs.bytes.len()];
    let mut order = Vec::with_capacity(current.len());
    while !ready.is_empty() {
        // Score: bytes freed minus bytes allocated (inputs first: they cost nothing).
        let score = |id: NodeId| -> i128 {
            let node = g.node(id);
            if matches!(node.kind, NodeKind::Input(_)) {
                return i128::MAX;
            }
            let mut seen = Vec::new();
            let mut freed = 0i128;
            for v in &node.operands {
                let b = bufs.of_value[v];
                if !seen.contains(&b) {
                    seen.push(b);
                    if readers[b] == 1 && !pinned[b] {
                        freed += bufs.bytes[b] as i128;
                    }
                }
            }
            let mut alloc = 0i128;
            for r in 0..node.results.len() as u32 {
                let b = bufs.of_value[&crate::ir::Value::new(id, r)];
                if !allocated[b] && !seen.contains(&b) {
                    alloc += bufs.bytes[b] as i128;
                }
            }
            freed - alloc
        };
        let (pick, _) = ready
            .iter()
            .enumerate()
            .max_by(|(_, &a), (_, &b)| score(a).cmp(&score(b)).then(rank[&b].cmp(&rank[&a])))
            .expect("ready is not empty");
        let id = ready.swap_remove(pick);
        order.push(id);
        let node = g.node(id);
        let mut seen = Vec::new();
        for v in &node.operands {
            let b = bufs.of_value[v];
            if !seen.contains(&b) {
                seen.push(b);
                readers[b] -= 1;
            }
        }
        for r in 0..node.results.len() as u32 {
            allocated[bufs.of_value[&crate::ir::Value::new(id, r)]] = true;
        }
        for e in pg.edges_directed(id, Direction::Outgoing) {
            let t = petgraph::visit::EdgeRef::target(&e);
            let d = indegree.get_mut(&t).expect("every node has an in-degree");
            *d -= 1;
            if *d == 0 {
                ready.push(t);
            }
        }
    }
    order
}
