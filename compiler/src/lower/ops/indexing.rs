//! Indexing: gather, scatter/scatter_add, index_select, embedding, index/index_put,
//! slice/select_scatter, as_strided(_scatter), put, masked_scatter, nonzero_static,
//! cumsum/cumprod/logcumsumexp.
//! Gathers and scatters use explicit per-element coordinates (one index vector per output
//! element), which keeps every form on one well-tested StableHLO pattern. Out-of-range
//! indices are clamped (gather) or dropped (scatter) by XLA where PyTorch raises.

use crate::ir::Scalar;
use crate::ir::{Attr, DType};
use crate::lower::emitter::{Cmp, Emitter, Tv};
use crate::lower::error::{bad, RuleResult};
use crate::lower::legality::Check;
use crate::lower::names::hlo;
use crate::lower::node::{axis, dim, product, NodeCtx};
use crate::lower::param::{Cumulative, Reduction, Scatter, SliceScatter};
use crate::registry::attrs::{
    ACCUMULATE, BINS, DIM, FILL_VALUE_INT, INCLUDE_SELF, INDEX, INDICES, MAX, MIN, REDUCE, SIZE, SIZE_INT, START, STEP,
    STORAGE_OFFSET, STRIDE, VALUE,
};

type R<'c, 'a> = RuleResult<Vec<Tv<'c, 'a>>>;

fn list(v: impl Iterator<Item = usize>) -> String {
    v.map(|i| i.to_string()).collect::<Vec<_>>().join(", ")
}

/// Coordinates `shape + [rank]` whose component `d` is `index` and every other component
/// `j` is the element's own position along `j`.
pub(crate) fn coordinates<'c, 'a>(
    e: &Emitter<'c, 'a>,
    index: &Tv<'c, 'a>,
    d: usize,
    rank: usize,
) -> RuleResult<Tv<'c, 'a>> {
    let shape = index.dims.clone();
    let idx = e.convert(index, DType::I64)?;
    let parts: Vec<Tv> = (0..rank)
        .map(|j| if j == d { Ok(idx.clone()) } else { e.iota(DType::I64, &shape, j) })
        .collect::<RuleResult<_>>()?;
    stack_coords(e, &parts, &shape)
}

/// Stacks per-dim coordinate components (each of shape S, i64) into coordinates S + [n].
fn stack_coords<'c, 'a>(e: &Emitter<'c, 'a>, parts: &[Tv<'c, 'a>], shape: &[i64]) -> RuleResult<Tv<'c, 'a>> {
    let mut one = shape.to_vec();
    one.push(1);
    let columns: Vec<Tv> = parts.iter().map(|c| e.reshape(c, &one)).collect::<RuleResult<_>>()?;
    let mut full = shape.to_vec();
    full.push(parts.len() as i64);
    e.concatenate(&columns, shape.len(), DType::I64, &full)
}

/// Gathers `x` at element coordinates `coords` (shape S + [rank]) -> shape S.
pub(crate) fn gather_at<'c, 'a>(e: &Emitter<'c, 'a>, x: &Tv<'c, 'a>, coords: &Tv<'c, 'a>) -> RuleResult<Tv<'c, 'a>> {
    let rank = x.rank();
    let out: Vec<i64> = coords.dims[..coords.rank() - 1].to_vec();
    if x.dims.contains(&0) {
        // Nothing to read (StableHLO refuses a slice of 1 from an empty dim): every coordinate
        // would be out of range, so the result is empty, as eager's; zeros of its shape.
        return e.constant(x.dtype, &out, Scalar::I(0));
    }
    let dn = format!(
        "#stablehlo.gather<offset_dims = [], collapsed_slice_dims = [{0}], start_index_map = [{0}], index_vector_dim = {1}>",
        list(0..rank),
        out.len()
    );
    e.op(
        hlo::GATHER,
        &[x, coords],
        x.dtype,
        &out,
        &[
            ("dimension_numbers", e.attr(&dn)?),
            ("slice_sizes", e.i64_array(&vec![1; rank])),
            ("indices_are_sorted", e.attr("false")?),
        ],
    )
}

/// Row coordinates for indexing x's first `k` dims by `idx` (which broadcast to B): B + [k],
/// negative indices wrapped. None when the indexed dims are not the leading ones.
fn leading_rows<'c, 'a>(
    e: &Emitter<'c, 'a>,
    x: &Tv<'c, 'a>,
    dims: &[usize],
    idx: &[&Tv<'c, 'a>],
) -> RuleResult<Option<(Vec<i64>, Tv<'c, 'a>)>> {
    if dims.iter().enumerate().any(|(i, &d)| i != d) || dims.len() == x.rank() {
        return Ok(None);
    }
    let b = broadcast_index_shape(idx)?;
    let comps: Vec<Tv> = idx
        .iter()
        .enumerate()
        .map(|(j, t)| {
            let t = wrap_negative(e, t, x.dims[j])?;
            let mapping: Vec<i64> = (b.len() - t.rank()..b.len()).map(|r| r as i64).collect();
            e.broadcast_in_dim(&t, &b, &mapping)
        })
        .collect::<RuleResult<_>>()?;
    let coords = stack_coords(e, &comps, &b)?;
    Ok(Some((b, coords)))
}

/// Scatters `updates` (shape S) into `x` at `coords` (S + [rank]); `add` accumulates,
/// otherwise later updates overwrite.
fn scatter_at<'c, 'a>(
    e: &Emitter<'c, 'a>,
    x: &Tv<'c, 'a>,
    coords: &Tv<'c, 'a>,
    updates: &Tv<'c, 'a>,
    add: bool,
) -> RuleResult<Tv<'c, 'a>> {
    scatter_combine(e, x, coords, updates, if add { Combine::Add } else { Combine::Replace })
}

/// How a scatter combines an update with the value already there.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Combine {
    Replace,
    Add,
    Mul,
    Max,
    Min,
}

fn scatter_combine<'c, 'a>(
    e: &Emitter<'c, 'a>,
    x: &Tv<'c, 'a>,
    coords: &Tv<'c, 'a>,
    updates: &Tv<'c, 'a>,
    how: Combine,
) -> RuleResult<Tv<'c, 'a>> {
    scatter_windows(e, x, coords, updates, how, 0)
}

/// `scatter_combine` where the last `windows` dims of `x` are whole windows: `coords` (S +
/// [rank - windows]) name the leading dims only and `updates` are S + x's trailing dims. One
/// index per row instead of per element: XLA CPU's scatter loop then moves rows (an embedding
/// gradient, 1024 tokens into a 1000 x 256 table: 1424 -> 451 us, benches/row_indexing.py).
/// (Row gathers measured no faster than element gathers on XLA CPU, so `index` keeps those.)
fn scatter_windows<'c, 'a>(
    e: &Emitter<'c, 'a>,
    x: &Tv<'c, 'a>,
    coords: &Tv<'c, 'a>,
    updates: &Tv<'c, 'a>,
    how: Combine,
    windows: usize,
) -> RuleResult<Tv<'c, 'a>> {
    let rank = x.rank();
    let (lead, batch) = (rank - windows, updates.rank() - windows);
    let dn = format!(
        "#stablehlo.scatter<update_window_dims = [{}], inserted_window_dims = [{1}], scatter_dims_to_operand_dims = [{1}], index_vector_dim = {2}>",
        list(batch..updates.rank()),
        list(0..lead),
        batch
    );
    let d = x.dtype;
    let boolean = d == DType::Bool;
    let region = e.scalar_region(&[d, d], |b, a| {
        Ok(vec![match how {
            Combine::Replace => a[1].clone(),
            Combine::Add => b.ew(if boolean { hlo::OR } else { hlo::ADD }, &[&a[0], &a[1]], d)?,
            Combine::Mul => b.ew(if boolean { hlo::AND } else { hlo::MULTIPLY }, &[&a[0], &a[1]], d)?,
            Combine::Max => b.minmax(&a[0], &a[1], true)?,
            Combine::Min => b.minmax(&a[0], &a[1], false)?,
        }])
    })?;
    let vals = e.build(
        hlo::SCATTER,
        &[x.v, coords.v, updates.v],
        &[e.ty(d, &x.dims)],
        &[
            ("scatter_dimension_numbers", e.attr(&dn)?),
            ("indices_are_sorted", e.attr("false")?),
            ("unique_indices", e.attr("false")?),
        ],
        vec![region],
    )?;
    Ok(Tv { v: vals[0], dtype: d, dims: x.dims.clone() })
}

/// scatter_reduce / index_reduce with reduce in sum|prod|mean|amax|amin and include_self:
/// `x` combined with `updates` at `coords`. Without include_self the positions that receive
/// an update start from the reduction's identity; mean divides by the number of values
/// reduced (floor division for integers, as PyTorch).
fn reduce_into<'c, 'a>(
    e: &Emitter<'c, 'a>,
    x: &Tv<'c, 'a>,
    coords: &Tv<'c, 'a>,
    updates: &Tv<'c, 'a>,
    reduce: &str,
    include_self: bool,
) -> RuleResult<Tv<'c, 'a>> {
    let d = x.dtype;
    let how = match reduce {
        "sum" | "mean" => Combine::Add,
        "prod" => Combine::Mul,
        "amax" => Combine::Max,
        "amin" => Combine::Min,
        other => return bad!("reduce='{other}' (refused by the legality checks)"),
    };
    let base = if include_self {
        x.clone()
    } else {
        let kind = match how {
            Combine::Mul => Reduction::Prod,
            Combine::Max => Reduction::Max,
            Combine::Min => Reduction::Min,
            _ => Reduction::Sum,
        };
        let identity = crate::lower::ops::reduce::init(d, kind);
        let touched = touched_mask(e, x, coords, updates)?;
        e.select(&touched, &e.constant(d, &x.dims, identity)?, x)?
    };
    let combined = scatter_combine(e, &base, coords, updates, how)?;
    if reduce != "mean" {
        return Ok(combined);
    }
    let counts_dtype = if d.is_float() { d } else { DType::I64 };
    let start = e.constant(counts_dtype, &x.dims, Scalar::I(include_self as i64))?;
    let ones = e.constant(counts_dtype, &updates.dims, Scalar::I(1))?;
    let counts = scatter_combine(e, &start, coords, &ones, Combine::Add)?;
    let one = e.constant(counts_dtype, &x.dims, Scalar::I(1))?;
    let zero = e.constant(counts_dtype, &x.dims, Scalar::I(0))?;
    let none = e.compare(&counts, &zero, Cmp::Eq)?;
    let safe = e.select(&none, &one, &counts)?;
    let safe = e.convert(&safe, d)?;
    let mean = if d.is_float() { e.ew(hlo::DIVIDE, &[&combined, &safe], d)? } else { floor_div(e, &combined, &safe)? };
    e.select(&none, &combined, &mean)
}

/// Integer floor division a / b (b > 0 here).
fn floor_div<'c, 'a>(e: &Emitter<'c, 'a>, a: &Tv<'c, 'a>, b: &Tv<'c, 'a>) -> RuleResult<Tv<'c, 'a>> {
    let d = a.dtype;
    let q = e.ew(hlo::DIVIDE, &[a, b], d)?;
    let back = e.ew(hlo::MULTIPLY, &[&q, b], d)?;
    let inexact = e.compare(&back, a, Cmp::Ne)?;
    let zero = e.constant(d, &a.dims, Scalar::I(0))?;
    let neg = e.compare(a, &zero, Cmp::Lt)?;
    let fix = e.ew(hlo::AND, &[&inexact, &neg], DType::Bool)?;
    let one = e.constant(d, &a.dims, Scalar::I(1))?;
    let lower = e.ew(hlo::SUBTRACT, &[&q, &one], d)?;
    e.select(&fix, &lower, &q)
}

/// Which positions of `x` a scatter at `coords` writes.
fn touched_mask<'c, 'a>(
    e: &Emitter<'c, 'a>,
    x: &Tv<'c, 'a>,
    coords: &Tv<'c, 'a>,
    updates: &Tv<'c, 'a>,
) -> RuleResult<Tv<'c, 'a>> {
    let none = e.constant(DType::Bool, &x.dims, Scalar::B(false))?;
    let all = e.constant(DType::Bool, &updates.dims, Scalar::B(true))?;
    scatter_combine(e, &none, coords, &all, Combine::Replace)
}

/// scatter_reduce.two(self, dim, index, src, reduce, include_self=True).
pub fn scatter_reduce<'c, 'a>(e: &Emitter<'c, 'a>, n: &NodeCtx<'c, 'a, '_>) -> R<'c, 'a> {
    let out = n.out_dtype();
    let x = e.convert(n.arg(0)?, out)?;
    let index = n.arg(1)?;
    let d = dim(n.get(DIM)?, x.rank())?;
    let src = e.convert(n.arg(2)?, out)?;
    let src = e.slice(&src, &vec![0; src.rank()], &index.dims, &vec![1; src.rank()])?;
    let reduce = n.get_or(REDUCE, "sum")?.to_string();
    let include_self = n.get_or(INCLUDE_SELF, true)?;
    if x.rank() == 0 {
        return bad!("scatter_reduce of a 0-d tensor (refused by `scatter_reduce_legal`)");
    }
    if product(index.dims.iter().copied())? == 0 {
        return Ok(vec![x]);
    }
    let coords = coordinates(e, index, d, x.rank())?;
    Ok(vec![reduce_into(e, &x, &coords, &src, &reduce, include_self)?])
}

/// index_reduce(self, dim, index, source, reduce, include_self=True): slice i of `source`
/// along `dim` is reduced into slice index[i] of `self`.
pub fn index_reduce<'c, 'a>(e: &Emitter<'c, 'a>, n: &NodeCtx<'c, 'a, '_>) -> R<'c, 'a> {
    let out = n.out_dtype();
    let x = e.convert(n.arg(0)?, out)?;
    let (index, src) = (n.arg(1)?, e.convert(n.arg(2)?, out)?);
    if x.rank() == 0 || product(src.dims.iter().copied())? == 0 {
        return bad!("index_reduce of a 0-d or empty tensor (refused by `index_reduce_legal`)");
    }
    let d = dim(n.get(DIM)?, x.rank())?;
    let reduce = n.get_or(REDUCE, "prod")?.to_string();
    let include_self = n.get_or(INCLUDE_SELF, true)?;
    let flat = e.reshape(index, &[product(index.dims.iter().copied())?])?;
    let wrapped = wrap_negative(e, &flat, x.dims[d])?;
    let spread = e.broadcast_in_dim(&wrapped, &src.dims, &[d as i64])?;
    let coords = coordinates(e, &spread, d, x.rank())?;
    Ok(vec![reduce_into(e, &x, &coords, &src, &reduce, include_self)?])
}

/// Negative indices count from the end of `size`.
fn wrap_negative<'c, 'a>(e: &Emitter<'c, 'a>, idx: &Tv<'c, 'a>, size: i64) -> RuleResult<Tv<'c, 'a>> {
    let idx = e.convert(idx, DType::I64)?;
    let zero = e.constant(DType::I64, &idx.dims, Scalar::I(0))?;
    let neg = e.compare(&idx, &zero, Cmp::Lt)?;
    let s = e.constant(DType::I64, &idx.dims, Scalar::I(size))?;
    let wrapped = e.ew(hlo::ADD, &[&idx, &s], DType::I64)?;
    e.select(&neg, &wrapped, &idx)
}

/// gather(self, dim, index): out[p] = self[p with p[dim] = index[p]].
pub fn gather<'c, 'a>(e: &Emitter<'c, 'a>, n: &NodeCtx<'c, 'a, '_>) -> R<'c, 'a> {
    let (x, index) = (n.arg(0)?, n.arg(1)?);
    let d = dim(n.get(DIM)?, x.rank())?;
    if x.rank() == 0 {
        return Ok(vec![e.reshape(x, n.out_dims())?]);
    }
    let coords = coordinates(e, index, d, x.rank())?;
    Ok(vec![gather_at(e, x, &coords)?])
}

/// index_select(self, dim, index): the 1-D index picks slices along `dim`.
pub fn index_select<'c, 'a>(e: &Emitter<'c, 'a>, n: &NodeCtx<'c, 'a, '_>) -> R<'c, 'a> {
    let (x, index) = (n.arg(0)?, n.arg(1)?);
    if x.rank() == 0 {
        return Ok(vec![e.reshape(x, n.out_dims())?]);
    }
    let d = dim(n.get(DIM)?, x.rank())?;
    let out = n.out_dims().to_vec();
    let flat = e.reshape(index, &[product(index.dims.iter().copied())?])?;
    let spread = e.broadcast_in_dim(&e.convert(&flat, DType::I64)?, &out, &[d as i64])?;
    let coords = coordinates(e, &spread, d, x.rank())?;
    Ok(vec![gather_at(e, x, &coords)?])
}

/// embedding(weight, indices, ...): rows of `weight`, shaped `indices.shape + [dim]`.
pub fn embedding<'c, 'a>(e: &Emitter<'c, 'a>, n: &NodeCtx<'c, 'a, '_>) -> R<'c, 'a> {
    let (w, idx) = (n.arg(0)?, n.arg(1)?);
    if w.rank() != 2 {
        return bad!("embedding weight must be 2-D");
    }
    let count: i64 = product(idx.dims.iter().copied())?;
    let rows_shape = [count, w.dims[1]];
    let flat = e.convert(&e.reshape(idx, &[count])?, DType::I64)?;
    let spread = e.broadcast_in_dim(&flat, &rows_shape, &[0])?;
    let coords = coordinates(e, &spread, 0, 2)?;
    let rows = gather_at(e, w, &coords)?;
    Ok(vec![e.reshape(&rows, n.out_dims())?])
}

/// scatter's `reduce`: none, add/sum or multiply.
pub fn scatter_legal(c: &Check) -> Result<(), String> {
    match c.get_or(REDUCE, "") {
        "" | "add" | "sum" | "multiply" => Ok(()),
        other => Err(format!("scatter with reduce='{other}'")),
    }
}

/// The reductions `scatter_reduce` and `index_reduce` lower.
const REDUCTIONS: [&str; 5] = ["sum", "mean", "prod", "amax", "amin"];

/// scatter_reduce: one of `REDUCTIONS`, into a tensor of rank >= 1.
pub fn scatter_reduce_legal(c: &Check) -> Result<(), String> {
    let reduce = c.get_or(REDUCE, "sum");
    if !REDUCTIONS.contains(&reduce) {
        return Err(format!("reduce='{reduce}'"));
    }
    match c.operand_rank(0) {
        Some(0) => Err("scatter_reduce of a 0-d tensor".into()),
        _ => Ok(()),
    }
}

/// index_reduce: one of `REDUCTIONS`, into a tensor of rank >= 1, from a non-empty source.
pub fn index_reduce_legal(c: &Check) -> Result<(), String> {
    let reduce = c.get_or(REDUCE, "prod");
    if !REDUCTIONS.contains(&reduce) {
        return Err(format!("reduce='{reduce}'"));
    }
    let empty = c.operands.get(2).is_some_and(|t| t.numel() == Some(0));
    if c.operand_rank(0) == Some(0) || empty {
        return Err("index_reduce of a 0-d or empty tensor".into());
    }
    Ok(())
}

/// index with boolean (or uint8) mask indices: the result shape depends on the data. The
/// indices are operands 1...
pub fn index_legal(c: &Check) -> Result<(), String> {
    no_masks(&c.operands[1.min(c.operands.len())..])
}

/// index_put with mask indices (between `self` and `values`): lowered where the mask is the
/// only index and has the shape of the dims it covers (`masked_index_put`); other mask forms
/// need the count to place the values and are refused.
pub fn index_put_legal(c: &Check) -> Result<(), String> {
    let end = c.operands.len().saturating_sub(1).max(1.min(c.operands.len()));
    let indices = &c.operands[1.min(c.operands.len())..end];
    if no_masks(indices).is_ok() {
        return Ok(());
    }
    let position = match c.raw(INDICES) {
        Some(Attr::IntList(p)) if p.len() == 1 && indices.len() == 1 => p[0],
        _ => return Err("indexing with a boolean mask among other indices (data-dependent shape)".into()),
    };
    let (x, mask, values) = (c.operands[0], indices[0], c.operands[c.operands.len() - 1]);
    let (Some(x_dims), Some(mask_dims)) = (x.static_dims(), mask.static_dims()) else {
        return Err("a boolean mask of symbolic shape".into());
    };
    let (p, r) = (position.max(0) as usize, mask_dims.len());
    let covered = x_dims.get(p..p + r);
    if r == 0 || position < 0 || covered != Some(mask_dims.as_slice()) {
        return Err(format!("a boolean mask of shape {mask_dims:?} at dim {position} of a tensor of shape {x_dims:?}"));
    }
    let result_rank = x_dims.len() - r + 1;
    if values.rank() > result_rank {
        return Err(format!("values of rank {} for an indexing result of rank {result_rank}", values.rank()));
    }
    Ok(())
}

fn no_masks(indices: &[&crate::ir::TensorType]) -> Result<(), String> {
    match indices.iter().any(|t| matches!(t.dtype, DType::Bool | DType::U8)) {
        true => Err("indexing with boolean mask indices (data-dependent shape)".into()),
        false => Ok(()),
    }
}

/// scatter(self, dim, index, src|value, reduce?) and scatter_add(self, dim, index, src).
pub fn scatter<'c, 'a>(e: &Emitter<'c, 'a>, n: &NodeCtx<'c, 'a, '_>) -> R<'c, 'a> {
    let (x, index) = (n.arg(0)?, n.arg(1)?);
    let d = dim(n.get(DIM)?, x.rank())?;
    let how = match (n.param()?, n.get_or(REDUCE, "")?) {
        (Scatter::Add, _) | (_, "add" | "sum") => Combine::Add,
        (_, "multiply") => Combine::Mul,
        (_, "") => Combine::Replace,
        (_, other) => return bad!("scatter with reduce='{other}' (refused by `scatter_legal`)"),
    };
    let add = how == Combine::Add;
    let out = n.out_dtype();
    let x = e.convert(x, out)?;
    let updates = match n.raw(VALUE) {
        Some(a) if !a.is_none() => match Scalar::from_attr(a) {
            Some(s) => e.constant(out, &index.dims, s)?,
            None => return bad!("value must be a number"),
        },
        _ => {
            let src = e.convert(n.arg(2)?, out)?;
            // Only the part of src that index covers is used.
            e.slice(&src, &vec![0; src.rank()], &index.dims, &vec![1; src.rank()])?
        }
    };
    if x.rank() == 0 {
        return Ok(vec![if add { e.ew(hlo::ADD, &[&x, &updates], out)? } else { e.reshape(&updates, &[])? }]);
    }
    if how == Combine::Mul && x.rank() == 0 {
        return Ok(vec![e.ew(hlo::MULTIPLY, &[&x, &e.reshape(&updates, &[])?], out)?]);
    }
    let coords = coordinates(e, index, d, x.rank())?;
    Ok(vec![scatter_combine(e, &x, &coords, &updates, how)?])
}

/// Advanced indexing shared by `index` and `index_put`: `x` indexed at dims `dims` (sorted,
/// from the `indices` attribute) by integer tensors `idx`. The index tensors broadcast
/// together to B; the result shape is x's dims with the indexed block replaced by B when the
/// indexed dims are adjacent, else B first and the remaining dims after it (NumPy rules).
/// Returns that shape and per-element coordinates into `x` (shape + [rank]).
fn advanced_index<'c, 'a>(
    e: &Emitter<'c, 'a>,
    x: &Tv<'c, 'a>,
    dims: &[usize],
    idx: &[&Tv<'c, 'a>],
) -> RuleResult<(Vec<i64>, Tv<'c, 'a>)> {
    if idx.iter().any(|t| t.dtype == DType::Bool || t.dtype == DType::U8) {
        return bad!("boolean mask indices (refused by `index_legal`)");
    }
    let b = broadcast_index_shape(idx)?;
    let adjacent = dims.windows(2).all(|w| w[1] == w[0] + 1);
    let k = dims.len();
    // Where the B block starts in the result, and where each non-indexed dim of x lands.
    let block = if adjacent { dims[0] } else { 0 };
    let mut shape: Vec<i64> = Vec::with_capacity(x.rank() - k + b.len());
    let mut rest_pos = vec![0usize; x.rank()];
    let rest: Vec<usize> = (0..x.rank()).filter(|j| !dims.contains(j)).collect();
    let before: Vec<usize> = rest.iter().copied().filter(|&j| j < block).collect();
    for &j in &before {
        rest_pos[j] = shape.len();
        shape.push(x.dims[j]);
    }
    shape.extend(&b);
    for &j in rest.iter().filter(|&&j| j >= block) {
        rest_pos[j] = shape.len();
        shape.push(x.dims[j]);
    }
    let mut comps = Vec::with_capacity(x.rank());
    for (j, &pos) in rest_pos.iter().enumerate().take(x.rank()) {
        comps.push(match dims.iter().position(|&d| d == j) {
            Some(i) => {
                let t = wrap_negative(e, idx[i], x.dims[j])?;
                let lead = block + b.len() - t.rank();
                let mapping: Vec<i64> = (0..t.rank()).map(|r| (lead + r) as i64).collect();
                e.broadcast_in_dim(&t, &shape, &mapping)?
            }
            None => e.iota(DType::I64, &shape, pos)?,
        });
    }
    let coords = stack_coords(e, &comps, &shape)?;
    Ok((shape, coords))
}

/// The shape the index tensors of an advanced index broadcast to (NumPy rules).
fn broadcast_index_shape(idx: &[&Tv<'_, '_>]) -> RuleResult<Vec<i64>> {
    let mut b: Vec<i64> = Vec::new();
    for t in idx {
        b = match crate::ir::types::broadcast_shapes(&static_dims(&b), &static_dims(&t.dims)) {
            Some(s) => s.iter().map(|d| if let crate::ir::Dim::Static(v) = d { *v } else { 0 }).collect(),
            None => return bad!("index tensors do not broadcast together"),
        };
    }
    Ok(b)
}

fn static_dims(v: &[i64]) -> Vec<crate::ir::Dim> {
    v.iter().map(|&d| crate::ir::Dim::Static(d)).collect()
}

/// The indexed dims and index operands of an `index`/`index_put` node: operands after `self`
/// named by the `indices` attribute (positions of the non-None entries of `Tensor?[]`).
fn indexed_dims(n: &NodeCtx<'_, '_, '_>, rank: usize) -> RuleResult<Vec<usize>> {
    let Some(Attr::IntList(indexed)) = n.raw(INDICES) else {
        return bad!("indexing needs the 'indices' attribute listing the indexed dims");
    };
    if indexed.is_empty() {
        return bad!("indexing with no index tensors");
    }
    let dims: Vec<usize> = indexed.iter().map(|&d| dim(d, rank)).collect::<RuleResult<_>>()?;
    if dims.windows(2).any(|w| w[1] <= w[0]) {
        return bad!("indexed dims {dims:?} must increase");
    }
    Ok(dims)
}

/// index.Tensor(self, indices): advanced (integer-tensor) indexing, a gather.
pub fn index<'c, 'a>(e: &Emitter<'c, 'a>, n: &NodeCtx<'c, 'a, '_>) -> R<'c, 'a> {
    let x = n.arg(0)?;
    let dims = indexed_dims(n, x.rank())?;
    if n.args.len() != dims.len() + 1 {
        return bad!("index expects {} index operands", dims.len());
    }
    let idx: Vec<&Tv> = n.args[1..].iter().collect();
    let (shape, coords) = advanced_index(e, x, &dims, &idx)?;
    let out = gather_at(e, x, &coords)?;
    Ok(vec![e.reshape(&out, &shape)?])
}

/// index_put(self, indices, values, accumulate=False): a scatter at the same coordinates
/// `index` would gather from.
pub fn index_put<'c, 'a>(e: &Emitter<'c, 'a>, n: &NodeCtx<'c, 'a, '_>) -> R<'c, 'a> {
    let x = e.convert(n.arg(0)?, n.out_dtype())?;
    let dims = indexed_dims(n, x.rank())?;
    let k = dims.len();
    if n.args.len() != k + 2 {
        return bad!("index_put expects {} index operands and values", k);
    }
    let idx: Vec<&Tv> = n.args[1..=k].iter().collect();
    let accumulate = n.get_or(ACCUMULATE, false)?;
    if k == 1 && matches!(idx[0].dtype, DType::Bool | DType::U8) {
        return Ok(vec![masked_index_put(e, &x, dims[0], idx[0], &n.args[2], accumulate)?]);
    }
    let how = if accumulate { Combine::Add } else { Combine::Replace };
    if let Some((b, rows)) = leading_rows(e, &x, &dims, &idx)? {
        // x[i] = v / x[i] += v (the embedding gradient) with the rest whole: row updates.
        let mut upd_shape = b;
        upd_shape.extend(&x.dims[k..]);
        let values = e.broadcast_to(&e.convert(&n.args[k + 1], x.dtype)?, &upd_shape)?;
        return Ok(vec![scatter_windows(e, &x, &rows, &values, how, x.rank() - k)?]);
    }
    let (upd_shape, coords) = advanced_index(e, &x, &dims, &idx)?;
    let values = e.broadcast_to(&e.convert(&n.args[k + 1], x.dtype)?, &upd_shape)?;
    Ok(vec![scatter_combine(e, &x, &coords, &values, how)?])
}

/// `x[mask] = v` (`+=` with `accumulate`): index_put whose one index is a mask covering dims
/// p..p+r of `x` with their shape. The indexing result is x's dims with those r dims replaced
/// by N, the number of set elements, and `v` broadcasts to it: where v's size at N is 1 (or
/// absent) every set element takes the same values: a select, static shapes. Where it is a
/// static n (one value per set element, as `x[mask] += y` writes back), the k-th set element in
/// row-major order takes v's k-th: its k is a prefix count over the flattened mask. That n is
/// the count is eager's shape check, made at run time by the program's checks
/// (`index_checks.py`); unset elements keep x.
fn masked_index_put<'c, 'a>(
    e: &Emitter<'c, 'a>,
    x: &Tv<'c, 'a>,
    p: usize,
    mask: &Tv<'c, 'a>,
    values: &Tv<'c, 'a>,
    accumulate: bool,
) -> RuleResult<Tv<'c, 'a>> {
    let r = mask.rank();
    if r == 0 || x.dims.get(p..p + r) != Some(mask.dims.as_slice()) {
        return bad!("a mask of shape {:?} at dim {p} of {:?} (refused by `index_put_legal`)", mask.dims, x.dims);
    }
    let result_rank = x.rank() - r + 1;
    let v = e.convert(values, x.dtype)?;
    let Some(lead) = result_rank.checked_sub(v.rank()) else {
        return bad!("values of rank {} for an indexing result of rank {result_rank}", v.rank());
    };
    // v as the indexing result's rank (leading 1s), then its size at N.
    let mut v_dims = vec![1; lead];
    v_dims.extend(&v.dims);
    let v = e.reshape(&v, &v_dims)?;
    let at_n = v_dims[p];
    let mapping: Vec<i64> = (p..p + r).map(|j| j as i64).collect();
    let set = match mask.dtype {
        DType::Bool => mask.clone(),
        _ => e.compare(mask, &e.constant(mask.dtype, &mask.dims, Scalar::I(0))?, Cmp::Ne)?,
    };
    let set_here = e.broadcast_in_dim(&set, &x.dims, &mapping)?;
    let spread = if at_n == 1 {
        // N's size 1 becomes r sizes 1, then the mask's dims.
        let mut dims = v_dims[..p].to_vec();
        dims.extend(std::iter::repeat_n(1, r));
        dims.extend(&v_dims[p + 1..]);
        e.broadcast_to(&e.reshape(&v, &dims)?, &x.dims)?
    } else {
        let mut full = x.dims[..p].to_vec();
        full.push(at_n);
        full.extend(&x.dims[p + r..]);
        let v = e.broadcast_to(&v, &full)?;
        let cells = product(mask.dims.iter().copied())?;
        let flat = e.convert(&e.reshape(&set, &[cells])?, DType::I64)?;
        let add = e.scalar_region(&[DType::I64, DType::I64], |b, a| {
            Ok(vec![b.ew(hlo::ADD, &[&a[0], &a[1]], DType::I64)?])
        })?;
        let zero = e.constant(DType::I64, &[], Scalar::I(0))?;
        let count = e.prefix_scan(&[&flat], &[&zero], 0, add)?.remove(0);
        // The k-th set element reads value k - 1; unset ones read a clamped value, unused.
        let one = e.constant(DType::I64, &[cells], Scalar::I(1))?;
        let k = e.ew(hlo::SUBTRACT, &[&count, &one], DType::I64)?;
        let lo = e.constant(DType::I64, &[cells], Scalar::I(0))?;
        let hi = e.constant(DType::I64, &[cells], Scalar::I((at_n - 1).max(0)))?;
        let k = e.minmax(&e.minmax(&k, &lo, true)?, &hi, false)?;
        let k = e.broadcast_in_dim(&e.reshape(&k, &mask.dims)?, &x.dims, &mapping)?;
        // Coordinates into v: x's own position outside the mask's dims, k at N.
        let mut parts: Vec<Tv> = (0..p).map(|j| e.iota(DType::I64, &x.dims, j)).collect::<RuleResult<_>>()?;
        parts.push(k);
        for j in p + r..x.rank() {
            parts.push(e.iota(DType::I64, &x.dims, j)?);
        }
        gather_at(e, &v, &stack_coords(e, &parts, &x.dims)?)?
    };
    let written = if accumulate { e.ew(hlo::ADD, &[x, &spread], x.dtype)? } else { spread };
    e.select(&set_here, &written, x)
}

/// slice_scatter(self, src, dim, start, end, step) and select_scatter(self, src, dim, index):
/// `src` written over the slice (or the single index) of `self` along `dim`.
pub fn slice_scatter<'c, 'a>(e: &Emitter<'c, 'a>, n: &NodeCtx<'c, 'a, '_>) -> R<'c, 'a> {
    let out = n.out_dtype();
    let x = e.convert(n.arg(0)?, out)?;
    let src = e.convert(n.arg(1)?, out)?;
    let d = axis(n.get_or(DIM, 0)?, x.rank())?;
    let size = x.dims[d];
    let is_select = n.param::<SliceScatter>()? == SliceScatter::Select;
    let (start, step, src) = if is_select {
        let i = n.get(INDEX)?;
        let i = if i < 0 { i + size } else { i };
        if src.rank() + 1 != x.rank() {
            return bad!("select_scatter: src {:?} does not fit self {:?}", src.dims, x.dims);
        }
        let mut dims = src.dims.clone();
        dims.insert(d, 1);
        (i, 1, e.reshape(&src, &dims)?)
    } else {
        let s = n.get_or(START, 0)?;
        let s = if s < 0 { s + size } else { s }.clamp(0, size);
        (s, n.get_or(STEP, 1)?, src)
    };
    if src.rank() != x.rank() || step < 1 {
        return bad!("slice_scatter: src {:?} does not fit self {:?}", src.dims, x.dims);
    }
    if product(src.dims.iter().copied())? == 0 {
        return Ok(vec![x]);
    }
    if step == 1 {
        // A contiguous window: one dynamic_update_slice at constant offsets.
        let starts: Vec<Tv> = (0..x.rank())
            .map(|j| e.constant(DType::I64, &[], Scalar::I(if j == d { start } else { 0 })))
            .collect::<RuleResult<_>>()?;
        let mut operands = vec![x.v, src.v];
        operands.extend(starts.iter().map(|t| t.v));
        let v = e.build(hlo::DYNAMIC_UPDATE_SLICE, &operands, &[e.ty(out, &x.dims)], &[], Vec::new())?[0];
        return Ok(vec![Tv { v, dtype: out, dims: x.dims.clone() }]);
    }
    let shape = src.dims.clone();
    let mut comps = Vec::with_capacity(x.rank());
    for j in 0..x.rank() {
        let mut c = e.iota(DType::I64, &shape, j)?;
        if j == d {
            let s = e.constant(DType::I64, &shape, Scalar::I(step))?;
            let o = e.constant(DType::I64, &shape, Scalar::I(start))?;
            c = e.ew(hlo::ADD, &[&e.ew(hlo::MULTIPLY, &[&c, &s], DType::I64)?, &o], DType::I64)?;
        }
        comps.push(c);
    }
    let coords = stack_coords(e, &comps, &shape)?;
    Ok(vec![scatter_at(e, &x, &coords, &src, false)?])
}

/// cumsum / cumprod (self, dim, dtype=None): a prefix-sum (-product) window along `dim`.
pub fn cumsum<'c, 'a>(e: &Emitter<'c, 'a>, n: &NodeCtx<'c, 'a, '_>) -> R<'c, 'a> {
    let prod = n.param::<Cumulative>()? == Cumulative::Prod;
    let out = n.out_dtype();
    let x = e.convert(n.arg(0)?, out)?;
    if x.rank() == 0 {
        return Ok(vec![x]);
    }
    let d = dim(n.get(DIM)?, x.rank())?;
    let op = match (out == DType::Bool, prod) {
        (true, false) => hlo::OR,
        (true, true) => hlo::AND,
        (false, false) => hlo::ADD,
        (false, true) => hlo::MULTIPLY,
    };
    let region = e.scalar_region(&[out, out], |b, a| Ok(vec![b.ew(op, &[&a[0], &a[1]], out)?]))?;
    let init = e.constant(out, &[], Scalar::I(prod as i64))?;
    e.prefix_scan(&[&x], &[&init], d, region)
}

/// as_strided(self, size, stride, storage_offset=None): element p of the result is element
/// `offset + sum(p[i] * stride[i])` of `self` read in row-major order. Exact when `self` is
/// contiguous from offset 0, which is how the IR holds every value (as Inductor assumes too).
pub fn as_strided<'c, 'a>(e: &Emitter<'c, 'a>, n: &NodeCtx<'c, 'a, '_>) -> R<'c, 'a> {
    let x = n.arg(0)?;
    let size = n.get(SIZE)?;
    let stride = n.get(STRIDE)?;
    if size.len() != stride.len() {
        return bad!("as_strided: size {size:?} and stride {stride:?} differ in length");
    }
    let offset = n.get_or(STORAGE_OFFSET, 0)?;
    let numel: i64 = product(x.dims.iter().copied())?;
    if size.iter().any(|&s| s < 0) {
        return bad!("as_strided: negative size {size:?}");
    }
    // The last element read, in i128: sizes and strides are attributes, of any magnitude.
    let last =
        offset as i128 + size.iter().zip(&stride).map(|(&s, &st)| (s - 1).max(0) as i128 * st as i128).sum::<i128>();
    if product(size.iter().copied())? > 0 && (offset < 0 || last >= numel as i128 || stride.iter().any(|&st| st < 0)) {
        return bad!("as_strided reads element {last} of a {numel}-element tensor");
    }
    let flat = e.reshape(x, &[numel])?;
    let count = product(size.iter().copied())?;
    if count > 0 && row_major(&size, &stride) {
        // A contiguous run from `offset` (a slice view of a storage): one slice, not a gather.
        let run = e.slice(&flat, &[offset], &[offset + count], &[1])?;
        return Ok(vec![e.reshape(&run, n.out_dims())?]);
    }
    let pos = strided_positions(e, &size, &stride, offset)?;
    let mut with_vec = size.clone();
    with_vec.push(1);
    let coords = e.reshape(&pos, &with_vec)?;
    let out = gather_at(e, &flat, &coords)?;
    Ok(vec![e.reshape(&out, n.out_dims())?])
}

/// Inclusive prefix sum of a 1-D tensor.
fn prefix_sum<'c, 'a>(e: &Emitter<'c, 'a>, x: &Tv<'c, 'a>) -> RuleResult<Tv<'c, 'a>> {
    let n = x.dims[0];
    e.window_sum(x, &[n.max(1)], &[1], &[[(n - 1).max(0), 0]], &x.dims.clone())
}

/// Flat (1-D) scatter of `updates` into `flat` at `positions` (both 1-D, same length).
fn scatter_flat<'c, 'a>(
    e: &Emitter<'c, 'a>,
    flat: &Tv<'c, 'a>,
    positions: &Tv<'c, 'a>,
    updates: &Tv<'c, 'a>,
    how: Combine,
) -> RuleResult<Tv<'c, 'a>> {
    let coords = e.reshape(positions, &[positions.dims[0], 1])?;
    scatter_combine(e, flat, &coords, updates, how)
}

/// put(self, index, source, accumulate=False): `source` written (or added) at flat indices.
pub fn put<'c, 'a>(e: &Emitter<'c, 'a>, n: &NodeCtx<'c, 'a, '_>) -> R<'c, 'a> {
    let out = n.out_dtype();
    let x = e.convert(n.arg(0)?, out)?;
    let (index, source) = (n.arg(1)?, e.convert(n.arg(2)?, out)?);
    let numel: i64 = product(x.dims.iter().copied())?;
    let k: i64 = product(index.dims.iter().copied())?;
    if k == 0 {
        return Ok(vec![x]);
    }
    let flat = e.reshape(&x, &[numel])?;
    let idx = wrap_negative(e, &e.reshape(index, &[k])?, numel)?;
    let src = e.reshape(&source, &[k])?;
    let how = if n.get_or(ACCUMULATE, false)? { Combine::Add } else { Combine::Replace };
    let r = scatter_flat(e, &flat, &idx, &src, how)?;
    Ok(vec![e.reshape(&r, &x.dims)?])
}

/// masked_scatter(self, mask, source): the masked positions, in row-major order, take
/// consecutive elements of `source`.
pub fn masked_scatter<'c, 'a>(e: &Emitter<'c, 'a>, n: &NodeCtx<'c, 'a, '_>) -> R<'c, 'a> {
    let out = n.out_dtype();
    let x = e.convert(n.arg(0)?, out)?;
    let mask = e.broadcast_to(&e.convert(n.arg(1)?, DType::Bool)?, &x.dims)?;
    let source = e.convert(n.arg(2)?, out)?;
    let numel: i64 = product(x.dims.iter().copied())?;
    let src_numel: i64 = product(source.dims.iter().copied())?;
    if numel == 0 || src_numel == 0 {
        return Ok(vec![x]);
    }
    let m = e.reshape(&mask, &[numel])?;
    let rank = prefix_sum(e, &e.convert(&m, DType::I64)?)?;
    let one = e.constant(DType::I64, &[numel], Scalar::I(1))?;
    let pos = e.ew(hlo::SUBTRACT, &[&rank, &one], DType::I64)?;
    let zero = e.constant(DType::I64, &[numel], Scalar::I(0))?;
    let pos = e.select(&m, &pos, &zero)?;
    let src = e.reshape(&source, &[src_numel])?;
    let taken = gather_at(e, &src, &e.reshape(&pos, &[numel, 1])?)?;
    let r = e.select(&m, &taken, &e.reshape(&x, &[numel])?)?;
    Ok(vec![e.reshape(&r, &x.dims)?])
}

/// Whether `stride` walks `size` in row-major order with no gaps (PyTorch's contiguity: a
/// dim of size 1 may have any stride), so the view is one run of consecutive elements.
fn row_major(size: &[i64], stride: &[i64]) -> bool {
    let mut expected = 1;
    for (&n, &st) in size.iter().zip(stride).rev() {
        if n != 1 && st != expected {
            return false;
        }
        expected *= n;
    }
    true
}

/// Flat positions `offset + sum(p[i] * stride[i])` over `size`, as as_strided reads them.
fn strided_positions<'c, 'a>(e: &Emitter<'c, 'a>, size: &[i64], stride: &[i64], offset: i64) -> RuleResult<Tv<'c, 'a>> {
    let mut pos = e.constant(DType::I64, size, Scalar::I(offset))?;
    for (i, &st) in stride.iter().enumerate() {
        let along = e.iota(DType::I64, size, i)?;
        let scaled = e.ew(hlo::MULTIPLY, &[&along, &e.constant(DType::I64, size, Scalar::I(st))?], DType::I64)?;
        pos = e.ew(hlo::ADD, &[&pos, &scaled], DType::I64)?;
    }
    Ok(pos)
}

/// as_strided_scatter(self, src, size, stride, storage_offset): `src` written where
/// as_strided(self, size, stride, storage_offset) would read (self contiguous, as in the IR).
pub fn as_strided_scatter<'c, 'a>(e: &Emitter<'c, 'a>, n: &NodeCtx<'c, 'a, '_>) -> R<'c, 'a> {
    let out = n.out_dtype();
    let x = e.convert(n.arg(0)?, out)?;
    let src = e.convert(n.arg(1)?, out)?;
    let (size, stride) = (n.get(SIZE)?, n.get(STRIDE)?);
    if size.len() != stride.len() || src.dims != size {
        return bad!("as_strided_scatter: src {:?} does not match size {size:?} / stride {stride:?}", src.dims);
    }
    let count: i64 = product(size.iter().copied())?;
    let numel: i64 = product(x.dims.iter().copied())?;
    if count == 0 {
        return Ok(vec![x]);
    }
    let offset = n.get_or(STORAGE_OFFSET, 0)?;
    let flat = e.reshape(&x, &[numel])?;
    if row_major(&size, &stride) && offset >= 0 && offset + count <= numel {
        // A contiguous run from `offset`: one dynamic_update_slice, not a scatter.
        let start = e.constant(DType::I64, &[], Scalar::I(offset))?;
        let run = e.reshape(&src, &[count])?;
        let v =
            e.build(hlo::DYNAMIC_UPDATE_SLICE, &[flat.v, run.v, start.v], &[e.ty(out, &[numel])], &[], Vec::new())?[0];
        return Ok(vec![e.reshape(&Tv { v, dtype: out, dims: vec![numel] }, &x.dims)?]);
    }
    let pos = strided_positions(e, &size, &stride, offset)?;
    let r = scatter_flat(e, &flat, &e.reshape(&pos, &[count])?, &e.reshape(&src, &[count])?, Combine::Replace)?;
    Ok(vec![e.reshape(&r, &x.dims)?])
}

/// nonzero_static(self, size, fill_value=-1): the coordinates of the first `size` nonzero
/// elements in row-major order, one row each, padded with `fill_value`.
pub fn nonzero_static<'c, 'a>(e: &Emitter<'c, 'a>, n: &NodeCtx<'c, 'a, '_>) -> R<'c, 'a> {
    let x = n.arg(0)?;
    let size = n.get(SIZE_INT)?;
    let fill = n.get_or(FILL_VALUE_INT, -1)?;
    let numel: i64 = product(x.dims.iter().copied())?;
    let r = x.rank();
    let out_dims = n.out_dims().to_vec();
    if numel == 0 || size == 0 || r == 0 {
        return Ok(vec![e.constant(DType::I64, &out_dims, Scalar::I(fill))?]);
    }
    let m = e.reshape(&e.convert(x, DType::Bool)?, &[numel])?;
    let rank = prefix_sum(e, &e.convert(&m, DType::I64)?)?;
    let one = e.constant(DType::I64, &[numel], Scalar::I(1))?;
    // Zero elements aim past the end, where the scatter drops them.
    let beyond = e.constant(DType::I64, &[numel], Scalar::I(size))?;
    let slot = e.select(&m, &e.ew(hlo::SUBTRACT, &[&rank, &one], DType::I64)?, &beyond)?;
    let flat_index = e.iota(DType::I64, &[numel], 0)?;
    let mut columns = Vec::with_capacity(r);
    let mut stride = numel;
    for j in 0..r {
        stride /= x.dims[j].max(1);
        let q = e.ew(
            hlo::DIVIDE,
            &[&flat_index, &e.constant(DType::I64, &[numel], Scalar::I(stride.max(1)))?],
            DType::I64,
        )?;
        let coord =
            e.ew(hlo::REMAINDER, &[&q, &e.constant(DType::I64, &[numel], Scalar::I(x.dims[j].max(1)))?], DType::I64)?;
        let column = e.constant(DType::I64, &[size], Scalar::I(fill))?;
        let column = scatter_flat(e, &column, &slot, &coord, Combine::Replace)?;
        columns.push(e.reshape(&column, &[size, 1])?);
    }
    Ok(vec![e.convert(&e.concatenate(&columns, 1, DType::I64, &[size, r as i64])?, n.out_dtype())?])
}

/// logcumsumexp(self, dim): a prefix window combining with log(exp(a) + exp(b)), computed
/// stably as max + log1p(exp(-|a - b|)).
pub fn logcumsumexp<'c, 'a>(e: &Emitter<'c, 'a>, n: &NodeCtx<'c, 'a, '_>) -> R<'c, 'a> {
    let out = n.out_dtype();
    let x = e.convert(n.arg(0)?, out)?;
    if x.rank() == 0 || !out.is_float() {
        return if out.is_float() { Ok(vec![x]) } else { bad!("logcumsumexp of a non-float tensor") };
    }
    let d = dim(n.get(DIM)?, x.rank())?;
    let region = e.scalar_region(&[out, out], |b, a| {
        let hi = b.minmax(&a[0], &a[1], true)?;
        let lo = b.minmax(&a[0], &a[1], false)?;
        let diff = b.ew(hlo::SUBTRACT, &[&lo, &hi], out)?;
        let sum =
            b.ew(hlo::ADD, &[&hi, &b.ew(hlo::LOG_PLUS_ONE, &[&b.ew(hlo::EXPONENTIAL, &[&diff], out)?], out)?], out)?;
        // Both -inf (or the same infinity): the sum is that value, not NaN.
        let same = b.compare(&a[0], &a[1], Cmp::Eq)?;
        let inf =
            b.compare(&b.ew(hlo::ABS, &[&hi], out)?, &b.constant(out, &[], Scalar::F(f64::INFINITY))?, Cmp::Eq)?;
        let keep = b.ew(hlo::AND, &[&same, &inf], DType::Bool)?;
        Ok(vec![b.select(&keep, &hi, &sum)?])
    })?;
    let init = e.constant(out, &[], Scalar::F(f64::NEG_INFINITY))?;
    e.prefix_scan(&[&x], &[&init], d, region)
}

/// histc(self, bins=100, min=0, max=0): counts per equal-width bin over [min, max] (the
/// data's own range when min == max), values outside and NaNs ignored, the top edge in the
/// last bin - bin = trunc((x - min) / (max - min) * bins) as ATen computes it. Integer tensors
/// (MoE routing counts experts this way) count in their own dtype with CUDA's exact integer
/// bin, (x - min) * bins / (max - min) in int64; CPU has no integer kernel.
pub fn histc<'c, 'a>(e: &Emitter<'c, 'a>, n: &NodeCtx<'c, 'a, '_>) -> R<'c, 'a> {
    let out = n.out_dtype();
    let x = n.arg(0)?;
    if out == DType::Bool {
        return bad!("histc of a bool tensor (refused by `prims::not_bool_legal`)");
    }
    let int = !out.is_float();
    let comp = if int { DType::I64 } else { out };
    let bins = n.get_or(BINS, 100)?;
    let numel: i64 = product(x.dims.iter().copied())?;
    let flat = e.reshape(&e.convert(x, comp)?, &[numel])?;
    let (lo, hi) = (n.get_or(MIN, 0.0)?, n.get_or(MAX, 0.0)?);
    let scalar = |v: f64| e.constant(comp, &[], if int { Scalar::I(v as i64) } else { Scalar::F(v) });
    let (mut lo_t, mut hi_t) = (scalar(lo)?, scalar(hi)?);
    if lo == hi && numel > 0 {
        lo_t = crate::lower::ops::reduce::reduce_with(e, &flat, &[0], Reduction::Min)?;
        hi_t = crate::lower::ops::reduce::reduce_with(e, &flat, &[0], Reduction::Max)?;
        let same = e.compare(&lo_t, &hi_t, Cmp::Eq)?;
        lo_t = e.select(&same, &e.ew(hlo::SUBTRACT, &[&lo_t, &scalar(1.0)?], comp)?, &lo_t)?;
        hi_t = e.select(&same, &e.ew(hlo::ADD, &[&hi_t, &scalar(1.0)?], comp)?, &hi_t)?;
    }
    let counts = e.constant(out, &[bins], Scalar::I(0))?;
    if numel == 0 {
        return Ok(vec![counts]);
    }
    let lo_b = e.broadcast_in_dim(&lo_t, &[numel], &[])?;
    let hi_b = e.broadcast_in_dim(&hi_t, &[numel], &[])?;
    let width = e.ew(hlo::SUBTRACT, &[&hi_b, &lo_b], comp)?;
    let offset = e.ew(hlo::SUBTRACT, &[&flat, &lo_b], comp)?;
    let bins_t = e.constant(comp, &[numel], Scalar::I(bins))?;
    let pos = if int {
        // Inside the range the numerator is non-negative, so truncation is CUDA's floor.
        e.ew(hlo::DIVIDE, &[&e.ew(hlo::MULTIPLY, &[&offset, &bins_t], comp)?, &width], comp)?
    } else {
        let frac = e.ew(hlo::DIVIDE, &[&offset, &width], comp)?;
        e.convert(&e.ew(hlo::MULTIPLY, &[&frac, &bins_t], comp)?, DType::I64)?
    };
    let last = e.constant(DType::I64, &[numel], Scalar::I(bins - 1))?;
    let at_top = e.compare(&pos, &e.constant(DType::I64, &[numel], Scalar::I(bins))?, Cmp::Eq)?;
    let pos = e.select(&at_top, &last, &pos)?;
    let inside =
        e.ew(hlo::AND, &[&e.compare(&flat, &lo_b, Cmp::Ge)?, &e.compare(&flat, &hi_b, Cmp::Le)?], DType::Bool)?;
    // Outside values (and NaNs, which compare false) aim past the end and are dropped.
    let pos = e.select(&inside, &pos, &e.constant(DType::I64, &[numel], Scalar::I(bins))?)?;
    let ones = e.constant(out, &[numel], Scalar::I(1))?;
    Ok(vec![scatter_flat(e, &counts, &pos, &ones, Combine::Add)?])
}
