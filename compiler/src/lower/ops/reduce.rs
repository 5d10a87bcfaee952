//! Reductions: sum, mean, prod, amax/amin, any/all, argmax/argmin, max/min with indices, var.
//! `dim=None` (or, for sum/mean/amax/amin, an empty list) reduces every dim; `keepdim` is
//! honoured through the declared result shape.

use crate::ir::DType;
use crate::ir::Scalar;
use crate::lower::emitter::{Cmp, Emitter, Tv};
use crate::lower::error::{bad, RuleResult};
use crate::lower::legality::Check;
use crate::lower::names::hlo;
use crate::lower::node::{dim, product, NodeCtx};
use crate::lower::param::{ArgReduction, Reduction};
use crate::registry::attrs::{CORRECTION, DIM, DIM_LIST, UNBIASED};

type R<'c, 'a> = RuleResult<Vec<Tv<'c, 'a>>>;

/// The dims to reduce: the `dim` attribute normalised, or all dims.
fn reduced_dims(n: &NodeCtx, rank: usize, empty_means_all: bool) -> RuleResult<Vec<usize>> {
    let dims = match n.opt(DIM_LIST)? {
        Some(v) if !(v.is_empty() && empty_means_all) => v,
        _ => return Ok((0..rank).collect()),
    };
    let mut out: Vec<usize> = dims.iter().map(|&d| dim(d, rank)).collect::<RuleResult<_>>()?;
    out.sort_unstable();
    out.dedup();
    // Rank-0 tensors have no dim to reduce even when `dim=0` is given.
    out.retain(|&d| d < rank);
    Ok(out)
}

/// The identity element of a reduction, for a dtype.
/// (`Mean` and `Var` accumulate a sum.)
pub(crate) fn init(d: DType, kind: Reduction) -> Scalar {
    use Reduction as K;
    match (kind, d) {
        (K::Sum | K::Mean | K::Var | K::Or, DType::Bool) => Scalar::B(false),
        (K::Prod | K::And, DType::Bool) => Scalar::B(true),
        (K::Sum | K::Mean | K::Var | K::Or, _) => Scalar::I(0),
        (K::Prod | K::And, _) => Scalar::I(1),
        (K::Max, DType::Bool) => Scalar::B(false),
        (K::Min, DType::Bool) => Scalar::B(true),
        (K::Max, d) if d.is_float() => Scalar::F(f64::NEG_INFINITY),
        (K::Min, d) if d.is_float() => Scalar::F(f64::INFINITY),
        (K::Max, DType::U8) => Scalar::I(0),
        (K::Min, DType::U8) => Scalar::I(255),
        (K::Max, d) => Scalar::I(int_limit(d, false)),
        (K::Min, d) => Scalar::I(int_limit(d, true)),
    }
}

fn int_limit(d: DType, max: bool) -> i64 {
    match (d, max) {
        (DType::I8, true) => i8::MAX as i64,
        (DType::I8, false) => i8::MIN as i64,
        (DType::I16, true) => i16::MAX as i64,
        (DType::I16, false) => i16::MIN as i64,
        (DType::I32, true) => i32::MAX as i64,
        (DType::I32, false) => i32::MIN as i64,
        (_, true) => i64::MAX,
        (_, false) => i64::MIN,
    }
}

fn body_op(kind: Reduction, d: DType) -> &'static str {
    use Reduction as K;
    match (kind, d) {
        (K::Sum | K::Mean | K::Var, DType::Bool) | (K::Or, _) => hlo::OR,
        (K::Prod, DType::Bool) | (K::And, _) => hlo::AND,
        (K::Sum | K::Mean | K::Var, _) => hlo::ADD,
        (K::Prod, _) => hlo::MULTIPLY,
        (K::Max, _) => hlo::MAXIMUM,
        (K::Min, _) => hlo::MINIMUM,
    }
}

/// The dtype a sum, product or variance accumulates in: f32 for bf16/f16 results, as
/// PyTorch's CPU kernels do (rounding every partial sum to 8 mantissa bits drifts far from
/// eager), else the result dtype.
pub fn accumulator(out: DType) -> DType {
    if matches!(out, DType::BF16 | DType::F16) {
        DType::F32
    } else {
        out
    }
}

/// One plain reduction of `x` (already in the compute dtype) over `dims`.
pub fn reduce_with<'c, 'a>(
    e: &Emitter<'c, 'a>,
    x: &Tv<'c, 'a>,
    dims: &[usize],
    kind: Reduction,
) -> RuleResult<Tv<'c, 'a>> {
    if dims.is_empty() {
        return Ok(x.clone());
    }
    let d = x.dtype;
    let init_v = e.constant(d, &[], init(d, kind))?;
    let op = body_op(kind, d);
    let out = e.reduce(&[x], &[&init_v], dims, |b, args| {
        Ok(vec![match kind {
            Reduction::Max | Reduction::Min => b.minmax(&args[0], &args[1], kind == Reduction::Max)?,
            _ => b.ew(op, &[&args[0], &args[1]], d)?,
        }])
    })?;
    Ok(out.into_iter().next().expect("one result"))
}

/// sum, prod, amax, amin, any, all and mean; the registry's parameter is the reduction
/// (`sum`, `prod`, `max`, `min`, `or`, `and`, `mean`).
pub fn simple<'c, 'a>(e: &Emitter<'c, 'a>, n: &NodeCtx<'c, 'a, '_>) -> R<'c, 'a> {
    let name: Reduction = n.param()?;
    let x = n.arg(0)?;
    let out = n.out_dtype();
    let (kind, compute, empty_all) = match name {
        Reduction::Sum | Reduction::Mean => (Reduction::Sum, accumulator(out), true),
        Reduction::Prod => (Reduction::Prod, accumulator(out), false),
        Reduction::Max | Reduction::Min => (name, out, true),
        Reduction::Or | Reduction::And => (name, DType::Bool, false),
        Reduction::Var => return bad!("no plain reduction var"),
    };
    let dims = reduced_dims(n, x.rank(), empty_all)?;
    let xc = e.convert(x, compute)?;
    let mut r = reduce_with(e, &xc, &dims, kind)?;
    if name == Reduction::Mean {
        let count: i64 = product(dims.iter().map(|&d| x.dims[d]))?;
        let c = e.constant(compute, &r.dims.clone(), Scalar::I(count))?;
        r = e.true_divide(&r, &c, compute)?;
    }
    let r = e.convert(&r, out)?;
    Ok(vec![e.reshape(&r, n.out_dims())?])
}

/// mean: of a floating or complex result only (PyTorch raises for integers).
pub fn mean_legal(c: &Check) -> Result<(), String> {
    match c.out_dtype() {
        Some(d) if !d.is_float() && !d.is_complex() => Err("mean of an integer result".into()),
        _ => Ok(()),
    }
}

/// var (and prims.var): of a floating result only.
pub fn float_result(c: &Check) -> Result<(), String> {
    match c.out_dtype() {
        Some(d) if !d.is_float() => Err(format!("a {d} result (floating results only)")),
        _ => Ok(()),
    }
}

/// (value, index) reduction picking the max (or min) with the first index on ties and NaN
/// counted as the extreme, as PyTorch's argmax/max.dim do.
fn arg_reduce<'c, 'a>(
    e: &Emitter<'c, 'a>,
    x: &Tv<'c, 'a>,
    d: usize,
    want_max: bool,
) -> RuleResult<(Tv<'c, 'a>, Tv<'c, 'a>)> {
    let idx = e.iota(DType::I64, &x.dims, d)?;
    let dtype = x.dtype;
    let init_v = e.constant(dtype, &[], init(dtype, if want_max { Reduction::Max } else { Reduction::Min }))?;
    let init_i = e.constant(DType::I64, &[], Scalar::I(0))?;
    let out = e.reduce(&[x, &idx], &[&init_v, &init_i], &[d], |b, a| {
        let (av, ai, bv, bi) = (&a[0], &a[1], &a[2], &a[3]);
        let better = b.compare(av, bv, if want_max { Cmp::Gt } else { Cmp::Lt })?;
        let equal = b.compare(av, bv, Cmp::Eq)?;
        let earlier = b.compare(ai, bi, Cmp::Lt)?;
        let tie = b.ew(hlo::AND, &[&equal, &earlier], DType::Bool)?;
        let mut pick_a = b.ew(hlo::OR, &[&better, &tie], DType::Bool)?;
        if dtype.is_float() {
            let a_nan = b.compare(av, av, Cmp::Ne)?;
            let b_nan = b.compare(bv, bv, Cmp::Ne)?;
            // a NaN wins unless b is NaN too (then the earlier index wins); a non-NaN never
            // beats a NaN.
            let both = b.ew(hlo::AND, &[&a_nan, &b_nan], DType::Bool)?;
            let nan_pick = b.select(&both, &earlier, &a_nan)?;
            let any_nan = b.ew(hlo::OR, &[&a_nan, &b_nan], DType::Bool)?;
            pick_a = b.select(&any_nan, &nan_pick, &pick_a)?;
        }
        Ok(vec![b.select(&pick_a, av, bv)?, b.select(&pick_a, ai, bi)?])
    })?;
    let mut it = out.into_iter();
    Ok((it.next().expect("value"), it.next().expect("index")))
}

/// argmax/argmin(self, dim=None, keepdim=False) and max.dim/min.dim (values, indices).
pub fn arg<'c, 'a>(e: &Emitter<'c, 'a>, n: &NodeCtx<'c, 'a, '_>) -> R<'c, 'a> {
    let name: ArgReduction = n.param()?;
    let want_max = matches!(name, ArgReduction::ArgMax | ArgReduction::Max);
    let x = n.arg(0)?;
    if matches!(name, ArgReduction::Max | ArgReduction::Min) && n.results.len() == 1 {
        // max(self) / min(self): a full reduction to one value.
        let kind = if want_max { Reduction::Max } else { Reduction::Min };
        let all: Vec<usize> = (0..x.rank()).collect();
        let r = reduce_with(e, x, &all, kind)?;
        return Ok(vec![e.reshape(&r, n.out_dims())?]);
    }
    let (x, d) = match n.raw(DIM).filter(|a| !a.is_none()) {
        Some(_) => (x.clone(), dim(n.get(DIM)?, x.rank())?),
        None => {
            let numel: i64 = product(x.dims.iter().copied())?;
            (e.reshape(x, &[numel])?, 0)
        }
    };
    if x.rank() == 0 {
        let zero = e.constant(DType::I64, &[], Scalar::I(0))?;
        return Ok(match n.results.len() {
            1 => vec![e.reshape(&zero, n.out_dims())?],
            _ => vec![e.reshape(&x, &n.results[0].1)?, e.reshape(&zero, &n.results[1].1)?],
        });
    }
    let (values, indices) = arg_reduce(e, &x, d, want_max)?;
    Ok(match n.results.len() {
        1 => vec![e.reshape(&indices, n.out_dims())?],
        _ => vec![e.reshape(&values, &n.results[0].1)?, e.reshape(&indices, &n.results[1].1)?],
    })
}

/// var(self, dim, correction=1, keepdim): sum((x - mean)^2) / (N - correction).
pub fn var<'c, 'a>(e: &Emitter<'c, 'a>, n: &NodeCtx<'c, 'a, '_>) -> R<'c, 'a> {
    let x = n.arg(0)?;
    let out = n.out_dtype();
    let dims = reduced_dims(n, x.rank(), true)?;
    let correction = match n.raw(CORRECTION) {
        Some(a) if !a.is_none() => n.get_or(CORRECTION, 1.0)?,
        _ => {
            if n.get_or(UNBIASED, true)? {
                1.0
            } else {
                0.0
            }
        }
    };
    let v = if x.dtype.is_complex() {
        complex_variance(e, x, &dims, correction, out)?
    } else {
        variance(e, &e.convert(x, out)?, &dims, correction)?
    };
    Ok(vec![e.reshape(&v, n.out_dims())?])
}

/// Variance of a complex `x`, a real `out`: E|z - E z|^2 = var(re z) + var(im z).
pub fn complex_variance<'c, 'a>(
    e: &Emitter<'c, 'a>,
    x: &Tv<'c, 'a>,
    dims: &[usize],
    correction: f64,
    out: DType,
) -> RuleResult<Tv<'c, 'a>> {
    let (re, im) = e.complex_parts(x)?;
    let vr = variance(e, &e.convert(&re, out)?, dims, correction)?;
    let vi = variance(e, &e.convert(&im, out)?, dims, correction)?;
    e.ew(hlo::ADD, &[&vr, &vi], out)
}

/// Variance of `x` (already in its float result dtype) over `dims` with Bessel's `correction`:
/// two passes (mean, then the mean of squared deviations) for accuracy. Result: `x` without
/// the reduced dims.
pub fn variance<'c, 'a>(
    e: &Emitter<'c, 'a>,
    x: &Tv<'c, 'a>,
    dims: &[usize],
    correction: f64,
) -> RuleResult<Tv<'c, 'a>> {
    if accumulator(x.dtype) != x.dtype {
        let wide = variance(e, &e.convert(x, accumulator(x.dtype))?, dims, correction)?;
        return e.convert(&wide, x.dtype);
    }
    let out = x.dtype;
    let count: i64 = product(dims.iter().map(|&d| x.dims[d]))?;
    let sum = reduce_with(e, x, dims, Reduction::Sum)?;
    let mean = e.true_divide(&sum, &e.constant(out, &sum.dims.clone(), Scalar::I(count))?, out)?;
    // Put the mean back in x's shape to subtract it.
    let kept: Vec<i64> = (0..x.rank()).map(|i| if dims.contains(&i) { 1 } else { x.dims[i] }).collect();
    let mean = e.broadcast_to(&e.reshape(&mean, &kept)?, &x.dims)?;
    let diff = e.ew(hlo::SUBTRACT, &[x, &mean], out)?;
    let sq = e.ew(hlo::MULTIPLY, &[&diff, &diff], out)?;
    let ss = reduce_with(e, &sq, dims, Reduction::Sum)?;
    let denom = e.constant(out, &ss.dims.clone(), Scalar::F((count as f64 - correction).max(0.0)))?;
    e.true_divide(&ss, &denom, out)
}
