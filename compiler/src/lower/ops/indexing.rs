//! Indexing: gather, scatter/scatter_add, index_select, embedding, index_put, cumsum.
//! Gathers and scatters use explicit per-element coordinates (one index vector per output
//! element), which keeps every form on one well-tested StableHLO pattern. Out-of-range
//! indices are clamped (gather) or dropped (scatter) by XLA where PyTorch raises.

use crate::ir::{Attr, DType};
use crate::lower::emitter::{Cmp, Emitter, Tv};
use crate::lower::error::{bad, unsupported, RuleResult};
use crate::lower::node::{dim, NodeCtx};
use crate::passes::patterns::Scalar;

type R<'c, 'a> = RuleResult<Vec<Tv<'c, 'a>>>;

fn list(v: impl Iterator<Item = usize>) -> String {
    v.map(|i| i.to_string()).collect::<Vec<_>>().join(", ")
}

/// Coordinates `shape + [rank]` whose component `d` is `index` and every other component
/// `j` is the element's own position along `j`.
fn coordinates<'c, 'a>(e: &Emitter<'c, 'a>, index: &Tv<'c, 'a>, d: usize, rank: usize) -> RuleResult<Tv<'c, 'a>> {
    let shape = index.dims.clone();
    let mut one = shape.clone();
    one.push(1);
    let idx = e.convert(index, DType::I64)?;
    let parts: Vec<Tv> = (0..rank)
        .map(|j| {
            let c = if j == d { idx.clone() } else { e.iota(DType::I64, &shape, j)? };
            e.reshape(&c, &one)
        })
        .collect::<RuleResult<_>>()?;
    let mut full = shape.clone();
    full.push(rank as i64);
    e.concatenate(&parts, shape.len(), DType::I64, &full)
}

/// Gathers `x` at element coordinates `coords` (shape S + [rank]) -> shape S.
fn gather_at<'c, 'a>(e: &Emitter<'c, 'a>, x: &Tv<'c, 'a>, coords: &Tv<'c, 'a>) -> RuleResult<Tv<'c, 'a>> {
    let rank = x.rank();
    let out: Vec<i64> = coords.dims[..coords.rank() - 1].to_vec();
    let dn = format!(
        "#stablehlo.gather<offset_dims = [], collapsed_slice_dims = [{0}], start_index_map = [{0}], index_vector_dim = {1}>",
        list(0..rank),
        out.len()
    );
    e.op(
        "stablehlo.gather",
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

/// Scatters `updates` (shape S) into `x` at `coords` (S + [rank]); `add` accumulates,
/// otherwise later updates overwrite.
fn scatter_at<'c, 'a>(e: &Emitter<'c, 'a>, x: &Tv<'c, 'a>, coords: &Tv<'c, 'a>, updates: &Tv<'c, 'a>, add: bool) -> RuleResult<Tv<'c, 'a>> {
    let rank = x.rank();
    let dn = format!(
        "#stablehlo.scatter<update_window_dims = [], inserted_window_dims = [{0}], scatter_dims_to_operand_dims = [{0}], index_vector_dim = {1}>",
        list(0..rank),
        updates.rank()
    );
    let d = x.dtype;
    let region = e.scalar_region(&[d, d], |b, a| {
        Ok(vec![if add {
            b.ew(if d == DType::Bool { "stablehlo.or" } else { "stablehlo.add" }, &[&a[0], &a[1]], d)?
        } else {
            a[1].clone()
        }])
    })?;
    let vals = e.build(
        "stablehlo.scatter",
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

/// Negative indices count from the end of `size`.
fn wrap_negative<'c, 'a>(e: &Emitter<'c, 'a>, idx: &Tv<'c, 'a>, size: i64) -> RuleResult<Tv<'c, 'a>> {
    let idx = e.convert(idx, DType::I64)?;
    let zero = e.constant(DType::I64, &idx.dims, Scalar::I(0))?;
    let neg = e.compare(&idx, &zero, Cmp::Lt)?;
    let s = e.constant(DType::I64, &idx.dims, Scalar::I(size))?;
    let wrapped = e.ew("stablehlo.add", &[&idx, &s], DType::I64)?;
    e.select(&neg, &wrapped, &idx)
}

/// gather(self, dim, index): out[p] = self[p with p[dim] = index[p]].
pub fn gather<'c, 'a>(e: &Emitter<'c, 'a>, n: &NodeCtx<'c, 'a, '_>) -> R<'c, 'a> {
    let (x, index) = (n.arg(0)?, n.arg(1)?);
    let d = dim(n.int("dim")?, x.rank())?;
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
    let d = dim(n.int("dim")?, x.rank())?;
    let out = n.out_dims().to_vec();
    let flat = e.reshape(index, &[index.dims.iter().product()])?;
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
    let count: i64 = idx.dims.iter().product();
    let rows_shape = [count, w.dims[1]];
    let flat = e.convert(&e.reshape(idx, &[count])?, DType::I64)?;
    let spread = e.broadcast_in_dim(&flat, &rows_shape, &[0])?;
    let coords = coordinates(e, &spread, 0, 2)?;
    let rows = gather_at(e, w, &coords)?;
    Ok(vec![e.reshape(&rows, n.out_dims())?])
}

/// scatter(self, dim, index, src|value, reduce?) and scatter_add(self, dim, index, src).
pub fn scatter<'c, 'a>(e: &Emitter<'c, 'a>, n: &NodeCtx<'c, 'a, '_>) -> R<'c, 'a> {
    let name = n.node.op().map(|o| o.name.as_str()).unwrap_or("");
    let (x, index) = (n.arg(0)?, n.arg(1)?);
    let d = dim(n.int("dim")?, x.rank())?;
    let add = match (name, n.str_or("reduce", "")?) {
        ("scatter_add", _) | (_, "add" | "sum") => true,
        (_, "") => false,
        (_, other) => return unsupported!("scatter with reduce='{other}'"),
    };
    let out = n.out_dtype();
    let x = e.convert(x, out)?;
    let updates = match n.attr("value") {
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
        return Ok(vec![if add { e.ew("stablehlo.add", &[&x, &updates], out)? } else { e.reshape(&updates, &[])? }]);
    }
    let coords = coordinates(e, index, d, x.rank())?;
    Ok(vec![scatter_at(e, &x, &coords, &updates, add)?])
}

/// index_put(self, indices, values, accumulate=False). The index tensors are operands after
/// `self` (values last); the `indices` attribute lists which dims they index, which must be
/// adjacent. Integer indices only (boolean masks have data-dependent shapes).
pub fn index_put<'c, 'a>(e: &Emitter<'c, 'a>, n: &NodeCtx<'c, 'a, '_>) -> R<'c, 'a> {
    let x = e.convert(n.arg(0)?, n.out_dtype())?;
    let Some(Attr::IntList(indexed)) = n.attr("indices") else {
        return bad!("index_put needs the 'indices' attribute listing the indexed dims");
    };
    let k = indexed.len();
    if k == 0 || n.args.len() != k + 2 {
        return bad!("index_put expects {} index operands and values", k);
    }
    let dims: Vec<usize> = indexed.iter().map(|&d| dim(d, x.rank())).collect::<RuleResult<_>>()?;
    if dims.windows(2).any(|w| w[1] != w[0] + 1) {
        return unsupported!("index_put with non-adjacent indexed dims {dims:?}");
    }
    let idx: Vec<&Tv> = n.args[1..=k].iter().collect();
    if idx.iter().any(|t| t.dtype == DType::Bool || t.dtype == DType::U8) {
        return unsupported!("index_put with boolean mask indices");
    }
    // All index tensors broadcast together to B; the update covers x's dims with the
    // indexed block replaced by B.
    let mut b: Vec<i64> = Vec::new();
    for t in &idx {
        b = match crate::ir::types::broadcast_shapes(
            &b.iter().map(|&d| crate::ir::Dim::Static(d)).collect::<Vec<_>>(),
            &t.dims.iter().map(|&d| crate::ir::Dim::Static(d)).collect::<Vec<_>>(),
        ) {
            Some(s) => s.iter().map(|d| if let crate::ir::Dim::Static(v) = d { *v } else { 0 }).collect(),
            None => return bad!("index tensors do not broadcast together"),
        };
    }
    let first = dims[0];
    let mut upd_shape: Vec<i64> = x.dims[..first].to_vec();
    upd_shape.extend(&b);
    upd_shape.extend(&x.dims[first + k..]);
    // Per-element coordinates over the update shape: the B block gives the indexed dims,
    // the other update dims give the remaining dims.
    let mut one = upd_shape.clone();
    one.push(1);
    let mut comps = Vec::with_capacity(x.rank());
    for j in 0..x.rank() {
        let c = if j < first {
            e.iota(DType::I64, &upd_shape, j)?
        } else if j < first + k {
            let t = wrap_negative(e, idx[j - first], x.dims[j])?;
            let mapping: Vec<i64> = (0..t.rank()).map(|i| (first + b.len() - t.rank() + i) as i64).collect();
            e.broadcast_in_dim(&t, &upd_shape, &mapping)?
        } else {
            e.iota(DType::I64, &upd_shape, j - k + b.len())?
        };
        comps.push(e.reshape(&c, &one)?);
    }
    let mut full = upd_shape.clone();
    full.push(x.rank() as i64);
    let coords = e.concatenate(&comps, upd_shape.len(), DType::I64, &full)?;
    let values = e.broadcast_to(&e.convert(&n.args[k + 1], x.dtype)?, &upd_shape)?;
    let accumulate = n.bool_or("accumulate", false)?;
    Ok(vec![scatter_at(e, &x, &coords, &values, accumulate)?])
}

/// cumsum(self, dim, dtype=None): a prefix-sum window along `dim`.
pub fn cumsum<'c, 'a>(e: &Emitter<'c, 'a>, n: &NodeCtx<'c, 'a, '_>) -> R<'c, 'a> {
    let out = n.out_dtype();
    let x = e.convert(n.arg(0)?, out)?;
    if x.rank() == 0 {
        return Ok(vec![x]);
    }
    let d = dim(n.int("dim")?, x.rank())?;
    let r = x.rank();
    let size = x.dims[d];
    let win: Vec<i64> = (0..r).map(|i| if i == d { size.max(1) } else { 1 }).collect();
    let pads = (0..r).map(|i| if i == d { format!("[{}, 0]", (size - 1).max(0)) } else { "[0, 0]".into() }).collect::<Vec<_>>().join(", ");
    let op = if out == DType::Bool { "stablehlo.or" } else { "stablehlo.add" };
    let region = e.scalar_region(&[out, out], |b, a| Ok(vec![b.ew(op, &[&a[0], &a[1]], out)?]))?;
    let init = e.constant(out, &[], Scalar::I(0))?;
    let vals = e.build(
        "stablehlo.reduce_window",
        &[x.v, init.v],
        &[e.ty(out, &x.dims)],
        &[
            ("window_dimensions", e.i64_array(&win)),
            ("window_strides", e.i64_array(&vec![1; r])),
            ("padding", e.attr(&format!("dense<[{pads}]> : tensor<{r}x2xi64>"))?),
        ],
        vec![region],
    )?;
    Ok(vec![Tv { v: vals[0], dtype: out, dims: x.dims.clone() }])
}
