//! Weight-only int8 linear layers, as torchao's `Int8WeightOnlyConfig` exports them:
//! `mul(mm(x, convert_f32(transpose(w_int8))), scale)`, with `w` int8 `[N, K]` (the
//! `nn.Linear` weight), `x` f32 `[M, K]` and `scale` f32 `[N]` (one per output row). Each
//! becomes one `tpu.quantized_linear(x, w, scale) {form}`, the form chosen here:
//!
//! - `host-kernel` for at most `kernel_max_rows` rows of `x` (decode: one token per sequence),
//!   where the target has torchtpu's int8 kernel: it reads the weight as int8, a quarter of
//!   the f32 bytes, where XLA's dot needs an f32 copy of the weight first, every call.
//! - `dequantize` otherwise: convert, one dot contracting the weight's last dim, scale. For
//!   many rows XLA's dot is faster than the kernel, and the conversion's cost is shared by all
//!   of them (measured, docs/quantization.md).
//!
//! A graph with a mesh is left alone (the node has no sharding rule). The W8A8 form
//! (`_int_mm`, `s8 x s8 -> s32`) is already an integer dot and needs no rewrite.
//! `torchtpu.explain` prints each node's form.

use super::patterns::{holds_dtype, static2};
use super::{Pass, PassDecl, PassError, PassOptions};
use crate::ir::{Attr, DType, Dim, Graph, NodeId, OpName, TensorType, Value};
use crate::registry::attrs::quantized_linear_form::{DEQUANTIZE, HOST_KERNEL};
use crate::registry::attrs::{DIM0, DIM1, DIMS, FORM};
use crate::target::Target;

/// Rows of `x` up to which the kernel beats XLA's convert-then-dot (benches/quantization.py:
/// at 8 rows 0.54 against 0.72 ms, at 64 rows 3.4 against 1.4 ms for a 2048 x 768 weight).
pub const KERNEL_MAX_ROWS: i64 = 16;

#[derive(Clone, Copy, Debug)]
pub struct QuantizedLinear {
    /// The target has torchtpu's int8 kernel (`Target::host_kernels`).
    kernel: bool,
    kernel_max_rows: i64,
}

impl Default for QuantizedLinear {
    fn default() -> Self {
        QuantizedLinear { kernel: false, kernel_max_rows: KERNEL_MAX_ROWS }
    }
}

impl PassDecl for QuantizedLinear {
    const NAME: &'static str = "quantized-linear";
    const DESCRIPTION: &'static str =
        "rewrite int8 weight-only linear layers (convert, mm, scale) into one node in a chosen form";
    const OPTIONS: &'static [(&'static str, &'static str)] = &[
        (
            "kernel",
            "host: use the int8 host kernel for few rows (the engine says whether the platform has it); off: never",
        ),
        ("kernel_max_rows", "the most rows of x the host kernel takes (default 16)"),
    ];

    fn with_options(opts: &PassOptions) -> Result<Self, String> {
        let mut pass = QuantizedLinear::default();
        for (k, v) in opts {
            match k.as_str() {
                "kernel" => {
                    pass.kernel = match v.as_str() {
                        "host" => true,
                        "off" => false,
                        _ => return Err(format!("kernel must be host or off, got '{v}'")),
                    }
                }
                "kernel_max_rows" => {
                    pass.kernel_max_rows =
                        v.parse().map_err(|_| format!("kernel_max_rows must be an integer, got '{v}'"))?
                }
                _ => return Err(format!("unknown option '{k}'")),
            }
        }
        Ok(pass)
    }

    /// Every graph with such a layer gets it (with the target's kernel), whatever the pipeline
    /// says, unless the pipeline runs it itself (with its own options).
    fn required(g: &Graph, target: &Target) -> Option<Self> {
        let found =
            g.mesh.is_none() && holds_dtype(g, DType::I8) && order(g).iter().any(|&id| matched(g, id).is_some());
        found.then_some(QuantizedLinear { kernel: target.host_kernels.int8_matmul, ..QuantizedLinear::default() })
    }
}

fn order(g: &Graph) -> Vec<NodeId> {
    g.topo_order().unwrap_or_default()
}

/// The pieces of one matched layer.
struct Layer {
    mul: NodeId,
    x: Value,
    w: Value,
    scale: Value,
    rows: i64,
    out: TensorType,
}

fn op_base(g: &Graph, v: Value) -> Option<String> {
    g.node(v.node).op().map(|o| o.base())
}

/// The single operand of `v`'s producer if it is a rank-2 transpose (`permute [1, 0]`, `t`,
/// `transpose(0, 1)`).
fn transposed(g: &Graph, v: Value) -> Option<Value> {
    let node = g.node(v.node);
    let swaps = match op_base(g, v)?.as_str() {
        "aten.permute" => matches!(node.attr(DIMS), Some(Attr::IntList(d)) if d == &[1, 0]),
        "aten.t" => true,
        "aten.transpose" => {
            let (a, b) = (node.attr(DIM0), node.attr(DIM1));
            matches!(
                (a, b),
                (Some(Attr::Int(0 | -2)), Some(Attr::Int(1 | -1))) | (Some(Attr::Int(1 | -1)), Some(Attr::Int(0 | -2)))
            )
        }
        _ => false,
    };
    (swaps && node.operands.len() == 1 && g.value_type(v).shape.len() == 2).then(|| node.operands[0])
}

/// `id` as the scale multiplication of an int8 weight-only linear layer.
fn matched(g: &Graph, id: NodeId) -> Option<Layer> {
    let node = g.node(id);
    if op_base(g, Value::new(id, 0))? != "aten.mul" || node.operands.len() != 2 {
        return None;
    }
    let out = node.results.first()?.clone();
    let (m, n) = static2(&out)?;
    if out.dtype != DType::F32 {
        return None;
    }
    // mul(mm, scale) or mul(scale, mm); the mm's result is read by the mul alone.
    let (mm, scale) = match (op_base(g, node.operands[0]), op_base(g, node.operands[1])) {
        (Some(a), _) if a == "aten.mm" => (node.operands[0], node.operands[1]),
        (_, Some(b)) if b == "aten.mm" => (node.operands[1], node.operands[0]),
        _ => return None,
    };
    let st = g.value_type(scale);
    if st.dtype != DType::F32 || st.shape != [Dim::Static(n)] || g.uses(mm).len() != 1 || g.is_output(mm) {
        return None;
    }
    let mm_node = g.node(mm.node);
    let [x, wt] = mm_node.operands.as_slice() else { return None };
    let (xt, wtt) = (g.value_type(*x), g.value_type(*wt));
    let (rows, k) = static2(xt)?;
    if xt.dtype != DType::F32 || rows != m || wtt.dtype != DType::F32 || static2(wtt)? != (k, n) {
        return None;
    }
    // convert_f32(transpose(w)) with w int8 [N, K].
    if op_base(g, *wt)? != "aten._to_copy" {
        return None;
    }
    let cast_in = *g.node(wt.node).operands.first()?;
    let w = transposed(g, cast_in)?;
    let wty = g.value_type(w);
    if wty.dtype != DType::I8 || static2(wty)? != (n, k) {
        return None;
    }
    Some(Layer { mul: id, x: *x, w, scale, rows, out })
}

impl Pass for QuantizedLinear {
    fn run(&self, g: &mut Graph) -> Result<bool, PassError> {
        if g.mesh.is_some() {
            return Ok(false);
        }
        let layers: Vec<Layer> = order(g).into_iter().filter_map(|id| matched(g, id)).collect();
        for layer in &layers {
            let form = if self.kernel && layer.rows <= self.kernel_max_rows { HOST_KERNEL } else { DEQUANTIZE };
            let attrs = [FORM.entry(form.to_string())].into_iter().collect();
            let op = OpName::new("tpu", "quantized_linear", None);
            let q = g.add_op(op, vec![layer.x, layer.w, layer.scale], attrs, vec![layer.out.clone()]);
            if let Some(loc) = g.node(layer.mul).loc {
                g.set_loc(q, loc);
            }
            g.replace_all_uses(Value::new(layer.mul, 0), Value::new(q, 0));
            g.remove_node(layer.mul);
        }
        // The mm, convert and transpose each layer left unread (a weight's convert or transpose
        // may feed other nodes too: those stay).
        if !layers.is_empty() {
            super::dce::remove_dead_nodes(g);
        }
        Ok(!layers.is_empty())
    }
}
