//! Tensor factories: constants (`tpu.constant` literals), full/zeros/ones and their `_like`
//! and `new_` forms, scalar_tensor, arange. `empty*` gives zeros (its contents are
//! unspecified in PyTorch; zeros are one valid choice).

use crate::ir::Scalar;
use crate::ir::{Attr, DType, Elements};
use crate::lower::emitter::{Emitter, Tv};
use crate::lower::error::{bad, RuleResult};
use crate::lower::legality::Check;
use crate::lower::names::hlo;
use crate::lower::node::NodeCtx;
use crate::lower::param::Fill;
use crate::registry::attrs::{AttrKey, Number, FILL_VALUE, S, START_NUMBER, STEP_NUMBER, VALUE};
use melior::ir::attribute::DenseElementsAttribute;

type R<'c, 'a> = RuleResult<Vec<Tv<'c, 'a>>>;

/// full, full_like, new_full, zeros*, ones*, empty*, scalar_tensor: a splat of the declared
/// type. The registry's parameter is the value (`0`, `1`) or the attribute holding it.
pub fn fill<'c, 'a>(e: &Emitter<'c, 'a>, n: &NodeCtx<'c, 'a, '_>) -> R<'c, 'a> {
    let value = match n.param()? {
        Fill::Zero => Scalar::I(0),
        Fill::One => Scalar::I(1),
        from @ (Fill::FillValue | Fill::S) => {
            let key = if from == Fill::S { S } else { FILL_VALUE };
            match n.raw(key).and_then(Scalar::from_attr) {
                Some(s) => s,
                None => return bad!("{} must be a number", key.name),
            }
        }
    };
    Ok(vec![e.constant(n.out_dtype(), n.out_dims(), value)?])
}

/// arange(start=0, end, step=1): `start + i * step`, computed in f64 (i64 for integer
/// results) and then cast, as PyTorch does.
pub fn arange<'c, 'a>(e: &Emitter<'c, 'a>, n: &NodeCtx<'c, 'a, '_>) -> R<'c, 'a> {
    let out = n.out_dtype();
    let dims = n.out_dims().to_vec();
    if dims.len() != 1 {
        return bad!("arange must produce a 1-D tensor");
    }
    let compute = if out.is_float() { DType::F64 } else { DType::I64 };
    let get = |k: AttrKey<Number>, d: f64| -> RuleResult<Scalar> {
        Ok(match n.raw(k) {
            None | Some(Attr::None) => Scalar::F(d),
            Some(a) => Scalar::from_attr(a)
                .ok_or_else(|| crate::lower::error::RuleError::Bad(format!("{} must be a number", k.name)))?,
        })
    };
    let (start, step) = (get(START_NUMBER, 0.0)?, get(STEP_NUMBER, 1.0)?);
    let i = e.iota(compute, &dims, 0)?;
    let step_c = e.constant(compute, &dims, step)?;
    let start_c = e.constant(compute, &dims, start)?;
    let scaled = e.ew(hlo::MULTIPLY, &[&i, &step_c], compute)?;
    let v = e.ew(hlo::ADD, &[&scaled, &start_c], compute)?;
    Ok(vec![e.convert(&v, out)?])
}

/// `tpu.constant`: literals of real dtypes (complex literals are not lowered).
pub fn literal_legal(c: &Check) -> Result<(), String> {
    match c.raw(VALUE) {
        Some(Attr::Tensor(l)) if l.ty.dtype.is_complex() => Err(format!("literals of dtype {}", l.ty.dtype)),
        _ => Ok(()),
    }
}

/// `tpu.constant {value = dense<...>}`: the literal as a StableHLO constant.
pub fn constant<'c, 'a>(e: &Emitter<'c, 'a>, n: &NodeCtx<'c, 'a, '_>) -> R<'c, 'a> {
    let Some(Attr::Tensor(lit)) = n.raw(VALUE) else { return bad!("'value' must be a dense literal") };
    let dims = n.out_dims().to_vec();
    let d = lit.ty.dtype;
    // f16/bf16 literals are held at f32 precision in the IR: emit f32 and convert.
    let storage = if matches!(d, DType::F16 | DType::BF16) { DType::F32 } else { d };
    let ty = e.ty(storage, &dims);
    let attr: DenseElementsAttribute = match (&lit.elems, storage) {
        (Elements::Float(v), DType::F64) => DenseElementsAttribute::f64_values(ty, v),
        (Elements::Float(v), _) => {
            DenseElementsAttribute::f32_values(ty, &v.iter().map(|x| *x as f32).collect::<Vec<_>>())
        }
        (Elements::Int(v), DType::I64) => DenseElementsAttribute::i64_values(ty, v),
        (Elements::Int(v), DType::I32) => {
            DenseElementsAttribute::i32_values(ty, &v.iter().map(|x| *x as i32).collect::<Vec<_>>())
        }
        (Elements::Int(v), DType::I16) => {
            DenseElementsAttribute::i16_values(ty, &v.iter().map(|x| *x as i16).collect::<Vec<_>>())
        }
        (Elements::Int(v), DType::I8) => {
            DenseElementsAttribute::i8_values(ty, &v.iter().map(|x| *x as i8).collect::<Vec<_>>())
        }
        (Elements::Int(v), DType::U8) => {
            DenseElementsAttribute::u8_values(ty, &v.iter().map(|x| *x as u8).collect::<Vec<_>>())
        }
        (Elements::Bool(v), DType::Bool) => {
            DenseElementsAttribute::bool_values(ty, &v.iter().map(|x| *x as i32).collect::<Vec<_>>())
        }
        _ => return bad!("a literal of dtype {d} (refused by `literal_legal`)"),
    };
    let c = e.literal(storage, &dims, attr.into())?;
    Ok(vec![e.convert(&c, n.out_dtype())?])
}
