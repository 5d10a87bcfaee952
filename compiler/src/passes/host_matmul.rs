//! Matrix products in the faster of two kernels. Where the target has a second kernel for a
//! matmul (ATen's CPU GEMM on the host platform, `Target::host_kernels.aten_matmul`), each
//! `aten.mm`, `aten.bmm` and `aten.addmm` of static floating shapes asks the target's chooser,
//! which measured both kernels on that shape once (the engine's), and becomes
//! `tpu.matmul {form = "aten"}` where ATen's wins, `addmm`'s bias then added by XLA. An operand
//! that is a transpose of its last two dims is read as stored (the kernel takes it
//! transposed), so no transposed copy is made. XLA's dot stays everywhere else.
//!
//! A graph with a mesh is left alone (the node has no sharding rule). `torchtpu.explain` and
//! `torchtpu.stats()["kernel_choices"]` show each choice with its timings.

use super::{Pass, PassDecl, PassError, PassOptions};
use crate::ir::{Attr, DType, Graph, NodeId, OpName, TensorType, Value};
use crate::registry::attrs::matmul_form::ATEN;
use crate::registry::attrs::{ALPHA, BETA, DIM0, DIM1, DIMS, FORM, TRANSPOSE_A, TRANSPOSE_B};
use crate::target::{KernelChoice, MatmulShape, Target};

/// Which kernel a matched matmul gets.
#[derive(Clone, Debug, Default)]
pub enum Kernel {
    /// XLA's, everywhere (nothing is rewritten).
    #[default]
    Xla,
    /// ATen's, everywhere (`host-matmul{kernel=aten}`: tests and comparisons).
    Aten,
    /// The target's measured choice, per shape.
    Measured(KernelChoice),
}

#[derive(Clone, Debug, Default)]
pub struct HostMatmul {
    kernel: Kernel,
}

impl PassDecl for HostMatmul {
    const NAME: &'static str = "host-matmul";
    const DESCRIPTION: &'static str =
        "run each matmul in the faster of XLA's dot and ATen's GEMM, as the target measured it per shape";
    const OPTIONS: &'static [(&'static str, &'static str)] =
        &[("kernel", "aten: ATen's for every matched matmul; xla: XLA's (the target's measured choice by default)")];

    fn with_options(opts: &PassOptions) -> Result<Self, String> {
        let mut pass = HostMatmul::default();
        for (k, v) in opts {
            match (k.as_str(), v.as_str()) {
                ("kernel", "aten") => pass.kernel = Kernel::Aten,
                ("kernel", "xla") => pass.kernel = Kernel::Xla,
                ("kernel", other) => return Err(format!("kernel must be aten or xla, got '{other}'")),
                _ => return Err(format!("unknown option '{k}'")),
            }
        }
        Ok(pass)
    }

    /// Every graph with a candidate gets it where the target has ATen's kernel and a chooser.
    fn required(g: &Graph, target: &Target) -> Option<Self> {
        let choice = target.kernel_choice.clone().filter(|_| target.host_kernels.aten_matmul)?;
        let found = g.mesh.is_none() && order(g).iter().any(|&id| matched(g, id).is_some());
        found.then_some(HostMatmul { kernel: Kernel::Measured(choice) })
    }
}

fn order(g: &Graph) -> Vec<NodeId> {
    g.topo_order().unwrap_or_default()
}

/// One matched product: `out = bias? + A @ B`.
struct Product {
    node: NodeId,
    a: Value,
    b: Value,
    bias: Option<Value>,
    shape: MatmulShape,
    out: TensorType,
}

fn base(g: &Graph, v: Value) -> Option<String> {
    g.node(v.node).op().map(|o| o.base())
}

/// The source of `v` if `v` swaps the last two dims of a rank-`rank` value (a permute, a
/// transpose, `t`), else None.
fn swapped_source(g: &Graph, v: Value, rank: usize) -> Option<Value> {
    let node = g.node(v.node);
    let [source] = node.operands.as_slice() else { return None };
    let last = (rank - 2) as i64..=(rank - 1) as i64;
    let norm = |d: i64| if d < 0 { d + rank as i64 } else { d };
    let swaps = match base(g, v)?.as_str() {
        "aten.permute" => {
            let want: Vec<i64> = if rank == 2 { vec![1, 0] } else { vec![0, 2, 1] };
            node.attr(DIMS).and_then(Attr::as_int_list) == Some(want.as_slice())
        }
        "aten.t" => rank == 2,
        "aten.transpose" => {
            let (a, b) = (node.attr(DIM0).and_then(Attr::as_int), node.attr(DIM1).and_then(Attr::as_int));
            matches!((a, b), (Some(a), Some(b)) if a != b && last.contains(&norm(a)) && last.contains(&norm(b)))
        }
        _ => false,
    };
    (swaps && g.value_type(*source).shape.len() == rank).then_some(*source)
}

/// `id` as a matmul the pass can hand to either kernel.
fn matched(g: &Graph, id: NodeId) -> Option<Product> {
    let node = g.node(id);
    let v = Value::new(id, 0);
    let (bias, a, b) = match (base(g, v)?.as_str(), node.operands.as_slice()) {
        ("aten.mm" | "aten.bmm", &[a, b]) => (None, a, b),
        ("aten.addmm", &[bias, a, b]) => {
            let one = |k| node.attr(k).is_none_or(|x: &Attr| x.as_number() == Some(1.0));
            if !(one(ALPHA) && one(BETA)) {
                return None;
            }
            (Some(bias), a, b)
        }
        _ => return None,
    };
    let out = node.results.first()?.clone();
    let dims = out.static_dims()?;
    let rank = dims.len();
    let floating = matches!(out.dtype, DType::F32 | DType::F64 | DType::BF16 | DType::F16);
    let same = [a, b].iter().all(|&x| g.value_type(x).dtype == out.dtype);
    if !(2..=3).contains(&rank) || !floating || !same {
        return None;
    }
    let (a, transpose_a) = swapped_source(g, a, rank).map_or((a, false), |s| (s, true));
    let (b, transpose_b) = swapped_source(g, b, rank).map_or((b, false), |s| (s, true));
    let (da, db) = (g.value_type(a).static_dims()?, g.value_type(b).static_dims()?);
    let k = if transpose_a { da[rank - 2] } else { da[rank - 1] };
    let shape = MatmulShape {
        dtype: out.dtype,
        batch: (rank == 3).then(|| dims[0]),
        m: dims[rank - 2],
        k,
        n: dims[rank - 1],
        transpose_a,
        transpose_b,
    };
    // The stored operands as the kernel reads them (the verifier checked the product's).
    (shape.dims()[..2] == [da, db]).then_some(Product { node: id, a, b, bias, shape, out })
}

impl HostMatmul {
    fn wants_aten(&self, shape: &MatmulShape) -> bool {
        match &self.kernel {
            Kernel::Xla => false,
            Kernel::Aten => true,
            Kernel::Measured(choice) => choice.0.host_matmul(shape),
        }
    }
}

impl Pass for HostMatmul {
    fn run(&self, g: &mut Graph) -> Result<bool, PassError> {
        if g.mesh.is_some() || matches!(self.kernel, Kernel::Xla) {
            return Ok(false);
        }
        let chosen: Vec<Product> =
            order(g).into_iter().filter_map(|id| matched(g, id)).filter(|p| self.wants_aten(&p.shape)).collect();
        for p in &chosen {
            let attrs = [
                TRANSPOSE_A.entry(p.shape.transpose_a),
                TRANSPOSE_B.entry(p.shape.transpose_b),
                FORM.entry(ATEN.to_string()),
            ];
            let op = OpName::new("tpu", "matmul", None);
            let mut product = g.add_op(op, vec![p.a, p.b], attrs.into_iter().collect(), vec![p.out.clone()]);
            let loc = g.node(p.node).loc;
            if let Some(bias) = p.bias {
                if let Some(loc) = loc {
                    g.set_loc(product, loc);
                }
                let add = OpName::new("aten", "add", Some("Tensor"));
                product = g.add_op(add, vec![Value::new(product, 0), bias], Default::default(), vec![p.out.clone()]);
            }
            if let Some(loc) = loc {
                g.set_loc(product, loc);
            }
            g.replace_all_uses(Value::new(p.node, 0), Value::new(product, 0));
            g.remove_node(p.node);
        }
        // Transposes the kernel now reads through are left unread (unless something else reads them).
        if !chosen.is_empty() {
            super::dce::remove_dead_nodes(g);
        }
        Ok(!chosen.is_empty())
    }
}
