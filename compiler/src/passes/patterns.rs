//! Shared helpers for rewrites: reading constant values out of the graph and PyTorch's
//! element conversions.

pub(crate) use crate::ir::Scalar;
use crate::ir::{Attr, DType, Dim, Elements, Graph, Literal, NodeKind, TensorType, Value};
use crate::registry::attrs::{AttrKey, Number, FILL_VALUE, S, START_NUMBER, STEP_NUMBER, VALUE};

/// A constant tensor with a static shape, element by element.
#[derive(Clone, Debug)]
pub(crate) struct ConstTensor {
    pub ty: TensorType,
    pub dims: Vec<i64>,
    pub vals: Vec<Scalar>,
}

impl ConstTensor {
    pub fn to_literal(&self) -> Option<Literal> {
        let elems = if self.ty.dtype == DType::Bool {
            Elements::Bool(self.vals.iter().map(|v| matches!(v, Scalar::B(true))).collect())
        } else if self.ty.dtype.is_integer() {
            Elements::Int(
                self.vals.iter().map(|v| if let Scalar::I(i) = v { Some(*i) } else { None }).collect::<Option<_>>()?,
            )
        } else {
            Elements::Float(self.vals.iter().map(|v| v.as_f64()).collect())
        };
        Literal::new(self.ty.clone(), elems).ok()
    }
}

fn literal_scalars(l: &Literal) -> Vec<Scalar> {
    match &l.elems {
        Elements::Float(v) => v.iter().map(|x| Scalar::F(*x)).collect(),
        Elements::Int(v) => v.iter().map(|x| Scalar::I(*x)).collect(),
        Elements::Bool(v) => v.iter().map(|x| Scalar::B(*x)).collect(),
    }
}

/// The single value every element of `v` holds, if `v` is a splat constant
/// (`tpu.constant` with equal elements, `aten.full`, `aten.scalar_tensor`), in `v`'s dtype.
pub(crate) fn splat_value(g: &Graph, v: Value) -> Option<Scalar> {
    let node = g.node(v.node);
    let NodeKind::Op(op) = &node.kind else { return None };
    let dtype = node.results.first()?.dtype;
    let raw = match (op.namespace.as_str(), op.name.as_str()) {
        ("tpu", "constant") => {
            let Some(Attr::Tensor(l)) = node.attr(VALUE) else { return None };
            let vals = literal_scalars(l);
            let first = *vals.first()?;
            if !vals.iter().all(|x| *x == first || (x.as_f64().is_nan() && first.as_f64().is_nan())) {
                return None;
            }
            first
        }
        ("aten", "full") => Scalar::from_attr(node.attr(FILL_VALUE)?)?,
        ("aten", "scalar_tensor") => Scalar::from_attr(node.attr(S)?)?,
        _ => return None,
    };
    raw.cast(dtype)
}

/// The full contents of `v` when it is a constant of at most `max_elements` elements.
pub(crate) fn const_tensor(g: &Graph, v: Value, max_elements: i64) -> Option<ConstTensor> {
    let node = g.node(v.node);
    let NodeKind::Op(op) = &node.kind else { return None };
    let ty = node.results.get(v.result as usize)?.clone();
    let dims = ty.static_dims()?;
    let numel = crate::ir::types::checked_numel(&dims)?;
    if numel > max_elements {
        return None;
    }
    let vals = if op.is("tpu", "constant") {
        let Some(Attr::Tensor(l)) = node.attr(VALUE) else { return None };
        literal_scalars(l)
    } else if op.is("aten", "arange") {
        let num = |k: AttrKey<Number>, d: f64| node.attr(k).map_or(Some(d), Attr::as_number);
        let (start, step) = (num(START_NUMBER, 0.0)?, num(STEP_NUMBER, 1.0)?);
        // PyTorch computes `start + i * step` in double, then casts to the dtype.
        (0..numel).map(|i| Scalar::F(start + i as f64 * step).cast(ty.dtype)).collect::<Option<_>>()?
    } else {
        let s = splat_value(g, v)?;
        vec![s; numel as usize]
    };
    (vals.len() as i64 == numel).then_some(ConstTensor { ty, dims, vals })
}

/// `(rows, columns)` of a rank-2 type with static dims.
pub(crate) fn static2(t: &TensorType) -> Option<(i64, i64)> {
    match t.shape.as_slice() {
        [Dim::Static(a), Dim::Static(b)] => Some((*a, *b)),
        _ => None,
    }
}

/// Whether any value of `g` (an input or a node's result) has dtype `d`: a pass whose pattern
/// needs such a value skips the graphs without one before matching node by node.
pub(crate) fn holds_dtype(g: &Graph, d: DType) -> bool {
    g.petgraph().node_weights().any(|n| n.results.iter().any(|t| t.dtype == d))
}
