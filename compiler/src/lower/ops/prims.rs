//! `prims.*` ops that PyTorch's reference decompositions (torch._refs) leave in a graph, and
//! the special functions CHLO provides. Prims take already-broadcast, already-promoted
//! operands, so most rules are one StableHLO/CHLO op in the result dtype.

use crate::ir::DType;
use crate::ir::Scalar;
use crate::lower::emitter::{Cmp, Emitter, Tv};
use crate::lower::error::{bad, RuleResult};
use crate::lower::legality::Check;
use crate::lower::names::{chlo, hlo};
use crate::lower::node::{dim, NodeCtx};
use crate::lower::ops::reduce::reduce_with;
use crate::lower::param::{Extreme, Gcd, Reduction, Special};
use crate::registry::attrs::{BROADCAST_DIMENSIONS, CORRECTION, DIMS, N};

type R<'c, 'a> = RuleResult<Vec<Tv<'c, 'a>>>;

/// The i-th operand converted to the result dtype (a number attribute becomes a constant).
fn operand<'c, 'a>(
    e: &Emitter<'c, 'a>,
    n: &NodeCtx<'c, 'a, '_>,
    names: &[&str],
    i: usize,
    d: DType,
) -> RuleResult<Tv<'c, 'a>> {
    let ps = n.params(names);
    let dims = n.out_dims().to_vec();
    match &ps[i] {
        crate::lower::node::Param::Tensor(t) => e.broadcast_to(&e.convert(t, d)?, &dims),
        crate::lower::node::Param::Attr(a) => match Scalar::from_attr(a) {
            Some(s) => e.constant(d, &dims, s),
            None => bad!("operand {} must be a tensor or a number", names[i]),
        },
        crate::lower::node::Param::Absent => bad!("missing operand {}", names[i]),
    }
}

/// prims.sum(inp, dims, *, output_dtype) and prims.var(inp, dims, correction, *, output_dtype).
pub fn reduction<'c, 'a>(e: &Emitter<'c, 'a>, n: &NodeCtx<'c, 'a, '_>) -> R<'c, 'a> {
    let x = n.arg(0)?;
    let out = n.out_dtype();
    let mut dims: Vec<usize> = match n.opt(DIMS)? {
        Some(v) => v.iter().map(|&d| dim(d, x.rank())).collect::<RuleResult<_>>()?,
        None => (0..x.rank()).collect(),
    };
    dims.sort_unstable();
    dims.dedup();
    if n.param::<Reduction>()? == Reduction::Sum {
        let acc = crate::lower::ops::reduce::accumulator(out);
        let s = e.convert(&reduce_with(e, &e.convert(x, acc)?, &dims, Reduction::Sum)?, out)?;
        return Ok(vec![e.reshape(&s, n.out_dims())?]);
    }
    let correction = n.get_or(CORRECTION, 1.0)?;
    if x.dtype.is_complex() {
        let v = crate::lower::ops::reduce::complex_variance(e, x, &dims, correction, out)?;
        return Ok(vec![e.reshape(&v, n.out_dims())?]);
    }
    let v = crate::lower::ops::reduce::variance(e, &e.convert(x, out)?, &dims, correction)?;
    Ok(vec![e.reshape(&v, n.out_dims())?])
}

/// prims.broadcast_in_dim(a, shape, broadcast_dimensions).
pub fn broadcast_in_dim<'c, 'a>(e: &Emitter<'c, 'a>, n: &NodeCtx<'c, 'a, '_>) -> R<'c, 'a> {
    let x = n.arg(0)?;
    let mapping = n.get(BROADCAST_DIMENSIONS)?;
    if mapping.len() != x.rank() {
        return bad!("broadcast_dimensions has {} entries for a rank-{} operand", mapping.len(), x.rank());
    }
    Ok(vec![e.broadcast_in_dim(x, n.out_dims(), &mapping)?])
}

/// prims.where(pred, a, b).
pub fn where_<'c, 'a>(e: &Emitter<'c, 'a>, n: &NodeCtx<'c, 'a, '_>) -> R<'c, 'a> {
    let names = ["pred", "a", "b"];
    let out = n.out_dtype();
    let c = operand(e, n, &names, 0, DType::Bool)?;
    let a = operand(e, n, &names, 1, out)?;
    let b = operand(e, n, &names, 2, out)?;
    Ok(vec![e.select(&c, &a, &b)?])
}

/// prims.fma(a, b, c) = a * b + c. PyTorch rounds once; this rounds the product and the sum
/// separately (XLA has no fused multiply-add op), within one ulp of eager, which the eager
/// comparisons' tolerances cover.
pub fn fma<'c, 'a>(e: &Emitter<'c, 'a>, n: &NodeCtx<'c, 'a, '_>) -> R<'c, 'a> {
    let out = n.out_dtype();
    let names = ["a", "b", "c"];
    let (a, b, c) = (operand(e, n, &names, 0, out)?, operand(e, n, &names, 1, out)?, operand(e, n, &names, 2, out)?);
    let ab = e.ew(hlo::MULTIPLY, &[&a, &b], out)?;
    Ok(vec![e.ew(hlo::ADD, &[&ab, &c], out)?])
}

/// prims.div: true division for floats, truncating for integers (StableHLO's int divide).
pub fn div<'c, 'a>(e: &Emitter<'c, 'a>, n: &NodeCtx<'c, 'a, '_>) -> R<'c, 'a> {
    let out = n.out_dtype();
    let names = ["self", "other"];
    let (a, b) = (operand(e, n, &names, 0, out)?, operand(e, n, &names, 1, out)?);
    Ok(vec![e.ew(hlo::DIVIDE, &[&a, &b], out)?])
}

/// `self` and `other` in the result dtype (aten.special_zeta names its operands like every
/// prim here).
fn both<'c, 'a>(e: &Emitter<'c, 'a>, n: &NodeCtx<'c, 'a, '_>) -> RuleResult<(Tv<'c, 'a>, Tv<'c, 'a>)> {
    let (out, names) = (n.out_dtype(), ["self", "other"]);
    Ok((operand(e, n, &names, 0, out)?, operand(e, n, &names, 1, out)?))
}

/// Elementwise binary prims that are one StableHLO/CHLO op (the registry's parameter):
/// shifts, zeta.
pub fn binary<'c, 'a>(e: &Emitter<'c, 'a>, n: &NodeCtx<'c, 'a, '_>) -> R<'c, 'a> {
    let (a, b) = both(e, n)?;
    Ok(vec![e.ew(n.param::<&str>()?, &[&a, &b], n.out_dtype())?])
}

/// fmax / fmin (the registry's parameter: `max` or `min`): a NaN loses to a number.
pub fn fminmax<'c, 'a>(e: &Emitter<'c, 'a>, n: &NodeCtx<'c, 'a, '_>) -> R<'c, 'a> {
    let (a, b) = both(e, n)?;
    let out = n.out_dtype();
    let op = if n.param::<Extreme>()? == Extreme::Max { hlo::MAXIMUM } else { hlo::MINIMUM };
    let m = e.ew(op, &[&a, &b], out)?;
    if !out.is_float() {
        return Ok(vec![m]);
    }
    // Take the other operand where one is NaN.
    let a_nan = e.compare(&a, &a, Cmp::Ne)?;
    let b_nan = e.compare(&b, &b, Cmp::Ne)?;
    let m = e.select(&a_nan, &b, &m)?;
    Ok(vec![e.select(&b_nan, &a, &m)?])
}

/// hypot(a, b) = sqrt(a^2 + b^2).
pub fn hypot<'c, 'a>(e: &Emitter<'c, 'a>, n: &NodeCtx<'c, 'a, '_>) -> R<'c, 'a> {
    let (a, b) = both(e, n)?;
    let out = n.out_dtype();
    let aa = e.ew(hlo::MULTIPLY, &[&a, &a], out)?;
    let bb = e.ew(hlo::MULTIPLY, &[&b, &b], out)?;
    let s = e.ew(hlo::ADD, &[&aa, &bb], out)?;
    Ok(vec![e.ew(hlo::SQRT, &[&s], out)?])
}

/// polygamma(n, self): chlo.polygamma with the order as a tensor. CHLO is inaccurate for
/// negative arguments, so for n >= 1 they are first shifted up with the recurrence
/// psi_n(x) = psi_n(x + 1) - (-1)^n n! / x^(n+1) (a while loop until every x >= 0).
pub fn polygamma<'c, 'a>(e: &Emitter<'c, 'a>, n: &NodeCtx<'c, 'a, '_>) -> R<'c, 'a> {
    let out = n.out_dtype();
    let x = e.convert(n.arg(0)?, out)?;
    let order = n.get(N)?;
    let orders = e.constant(out, &x.dims, Scalar::I(order))?;
    if order < 1 || x.dims.contains(&0) {
        return Ok(vec![e.ew(chlo::POLYGAMMA, &[&orders, &x], out)?]);
    }
    // n! overflows f64 past 170 (the result is then +-inf or NaN, as in eager); stopping the
    // product there keeps a huge `n` from looping for ever.
    let factorial: f64 = (1..=order.min(171)).map(|k| k as f64).product();
    let sign = if order % 2 == 0 { -1.0 } else { 1.0 }; // -(-1)^n
    let coef = sign * factorial;
    let zero = e.constant(out, &x.dims, Scalar::F(0.0))?;
    let all: Vec<usize> = (0..x.rank()).collect();
    let shifted = e.while_loop(
        &[&x, &zero],
        |b, s| {
            let z = b.constant(out, &s[0].dims, Scalar::F(0.0))?;
            let neg = b.compare(&s[0], &z, Cmp::Lt)?;
            let any = reduce_with(b, &neg, &all, Reduction::Or)?;
            Ok(any)
        },
        |b, s| {
            let (xs, acc) = (&s[0], &s[1]);
            let dims = xs.dims.clone();
            let z = b.constant(out, &dims, Scalar::F(0.0))?;
            let neg = b.compare(xs, &z, Cmp::Lt)?;
            let p = b.ew(hlo::POWER, &[xs, &b.constant(out, &dims, Scalar::F(order as f64 + 1.0))?], out)?;
            let term = b.ew(hlo::DIVIDE, &[&b.constant(out, &dims, Scalar::F(coef))?, &p], out)?;
            let acc2 = b.select(&neg, &b.ew(hlo::ADD, &[acc, &term], out)?, acc)?;
            let x2 = b.select(&neg, &b.ew(hlo::ADD, &[xs, &b.constant(out, &dims, Scalar::F(1.0))?], out)?, xs)?;
            Ok(vec![x2, acc2])
        },
    )?;
    let base = e.ew(chlo::POLYGAMMA, &[&orders, &shifted[0]], out)?;
    Ok(vec![e.ew(hlo::ADD, &[&base, &shifted[1]], out)?])
}

/// view_of_dtype(a, dtype): `a`'s bytes read as `dtype` (`Tensor.view(dtype)`). A smaller
/// element splits each of `a`'s into a new last dim that is merged into the last; a larger one
/// groups the last dim's elements into one (PyTorch's rule for the result's shape).
pub fn view_of_dtype<'c, 'a>(e: &Emitter<'c, 'a>, n: &NodeCtx<'c, 'a, '_>) -> R<'c, 'a> {
    let x = n.arg(0)?;
    let (to, out) = (n.out_dtype(), n.out_dims().to_vec());
    let (from_size, to_size) = (x.dtype.size_bytes(), to.size_bytes());
    if x.dtype == DType::Bool || to == DType::Bool {
        // Bools are bytes of 0 or 1 in PyTorch and i1 in StableHLO, which has no bitcast of
        // them; a conversion reads a valid bool the same way.
        return Ok(vec![e.reshape(&e.convert(x, to)?, &out)?]);
    }
    let v = if from_size == to_size {
        e.op(hlo::BITCAST_CONVERT, &[x], to, &out, &[])?
    } else if from_size > to_size {
        let mut split = x.dims.clone();
        split.push((from_size / to_size) as i64);
        e.reshape(&e.op(hlo::BITCAST_CONVERT, &[x], to, &split, &[])?, &out)?
    } else {
        let mut grouped = out.clone();
        grouped.push((to_size / from_size) as i64);
        e.op(hlo::BITCAST_CONVERT, &[&e.reshape(x, &grouped)?], to, &out, &[])?
    };
    Ok(vec![v])
}

/// `view_of_dtype` between real dtypes, of bools only as bytes: StableHLO's bitcast takes no
/// complex element, and a bool is not a bit pattern of another size.
pub fn view_of_dtype_legal(c: &Check) -> Result<(), String> {
    let (Some(from), Some(to)) = (c.operand_dtype(0), c.out_dtype()) else { return Ok(()) };
    if from.is_complex() || to.is_complex() {
        return Err(format!("a {to} view of {from} (complex elements are viewed as their parts only)"));
    }
    let bool_of_other_size = |a: DType, b: DType| a == DType::Bool && b.size_bytes() != 1;
    if bool_of_other_size(from, to) || bool_of_other_size(to, from) {
        return Err(format!("a {to} view of {from}"));
    }
    Ok(())
}

/// signbit(x): the sign bit of floats (true for -0.0 and negative NaNs), x < 0 for ints.
pub fn signbit<'c, 'a>(e: &Emitter<'c, 'a>, n: &NodeCtx<'c, 'a, '_>) -> R<'c, 'a> {
    let x = n.arg(0)?;
    let r = match x.dtype {
        DType::Bool | DType::U8 => e.constant(DType::Bool, &x.dims, Scalar::B(false))?,
        d if d.is_integer() => e.compare(x, &e.constant(d, &x.dims, Scalar::I(0))?, Cmp::Lt)?,
        d => {
            let bits = match d {
                DType::F64 => DType::I64,
                DType::F32 => DType::I32,
                _ => DType::I16,
            };
            let as_int = e.op(hlo::BITCAST_CONVERT, &[x], bits, &x.dims.clone(), &[])?;
            e.compare(&as_int, &e.constant(bits, &x.dims, Scalar::I(0))?, Cmp::Lt)?
        }
    };
    Ok(vec![e.convert(&r, n.out_dtype())?])
}

/// angle(self) for real tensors: pi for negative values, 0 otherwise, NaN kept.
pub fn angle<'c, 'a>(e: &Emitter<'c, 'a>, n: &NodeCtx<'c, 'a, '_>) -> R<'c, 'a> {
    let out = n.out_dtype();
    let x = n.arg(0)?;
    if x.dtype.is_complex() {
        // arg(z) = atan2(imag, real).
        let (re, im) = e.complex_parts(x)?;
        return Ok(vec![e.ew(hlo::ATAN2, &[&im, &re], out)?]);
    }
    let xf = e.convert(x, out)?;
    let zero = e.constant(out, &x.dims, Scalar::F(0.0))?;
    let pi = e.constant(out, &x.dims, Scalar::F(std::f64::consts::PI))?;
    let neg = e.compare(&xf, &zero, Cmp::Lt)?;
    let r = e.select(&neg, &pi, &zero)?;
    let nan = e.compare(&xf, &xf, Cmp::Ne)?;
    Ok(vec![e.select(&nan, &xf, &r)?])
}

/// copy(self, src, non_blocking): `src` converted to self's dtype and broadcast to its shape.
pub fn copy<'c, 'a>(e: &Emitter<'c, 'a>, n: &NodeCtx<'c, 'a, '_>) -> R<'c, 'a> {
    let src = e.cast(n.arg(1)?, n.out_dtype())?;
    Ok(vec![e.broadcast_to(&src, n.out_dims())?])
}

/// Special functions built from CHLO and elementary ops: erfcx, ndtri, spherical_bessel_j0,
/// bessel_i1 / modified_bessel_i1 (from CHLO's exponentially scaled i1e).
pub fn special_unary<'c, 'a>(e: &Emitter<'c, 'a>, n: &NodeCtx<'c, 'a, '_>) -> R<'c, 'a> {
    let f: Special = n.param()?;
    let d = n.out_dtype();
    let x = e.convert(n.arg(0)?, d)?;
    let dims = x.dims.clone();
    let c = |v: f64| e.constant(d, &dims, Scalar::F(v));
    let mul = |a: &Tv<'c, 'a>, b: &Tv<'c, 'a>| e.ew(hlo::MULTIPLY, &[a, b], d);
    let r = match f {
        Special::Erfcx => {
            // exp(x^2) erfc(x), with the asymptotic series where exp(x^2) would overflow:
            // erfcx(x) ~ 1/(x sqrt(pi)) (1 - 1/(2x^2) + 3/(4x^4) - 15/(8x^6) + 105/(16x^8)).
            let direct = mul(&e.ew(hlo::EXPONENTIAL, &[&mul(&x, &x)?], d)?, &e.ew(chlo::ERFC, &[&x], d)?)?;
            let inv2 = e.ew(hlo::DIVIDE, &[&c(1.0)?, &mul(&x, &x)?], d)?;
            let mut series = c(105.0 / 16.0)?;
            for coef in [-15.0 / 8.0, 3.0 / 4.0, -0.5, 1.0] {
                series = e.ew(hlo::ADD, &[&mul(&series, &inv2)?, &c(coef)?], d)?;
            }
            let lead = e.ew(hlo::DIVIDE, &[&c(1.0 / std::f64::consts::PI.sqrt())?, &x], d)?;
            let asymptotic = mul(&lead, &series)?;
            let large = e.compare(&x, &c(5.0)?, Cmp::Gt)?;
            e.select(&large, &asymptotic, &direct)?
        }
        // ndtri(p) = sqrt(2) erfinv(2p - 1)
        Special::Ndtri => {
            let t = e.ew(hlo::SUBTRACT, &[&mul(&x, &c(2.0)?)?, &c(1.0)?], d)?;
            mul(&e.ew(chlo::ERF_INV, &[&t], d)?, &c(std::f64::consts::SQRT_2)?)?
        }
        // sin(x)/x, with its series near 0
        Special::SphericalBesselJ0 => {
            let x2 = mul(&x, &x)?;
            let series = e.ew(
                hlo::ADD,
                &[&c(1.0)?, &mul(&x2, &e.ew(hlo::ADD, &[&c(-1.0 / 6.0)?, &mul(&x2, &c(1.0 / 120.0)?)?], d)?)?],
                d,
            )?;
            let direct = e.ew(hlo::DIVIDE, &[&e.ew(hlo::SINE, &[&x], d)?, &x], d)?;
            let small = e.compare(&e.ew(hlo::ABS, &[&x], d)?, &c(1e-2)?, Cmp::Lt)?;
            let inf = e.compare(&e.ew(hlo::ABS, &[&x], d)?, &c(f64::INFINITY)?, Cmp::Eq)?;
            let r = e.select(&small, &series, &direct)?;
            e.select(&inf, &c(0.0)?, &r)?
        }
        // I1(x) = i1e(x) exp(|x|)
        Special::BesselI1 => {
            let scaled = e.ew(chlo::BESSEL_I1E, &[&x], d)?;
            mul(&scaled, &e.ew(hlo::EXPONENTIAL, &[&e.ew(hlo::ABS, &[&x], d)?], d)?)?
        }
        // I0 and exp(-|x|) I0: the power series sum (x^2/4)^k / (k!)^2 up to |x| = 15,
        // the asymptotic expansion of i0e beyond.
        Special::BesselI0 | Special::BesselI0e => {
            let scaled_result = f == Special::BesselI0e;
            let ax = e.ew(hlo::ABS, &[&x], d)?;
            let q = mul(&mul(&x, &x)?, &c(0.25)?)?;
            let (mut term, mut sum) = (c(1.0)?, c(1.0)?);
            for k in 1..=64 {
                term = mul(&term, &mul(&q, &c(1.0 / (k * k) as f64)?)?)?;
                sum = e.ew(hlo::ADD, &[&sum, &term], d)?;
            }
            let exp_neg = e.ew(hlo::EXPONENTIAL, &[&e.ew(hlo::NEGATE, &[&ax], d)?], d)?;
            let series_e = mul(&sum, &exp_neg)?;
            let inv = e.ew(hlo::DIVIDE, &[&c(1.0)?, &ax], d)?;
            let mut poly = c(11025.0 / 98304.0)?;
            for coef in [225.0 / 3072.0, 9.0 / 128.0, 1.0 / 8.0, 1.0] {
                poly = e.ew(hlo::ADD, &[&mul(&poly, &inv)?, &c(coef)?], d)?;
            }
            let root = e.ew(hlo::RSQRT, &[&mul(&ax, &c(2.0 * std::f64::consts::PI)?)?], d)?;
            let asym_e = mul(&poly, &root)?;
            let large = e.compare(&ax, &c(15.0)?, Cmp::Gt)?;
            let scaled = e.select(&large, &asym_e, &series_e)?;
            if scaled_result {
                scaled
            } else {
                let direct = e.select(&large, &mul(&asym_e, &e.ew(hlo::EXPONENTIAL, &[&ax], d)?)?, &sum)?;
                direct
            }
        }
    };
    Ok(vec![r])
}

/// prims.div and prims.fma: not of bools.
pub fn not_bool_legal(c: &Check) -> Result<(), String> {
    match c.out_dtype() {
        Some(DType::Bool) => Err("of bools".into()),
        _ => Ok(()),
    }
}

/// gcd / lcm: of integers only.
pub fn integer_legal(c: &Check) -> Result<(), String> {
    match c.out_dtype() {
        Some(d) if !d.is_integer() => Err(format!("of a non-integer dtype {d}")),
        _ => Ok(()),
    }
}

/// gcd / lcm of integers: Euclid's algorithm as one while loop over the whole tensor.
pub fn gcd<'c, 'a>(e: &Emitter<'c, 'a>, n: &NodeCtx<'c, 'a, '_>) -> R<'c, 'a> {
    let out = n.out_dtype();
    let names = ["self", "other"];
    let (a, b) = (operand(e, n, &names, 0, out)?, operand(e, n, &names, 1, out)?);
    let (a0, b0) = (e.ew(hlo::ABS, &[&a], out)?, e.ew(hlo::ABS, &[&b], out)?);
    let all: Vec<usize> = (0..a.rank()).collect();
    let done = e.while_loop(
        &[&a0, &b0],
        |w, s| {
            let zero = w.constant(out, &s[1].dims, Scalar::I(0))?;
            reduce_with(w, &w.compare(&s[1], &zero, Cmp::Ne)?, &all, Reduction::Or)
        },
        |w, s| {
            let (x, y) = (&s[0], &s[1]);
            let zero = w.constant(out, &y.dims, Scalar::I(0))?;
            let one = w.constant(out, &y.dims, Scalar::I(1))?;
            let live = w.compare(y, &zero, Cmp::Ne)?;
            let safe = w.select(&live, y, &one)?;
            let rem = w.ew(hlo::REMAINDER, &[x, &safe], out)?;
            Ok(vec![w.select(&live, y, x)?, w.select(&live, &rem, y)?])
        },
    )?;
    let g = done[0].clone();
    if n.param::<Gcd>()? != Gcd::Lcm {
        return Ok(vec![g]);
    }
    // lcm = |a / gcd * b|, 0 when gcd is 0.
    let zero = e.constant(out, &g.dims, Scalar::I(0))?;
    let one = e.constant(out, &g.dims, Scalar::I(1))?;
    let nz = e.compare(&g, &zero, Cmp::Ne)?;
    let q = e.ew(hlo::DIVIDE, &[&a, &e.select(&nz, &g, &one)?], out)?;
    let l = e.ew(hlo::ABS, &[&e.ew(hlo::MULTIPLY, &[&q, &b], out)?], out)?;
    Ok(vec![e.select(&nz, &l, &zero)?])
}

/// nextafter(self, other): CHLO's next_after.
pub fn nextafter<'c, 'a>(e: &Emitter<'c, 'a>, n: &NodeCtx<'c, 'a, '_>) -> R<'c, 'a> {
    let out = n.out_dtype();
    let names = ["self", "other"];
    let (a, b) = (operand(e, n, &names, 0, out)?, operand(e, n, &names, 1, out)?);
    Ok(vec![e.ew(chlo::NEXT_AFTER, &[&a, &b], out)?])
}
