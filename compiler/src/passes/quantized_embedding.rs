//! Gather, then dequantize: an embedding whose table is computed row by row from an int8
//! table (torchao's `IntxWeightOnlyConfig(weight_dtype=torch.int8, granularity=PerAxis(0))`
//! exports `embedding((convert(q) - convert(zero_point)) * scale, ids)`, with `q` int8
//! `[V, D]` and per-row `zero_point`, `scale` `[V, 1]`) looks up the rows of each operand of
//! that computation and computes only the looked-up rows. Otherwise the whole table, a
//! `[V, D]` f32 copy (98 MB for a 32000 x 768 vocabulary), is dequantized on every call to
//! read a few rows of it.
//!
//! The computation may be elementwise conversions, `sub`, `add` and `mul` of operands with `V`
//! rows (`[V, D]` or per-row `[V, 1]`), and same-shape views; each of its nodes must be read
//! by it alone (a table also read elsewhere, a tied LM head, is computed anyway). A graph
//! with a mesh is left alone.

use std::collections::HashMap;

use super::patterns::holds_dtype;
use super::{Pass, PassDecl, PassError};
use crate::ir::{Attr, DType, Dim, Graph, NodeId, OpName, TensorType, Value};
use crate::registry::attrs::ALPHA;
use crate::target::Target;

#[derive(Clone, Copy, Debug, Default)]
pub struct QuantizedEmbedding;

impl PassDecl for QuantizedEmbedding {
    const NAME: &'static str = "quantized-embedding";
    const DESCRIPTION: &'static str = "look up the rows of an int8 embedding table before dequantizing them, not after";

    /// Every graph with such an embedding gets it, whatever the pipeline says.
    fn required(g: &Graph, _target: &Target) -> Option<Self> {
        (g.mesh.is_none() && holds_dtype(g, DType::I8) && candidates(g).next().is_some()).then_some(QuantizedEmbedding)
    }
}

fn op_base(g: &Graph, id: NodeId) -> Option<String> {
    g.node(id).op().map(|o| o.base())
}

/// The embeddings whose table computation this pass rewrites.
fn candidates(g: &Graph) -> impl Iterator<Item = NodeId> + '_ {
    g.topo_order().unwrap_or_default().into_iter().filter(|&id| {
        let node = g.node(id);
        // (table, ids) -> one result; the registry declares no signature for `embedding`.
        let [table, ids] = node.operands.as_slice() else { return false };
        let (table, shape) = (*table, &g.value_type(*table).shape);
        // The result is the ids' shape with a row of the table each.
        let mut looked_up = g.value_type(*ids).shape.clone();
        looked_up.extend(shape.get(1).copied());
        let mut int8 = false;
        op_base(g, id).as_deref() == Some("aten.embedding")
            && node.results.len() == 1
            && node.results[0].static_dims().is_some()
            && node.results[0].shape == looked_up
            && node.results[0].dtype == g.value_type(table).dtype
            && shape.len() == 2
            && matches!(shape[0], Dim::Static(_))
            && rowwise(g, table, shape[0], &mut int8)
            && int8
    })
}

/// The elementwise ops the table computation may use.
fn is_rowwise_op(g: &Graph, id: NodeId) -> bool {
    let node = g.node(id);
    match op_base(g, id).as_deref() {
        Some("aten._to_copy") => node.operands.len() == 1,
        Some("aten.sub" | "aten.add") => {
            node.operands.len() == 2 && matches!(node.attr(ALPHA), None | Some(Attr::Int(1)))
        }
        Some("aten.mul") => node.operands.len() == 2,
        Some("aten.view") => node.operands.len() == 1 && g.value_type(node.operands[0]).shape == node.results[0].shape,
        _ => false,
    }
}

/// Whether `v` is computed row by row from operands of `rows` rows (`[rows, D]` or
/// `[rows, 1]`), each computed node (the table itself included) read once. Sets `int8` where a leaf is an int8 `[rows, D]` table.
fn rowwise(g: &Graph, v: Value, rows: Dim, int8: &mut bool) -> bool {
    let ty = g.value_type(v);
    if ty.shape.len() != 2 || ty.shape[0] != rows {
        return false;
    }
    if !is_rowwise_op(g, v.node) {
        *int8 |= ty.dtype == DType::I8 && ty.shape[1] != Dim::Static(1);
        return true;
    }
    // The table itself is read by the embedding alone too.
    if g.uses(v).len() != 1 || g.is_output(v) {
        return false;
    }
    g.node(v.node).operands.clone().into_iter().all(|o| rowwise(g, o, rows, int8))
}

/// `v`'s looked-up rows: an embedding of each leaf, the computation redone on the results.
fn gathered(g: &mut Graph, v: Value, embedding: NodeId, memo: &mut HashMap<Value, Value>) -> Value {
    if let Some(&done) = memo.get(&v) {
        return done;
    }
    let (ids, attrs) = (g.node(embedding).operands[1], g.node(embedding).attrs.clone());
    let ids_dims = g.value_type(ids).shape.clone();
    let ty = g.value_type(v).clone();
    let mut shape = ids_dims;
    shape.push(ty.shape[1]);
    let out = TensorType { dtype: ty.dtype, shape };
    let same_shape_view = is_rowwise_op(g, v.node) && op_base(g, v.node).as_deref() == Some("aten.view");
    let new = if same_shape_view {
        let source = g.node(v.node).operands[0];
        gathered(g, source, embedding, memo)
    } else if is_rowwise_op(g, v.node) {
        let node = g.node(v.node).clone();
        let operands = node.operands.iter().map(|&o| gathered(g, o, embedding, memo)).collect();
        let op = node.op().expect("a row-wise op").clone();
        Value::new(g.add_op(op, operands, node.attrs.clone(), vec![out]), 0)
    } else {
        Value::new(g.add_op(OpName::new("aten", "embedding", Some("default")), vec![v, ids], attrs, vec![out]), 0)
    };
    memo.insert(v, new);
    new
}

impl Pass for QuantizedEmbedding {
    fn run(&self, g: &mut Graph) -> Result<bool, PassError> {
        if g.mesh.is_some() {
            return Ok(false);
        }
        let found: Vec<NodeId> = candidates(g).collect();
        for &embedding in &found {
            let table = g.node(embedding).operands[0];
            let rows = gathered(g, table, embedding, &mut HashMap::new());
            g.replace_all_uses(Value::new(embedding, 0), rows);
        }
        // The embeddings replaced, and the whole-table computations now unread.
        if !found.is_empty() {
            super::dce::remove_dead_nodes(g);
        }
        Ok(!found.is_empty())
    }
}
