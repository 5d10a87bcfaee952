//! Views and data movement: reshapes, permutes, transposes, squeeze/unsqueeze, expand,
//! slice/select, cat/stack, split. The IR's result type gives every output shape; rules
//! compute only what the shape alone does not say (which elements).

use crate::lower::emitter::{Emitter, Tv};
use crate::lower::error::{bad, RuleResult};
use crate::lower::names::hlo;
use crate::lower::node::{axis, dim, product, NodeCtx};
use crate::lower::param::Split;
use crate::registry::attrs::{DIM, DIM0, DIM1, DIMS, END_INT, INDEX, PAD, START, STEP, VALUE_NUMBER};

type R<'c, 'a> = RuleResult<Vec<Tv<'c, 'a>>>;

/// view, reshape, _unsafe_view, squeeze, unsqueeze, flatten: the data in row-major order
/// takes the declared shape.
pub fn reshape<'c, 'a>(e: &Emitter<'c, 'a>, n: &NodeCtx<'c, 'a, '_>) -> R<'c, 'a> {
    let x = n.arg(0)?;
    let want: i64 = product(n.out_dims().iter().copied())?;
    let have: i64 = product(x.dims.iter().copied())?;
    if want != have {
        return bad!("cannot reshape {:?} ({have} elements) to {:?}", x.dims, n.out_dims());
    }
    Ok(vec![e.reshape(&e.convert(x, n.out_dtype())?, n.out_dims())?])
}

pub fn permute<'c, 'a>(e: &Emitter<'c, 'a>, n: &NodeCtx<'c, 'a, '_>) -> R<'c, 'a> {
    let x = n.arg(0)?;
    let perm = match crate::ir::verifier::normalize_permutation(&n.get(DIMS)?, x.rank()) {
        Some(p) => p,
        None => return bad!("dims is not a permutation of rank {}", x.rank()),
    };
    Ok(vec![e.transpose(x, &perm)?])
}

/// transpose.int(self, dim0, dim1) and t(self).
pub fn transpose<'c, 'a>(e: &Emitter<'c, 'a>, n: &NodeCtx<'c, 'a, '_>) -> R<'c, 'a> {
    let x = n.arg(0)?;
    let r = x.rank();
    let mut perm: Vec<usize> = (0..r).collect();
    if r >= 2 {
        let (a, b) = if n.raw(DIM0).is_some() { (dim(n.get(DIM0)?, r)?, dim(n.get(DIM1)?, r)?) } else { (0, 1) };
        perm.swap(a, b);
    }
    Ok(vec![e.transpose(x, &perm)?])
}

/// expand(self, size) and broadcast_to: PyTorch broadcasting to the declared shape.
pub fn expand<'c, 'a>(e: &Emitter<'c, 'a>, n: &NodeCtx<'c, 'a, '_>) -> R<'c, 'a> {
    Ok(vec![e.broadcast_to(n.arg(0)?, n.out_dims())?])
}

/// Clamps a slice bound as Python does: negative wraps once, then clamps to [0, size].
fn clamp_bound(v: i64, size: i64) -> i64 {
    let v = if v < 0 { v + size } else { v };
    v.clamp(0, size)
}

/// slice.Tensor(self, dim=0, start=None, end=None, step=1).
pub fn slice<'c, 'a>(e: &Emitter<'c, 'a>, n: &NodeCtx<'c, 'a, '_>) -> R<'c, 'a> {
    let x = n.arg(0)?;
    let d = axis(n.get_or(DIM, 0)?, x.rank())?;
    let size = x.dims[d];
    let start = clamp_bound(n.get_or(START, 0)?, size);
    let end = clamp_bound(n.get_or(END_INT, size)?, size).max(start);
    let step = n.get_or(STEP, 1)?;
    if step < 1 {
        return bad!("slice step must be positive, got {step}");
    }
    let mut lo = vec![0; x.rank()];
    let mut hi = x.dims.clone();
    let mut st = vec![1; x.rank()];
    lo[d] = start;
    hi[d] = end;
    st[d] = step;
    Ok(vec![e.slice(x, &lo, &hi, &st)?])
}

/// select.int(self, dim, index): one slice along `dim`, with the dim dropped.
pub fn select<'c, 'a>(e: &Emitter<'c, 'a>, n: &NodeCtx<'c, 'a, '_>) -> R<'c, 'a> {
    let x = n.arg(0)?;
    let d = axis(n.get(DIM)?, x.rank())?;
    let size = x.dims[d];
    let i = n.get(INDEX)?;
    let i = if i < 0 { i + size } else { i };
    if !(0..size).contains(&i) {
        return bad!("index {} is out of range for dim {d} of size {size}", n.get(INDEX)?);
    }
    let mut lo = vec![0; x.rank()];
    let mut hi = x.dims.clone();
    lo[d] = i;
    hi[d] = i + 1;
    let s = e.slice(x, &lo, &hi, &vec![1; x.rank()])?;
    Ok(vec![e.reshape(&s, n.out_dims())?])
}

/// cat(tensors, dim=0): operands converted to the result dtype; PyTorch's legacy empty 1-D
/// tensors (`[0]`) are skipped.
pub fn cat<'c, 'a>(e: &Emitter<'c, 'a>, n: &NodeCtx<'c, 'a, '_>) -> R<'c, 'a> {
    let out = n.out_dtype();
    let dims = n.out_dims().to_vec();
    let d = dim(n.get_or(DIM, 0)?, dims.len())?;
    let parts: Vec<Tv> = n
        .args
        .iter()
        .filter(|t| !(t.dims == [0] && dims.len() != 1))
        .map(|t| e.convert(t, out))
        .collect::<RuleResult<_>>()?;
    if parts.is_empty() {
        return bad!("cat of no non-empty tensors");
    }
    Ok(vec![e.concatenate(&parts, d, out, &dims)?])
}

/// stack(tensors, dim=0): each operand gains a size-1 dim, then they are concatenated.
pub fn stack<'c, 'a>(e: &Emitter<'c, 'a>, n: &NodeCtx<'c, 'a, '_>) -> R<'c, 'a> {
    let out = n.out_dtype();
    let dims = n.out_dims().to_vec();
    let d = dim(n.get_or(DIM, 0)?, dims.len())?;
    let parts: Vec<Tv> = n
        .args
        .iter()
        .map(|t| {
            if t.rank() + 1 != dims.len() {
                return bad!("stack of a rank-{} tensor into a rank-{} result", t.rank(), dims.len());
            }
            let mut unsq = t.dims.clone();
            unsq.insert(d, 1);
            e.reshape(&e.convert(t, out)?, &unsq)
        })
        .collect::<RuleResult<_>>()?;
    Ok(vec![e.concatenate(&parts, d, out, &dims)?])
}

/// split_with_sizes / split.Tensor / chunk / unbind: consecutive slices along `dim`, each
/// result's extent read from its declared type.
pub fn split<'c, 'a>(e: &Emitter<'c, 'a>, n: &NodeCtx<'c, 'a, '_>) -> R<'c, 'a> {
    let x = n.arg(0)?;
    let d = axis(n.get_or(DIM, 0)?, x.rank())?;
    let unbind = n.param::<Split>()? == Split::Unbind;
    let mut start: i64 = 0;
    let mut outs = Vec::with_capacity(n.results.len());
    for (_, rdims) in &n.results {
        let len = match (unbind, rdims.get(d)) {
            (true, _) => 1,
            (false, Some(&len)) => len,
            (false, None) => return bad!("result {rdims:?} has no dim {d}"),
        };
        let mut lo = vec![0; x.rank()];
        let mut hi = x.dims.clone();
        lo[d] = start;
        hi[d] = start.saturating_add(len);
        if hi[d] > x.dims[d] {
            return bad!("split parts exceed dim {d} of size {}", x.dims[d]);
        }
        let s = e.slice(x, &lo, &hi, &vec![1; x.rank()])?;
        outs.push(e.reshape(&s, rdims)?);
        start = hi[d];
    }
    Ok(outs)
}

/// flip(self, dims).
pub fn flip<'c, 'a>(e: &Emitter<'c, 'a>, n: &NodeCtx<'c, 'a, '_>) -> R<'c, 'a> {
    let x = n.arg(0)?;
    let dims: Vec<i64> = n.get(DIMS)?.iter().map(|&d| dim(d, x.rank()).map(|d| d as i64)).collect::<RuleResult<_>>()?;
    Ok(vec![e.op(hlo::REVERSE, &[x], x.dtype, &x.dims.clone(), &[("dimensions", e.i64_array(&dims))])?])
}

/// constant_pad_nd(self, pad, value=0): `pad` lists (low, high) pairs from the last dim
/// backwards; negative amounts crop.
pub fn constant_pad<'c, 'a>(e: &Emitter<'c, 'a>, n: &NodeCtx<'c, 'a, '_>) -> R<'c, 'a> {
    let x = e.convert(n.arg(0)?, n.out_dtype())?;
    let pad = n.get(PAD)?;
    let r = x.rank();
    if pad.len() % 2 != 0 || pad.len() / 2 > r {
        return bad!("pad has {} entries for a rank-{r} tensor", pad.len());
    }
    let (mut low, mut high) = (vec![0; r], vec![0; r]);
    for (i, pair) in pad.chunks(2).enumerate() {
        low[r - 1 - i] = pair[0];
        high[r - 1 - i] = pair[1];
    }
    let value = n.get_or(VALUE_NUMBER, 0.0)?;
    let value = e.constant(x.dtype, &[], crate::ir::Scalar::F(value))?;
    let out = e.pad(&x, &value, &low, &high, &vec![0; r])?;
    Ok(vec![e.reshape(&out, n.out_dims())?])
}
