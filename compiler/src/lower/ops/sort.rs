//! Sorting: sort (and sort.stable), topk, both as one stable `stablehlo.sort` of the values
//! with their positions. NaN sorts as the largest value, as in PyTorch: last ascending, first
//! descending; equal values keep their original order.

use crate::ir::DType;
use crate::lower::emitter::{Cmp, Emitter, Tv};
use crate::lower::error::{bad, RuleResult};
use crate::lower::node::{dim, NodeCtx};

type R<'c, 'a> = RuleResult<Vec<Tv<'c, 'a>>>;

/// Sorts `x` along `d`; returns (values, int64 indices).
fn sort_along<'c, 'a>(e: &Emitter<'c, 'a>, x: &Tv<'c, 'a>, d: usize, descending: bool) -> RuleResult<(Tv<'c, 'a>, Tv<'c, 'a>)> {
    let dt = x.dtype;
    let iota = e.iota(DType::I64, &x.dims, d)?;
    let region = e.scalar_region(&[dt, dt, DType::I64, DType::I64], |b, a| {
        let (lhs, rhs) = (&a[0], &a[1]);
        let (first, second) = if descending { (rhs, lhs) } else { (lhs, rhs) };
        // first < second, with NaN above every number.
        let mut before = b.compare(first, second, Cmp::Lt)?;
        if dt.is_float() {
            let first_nan = b.compare(first, first, Cmp::Ne)?;
            let second_nan = b.compare(second, second, Cmp::Ne)?;
            let first_num = b.ew("stablehlo.not", &[&first_nan], DType::Bool)?;
            let nan_after = b.ew("stablehlo.and", &[&first_num, &second_nan], DType::Bool)?;
            before = b.ew("stablehlo.or", &[&before, &nan_after], DType::Bool)?;
        }
        Ok(vec![before])
    })?;
    let vals = e.build(
        "stablehlo.sort",
        &[x.v, iota.v],
        &[e.ty(dt, &x.dims), e.ty(DType::I64, &x.dims)],
        &[("dimension", e.attr(&format!("{d} : i64"))?), ("is_stable", e.attr("true")?)],
        vec![region],
    )?;
    Ok((Tv { v: vals[0], dtype: dt, dims: x.dims.clone() }, Tv { v: vals[1], dtype: DType::I64, dims: x.dims.clone() }))
}

/// sort(self, dim=-1, descending=False) / sort.stable(self, *, stable, dim, descending).
pub fn sort<'c, 'a>(e: &Emitter<'c, 'a>, n: &NodeCtx<'c, 'a, '_>) -> R<'c, 'a> {
    let x = n.arg(0)?;
    if x.rank() == 0 {
        let zero = e.constant(DType::I64, &[], crate::passes::patterns::Scalar::I(0))?;
        return Ok(vec![x.clone(), zero]);
    }
    let d = dim(n.int_or("dim", -1)?, x.rank())?;
    let (values, indices) = sort_along(e, x, d, n.bool_or("descending", false)?)?;
    Ok(vec![values, indices])
}

/// topk(self, k, dim=-1, largest=True, sorted=True): the first k of a sort.
pub fn topk<'c, 'a>(e: &Emitter<'c, 'a>, n: &NodeCtx<'c, 'a, '_>) -> R<'c, 'a> {
    let x = n.arg(0)?;
    let k = n.int("k")?;
    if x.rank() == 0 {
        let zero = e.constant(DType::I64, &[], crate::passes::patterns::Scalar::I(0))?;
        return Ok(vec![x.clone(), zero]);
    }
    let d = dim(n.int_or("dim", -1)?, x.rank())?;
    if k < 0 || k > x.dims[d] {
        return bad!("k = {k} is out of range for dim {d} of size {}", x.dims[d]);
    }
    let (values, indices) = sort_along(e, x, d, n.bool_or("largest", true)?)?;
    let lo = vec![0; x.rank()];
    let mut hi = x.dims.clone();
    hi[d] = k;
    let ones = vec![1; x.rank()];
    Ok(vec![e.slice(&values, &lo, &hi, &ones)?, e.slice(&indices, &lo, &hi, &ones)?])
}
