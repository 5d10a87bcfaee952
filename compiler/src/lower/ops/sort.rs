//! Sorting and order statistics: sort (and sort.stable), topk, kthvalue, median/nanmedian
//! as one stable `stablehlo.sort` of the values with their positions; searchsorted/bucketize
//! by counting; cummax/cummin as a prefix window. NaN sorts as the largest value, as in PyTorch: last ascending, first
//! descending; equal values keep their original order.

use crate::ir::DType;
use crate::ir::Scalar;
use crate::lower::emitter::{Cmp, Emitter, Tv};
use crate::lower::error::{bad, RuleResult};
use crate::lower::legality::Check;
use crate::lower::names::hlo;
use crate::lower::node::{dim, product, NodeCtx};
use crate::lower::ops::indexing::{coordinates, gather_at};
use crate::lower::ops::reduce::reduce_with;
use crate::lower::param::{Extreme, Median, Reduction, Search};
use crate::registry::attrs::{DESCENDING, DIM, K, LARGEST, RIGHT, SIDE};

type R<'c, 'a> = RuleResult<Vec<Tv<'c, 'a>>>;

/// Sorts `x` along `d`; returns (values, int64 indices).
fn sort_along<'c, 'a>(
    e: &Emitter<'c, 'a>,
    x: &Tv<'c, 'a>,
    d: usize,
    descending: bool,
) -> RuleResult<(Tv<'c, 'a>, Tv<'c, 'a>)> {
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
            let first_num = b.ew(hlo::NOT, &[&first_nan], DType::Bool)?;
            let nan_after = b.ew(hlo::AND, &[&first_num, &second_nan], DType::Bool)?;
            before = b.ew(hlo::OR, &[&before, &nan_after], DType::Bool)?;
        }
        Ok(vec![before])
    })?;
    let vals = e.build(
        hlo::SORT,
        &[x.v, iota.v],
        &[e.ty(dt, &x.dims), e.ty(DType::I64, &x.dims)],
        &[("dimension", e.attr(&format!("{d} : i64"))?), ("is_stable", e.attr("true")?)],
        vec![region],
    )?;
    Ok((Tv { v: vals[0], dtype: dt, dims: x.dims.clone() }, Tv { v: vals[1], dtype: DType::I64, dims: x.dims.clone() }))
}

/// A 0-d input to a (values, indices) op: itself, at index 0.
fn scalar_with_index<'c, 'a>(e: &Emitter<'c, 'a>, x: &Tv<'c, 'a>) -> R<'c, 'a> {
    Ok(vec![x.clone(), e.constant(DType::I64, &[], Scalar::I(0))?])
}

/// sort(self, dim=-1, descending=False) / sort.stable(self, *, stable, dim, descending).
pub fn sort<'c, 'a>(e: &Emitter<'c, 'a>, n: &NodeCtx<'c, 'a, '_>) -> R<'c, 'a> {
    let x = n.arg(0)?;
    if x.rank() == 0 {
        return scalar_with_index(e, x);
    }
    let d = dim(n.get_or(DIM, -1)?, x.rank())?;
    let (values, indices) = sort_along(e, x, d, n.get_or(DESCENDING, false)?)?;
    Ok(vec![values, indices])
}

/// topk(self, k, dim=-1, largest=True, sorted=True): the first k of a sort.
pub fn topk<'c, 'a>(e: &Emitter<'c, 'a>, n: &NodeCtx<'c, 'a, '_>) -> R<'c, 'a> {
    let x = n.arg(0)?;
    let k = n.get(K)?;
    if x.rank() == 0 {
        return scalar_with_index(e, x);
    }
    let d = dim(n.get_or(DIM, -1)?, x.rank())?;
    if k < 0 || k > x.dims[d] {
        return bad!("k = {k} is out of range for dim {d} of size {}", x.dims[d]);
    }
    let (values, indices) = sort_along(e, x, d, n.get_or(LARGEST, true)?)?;
    let lo = vec![0; x.rank()];
    let mut hi = x.dims.clone();
    hi[d] = k;
    let ones = vec![1; x.rank()];
    Ok(vec![e.slice(&values, &lo, &hi, &ones)?, e.slice(&indices, &lo, &hi, &ones)?])
}

/// Values and indices at position `pos` (shape of `vals` without `d`) along `d`.
fn pick<'c, 'a>(
    e: &Emitter<'c, 'a>,
    vals: &Tv<'c, 'a>,
    idx: &Tv<'c, 'a>,
    d: usize,
    pos: &Tv<'c, 'a>,
) -> RuleResult<(Tv<'c, 'a>, Tv<'c, 'a>)> {
    let mut kept = vals.dims.clone();
    kept[d] = 1;
    let pos = e.reshape(pos, &kept)?;
    let coords = coordinates(e, &pos, d, vals.rank())?;
    Ok((gather_at(e, vals, &coords)?, gather_at(e, idx, &coords)?))
}

fn keep_or_drop(n: &NodeCtx, i: usize) -> Vec<i64> {
    n.results[i].1.clone()
}

/// kthvalue(self, k, dim=-1, keepdim=False): position k-1 of an ascending sort.
pub fn kthvalue<'c, 'a>(e: &Emitter<'c, 'a>, n: &NodeCtx<'c, 'a, '_>) -> R<'c, 'a> {
    let x = n.arg(0)?;
    if x.rank() == 0 {
        return scalar_with_index(e, x);
    }
    let d = dim(n.get_or(DIM, -1)?, x.rank())?;
    let k = n.get(K)?;
    if k < 1 || k > x.dims[d] {
        return bad!("k = {k} is out of range for dim {d} of size {}", x.dims[d]);
    }
    let (vals, idx) = sort_along(e, x, d, false)?;
    let mut kept = x.dims.clone();
    kept[d] = 1;
    let pos = e.constant(DType::I64, &kept, Scalar::I(k - 1))?;
    let (v, i) = pick(e, &vals, &idx, d, &pos)?;
    Ok(vec![e.reshape(&v, &keep_or_drop(n, 0))?, e.reshape(&i, &keep_or_drop(n, 1))?])
}

/// median / nanmedian, whole tensor or along `dim`: the lower median of an ascending sort.
/// median returns the first NaN when a row has one; nanmedian skips NaNs.
pub fn median<'c, 'a>(e: &Emitter<'c, 'a>, n: &NodeCtx<'c, 'a, '_>) -> R<'c, 'a> {
    let skip_nan = n.param::<Median>()? == Median::NanMedian;
    let x0 = n.arg(0)?;
    let (x, d) = match n.raw(DIM).filter(|a| !a.is_none()) {
        Some(_) if x0.rank() > 0 => (x0.clone(), dim(n.get(DIM)?, x0.rank())?),
        _ => (e.reshape(x0, &[product(x0.dims.iter().copied())?.max(1)])?, 0),
    };
    if x.dims[d] == 0 {
        return bad!("median of an empty dim");
    }
    let (vals, idx) = sort_along(e, &x, d, false)?;
    let mut kept = x.dims.clone();
    kept[d] = 1;
    let size = e.constant(DType::I64, &kept, Scalar::I(x.dims[d]))?;
    let pos = if x.dtype.is_float() {
        let nan = e.convert(&e.compare(&x, &x, Cmp::Ne)?, DType::I64)?;
        let nans = e.reshape(&reduce_with(e, &nan, &[d], Reduction::Sum)?, &kept)?;
        let finite = e.ew(hlo::SUBTRACT, &[&size, &nans], DType::I64)?;
        let one = e.constant(DType::I64, &kept, Scalar::I(1))?;
        let two = e.constant(DType::I64, &kept, Scalar::I(2))?;
        let zero = e.constant(DType::I64, &kept, Scalar::I(0))?;
        let lower_mid = e.ew(hlo::DIVIDE, &[&e.ew(hlo::SUBTRACT, &[&finite, &one], DType::I64)?, &two], DType::I64)?;
        let any_nan = e.compare(&nans, &zero, Cmp::Gt)?;
        if skip_nan {
            let all_nan = e.compare(&finite, &zero, Cmp::Eq)?;
            e.select(&all_nan, &zero, &lower_mid)?
        } else {
            e.select(&any_nan, &finite, &lower_mid)?
        }
    } else {
        e.constant(DType::I64, &kept, Scalar::I((x.dims[d] - 1) / 2))?
    };
    let (v, i) = pick(e, &vals, &idx, d, &pos)?;
    let mut outs = vec![e.reshape(&v, &keep_or_drop(n, 0))?];
    if n.results.len() > 1 {
        outs.push(e.reshape(&i, &keep_or_drop(n, 1))?);
    }
    Ok(outs)
}

/// searchsorted with a `sorter` (a third tensor operand) is not lowered.
pub fn searchsorted_legal(c: &Check) -> Result<(), String> {
    match c.operands.len() {
        0..=2 => Ok(()),
        _ => Err("searchsorted with a sorter".into()),
    }
}

/// searchsorted(sorted_sequence, self, out_int32, right, side, sorter) and
/// bucketize(self, boundaries, out_int32, right): how many sequence values lie below each
/// value (at or below with right=True), by comparing every pair; NaN sorts last.
pub fn searchsorted<'c, 'a>(e: &Emitter<'c, 'a>, n: &NodeCtx<'c, 'a, '_>) -> R<'c, 'a> {
    let bucketize = n.param::<Search>()? == Search::Bucketize;
    let (seq, vals) = if bucketize { (n.arg(1)?, n.arg(0)?) } else { (n.arg(0)?, n.arg(1)?) };
    let right = n.get_or(RIGHT, false)? || n.get_or(SIDE, "left")? == "right";
    let common = crate::lower::promote::result_type(
        &[crate::lower::promote::Operand::Dim(seq.dtype), crate::lower::promote::Operand::Dim(vals.dtype)],
        DType::F32,
    )
    .unwrap_or(vals.dtype);
    let (seq, vals) = (e.convert(seq, common)?, e.convert(vals, common)?);
    let m = *seq.dims.last().unwrap_or(&1);
    let vr = vals.rank();
    // pairs[..., k, j] = seq[..., j] vs vals[..., k]
    let mut pair = vals.dims.clone();
    pair.push(m);
    let vb = e.broadcast_in_dim(&vals, &pair, &(0..vr as i64).collect::<Vec<_>>())?;
    let seq_map: Vec<i64> =
        if seq.rank() == 1 { vec![vr as i64] } else { (0..vr as i64 - 1).chain([vr as i64]).collect() };
    let sb = e.broadcast_in_dim(&seq, &pair, &seq_map)?;
    let mut below = e.compare(&sb, &vb, if right { Cmp::Le } else { Cmp::Lt })?;
    if common.is_float() {
        // A NaN value goes after every number; a NaN in the sequence after every value.
        let v_nan = e.compare(&vb, &vb, Cmp::Ne)?;
        let s_nan = e.compare(&sb, &sb, Cmp::Ne)?;
        let not_s_nan = e.ew(hlo::NOT, &[&s_nan], DType::Bool)?;
        let nan_case = e.ew(hlo::AND, &[&v_nan, &not_s_nan], DType::Bool)?;
        below = e.ew(hlo::OR, &[&below, &nan_case], DType::Bool)?;
        if right {
            let both = e.ew(hlo::AND, &[&v_nan, &s_nan], DType::Bool)?;
            below = e.ew(hlo::OR, &[&below, &both], DType::Bool)?;
        }
    }
    let count = reduce_with(e, &e.convert(&below, DType::I64)?, &[vr], Reduction::Sum)?;
    Ok(vec![e.convert(&e.reshape(&count, n.out_dims())?, n.out_dtype())?])
}

/// cummax / cummin (self, dim): running extreme and the index where it was last reached
/// (later equal values win; NaN wins and sticks), as one prefix reduce_window of pairs.
pub fn cumulative_extreme<'c, 'a>(e: &Emitter<'c, 'a>, n: &NodeCtx<'c, 'a, '_>) -> R<'c, 'a> {
    let want_max = n.param::<Extreme>()? == Extreme::Max;
    let x = n.arg(0)?;
    if x.rank() == 0 {
        return scalar_with_index(e, x);
    }
    let d = dim(n.get(DIM)?, x.rank())?;
    let dt = x.dtype;
    let iota = e.iota(DType::I64, &x.dims, d)?;
    let region = e.scalar_region(&[dt, DType::I64, dt, DType::I64], |b, a| {
        let (av, ai, bv, bi) = (&a[0], &a[1], &a[2], &a[3]);
        // Does b beat a?
        let strictly = b.compare(bv, av, if want_max { Cmp::Gt } else { Cmp::Lt })?;
        let equal = b.compare(bv, av, Cmp::Eq)?;
        let later = b.compare(bi, ai, Cmp::Gt)?;
        let tie = b.ew(hlo::AND, &[&equal, &later], DType::Bool)?;
        let mut b_wins = b.ew(hlo::OR, &[&strictly, &tie], DType::Bool)?;
        if dt.is_float() {
            let a_nan = b.compare(av, av, Cmp::Ne)?;
            let b_nan = b.compare(bv, bv, Cmp::Ne)?;
            let not_a_nan = b.ew(hlo::NOT, &[&a_nan], DType::Bool)?;
            // b NaN: wins over a number, and over a NaN when later.
            let b_nan_wins =
                b.ew(hlo::AND, &[&b_nan, &b.ew(hlo::OR, &[&not_a_nan, &later], DType::Bool)?], DType::Bool)?;
            let b_num_wins = b.ew(hlo::AND, &[&b_wins, &not_a_nan], DType::Bool)?;
            b_wins = b.ew(hlo::OR, &[&b_nan_wins, &b_num_wins], DType::Bool)?;
        }
        Ok(vec![b.select(&b_wins, bv, av)?, b.select(&b_wins, bi, ai)?])
    })?;
    let worst = if dt.is_float() {
        Scalar::F(if want_max { f64::NEG_INFINITY } else { f64::INFINITY })
    } else if dt == DType::Bool {
        Scalar::B(!want_max)
    } else if dt == DType::U8 {
        Scalar::I(if want_max { 0 } else { 255 })
    } else {
        Scalar::I(if want_max { i64::MIN } else { i64::MAX })
    };
    let init_v = e.constant(dt, &[], worst)?;
    let init_i = e.constant(DType::I64, &[], Scalar::I(-1))?;
    e.prefix_scan(&[x, &iota], &[&init_v, &init_i], d, region)
}
