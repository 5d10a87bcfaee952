//! Fourier transforms (`_fft_r2c`, `_fft_c2r`, `_fft_c2c`) and the complex helpers around
//! them (`_conj`, `view_as_real`, `view_as_complex`, `real`, `imag`).
//!
//! Each transform runs as 1-D `stablehlo.fft`s, one signal dim at a time (moved last and
//! back), since the op only transforms trailing dims. XLA's inverse transforms divide by n;
//! PyTorch's `normalization` (0: none, 1: 1/sqrt(n), 2: 1/n over the signal size) is applied
//! after undoing that.

use crate::ir::DType;
use crate::ir::Scalar;
use crate::lower::emitter::{Emitter, Tv};
use crate::lower::error::{bad, RuleResult};
use crate::lower::names::hlo;
use crate::lower::node::{dim, product, NodeCtx};
use crate::lower::param::Part;
use crate::registry::attrs::{DIM_LIST, FORWARD, LAST_DIM_SIZE, NORMALIZATION, ONESIDED};

type R<'c, 'a> = RuleResult<Vec<Tv<'c, 'a>>>;

fn complex_of(d: DType) -> DType {
    if d == DType::F64 || d == DType::C128 {
        DType::C128
    } else {
        DType::C64
    }
}

fn real_of(d: DType) -> DType {
    if d == DType::C128 || d == DType::F64 {
        DType::F64
    } else {
        DType::F32
    }
}

/// One 1-D transform of `kind` (FFT, IFFT, RFFT, IRFFT) along `axis` with length `len`.
fn fft_1d<'c, 'a>(e: &Emitter<'c, 'a>, x: &Tv<'c, 'a>, axis: usize, kind: &str, len: i64) -> RuleResult<Tv<'c, 'a>> {
    let r = x.rank();
    let mut perm: Vec<usize> = (0..r).filter(|&i| i != axis).collect();
    perm.push(axis);
    let moved = e.transpose(x, &perm)?;
    let mut out_dims = moved.dims.clone();
    let out_dtype = match kind {
        "RFFT" => {
            out_dims[r - 1] = len / 2 + 1;
            complex_of(x.dtype)
        }
        "IRFFT" => {
            out_dims[r - 1] = len;
            real_of(x.dtype)
        }
        _ => x.dtype,
    };
    let y = e.op(
        hlo::FFT,
        &[&moved],
        out_dtype,
        &out_dims,
        &[("fft_type", e.attr(&format!("#stablehlo<fft_type {kind}>"))?), ("fft_length", e.i64_array(&[len]))],
    )?;
    let mut inverse = vec![0; r];
    for (i, &p) in perm.iter().enumerate() {
        inverse[p] = i;
    }
    e.transpose(&y, &inverse)
}

/// Multiplies by `factor` (a real number) in x's dtype.
fn scale<'c, 'a>(e: &Emitter<'c, 'a>, x: &Tv<'c, 'a>, factor: f64) -> RuleResult<Tv<'c, 'a>> {
    if factor == 1.0 {
        return Ok(x.clone());
    }
    let c = e.constant(x.dtype, &x.dims, Scalar::F(factor))?;
    e.ew(hlo::MULTIPLY, &[x, &c], x.dtype)
}

/// PyTorch's normalization factor for signal size `n`, times `n` when XLA already divided
/// by it (inverse transforms).
fn norm_factor(mode: i64, n: i64, xla_divided: bool) -> RuleResult<f64> {
    let n = n as f64;
    let base = match mode {
        0 => 1.0,
        1 => 1.0 / n.sqrt(),
        2 => 1.0 / n,
        m => return bad!("unknown FFT normalization mode {m}"),
    };
    Ok(if xla_divided { base * n } else { base })
}

fn signal_dims(n: &NodeCtx, rank: usize) -> RuleResult<Vec<usize>> {
    n.get(DIM_LIST)?.iter().map(|&d| dim(d, rank)).collect()
}

/// _fft_r2c(self, dim, normalization, onesided): the last listed dim is halved when onesided.
pub fn r2c<'c, 'a>(e: &Emitter<'c, 'a>, n: &NodeCtx<'c, 'a, '_>) -> R<'c, 'a> {
    let x = n.arg(0)?;
    let dims = signal_dims(n, x.rank())?;
    let Some((&last, rest)) = dims.split_last() else { return bad!("_fft_r2c needs at least one dim") };
    let size: i64 = product(dims.iter().map(|&d| x.dims[d]))?;
    let real = e.convert(x, real_of(n.out_dtype()))?;
    let mut y = if n.get_or(ONESIDED, true)? {
        fft_1d(e, &real, last, "RFFT", x.dims[last])?
    } else {
        let c = e.convert(&real, n.out_dtype())?;
        fft_1d(e, &c, last, "FFT", x.dims[last])?
    };
    for &d in rest {
        y = fft_1d(e, &y, d, "FFT", y.dims[d])?;
    }
    Ok(vec![scale(e, &y, norm_factor(n.get(NORMALIZATION)?, size, false)?)?])
}

/// _fft_c2c(self, dim, normalization, forward).
pub fn c2c<'c, 'a>(e: &Emitter<'c, 'a>, n: &NodeCtx<'c, 'a, '_>) -> R<'c, 'a> {
    let x = e.convert(n.arg(0)?, n.out_dtype())?;
    let dims = signal_dims(n, x.rank())?;
    let forward = n.get_or(FORWARD, true)?;
    let size: i64 = product(dims.iter().map(|&d| x.dims[d]))?;
    let mut y = x;
    for &d in &dims {
        y = fft_1d(e, &y, d, if forward { "FFT" } else { "IFFT" }, y.dims[d])?;
    }
    Ok(vec![scale(e, &y, norm_factor(n.get(NORMALIZATION)?, size, !forward)?)?])
}

/// _fft_c2r(self, dim, normalization, last_dim_size): inverse transforms over the leading
/// listed dims, then a real inverse over the last one producing `last_dim_size` values.
pub fn c2r<'c, 'a>(e: &Emitter<'c, 'a>, n: &NodeCtx<'c, 'a, '_>) -> R<'c, 'a> {
    let x = e.convert(n.arg(0)?, complex_of(n.out_dtype()))?;
    let dims = signal_dims(n, x.rank())?;
    let Some((&last, rest)) = dims.split_last() else { return bad!("_fft_c2r needs at least one dim") };
    let len = n.get(LAST_DIM_SIZE)?;
    let mut y = x;
    for &d in rest {
        y = fft_1d(e, &y, d, "IFFT", y.dims[d])?;
    }
    // IRFFT reads exactly len/2 + 1 values along the last dim.
    let want = len / 2 + 1;
    let have = y.dims[last];
    if have > want {
        let mut hi = y.dims.clone();
        hi[last] = want;
        y = e.slice(&y, &vec![0; y.rank()], &hi, &vec![1; y.rank()])?;
    } else if have < want {
        let zero = e.constant(y.dtype, &[], Scalar::I(0))?;
        let mut high = vec![0; y.rank()];
        high[last] = want - have;
        y = e.pad(&y, &zero, &vec![0; y.rank()], &high, &vec![0; y.rank()])?;
    }
    let y = fft_1d(e, &y, last, "IRFFT", len)?;
    let size: i64 = product(rest.iter().map(|&d| y.dims[d]).chain([len]))?;
    Ok(vec![scale(e, &y, norm_factor(n.get(NORMALIZATION)?, size, true)?)?])
}

/// _conj / _conj_physical / conj_physical: negated imaginary part (identity for reals).
pub fn conj<'c, 'a>(e: &Emitter<'c, 'a>, n: &NodeCtx<'c, 'a, '_>) -> R<'c, 'a> {
    let x = n.arg(0)?;
    if !x.dtype.is_complex() {
        return Ok(vec![x.clone()]);
    }
    let (re, im) = e.complex_parts(x)?;
    let neg = e.ew(hlo::NEGATE, &[&im], im.dtype)?;
    Ok(vec![e.op(hlo::COMPLEX, &[&re, &neg], x.dtype, &x.dims.clone(), &[])?])
}

/// real / imag of a complex tensor (real of a real tensor is itself).
pub fn part<'c, 'a>(e: &Emitter<'c, 'a>, n: &NodeCtx<'c, 'a, '_>) -> R<'c, 'a> {
    let x = n.arg(0)?;
    let imag = n.param::<Part>()? == Part::Imag;
    if !x.dtype.is_complex() {
        return if imag { bad!("imag of a real tensor") } else { Ok(vec![x.clone()]) };
    }
    let op = if imag { hlo::IMAG } else { hlo::REAL };
    Ok(vec![e.op(op, &[x], real_of(x.dtype), &x.dims.clone(), &[])?])
}

/// view_as_real(self): [..., 2] with the real and imaginary parts.
pub fn view_as_real<'c, 'a>(e: &Emitter<'c, 'a>, n: &NodeCtx<'c, 'a, '_>) -> R<'c, 'a> {
    let x = n.arg(0)?;
    let mut one = x.dims.clone();
    one.push(1);
    let (re, im) = e.complex_parts(x)?;
    let part = re.dtype;
    let (re, im) = (e.reshape(&re, &one)?, e.reshape(&im, &one)?);
    Ok(vec![e.concatenate(&[re, im], x.rank(), part, n.out_dims())?])
}

/// view_as_complex(self): the last dim (of size 2) holds the real and imaginary parts.
pub fn view_as_complex<'c, 'a>(e: &Emitter<'c, 'a>, n: &NodeCtx<'c, 'a, '_>) -> R<'c, 'a> {
    let x = n.arg(0)?;
    let r = x.rank();
    if r == 0 || x.dims[r - 1] != 2 {
        return bad!("view_as_complex needs a last dim of size 2");
    }
    let mut hi = x.dims.clone();
    hi[r - 1] = 1;
    let re = e.reshape(&e.slice(x, &vec![0; r], &hi, &vec![1; r])?, n.out_dims())?;
    let mut lo = vec![0; r];
    lo[r - 1] = 1;
    let im = e.reshape(&e.slice(x, &lo, &x.dims.clone(), &vec![1; r])?, n.out_dims())?;
    Ok(vec![e.op(hlo::COMPLEX, &[&re, &im], n.out_dtype(), n.out_dims(), &[])?])
}
