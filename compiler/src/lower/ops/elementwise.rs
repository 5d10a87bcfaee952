//! Elementwise ops: unary math, binary arithmetic with PyTorch promotion and broadcasting,
//! comparisons, logical and bitwise ops, `where`, `clamp`, casts.

use crate::ir::DType;
use crate::lower::emitter::{Cmp, Emitter, Tv};
use crate::lower::error::{bad, unsupported, RuleResult};
use crate::lower::node::{NodeCtx, Param};
use crate::lower::promote::{result_type, Operand};
use crate::passes::patterns::Scalar;

type R<'c, 'a> = RuleResult<Vec<Tv<'c, 'a>>>;

/// Materialises a parameter (tensor or scalar attribute) in `dtype`, broadcast to `dims`.
fn operand<'c, 'a>(e: &Emitter<'c, 'a>, p: &Param<'c, 'a, '_>, dtype: DType, dims: &[i64]) -> RuleResult<Tv<'c, 'a>> {
    match p {
        Param::Tensor(t) => {
            let t = e.convert(t, dtype)?;
            e.broadcast_to(&t, dims)
        }
        Param::Attr(a) => match crate::passes::patterns::Scalar::from_attr(a) {
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

pub fn unary_op(name: &str) -> Option<&'static str> {
    Some(match name {
        "abs" => "stablehlo.abs",
        "neg" => "stablehlo.negate",
        "ceil" => "stablehlo.ceil",
        "floor" => "stablehlo.floor",
        "sqrt" => "stablehlo.sqrt",
        "rsqrt" => "stablehlo.rsqrt",
        "exp" => "stablehlo.exponential",
        "expm1" => "stablehlo.exponential_minus_one",
        "log" => "stablehlo.log",
        "log1p" => "stablehlo.log_plus_one",
        "sin" => "stablehlo.sine",
        "cos" => "stablehlo.cosine",
        "tan" => "stablehlo.tan",
        "tanh" => "stablehlo.tanh",
        "sigmoid" => "stablehlo.logistic",
        "erf" => "chlo.erf",
        "erfinv" => "chlo.erf_inv",
        "erfc" => "chlo.erfc",
        "bessel_i1e" => "chlo.bessel_i1e",
        "lgamma" => "chlo.lgamma",
        "digamma" => "chlo.digamma",
        "asin" => "chlo.asin",
        "acos" => "chlo.acos",
        "sinh" => "chlo.sinh",
        "cosh" => "chlo.cosh",
        "asinh" => "chlo.asinh",
        "acosh" => "chlo.acosh",
        "atanh" => "chlo.atanh",
        "round" => "stablehlo.round_nearest_even",
        "bitwise_not" => "stablehlo.not",
        _ => return None,
    })
}

/// Unary math: the operand is converted to the result dtype (ints become floats for `sqrt`
/// etc.), then one StableHLO op, or a short expansion.
pub fn unary<'c, 'a>(e: &Emitter<'c, 'a>, n: &NodeCtx<'c, 'a, '_>) -> R<'c, 'a> {
    let name = n.node.op().map(|o| o.name.as_str()).unwrap_or("");
    let out = n.out_dtype();
    let x = n.arg(0)?;
    let one = |dims: &[i64]| e.constant(out, dims, Scalar::F(1.0));
    let r = match name {
        "logical_not" => {
            let b = e.convert(x, DType::Bool)?;
            let t = e.ew("stablehlo.not", &[&b], DType::Bool)?;
            e.convert(&t, out)?
        }
        "round" if n.int_or("decimals", 0)? != 0 => return unsupported!("round with decimals != 0"),
        "round" | "ceil" | "floor" | "trunc" if !out.is_float() => e.convert(x, out)?,
        "abs" | "neg" if x.dtype == DType::Bool => return unsupported!("{name} of a bool tensor"),
        // |z|: StableHLO's abs of a complex tensor is its (real) modulus.
        "abs" if x.dtype.is_complex() => e.op("stablehlo.abs", &[x], x.dtype.real_part(), &x.dims.clone(), &[])?,
        "sign" if x.dtype.is_complex() => return unsupported!("sign of a complex tensor (PyTorch has sgn)"),
        "bitwise_not" if out == DType::Bool => e.ew("stablehlo.not", &[x], DType::Bool)?,
        "sign" => {
            let x = e.convert(x, out)?;
            if out == DType::Bool {
                x
            } else if out == DType::U8 {
                let zero = e.constant(out, &x.dims, Scalar::I(0))?;
                let pos = e.compare(&x, &zero, Cmp::Gt)?;
                e.convert(&pos, out)?
            } else {
                e.ew("stablehlo.sign", &[&x], out)?
            }
        }
        "trunc" => {
            // trunc(x) = x < 0 ? ceil(x) : floor(x)
            let x = e.convert(x, out)?;
            let zero = e.constant(out, &x.dims, Scalar::F(0.0))?;
            let neg = e.compare(&x, &zero, Cmp::Lt)?;
            let c = e.ew("stablehlo.ceil", &[&x], out)?;
            let f = e.ew("stablehlo.floor", &[&x], out)?;
            e.select(&neg, &c, &f)?
        }
        "reciprocal" => {
            let x = e.convert(x, out)?;
            e.ew("stablehlo.divide", &[&one(&x.dims)?, &x], out)?
        }
        "relu" => {
            // max(x, 0) with x first: XLA keeps a NaN from its first operand and the
            // constant is never NaN, so NaN propagates without the general NaN selects
            // (the `relu_nan` eager comparison test guards this).
            let x = e.convert(x, out)?;
            let zero = e.constant(out, &x.dims, Scalar::I(0))?;
            e.ew("stablehlo.maximum", &[&x, &zero], out)?
        }
        "exp2" => {
            let x = e.convert(x, out)?;
            let two = e.constant(out, &x.dims, Scalar::F(2.0))?;
            e.ew("stablehlo.power", &[&two, &x], out)?
        }
        "log2" | "log10" => {
            let x = e.convert(x, out)?;
            let l = e.ew("stablehlo.log", &[&x], out)?;
            let base = if name == "log2" { std::f64::consts::LN_2 } else { std::f64::consts::LN_10 };
            let c = e.constant(out, &x.dims, Scalar::F(base))?;
            e.ew("stablehlo.divide", &[&l, &c], out)?
        }
        "gelu" => gelu(e, &e.convert(x, out)?, n.str_or("approximate", "none")?)?,
        "atan" => {
            // atan(x) = 2 atan2(x, 1 + sqrt(1 + x^2)). The plugin's XLA miscomputes atan, and
            // atan2(x, 1) which it simplifies to atan, on f32 arrays of 64+ elements (output =
            // input; measured, see the `atan_long` eager comparison); a non-constant
            // denominator avoids that path.
            let x = e.convert(x, out)?;
            let o = one(&x.dims)?;
            let x2 = e.ew("stablehlo.multiply", &[&x, &x], out)?;
            let r = e.ew("stablehlo.sqrt", &[&e.ew("stablehlo.add", &[&o, &x2], out)?], out)?;
            let den = e.ew("stablehlo.add", &[&o, &r], out)?;
            let half = e.ew("stablehlo.atan2", &[&x, &den], out)?;
            let two = e.constant(out, &x.dims, Scalar::F(2.0))?;
            e.ew("stablehlo.multiply", &[&half, &two], out)?
        }
        "silu" => {
            let x = e.convert(x, out)?;
            let s = e.ew("stablehlo.logistic", &[&x], out)?;
            e.ew("stablehlo.multiply", &[&x, &s], out)?
        }
        _ => {
            let Some(op) = unary_op(name) else { return unsupported!("no unary rule for '{name}'") };
            let x = e.convert(x, out)?;
            e.ew(op, &[&x], out)?
        }
    };
    Ok(vec![r])
}

/// GELU, exact (erf) or tanh-approximated, as PyTorch defines them.
pub fn gelu<'c, 'a>(e: &Emitter<'c, 'a>, x: &Tv<'c, 'a>, approximate: &str) -> RuleResult<Tv<'c, 'a>> {
    let d = x.dtype;
    let c = |v: f64| e.constant(d, &x.dims, Scalar::F(v));
    let mul = |a: &Tv<'c, 'a>, b: &Tv<'c, 'a>| e.ew("stablehlo.multiply", &[a, b], d);
    let add = |a: &Tv<'c, 'a>, b: &Tv<'c, 'a>| e.ew("stablehlo.add", &[a, b], d);
    let inner = match approximate {
        // 0.5 * x * (1 + erf(x / sqrt(2)))
        "none" => {
            let scaled = mul(x, &c(std::f64::consts::FRAC_1_SQRT_2)?)?;
            e.ew("chlo.erf", &[&scaled], d)?
        }
        // 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3)))
        "tanh" => {
            let x3 = mul(&mul(x, x)?, x)?;
            let poly = add(x, &mul(&x3, &c(0.044715)?)?)?;
            let arg = mul(&poly, &c((2.0 / std::f64::consts::PI).sqrt())?)?;
            e.ew("stablehlo.tanh", &[&arg], d)?
        }
        other => return bad!("unknown gelu approximation '{other}'"),
    };
    let one_plus = add(&c(1.0)?, &inner)?;
    mul(&mul(x, &c(0.5)?)?, &one_plus)
}

/// Binary arithmetic in the result dtype (PyTorch computes in the promoted type, which the IR
/// records as the result type), with `alpha` for add/sub and `rounding_mode` for div.
pub fn binary<'c, 'a>(e: &Emitter<'c, 'a>, n: &NodeCtx<'c, 'a, '_>) -> R<'c, 'a> {
    let name = n.node.op().map(|o| o.name.as_str()).unwrap_or("");
    let ps = n.params(&["self", if name == "pow" { "exponent" } else { "other" }]);
    let (out, dims) = (n.out_dtype(), n.out_dims().to_vec());
    let mode = n.str_or("rounding_mode", "")?;
    // Integer/bool inputs with a rounding mode divide in their own type; true division of
    // ints produces floats (the result dtype).
    let a = operand(e, &ps[0], out, &dims)?;
    let mut b = operand(e, &ps[1], out, &dims)?;
    let alpha = n.attr("alpha").and_then(Scalar::from_attr);
    if let (Some(al), "add" | "sub") = (alpha, name) {
        if !al.is_one() {
            let c = e.constant(out, &dims, al)?;
            b = e.ew(if out == DType::Bool { "stablehlo.and" } else { "stablehlo.multiply" }, &[&b, &c], out)?;
        }
    }
    let bool_out = out == DType::Bool;
    let r = match name {
        "add" if bool_out => e.ew("stablehlo.or", &[&a, &b], out)?,
        "mul" if bool_out => e.ew("stablehlo.and", &[&a, &b], out)?,
        "add" => e.ew("stablehlo.add", &[&a, &b], out)?,
        "sub" | "rsub" if bool_out => return unsupported!("subtraction of bool tensors"),
        "sub" => e.ew("stablehlo.subtract", &[&a, &b], out)?,
        "rsub" => e.ew("stablehlo.subtract", &[&b, &a], out)?,
        "mul" => e.ew("stablehlo.multiply", &[&a, &b], out)?,
        "div" => match mode {
            "" if out.is_float() || out.is_complex() => e.ew("stablehlo.divide", &[&a, &b], out)?,
            "" => return bad!("true division must produce a floating result, the IR says {out}"),
            "trunc" if out.is_float() => {
                let q = e.ew("stablehlo.divide", &[&a, &b], out)?;
                let zero = e.constant(out, &dims, Scalar::F(0.0))?;
                let neg = e.compare(&q, &zero, Cmp::Lt)?;
                let c = e.ew("stablehlo.ceil", &[&q], out)?;
                let f = e.ew("stablehlo.floor", &[&q], out)?;
                e.select(&neg, &c, &f)?
            }
            "trunc" => e.ew("stablehlo.divide", &[&a, &b], out)?,
            "floor" => floor_divide(e, &a, &b)?,
            m => return bad!("unknown rounding_mode '{m}'"),
        },
        "floor_divide" => floor_divide(e, &a, &b)?,
        "pow" => e.ew("stablehlo.power", &[&a, &b], out)?,
        "maximum" => e.minmax(&a, &b, true)?,
        "minimum" => e.minmax(&a, &b, false)?,
        "atan2" => e.ew("stablehlo.atan2", &[&a, &b], out)?,
        "fmod" => e.ew("stablehlo.remainder", &[&a, &b], out)?,
        "remainder" => {
            // Python modulo: the result takes the divisor's sign. r = fmod(a, b);
            // r != 0 && (r < 0) != (b < 0) ? r + b : r
            let r = e.ew("stablehlo.remainder", &[&a, &b], out)?;
            let zero = e.constant(out, &dims, Scalar::I(0))?;
            let nonzero = e.compare(&r, &zero, Cmp::Ne)?;
            let r_neg = e.compare(&r, &zero, Cmp::Lt)?;
            let b_neg = e.compare(&b, &zero, Cmp::Lt)?;
            let differ = e.ew("stablehlo.xor", &[&r_neg, &b_neg], DType::Bool)?;
            let fix = e.ew("stablehlo.and", &[&nonzero, &differ], DType::Bool)?;
            let shifted = e.ew("stablehlo.add", &[&r, &b], out)?;
            e.select(&fix, &shifted, &r)?
        }
        "bitwise_and" => e.ew("stablehlo.and", &[&a, &b], out)?,
        "bitwise_or" => e.ew("stablehlo.or", &[&a, &b], out)?,
        "bitwise_xor" => e.ew("stablehlo.xor", &[&a, &b], out)?,
        _ => return unsupported!("no binary rule for '{name}'"),
    };
    Ok(vec![r])
}

/// PyTorch's floor division: ints round toward -inf; floats follow `div_floor_floating`
/// (fmod-based, exact where `floor(a / b)` is not).
fn floor_divide<'c, 'a>(e: &Emitter<'c, 'a>, a: &Tv<'c, 'a>, b: &Tv<'c, 'a>) -> RuleResult<Tv<'c, 'a>> {
    let d = a.dtype;
    let dims = a.dims.clone();
    let zero = e.constant(d, &dims, Scalar::I(0))?;
    let one = e.constant(d, &dims, Scalar::I(1))?;
    if !d.is_float() {
        let q = e.ew("stablehlo.divide", &[a, b], d)?;
        let r = e.ew("stablehlo.remainder", &[a, b], d)?;
        let r_nonzero = e.compare(&r, &zero, Cmp::Ne)?;
        let a_neg = e.compare(a, &zero, Cmp::Lt)?;
        let b_neg = e.compare(b, &zero, Cmp::Lt)?;
        let signs_differ = e.ew("stablehlo.xor", &[&a_neg, &b_neg], DType::Bool)?;
        let adjust = e.ew("stablehlo.and", &[&r_nonzero, &signs_differ], DType::Bool)?;
        let q1 = e.ew("stablehlo.subtract", &[&q, &one], d)?;
        return e.select(&adjust, &q1, &q);
    }
    // mod = fmod(a, b); div = (a - mod) / b; if mod != 0 && (b < 0) != (mod < 0): div -= 1
    // if div != 0: f = floor(div); if div - f > 0.5: f += 1  else: copysign(0, a / b)
    // b == 0: a / b
    let m = e.ew("stablehlo.remainder", &[a, b], d)?;
    let am = e.ew("stablehlo.subtract", &[a, &m], d)?;
    let div = e.ew("stablehlo.divide", &[&am, b], d)?;
    let m_nonzero = e.compare(&m, &zero, Cmp::Ne)?;
    let b_neg = e.compare(b, &zero, Cmp::Lt)?;
    let m_neg = e.compare(&m, &zero, Cmp::Lt)?;
    let differ = e.ew("stablehlo.xor", &[&b_neg, &m_neg], DType::Bool)?;
    let adjust = e.ew("stablehlo.and", &[&m_nonzero, &differ], DType::Bool)?;
    let div1 = e.ew("stablehlo.subtract", &[&div, &one], d)?;
    let div = e.select(&adjust, &div1, &div)?;
    let f = e.ew("stablehlo.floor", &[&div], d)?;
    let frac = e.ew("stablehlo.subtract", &[&div, &f], d)?;
    let half = e.constant(d, &dims, Scalar::F(0.5))?;
    let round_up = e.compare(&frac, &half, Cmp::Gt)?;
    let f1 = e.ew("stablehlo.add", &[&f, &one], d)?;
    let f = e.select(&round_up, &f1, &f)?;
    let q = e.ew("stablehlo.divide", &[a, b], d)?;
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

/// Comparisons: operands promoted with `torch.result_type`, result bool.
pub fn compare<'c, 'a>(e: &Emitter<'c, 'a>, n: &NodeCtx<'c, 'a, '_>) -> R<'c, 'a> {
    let name = n.node.op().map(|o| o.name.as_str()).unwrap_or("");
    let dir = match name {
        "eq" => Cmp::Eq,
        "ne" => Cmp::Ne,
        "lt" => Cmp::Lt,
        "le" => Cmp::Le,
        "gt" => Cmp::Gt,
        "ge" => Cmp::Ge,
        _ => return unsupported!("no comparison rule for '{name}'"),
    };
    let ps = n.params(&["self", "other"]);
    let roles: Vec<Operand> = ps.iter().filter_map(role).collect();
    let Some(compute) = result_type(&roles, DType::F32) else { return bad!("cannot promote the operands") };
    let dims = n.out_dims().to_vec();
    if compute.is_complex() && !matches!(dir, Cmp::Eq | Cmp::Ne) {
        return unsupported!("{name} of complex operands (unordered)");
    }
    let a = operand(e, &ps[0], compute, &dims)?;
    let b = operand(e, &ps[1], compute, &dims)?;
    let r = e.compare(&a, &b, dir)?;
    Ok(vec![e.convert(&r, n.out_dtype())?])
}

/// logical_and/or/xor: both operands as bools.
pub fn logical<'c, 'a>(e: &Emitter<'c, 'a>, n: &NodeCtx<'c, 'a, '_>) -> R<'c, 'a> {
    let name = n.node.op().map(|o| o.name.as_str()).unwrap_or("");
    let op = match name {
        "logical_and" => "stablehlo.and",
        "logical_or" => "stablehlo.or",
        "logical_xor" => "stablehlo.xor",
        _ => return unsupported!("no logical rule for '{name}'"),
    };
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
    let name = n.node.op().map(|o| o.name.as_str()).unwrap_or("");
    let ps = match name {
        "clamp_min" => n.params(&["self", "min"]),
        "clamp_max" => {
            let p = n.params(&["self", "max"]);
            vec![p[0].clone(), Param::Absent, p[1].clone()]
        }
        _ => n.params(&["self", "min", "max"]),
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
    Ok(vec![e.op("stablehlo.complex", &[&re, &im], out, &dims, &[])?])
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
    let lo = e.constant(out, &dims, Scalar::F(n.float_or("min_val", -1.0)?))?;
    let hi = e.constant(out, &dims, Scalar::F(n.float_or("max_val", 1.0)?))?;
    Ok(vec![e.minmax(&e.minmax(&x, &lo, true)?, &hi, false)?])
}

/// isnan / isinf / isfinite: bool results; integers are always finite.
pub fn classify<'c, 'a>(e: &Emitter<'c, 'a>, n: &NodeCtx<'c, 'a, '_>) -> R<'c, 'a> {
    let name = n.node.op().map(|o| o.name.as_str()).unwrap_or("");
    let x = n.arg(0)?;
    let dims = x.dims.clone();
    if x.dtype.is_complex() {
        // NaN or infinite if either part is; finite if both are.
        let (re, im) = e.complex_parts(x)?;
        let (re_class, im_class) = (classify_real(e, name, &re)?, classify_real(e, name, &im)?);
        let join = if name == "isfinite" { "stablehlo.and" } else { "stablehlo.or" };
        return Ok(vec![e.ew(join, &[&re_class, &im_class], DType::Bool)?]);
    }
    if !x.dtype.is_float() {
        return Ok(vec![e.constant(DType::Bool, &dims, Scalar::B(name == "isfinite"))?]);
    }
    Ok(vec![classify_real(e, name, x)?])
}

/// isnan / isinf / isfinite of a floating tensor.
fn classify_real<'c, 'a>(e: &Emitter<'c, 'a>, name: &str, x: &Tv<'c, 'a>) -> RuleResult<Tv<'c, 'a>> {
    let dims = x.dims.clone();
    Ok(match name {
        "isnan" => e.compare(x, x, Cmp::Ne)?,
        "isinf" => {
            let a = e.ew("stablehlo.abs", &[x], x.dtype)?;
            let inf = e.constant(x.dtype, &dims, Scalar::F(f64::INFINITY))?;
            e.compare(&a, &inf, Cmp::Eq)?
        }
        "isfinite" => {
            // |x| < inf is false for NaN and for infinities.
            let a = e.ew("stablehlo.abs", &[x], x.dtype)?;
            let inf = e.constant(x.dtype, &dims, Scalar::F(f64::INFINITY))?;
            e.compare(&a, &inf, Cmp::Lt)?
        }
        _ => return unsupported!("no classification rule for '{name}'"),
    })
}
