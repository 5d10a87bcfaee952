//! Elementwise ops: unary math, binary arithmetic with PyTorch promotion and broadcasting,
//! comparisons, logical and bitwise ops, `where`, `clamp`, casts.

use crate::ir::DType;
use crate::ir::Scalar;
use crate::lower::emitter::{Cmp, Emitter, Tv};
use crate::lower::error::{bad, RuleResult};
use crate::lower::legality::Check;
use crate::lower::names::{chlo, hlo};
use crate::lower::node::{NodeCtx, Param};
use crate::lower::param::{Clamp, Classify, Extreme, LogBase};
use crate::lower::promote::{result_type, Operand};
use crate::registry::attrs::{ALPHA, APPROXIMATE, DECIMALS, MAX_VAL, MIN_VAL, ROUNDING_MODE};

type R<'c, 'a> = RuleResult<Vec<Tv<'c, 'a>>>;

/// Materialises a parameter (tensor or scalar attribute) in `dtype`, broadcast to `dims`.
fn operand<'c, 'a>(e: &Emitter<'c, 'a>, p: &Param<'c, 'a, '_>, dtype: DType, dims: &[i64]) -> RuleResult<Tv<'c, 'a>> {
    match p {
        Param::Tensor(t) => {
            let t = e.convert(t, dtype)?;
            e.broadcast_to(&t, dims)
        }
        Param::Attr(a) => match crate::ir::Scalar::from_attr(a) {
            Some(s) => e.constant(dtype, dims, s),
            None => bad!("expected a tensor or a number, got {a:?}"),
        },
        Param::Absent => bad!("missing operand"),
    }
}

/// The promotion role of a parameter.
fn role(p: &Param) -> Option<Operand> {
    match p {
        Param::Tensor(t) if t.rank() == 0 => Some(Operand::ZeroDim(t.dtype)),
        Param::Tensor(t) => Some(Operand::Dim(t.dtype)),
        Param::Attr(a) => Some(Operand::Scalar(match Scalar::from_attr(a)? {
            Scalar::B(_) => DType::Bool,
            Scalar::I(_) => DType::I64,
            Scalar::F(_) => DType::F64,
        })),
        Param::Absent => None,
    }
}

/// Unary math that is one StableHLO/CHLO op (the registry's parameter) in the result dtype:
/// the operand is converted first (ints become floats for `sqrt` etc.). Rounding an integer
/// is the identity; `abs` of a complex tensor is its real modulus.
pub fn unary<'c, 'a>(e: &Emitter<'c, 'a>, n: &NodeCtx<'c, 'a, '_>) -> R<'c, 'a> {
    let op = n.param::<&str>()?;
    let out = n.out_dtype();
    let x = n.arg(0)?;
    let r = match op {
        hlo::ROUND_NEAREST_EVEN | hlo::CEIL | hlo::FLOOR if !out.is_float() => e.convert(x, out)?,
        // |z|: StableHLO's abs of a complex tensor is its (real) modulus.
        hlo::ABS if x.dtype.is_complex() => e.op(hlo::ABS, &[x], x.dtype.real_part(), &x.dims.clone(), &[])?,
        hlo::NOT if out == DType::Bool => e.ew(hlo::NOT, &[x], DType::Bool)?,
        _ => e.ew(op, &[&e.convert(x, out)?], out)?,
    };
    Ok(vec![r])
}

/// `abs`/`neg` of a bool tensor: PyTorch raises for both.
pub fn not_of_bool(c: &Check) -> Result<(), String> {
    match c.operand_dtype(0) {
        Some(DType::Bool) => Err("of a bool tensor".into()),
        _ => Ok(()),
    }
}

/// `round(x, decimals)`: only `decimals = 0` is lowered.
pub fn round_legal(c: &Check) -> Result<(), String> {
    match c.get_or(DECIMALS, 0) {
        0 => Ok(()),
        _ => Err("round with decimals != 0".into()),
    }
}

pub fn sign_legal(c: &Check) -> Result<(), String> {
    match c.operand_dtype(0) {
        Some(d) if d.is_complex() => Err("sign of a complex tensor (PyTorch has sgn)".into()),
        _ => Ok(()),
    }
}

pub fn logical_not<'c, 'a>(e: &Emitter<'c, 'a>, n: &NodeCtx<'c, 'a, '_>) -> R<'c, 'a> {
    let b = e.convert(n.arg(0)?, DType::Bool)?;
    let t = e.ew(hlo::NOT, &[&b], DType::Bool)?;
    Ok(vec![e.convert(&t, n.out_dtype())?])
}

pub fn sign<'c, 'a>(e: &Emitter<'c, 'a>, n: &NodeCtx<'c, 'a, '_>) -> R<'c, 'a> {
    let out = n.out_dtype();
    let x = e.convert(n.arg(0)?, out)?;
    let r = if out == DType::Bool {
        x
    } else if out == DType::U8 {
        let zero = e.constant(out, &x.dims, Scalar::I(0))?;
        let pos = e.compare(&x, &zero, Cmp::Gt)?;
        e.convert(&pos, out)?
    } else {
        e.ew(hlo::SIGN, &[&x], out)?
    };
    Ok(vec![r])
}

/// trunc(x) = x < 0 ? ceil(x) : floor(x); the identity on integers.
pub fn trunc<'c, 'a>(e: &Emitter<'c, 'a>, n: &NodeCtx<'c, 'a, '_>) -> R<'c, 'a> {
    let out = n.out_dtype();
    let x = e.convert(n.arg(0)?, out)?;
    if !out.is_float() {
        return Ok(vec![x]);
    }
    let zero = e.constant(out, &x.dims, Scalar::F(0.0))?;
    let neg = e.compare(&x, &zero, Cmp::Lt)?;
    let c = e.ew(hlo::CEIL, &[&x], out)?;
    let f = e.ew(hlo::FLOOR, &[&x], out)?;
    Ok(vec![e.select(&neg, &c, &f)?])
}

pub fn reciprocal<'c, 'a>(e: &Emitter<'c, 'a>, n: &NodeCtx<'c, 'a, '_>) -> R<'c, 'a> {
    let out = n.out_dtype();
    let x = e.convert(n.arg(0)?, out)?;
    let one = e.constant(out, &x.dims, Scalar::F(1.0))?;
    Ok(vec![e.ew(hlo::DIVIDE, &[&one, &x], out)?])
}

pub fn relu<'c, 'a>(e: &Emitter<'c, 'a>, n: &NodeCtx<'c, 'a, '_>) -> R<'c, 'a> {
    // max(x, 0) with x first: XLA keeps a NaN from its first operand and the constant is
    // never NaN, so NaN propagates without the general NaN selects (the `relu_nan` eager
    // comparison test guards this).
    let out = n.out_dtype();
    let x = e.convert(n.arg(0)?, out)?;
    let zero = e.constant(out, &x.dims, Scalar::I(0))?;
    Ok(vec![e.ew(hlo::MAXIMUM, &[&x, &zero], out)?])
}

pub fn exp2<'c, 'a>(e: &Emitter<'c, 'a>, n: &NodeCtx<'c, 'a, '_>) -> R<'c, 'a> {
    let out = n.out_dtype();
    let x = e.convert(n.arg(0)?, out)?;
    let two = e.constant(out, &x.dims, Scalar::F(2.0))?;
    Ok(vec![e.ew(hlo::POWER, &[&two, &x], out)?])
}

/// log2 / log10 (the registry's parameter is the base): ln(x) / ln(base).
pub fn log_base<'c, 'a>(e: &Emitter<'c, 'a>, n: &NodeCtx<'c, 'a, '_>) -> R<'c, 'a> {
    let base = match n.param()? {
        LogBase::Two => std::f64::consts::LN_2,
        LogBase::Ten => std::f64::consts::LN_10,
    };
    let out = n.out_dtype();
    let x = e.convert(n.arg(0)?, out)?;
    let l = e.ew(hlo::LOG, &[&x], out)?;
    let c = e.constant(out, &x.dims, Scalar::F(base))?;
    Ok(vec![e.ew(hlo::DIVIDE, &[&l, &c], out)?])
}

pub fn gelu_rule<'c, 'a>(e: &Emitter<'c, 'a>, n: &NodeCtx<'c, 'a, '_>) -> R<'c, 'a> {
    let x = e.convert(n.arg(0)?, n.out_dtype())?;
    Ok(vec![gelu(e, &x, n.get_or(APPROXIMATE, "none")?)?])
}

pub fn atan<'c, 'a>(e: &Emitter<'c, 'a>, n: &NodeCtx<'c, 'a, '_>) -> R<'c, 'a> {
    // atan(x) = 2 atan2(x, 1 + sqrt(1 + x^2)). The plugin's XLA miscomputes atan, and
    // atan2(x, 1) which it simplifies to atan, on f32 arrays of 64+ elements (output =
    // input; measured, see the `atan_long` eager comparison); a non-constant
    // denominator avoids that path.
    let out = n.out_dtype();
    let x = e.convert(n.arg(0)?, out)?;
    let o = e.constant(out, &x.dims, Scalar::F(1.0))?;
    let x2 = e.ew(hlo::MULTIPLY, &[&x, &x], out)?;
    let r = e.ew(hlo::SQRT, &[&e.ew(hlo::ADD, &[&o, &x2], out)?], out)?;
    let den = e.ew(hlo::ADD, &[&o, &r], out)?;
    let half = e.ew(hlo::ATAN2, &[&x, &den], out)?;
    let two = e.constant(out, &x.dims, Scalar::F(2.0))?;
    Ok(vec![e.ew(hlo::MULTIPLY, &[&half, &two], out)?])
}

pub fn silu<'c, 'a>(e: &Emitter<'c, 'a>, n: &NodeCtx<'c, 'a, '_>) -> R<'c, 'a> {
    let out = n.out_dtype();
    let x = e.convert(n.arg(0)?, out)?;
    let s = e.ew(hlo::LOGISTIC, &[&x], out)?;
    Ok(vec![e.ew(hlo::MULTIPLY, &[&x, &s], out)?])
}

/// GELU, exact (erf) or tanh-approximated, as PyTorch defines them.
pub fn gelu<'c, 'a>(e: &Emitter<'c, 'a>, x: &Tv<'c, 'a>, approximate: &str) -> RuleResult<Tv<'c, 'a>> {
    let d = x.dtype;
    let c = |v: f64| e.constant(d, &x.dims, Scalar::F(v));
    let mul = |a: &Tv<'c, 'a>, b: &Tv<'c, 'a>| e.ew(hlo::MULTIPLY, &[a, b], d);
    let add = |a: &Tv<'c, 'a>, b: &Tv<'c, 'a>| e.ew(hlo::ADD, &[a, b], d);
    let inner = match approximate {
        // 0.5 * x * (1 + erf(x / sqrt(2)))
        "none" => {
            let scaled = mul(x, &c(std::f64::consts::FRAC_1_SQRT_2)?)?;
            e.ew(chlo::ERF, &[&scaled], d)?
        }
        // 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3)))
        "tanh" => {
            let x3 = mul(&mul(x, x)?, x)?;
            let poly = add(x, &mul(&x3, &c(0.044715)?)?)?;
            let arg = mul(&poly, &c((2.0 / std::f64::consts::PI).sqrt())?)?;
            e.ew(hlo::TANH, &[&arg], d)?
        }
        other => return bad!("unknown gelu approximation '{other}'"),
    };
    let one_plus = add(&c(1.0)?, &inner)?;
    mul(&mul(x, &c(0.5)?)?, &one_plus)
}

/// Binary arithmetic in the result dtype (PyTorch computes in the promoted type, which the IR
/// records as the result type): one StableHLO op, the registry's parameter, with `alpha` for
/// add/sub and `rounding_mode` for div. On bools add is `or` and mul is `and`.
pub fn binary<'c, 'a>(e: &Emitter<'c, 'a>, n: &NodeCtx<'c, 'a, '_>) -> R<'c, 'a> {
    let op = n.param::<&str>()?;
    let (a, b) = operands(e, n, op == hlo::POWER)?;
    let out = n.out_dtype();
    let b = scaled_by_alpha(e, n, b)?;
    let bool_out = out == DType::Bool;
    let r = match op {
        hlo::ADD if bool_out => e.ew(hlo::OR, &[&a, &b], out)?,
        hlo::MULTIPLY if bool_out => e.ew(hlo::AND, &[&a, &b], out)?,
        hlo::DIVIDE => divide(e, n, &a, &b)?,
        _ => e.ew(op, &[&a, &b], out)?,
    };
    Ok(vec![r])
}

/// `self` and `other` (or `exponent`) in the result dtype, broadcast to the result.
fn operands<'c, 'a>(
    e: &Emitter<'c, 'a>,
    n: &NodeCtx<'c, 'a, '_>,
    exponent: bool,
) -> RuleResult<(Tv<'c, 'a>, Tv<'c, 'a>)> {
    let ps = n.params(&["self", if exponent { "exponent" } else { "other" }]);
    let (out, dims) = (n.out_dtype(), n.out_dims().to_vec());
    Ok((operand(e, &ps[0], out, &dims)?, operand(e, &ps[1], out, &dims)?))
}

/// `alpha * x` for add/sub/rsub's `alpha` (absent or 1: `x`).
fn scaled_by_alpha<'c, 'a>(e: &Emitter<'c, 'a>, n: &NodeCtx<'c, 'a, '_>, x: Tv<'c, 'a>) -> RuleResult<Tv<'c, 'a>> {
    let out = n.out_dtype();
    match n.raw(ALPHA).and_then(Scalar::from_attr) {
        Some(al) if !al.is_one() => {
            let c = e.constant(out, &x.dims.clone(), al)?;
            e.ew(if out == DType::Bool { hlo::AND } else { hlo::MULTIPLY }, &[&x, &c], out)
        }
        _ => Ok(x),
    }
}

/// div with `rounding_mode` none (true division: the result is floating), trunc or floor.
/// Integer/bool inputs with a rounding mode divide in their own type.
fn divide<'c, 'a>(
    e: &Emitter<'c, 'a>,
    n: &NodeCtx<'c, 'a, '_>,
    a: &Tv<'c, 'a>,
    b: &Tv<'c, 'a>,
) -> RuleResult<Tv<'c, 'a>> {
    let (out, dims) = (n.out_dtype(), n.out_dims().to_vec());
    match n.get_or(ROUNDING_MODE, "")? {
        "" if out.is_float() || out.is_complex() => e.true_divide(a, b, out),
        "" => bad!("true division must produce a floating result, the IR says {out}"),
        "trunc" if out.is_float() => {
            let q = e.ew(hlo::DIVIDE, &[a, b], out)?;
            let zero = e.constant(out, &dims, Scalar::F(0.0))?;
            let neg = e.compare(&q, &zero, Cmp::Lt)?;
            let c = e.ew(hlo::CEIL, &[&q], out)?;
            let f = e.ew(hlo::FLOOR, &[&q], out)?;
            e.select(&neg, &c, &f)
        }
        "trunc" => e.ew(hlo::DIVIDE, &[a, b], out),
        "floor" => floor_divide_values(e, a, b),
        m => bad!("unknown rounding_mode '{m}'"),
    }
}

/// sub and rsub of bools: PyTorch raises.
pub fn subtract_legal(c: &Check) -> Result<(), String> {
    match c.out_dtype() {
        Some(DType::Bool) => Err("subtraction of bool tensors".into()),
        _ => Ok(()),
    }
}

/// rsub(self, other, alpha) = other - alpha * self.
pub fn rsub<'c, 'a>(e: &Emitter<'c, 'a>, n: &NodeCtx<'c, 'a, '_>) -> R<'c, 'a> {
    let (a, b) = operands(e, n, false)?;
    let a = scaled_by_alpha(e, n, a)?;
    Ok(vec![e.ew(hlo::SUBTRACT, &[&b, &a], n.out_dtype())?])
}

pub fn floor_divide<'c, 'a>(e: &Emitter<'c, 'a>, n: &NodeCtx<'c, 'a, '_>) -> R<'c, 'a> {
    let (a, b) = operands(e, n, false)?;
    Ok(vec![floor_divide_values(e, &a, &b)?])
}

/// maximum / minimum (the registry's parameter: `max` or `min`), NaN propagating.
pub fn extremum<'c, 'a>(e: &Emitter<'c, 'a>, n: &NodeCtx<'c, 'a, '_>) -> R<'c, 'a> {
    let (a, b) = operands(e, n, false)?;
    Ok(vec![e.minmax(&a, &b, n.param::<Extreme>()? == Extreme::Max)?])
}

/// Python modulo: the result takes the divisor's sign. r = fmod(a, b);
/// r != 0 && (r < 0) != (b < 0) ? r + b : r
pub fn remainder<'c, 'a>(e: &Emitter<'c, 'a>, n: &NodeCtx<'c, 'a, '_>) -> R<'c, 'a> {
    let (a, b) = operands(e, n, false)?;
    let (out, dims) = (n.out_dtype(), n.out_dims().to_vec());
    let r = e.ew(hlo::REMAINDER, &[&a, &b], out)?;
    let zero = e.constant(out, &dims, Scalar::I(0))?;
    let nonzero = e.compare(&r, &zero, Cmp::Ne)?;
    let r_neg = e.compare(&r, &zero, Cmp::Lt)?;
    let b_neg = e.compare(&b, &zero, Cmp::Lt)?;
    let differ = e.ew(hlo::XOR, &[&r_neg, &b_neg], DType::Bool)?;
    let fix = e.ew(hlo::AND, &[&nonzero, &differ], DType::Bool)?;
    let shifted = e.ew(hlo::ADD, &[&r, &b], out)?;
    Ok(vec![e.select(&fix, &shifted, &r)?])
}

/// PyTorch's floor division: ints round toward -inf; floats follow `div_floor_floating`
/// (fmod-based, exact where `floor(a / b)` is not).
fn floor_divide_values<'c, 'a>(e: &Emitter<'c, 'a>, a: &Tv<'c, 'a>, b: &Tv<'c, 'a>) -> RuleResult<Tv<'c, 'a>> {
    let d = a.dtype;
    let dims = a.dims.clone();
    let zero = e.constant(d, &dims, Scalar::I(0))?;
    let one = e.constant(d, &dims, Scalar::I(1))?;
    if !d.is_float() {
        let q = e.ew(hlo::DIVIDE, &[a, b], d)?;
        let r = e.ew(hlo::REMAINDER, &[a, b], d)?;
        let r_nonzero = e.compare(&r, &zero, Cmp::Ne)?;
        let a_neg = e.compare(a, &zero, Cmp::Lt)?;
        let b_neg = e.compare(b, &zero, Cmp::Lt)?;
        let signs_differ = e.ew(hlo::XOR, &[&a_neg, &b_neg], DType::Bool)?;
        let adjust = e.ew(hlo::AND, &[&r_nonzero, &signs_differ], DType::Bool)?;
        let q1 = e.ew(hlo::SUBTRACT, &[&q, &one], d)?;
        return e.select(&adjust, &q1, &q);
    }
    // mod = fmod(a, b); div = (a - mod) / b; if mod != 0 && (b < 0) != (mod < 0): div -= 1
    // if div != 0: f = floor(div); if div - f > 0.5: f += 1  else: copysign(0, a / b)
    // b == 0: a / b
    let m = e.ew(hlo::REMAINDER, &[a, b], d)?;
    let am = e.ew(hlo::SUBTRACT, &[a, &m], d)?;
    let div = e.ew(hlo::DIVIDE, &[&am, b], d)?;
    let m_nonzero = e.compare(&m, &zero, Cmp::Ne)?;
    let b_neg = e.compare(b, &zero, Cmp::Lt)?;
    let m_neg = e.compare(&m, &zero, Cmp::Lt)?;
    let differ = e.ew(hlo::XOR, &[&b_neg, &m_neg], DType::Bool)?;
    let adjust = e.ew(hlo::AND, &[&m_nonzero, &differ], DType::Bool)?;
    let div1 = e.ew(hlo::SUBTRACT, &[&div, &one], d)?;
    let div = e.select(&adjust, &div1, &div)?;
    let f = e.ew(hlo::FLOOR, &[&div], d)?;
    let frac = e.ew(hlo::SUBTRACT, &[&div, &f], d)?;
    let half = e.constant(d, &dims, Scalar::F(0.5))?;
    let round_up = e.compare(&frac, &half, Cmp::Gt)?;
    let f1 = e.ew(hlo::ADD, &[&f, &one], d)?;
    let f = e.select(&round_up, &f1, &f)?;
    let q = e.ew(hlo::DIVIDE, &[a, b], d)?;
    let signed_zero = {
        // copysign(0, q) = q's sign bit on zero: 0 * sign(q) loses -0 for q = -0, so select.
        let q_neg = e.compare(&q, &zero, Cmp::Lt)?;
        let neg_zero = e.constant(d, &dims, Scalar::F(-0.0))?;
        e.select(&q_neg, &neg_zero, &zero)?
    };
    let div_nonzero = e.compare(&div, &zero, Cmp::Ne)?;
    let res = e.select(&div_nonzero, &f, &signed_zero)?;
    let b_zero = e.compare(b, &zero, Cmp::Eq)?;
    e.select(&b_zero, &q, &res)
}

/// Comparisons: operands promoted with `torch.result_type`, result bool; the registry's
/// parameter is the direction (`EQ`, `NE`, `LT`, `LE`, `GT`, `GE`).
pub fn compare<'c, 'a>(e: &Emitter<'c, 'a>, n: &NodeCtx<'c, 'a, '_>) -> R<'c, 'a> {
    let dir: Cmp = n.param()?;
    let ps = n.params(&["self", "other"]);
    let Some(compute) = compare_type(&ps) else { return bad!("cannot promote the operands") };
    let dims = n.out_dims().to_vec();
    let a = operand(e, &ps[0], compute, &dims)?;
    let b = operand(e, &ps[1], compute, &dims)?;
    let r = e.compare(&a, &b, dir)?;
    Ok(vec![e.convert(&r, n.out_dtype())?])
}

/// The type a comparison computes in: `torch.result_type` of its operands.
fn compare_type(ps: &[Param]) -> Option<DType> {
    let roles: Vec<Operand> = ps.iter().filter_map(role).collect();
    result_type(&roles, DType::F32)
}

/// lt/le/gt/ge: complex numbers are unordered.
pub fn ordered_legal(c: &Check) -> Result<(), String> {
    if c.operands.iter().any(|t| t.dtype.is_complex()) {
        return Err("ordering of complex operands (unordered)".into());
    }
    Ok(())
}

/// logical_and/or/xor: both operands as bools, one StableHLO op (the registry's parameter).
pub fn logical<'c, 'a>(e: &Emitter<'c, 'a>, n: &NodeCtx<'c, 'a, '_>) -> R<'c, 'a> {
    let op = n.param::<&str>()?;
    let ps = n.params(&["self", "other"]);
    let dims = n.out_dims().to_vec();
    let a = operand(e, &ps[0], DType::Bool, &dims)?;
    let b = operand(e, &ps[1], DType::Bool, &dims)?;
    let r = e.ew(op, &[&a, &b], DType::Bool)?;
    Ok(vec![e.convert(&r, n.out_dtype())?])
}

/// `where(condition, self, other)`; scalar branches come as attributes.
pub fn where_<'c, 'a>(e: &Emitter<'c, 'a>, n: &NodeCtx<'c, 'a, '_>) -> R<'c, 'a> {
    let ps = n.params(&["condition", "self", "other"]);
    let dims = n.out_dims().to_vec();
    let out = n.out_dtype();
    let c = operand(e, &ps[0], DType::Bool, &dims)?;
    let a = operand(e, &ps[1], out, &dims)?;
    let b = operand(e, &ps[2], out, &dims)?;
    Ok(vec![e.select(&c, &a, &b)?])
}

/// `clamp(self, min=None, max=None)`, scalar or tensor bounds; NaN in `self` propagates.
pub fn clamp<'c, 'a>(e: &Emitter<'c, 'a>, n: &NodeCtx<'c, 'a, '_>) -> R<'c, 'a> {
    let ps = match n.param()? {
        Clamp::Min => n.params(&["self", "min"]),
        Clamp::Max => {
            let p = n.params(&["self", "max"]);
            vec![p[0].clone(), Param::Absent, p[1].clone()]
        }
        Clamp::MinMax => n.params(&["self", "min", "max"]),
    };
    let (out, dims) = (n.out_dtype(), n.out_dims().to_vec());
    let mut r = operand(e, &ps[0], out, &dims)?;
    if let Some(lo) = ps.get(1).filter(|p| !p.is_none()) {
        let lo = operand(e, lo, out, &dims)?;
        r = e.minmax(&r, &lo, true)?;
    }
    if let Some(hi) = ps.get(2).filter(|p| !p.is_none()) {
        let hi = operand(e, hi, out, &dims)?;
        r = e.minmax(&r, &hi, false)?;
    }
    Ok(vec![r])
}

/// `_to_copy` / `to` / `type_as` style conversions: the result dtype says the target.
pub fn convert<'c, 'a>(e: &Emitter<'c, 'a>, n: &NodeCtx<'c, 'a, '_>) -> R<'c, 'a> {
    Ok(vec![e.cast(n.arg(0)?, n.out_dtype())?])
}

/// complex(real, imag), broadcast to the result's shape.
pub fn complex<'c, 'a>(e: &Emitter<'c, 'a>, n: &NodeCtx<'c, 'a, '_>) -> R<'c, 'a> {
    let (out, dims) = (n.out_dtype(), n.out_dims().to_vec());
    if !out.is_complex() {
        return bad!("complex() must produce a complex tensor, not {out}");
    }
    let part = out.real_part();
    let re = e.broadcast_to(&e.convert(n.arg(0)?, part)?, &dims)?;
    let im = e.broadcast_to(&e.convert(n.arg(1)?, part)?, &dims)?;
    Ok(vec![e.op(hlo::COMPLEX, &[&re, &im], out, &dims, &[])?])
}

/// Ops that return their (first) operand unchanged: alias, clone, contiguous, detach, ...
pub fn identity<'c, 'a>(e: &Emitter<'c, 'a>, n: &NodeCtx<'c, 'a, '_>) -> R<'c, 'a> {
    let x = e.convert(n.arg(0)?, n.out_dtype())?;
    Ok(vec![e.reshape(&x, n.out_dims())?])
}

/// hardtanh(self, min_val=-1, max_val=1): clamp with PyTorch's NaN propagation.
pub fn hardtanh<'c, 'a>(e: &Emitter<'c, 'a>, n: &NodeCtx<'c, 'a, '_>) -> R<'c, 'a> {
    let (out, dims) = (n.out_dtype(), n.out_dims().to_vec());
    let x = e.convert(n.arg(0)?, out)?;
    let lo = e.constant(out, &dims, Scalar::F(n.get_or(MIN_VAL, -1.0)?))?;
    let hi = e.constant(out, &dims, Scalar::F(n.get_or(MAX_VAL, 1.0)?))?;
    Ok(vec![e.minmax(&e.minmax(&x, &lo, true)?, &hi, false)?])
}

/// isnan / isinf / isfinite: bool results; integers are always finite.
pub fn classify<'c, 'a>(e: &Emitter<'c, 'a>, n: &NodeCtx<'c, 'a, '_>) -> R<'c, 'a> {
    let class: Classify = n.param()?;
    let x = n.arg(0)?;
    let dims = x.dims.clone();
    if x.dtype.is_complex() {
        // NaN or infinite if either part is; finite if both are.
        let (re, im) = e.complex_parts(x)?;
        let (re_class, im_class) = (classify_real(e, class, &re)?, classify_real(e, class, &im)?);
        let join = if class == Classify::IsFinite { hlo::AND } else { hlo::OR };
        return Ok(vec![e.ew(join, &[&re_class, &im_class], DType::Bool)?]);
    }
    if !x.dtype.is_float() {
        return Ok(vec![e.constant(DType::Bool, &dims, Scalar::B(class == Classify::IsFinite))?]);
    }
    Ok(vec![classify_real(e, class, x)?])
}

/// isnan / isinf / isfinite of a floating tensor.
fn classify_real<'c, 'a>(e: &Emitter<'c, 'a>, class: Classify, x: &Tv<'c, 'a>) -> RuleResult<Tv<'c, 'a>> {
    let dims = x.dims.clone();
    Ok(match class {
        Classify::IsNan => e.compare(x, x, Cmp::Ne)?,
        Classify::IsInf => {
            let a = e.ew(hlo::ABS, &[x], x.dtype)?;
            let inf = e.constant(x.dtype, &dims, Scalar::F(f64::INFINITY))?;
            e.compare(&a, &inf, Cmp::Eq)?
        }
        Classify::IsFinite => {
            // |x| < inf is false for NaN and for infinities.
            let a = e.ew(hlo::ABS, &[x], x.dtype)?;
            let inf = e.constant(x.dtype, &dims, Scalar::F(f64::INFINITY))?;
            e.compare(&a, &inf, Cmp::Lt)?
        }
    })
}
