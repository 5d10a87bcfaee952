//! Shared helpers for rewrites: reading constant values out of the graph and PyTorch's
//! element conversions.

use crate::ir::attr::{round_to_dtype, wrap_int};
use crate::ir::{Attr, DType, Elements, Graph, Literal, NodeKind, TensorType, Value};

/// One element of a constant, in the widest form of its kind.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Scalar {
    F(f64),
    I(i64),
    B(bool),
}

impl Scalar {
    pub fn from_attr(a: &Attr) -> Option<Scalar> {
        match a {
            Attr::Int(i) => Some(Scalar::I(*i)),
            Attr::Float(x) => Some(Scalar::F(*x)),
            Attr::Bool(b) => Some(Scalar::B(*b)),
            _ => None,
        }
    }

    /// Converts as PyTorch's `.to(dtype)` does; `None` where C++ leaves the result undefined
    /// (non-finite or out-of-range float to int) or for dtypes the folder does not model.
    pub fn cast(self, to: DType) -> Option<Scalar> {
        if matches!(to, DType::F16 | DType::BF16 | DType::C64 | DType::C128) {
            return None;
        }
        Some(match (self, to) {
            (Scalar::F(x), DType::Bool) => Scalar::B(x != 0.0),
            (Scalar::I(i), DType::Bool) => Scalar::B(i != 0),
            (Scalar::B(b), DType::Bool) => Scalar::B(b),
            (Scalar::F(x), t) if t.is_float() => Scalar::F(round_to_dtype(t, x)),
            (Scalar::I(i), t) if t.is_float() => Scalar::F(round_to_dtype(t, i as f64)),
            (Scalar::B(b), t) if t.is_float() => Scalar::F(b as i64 as f64),
            (Scalar::F(x), t) => {
                let x = x.trunc();
                // i64 covers every narrower int; the wrap below is what a C cast does for those.
                if !x.is_finite() || !(-9.223372036854776e18..9.223372036854776e18).contains(&x) {
                    return None;
                }
                Scalar::I(wrap_int(t, x as i64))
            }
            (Scalar::I(i), t) => Scalar::I(wrap_int(t, i)),
            (Scalar::B(b), _) => Scalar::I(b as i64),
        })
    }

    pub fn as_f64(self) -> f64 {
        match self {
            Scalar::F(x) => x,
            Scalar::I(i) => i as f64,
            Scalar::B(b) => b as i64 as f64,
        }
    }

    pub fn is_zero(self) -> bool {
        self.as_f64() == 0.0
    }

    pub fn is_one(self) -> bool {
        self.as_f64() == 1.0
    }

    /// Zero with a negative sign bit (only floats have one).
    pub fn is_negative_zero(self) -> bool {
        matches!(self, Scalar::F(x) if x == 0.0 && x.is_sign_negative())
    }
}

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
            let Some(Attr::Tensor(l)) = node.attr("value") else { return None };
            let vals = literal_scalars(l);
            let first = *vals.first()?;
            if !vals.iter().all(|x| *x == first || (x.as_f64().is_nan() && first.as_f64().is_nan())) {
                return None;
            }
            first
        }
        ("aten", "full") => Scalar::from_attr(node.attr("fill_value")?)?,
        ("aten", "scalar_tensor") => Scalar::from_attr(node.attr("s")?)?,
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
        let Some(Attr::Tensor(l)) = node.attr("value") else { return None };
        literal_scalars(l)
    } else if op.is("aten", "arange") {
        let num = |k: &str, d: f64| node.attr(k).map_or(Some(d), Attr::as_number);
        let (start, step) = (num("start", 0.0)?, num("step", 1.0)?);
        // PyTorch computes `start + i * step` in double, then casts to the dtype.
        (0..numel).map(|i| Scalar::F(start + i as f64 * step).cast(ty.dtype)).collect::<Option<_>>()?
    } else {
        let s = splat_value(g, v)?;
        vec![s; numel as usize]
    };
    (vals.len() as i64 == numel).then_some(ConstTensor { ty, dims, vals })
}
