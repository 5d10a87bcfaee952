//! Sharding propagation's vocabulary: what moving a value from one layout to another costs
//! (`reshard`), and the per-op-family rules the op registry points at (`rules`).
//!
//! Propagation (the `propagate-sharding` pass) asks each op's rule which layouts it wants
//! for its operands and which its results get; where an operand's layout differs, a
//! `tpu.reshard` node records the collective and the bytes each device receives. XLA's
//! partitioner (Shardy) does the partitioning itself: these layouts are pinned in the
//! module with `sdy.sharding` and `sdy.sharding_constraint`, so XLA follows the plan and
//! the prediction can be checked against its optimised program.

pub mod rules;
pub mod table;

use crate::ir::printer::ValueNames;
use crate::ir::{Attr, Graph, Mesh, NodeKind, Origin, Sharding, TensorType, Value};
use crate::registry::attrs::{BYTES, COLLECTIVE, CONSUMER};

/// One collective the propagation planned (a `tpu.reshard` or a user's constraint; local
/// slices, which move nothing, are not collectives).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PlannedCollective {
    /// The layout node in the IR after the passes (`%12`).
    pub node: String,
    /// The op that needed the new layout (`aten.mm.default`), or `output` / `constraint`.
    pub consumer: String,
    pub collective: String,
    pub bytes_per_device: u64,
    /// Where the consumer was written in the IR text (the exporter maps it to user code).
    pub line: Option<u32>,
    /// The layout it produces.
    pub to: Sharding,
}

/// The sharding analysis of a propagated graph: every input's and output's layout, the
/// collectives, and the bytes each device receives per call.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ShardingPlan {
    pub mesh: Mesh,
    pub inputs: Vec<Sharding>,
    pub outputs: Vec<Sharding>,
    pub collectives: Vec<PlannedCollective>,
    pub total_bytes_per_device: u64,
}

impl ShardingPlan {
    pub fn num_partitions(&self) -> i64 {
        self.mesh.devices()
    }

    /// The plan of a graph after `propagate-sharding` (None without a mesh).
    pub fn of(g: &Graph) -> Option<ShardingPlan> {
        let mesh = g.mesh.clone()?;
        let layout = |v: Value| layout_of(g, v);
        let inputs = g.input_values().into_iter().map(layout).collect();
        let outputs = g.outputs().iter().map(|&v| layout(v)).collect();
        let names = ValueNames::for_graph(g);
        let mut collectives = Vec::new();
        for id in g.topo_order().unwrap_or_default() {
            let node = g.node(id);
            let NodeKind::Op(op) = &node.kind else { continue };
            if !is_layout_op(op) {
                continue;
            }
            // No change, or a local slice (it moves nothing): not a collective.
            let Some(collective) = node.attr(COLLECTIVE).and_then(Attr::as_str) else { continue };
            if collective == "none" || collective == "slice" {
                continue;
            }
            let v = Value::new(id, 0);
            let consumer = match node.attr(CONSUMER).and_then(Attr::as_str) {
                _ if op.is("tpu", "sharding_constraint") => "constraint",
                Some(c) => c,
                None => "output",
            };
            collectives.push(PlannedCollective {
                node: names.node(id).to_string(),
                consumer: consumer.to_string(),
                collective: collective.to_string(),
                bytes_per_device: node.attr(BYTES).and_then(|a| a.as_int()).unwrap_or(0).max(0) as u64,
                line: node.loc.map(|l| l.line),
                to: layout(v),
            });
        }
        let total_bytes_per_device = collectives.iter().map(|c| c.bytes_per_device).sum();
        Some(ShardingPlan { mesh, inputs, outputs, collectives, total_bytes_per_device })
    }
}

/// The layout of `v`: its sharding, or replicated when nobody decided one (an input nobody
/// annotated).
pub fn layout_of(g: &Graph, v: Value) -> Sharding {
    g.sharding(v).cloned().unwrap_or_else(|| Sharding::replicated(g.value_type(v).shape.len(), Origin::Unannotated))
}

/// `tpu.reshard` and `tpu.sharding_constraint`: layout changes whose result layout is fixed.
pub fn is_layout_op(op: &crate::ir::OpName) -> bool {
    op.is("tpu", "reshard") || op.is("tpu", "sharding_constraint")
}

/// How one value moves from one layout to another.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reshard {
    /// `all-reduce`, `reduce-scatter`, `all-gather`, `all-to-all`, `slice` (local, no communication), joined
    /// with `+` when several are needed; empty when the layouts are the same.
    pub collective: String,
    /// Bytes each device receives (the collective's result on one device; 0 for a slice).
    pub bytes_per_device: u64,
}

impl Reshard {
    pub fn is_noop(&self) -> bool {
        self.collective.is_empty()
    }
}

pub use crate::target::Target;

/// Bytes of one device's piece of `ty` under `s` (static shapes; 0 when symbolic).
pub fn local_bytes(mesh: &Mesh, ty: &TensorType, s: &Sharding) -> u64 {
    let Some(dims) = ty.static_dims() else { return 0 };
    s.local_dims(mesh, &dims).iter().fold(ty.dtype.size_bytes() as u64, |acc, &d| acc.saturating_mul(d.max(0) as u64))
}

/// What taking a value of type `ty` from layout `from` to layout `to` costs on `target`.
/// Partial sums pending on axes `to` does not keep are reduce-scattered where `to` splits a
/// dim by them (and the target can), else all-reduced (on `from`'s piece); dims that lose
/// axes are all-gathered, axes that move between dims are an all-to-all, and dims that gain
/// axes not in use are sliced locally.
pub fn reshard(mesh: &Mesh, ty: &TensorType, from: &Sharding, to: &Sharding, target: &Target) -> Reshard {
    if from.same_layout(to) {
        return Reshard { collective: String::new(), bytes_per_device: 0 };
    }
    let mut steps: Vec<&str> = Vec::new();
    let mut bytes = 0u64;
    let finished: Vec<&String> = from.partial.iter().filter(|a| !to.partial.contains(a)).collect();
    if !finished.is_empty() {
        // Pending sums that end up splitting a dim are reduce-scattered (each device receives
        // its piece of the sum); the others are all-reduced.
        if target.reduce_scatter && finished.iter().all(|a| to.dims.iter().flatten().any(|b| b == *a)) {
            steps.push("reduce-scatter");
            bytes += local_bytes(mesh, ty, to);
        } else {
            steps.push("all-reduce");
            bytes += local_bytes(mesh, ty, &Sharding { partial: Vec::new(), ..from.clone() });
        }
    }
    let lost: Vec<&String> =
        from.dims.iter().flatten().filter(|a| !to.dims.iter().flatten().any(|b| b == *a)).collect();
    let moved = from
        .dims
        .iter()
        .enumerate()
        .any(|(d, axes)| axes.iter().any(|a| to.dims.iter().enumerate().any(|(e, bx)| e != d && bx.contains(a))));
    let gained = to.dims.iter().enumerate().any(|(d, axes)| {
        axes.iter().any(|a| !from.dims.get(d).is_some_and(|f| f.contains(a)) && !from.axes().any(|b| b == a))
    });
    if moved {
        steps.push("all-to-all");
        bytes += local_bytes(mesh, ty, to);
    }
    if !lost.is_empty() {
        steps.push("all-gather");
        // The gathered piece: `from` without the lost axes.
        let kept = Sharding {
            dims: from.dims.iter().map(|axes| axes.iter().filter(|a| !lost.contains(a)).cloned().collect()).collect(),
            partial: Vec::new(),
            origin: from.origin.clone(),
        };
        bytes += local_bytes(mesh, ty, &kept);
    }
    if gained {
        steps.push("slice");
    }
    Reshard { collective: steps.join("+"), bytes_per_device: bytes }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{DType, Origin};

    fn mesh() -> Mesh {
        Mesh { axes: vec![("dp".into(), 2), ("tp".into(), 2)] }
    }

    fn s(dims: &[&[&str]], partial: &[&str]) -> Sharding {
        Sharding {
            dims: dims.iter().map(|d| d.iter().map(|a| a.to_string()).collect()).collect(),
            partial: partial.iter().map(|a| a.to_string()).collect(),
            origin: Origin::User,
        }
    }

    #[test]
    fn collectives_and_bytes() {
        let ty = TensorType::fixed(DType::F32, &[8, 16]);
        let m = mesh();
        assert!(reshard(&m, &ty, &s(&[&["dp"], &[]], &[]), &s(&[&["dp"], &[]], &[]), &Target::default()).is_noop());
        // Gather dp: each device ends with the whole [8, 16] = 512 bytes.
        assert_eq!(
            reshard(&m, &ty, &s(&[&["dp"], &[]], &[]), &s(&[&[], &[]], &[]), &Target::default()),
            Reshard { collective: "all-gather".into(), bytes_per_device: 512 }
        );
        // A partial sum over tp of a [4, 16] piece, all-reduced: 256 bytes.
        let r = reshard(&m, &ty, &s(&[&["dp"], &[]], &["tp"]), &s(&[&["dp"], &[]], &[]), &Target::default());
        assert_eq!((r.collective.as_str(), r.bytes_per_device), ("all-reduce", 256));
        // Slicing a replicated value costs nothing.
        let r = reshard(&m, &ty, &s(&[&[], &[]], &[]), &s(&[&[], &["tp"]], &[]), &Target::default());
        assert_eq!((r.collective.as_str(), r.bytes_per_device), ("slice", 0));
        let r = reshard(&m, &ty, &s(&[&["tp"], &[]], &[]), &s(&[&[], &["tp"]], &[]), &Target::default());
        assert_eq!(r.collective, "all-to-all");
        // A pending sum over dp scattered onto dim 0: each device gets its [4, 16] piece.
        let r = reshard(&m, &ty, &s(&[&[], &[]], &["dp"]), &s(&[&["dp"], &[]], &[]), &Target::default());
        assert_eq!((r.collective.as_str(), r.bytes_per_device), ("reduce-scatter", 256));
        let cpu = Target { reduce_scatter: false, ..Target::default() };
        let r = reshard(&m, &ty, &s(&[&[], &[]], &["dp"]), &s(&[&["dp"], &[]], &[]), &cpu);
        assert_eq!((r.collective.as_str(), r.bytes_per_device), ("all-reduce", 512));
    }
}
