//! Device random numbers with the generator state threaded through the graph:
//!
//! ```text
//! %r:2 = tpu.rng_uniform(%state) {high = 1.0, low = 0.0} : (i64[2], f32[4, 8])
//! %n:2 = tpu.rng_normal(%r#0) {mean = 0.0, std = 1.0} : (i64[2], bf16[16])
//! %i:2 = tpu.rng_integers(%n#0) {high = 10, low = 0} : (i64[2], i32[3])
//! ```
//!
//! Operand 0 and result 0 are the state in the layout of PyTorch's Philox generators (CUDA's
//! `get_rng_state`): two i64 words, the seed and the offset. A draw of `n` values runs XLA's
//! ThreeFry generator (`stablehlo.rng_bit_generator`, which wants `ui64[2]`; the IR has no
//! unsigned 64-bit dtype, so the state is bitcast both ways) keyed by the seed with its counter
//! at `2 * offset`, and returns the state with the offset advanced by `n` rounded up to a
//! multiple of 4, as DTensor's RNG tracker assumes of a Philox offset
//! (`torch/distributed/tensor/_random.py`). No draw uses more than 2 counters a value (a normal
//! f64 takes two 64-bit words), so draws at offsets `n` apart never share a counter: DTensor's
//! shards, each at its own offset, get distinct numbers. Result 1 is the draw. Each op is a pure
//! function of its state: the same state gives the same numbers.
//!
//! - `rng_uniform {low, high}`: floats uniform in `[low, high)` (f16, bf16, f32, f64). The top
//!   mantissa bits of a random word under the exponent of 1.0 are a float in `[1, 2)`; minus 1,
//!   scaled and shifted. f16/bf16 are computed in f32 (32-bit words), f64 from 64-bit words.
//!   The result is clamped into the values of its dtype that lie in `[low, high)`, so rounding
//!   never reaches `high` (PyTorch guarantees `[from, to)`).
//! - `rng_normal {mean, std}`: Box–Muller, `sqrt(-2 ln(1 - u1)) * cos(2 pi u2)` from two
//!   uniforms (one draw of twice the words); `1 - u1` lies in `(0, 1]`, so the log is finite.
//! - `rng_integers {low, high}`: integers uniform in `[low, high)`, filling an integer, float
//!   or bool tensor (PyTorch's `random_`/`randint` fill float tensors with integers too): a
//!   64-bit word modulo `high - low`, plus `low`. The modulo bias is at most
//!   `(high - low) / 2^64`, negligible for any range a tensor can be filled from.
//!
//! Forms these rules do not take (a state that is not i64[2], a dtype the op does not fill,
//! `low >= high`, bounds outside the dtype) are refused by the legality checks below.

use super::{Emitter, NodeCtx, RuleResult, Tv};
use crate::ir::{Attr, DType, Scalar, TensorType};
use crate::lower::error::bad;
use crate::lower::legality::Check;
use crate::lower::names::hlo;
use crate::registry::attrs::{AttrKey, Int, Number, HIGH, HIGH_INT, LOW, LOW_INT, MEAN, STD};
use melior::ir::r#type::{IntegerType, RankedTensorType};
use melior::ir::{Type, Value};

type R<'c, 'a> = RuleResult<Vec<Tv<'c, 'a>>>;

/// Random words: a tensor of `ui32` or `ui64`, types the IR's dtypes do not have.
struct Bits<'c, 'a> {
    v: Value<'c, 'a>,
    width: u32,
    dims: Vec<i64>,
}

/// `ui{width}[dims]` (its size recorded as the same-width signed type's).
fn uty<'c>(e: &Emitter<'c, '_>, width: u32, dims: &[i64]) -> Type<'c> {
    e.ty(if width == 32 { DType::I32 } else { DType::I64 }, dims);
    let shape: Vec<u64> = dims.iter().map(|&d| d as u64).collect();
    RankedTensorType::new(&shape, IntegerType::unsigned(e.ctx, width).into(), None).into()
}

/// A splat constant of `ui{width}[dims]`.
fn splat<'c, 'a>(e: &Emitter<'c, 'a>, width: u32, value: u64, dims: &[i64]) -> RuleResult<Bits<'c, 'a>> {
    let scalar = uty(e, width, &[]);
    let attr = e.attr(&format!("dense<{value}> : {scalar}"))?;
    let mut v = e.build(hlo::CONSTANT, &[], &[scalar], &[("value", attr)], Vec::new())?[0];
    if !dims.is_empty() {
        let mapping = e.i64_array(&[]);
        v = e.build(
            hlo::BROADCAST_IN_DIM,
            &[v],
            &[uty(e, width, dims)],
            &[("broadcast_dimensions", mapping)],
            Vec::new(),
        )?[0];
    }
    Ok(Bits { v, width, dims: dims.to_vec() })
}

/// An elementwise op on two word tensors of the same type.
fn binary<'c, 'a>(e: &Emitter<'c, 'a>, name: &str, a: &Bits<'c, 'a>, b: &Bits<'c, 'a>) -> RuleResult<Bits<'c, 'a>> {
    let v = e.build(name, &[a.v, b.v], &[uty(e, a.width, &a.dims)], &[], Vec::new())?[0];
    Ok(Bits { v, width: a.width, dims: a.dims.clone() })
}

/// Words reinterpreted as a same-width dtype (i64 or f32/f64).
fn bitcast<'c, 'a>(e: &Emitter<'c, 'a>, b: &Bits<'c, 'a>, to: DType) -> RuleResult<Tv<'c, 'a>> {
    let v = e.build(hlo::BITCAST_CONVERT, &[b.v], &[e.ty(to, &b.dims)], &[], Vec::new())?[0];
    Ok(Tv { v, dtype: to, dims: b.dims.clone() })
}

/// One `stablehlo.rng_bit_generator` (THREE_FRY) from the (seed, offset) state, for a draw of
/// `values` values: the next state (i64[2], the offset advanced) and random `width`-bit words of
/// `dims`.
fn draw<'c, 'a>(
    e: &Emitter<'c, 'a>,
    state: &Tv<'c, 'a>,
    width: u32,
    dims: &[i64],
    values: i64,
) -> RuleResult<(Tv<'c, 'a>, Bits<'c, 'a>)> {
    if state.dtype != DType::I64 || state.dims != [2] {
        return bad!("the state must be i64[2], got {}", TensorType::fixed(state.dtype, &state.dims));
    }
    let words = |a: u64, b: u64| -> RuleResult<Bits<'c, 'a>> {
        let ty = uty(e, 64, &[2]);
        let attr = e.attr(&format!("dense<[{a}, {b}]> : {ty}"))?;
        let v = e.build(hlo::CONSTANT, &[], &[ty], &[("value", attr)], Vec::new())?[0];
        Ok(Bits { v, width: 64, dims: vec![2] })
    };
    let seed_offset = Bits {
        v: e.build(hlo::BITCAST_CONVERT, &[state.v], &[uty(e, 64, &[2])], &[], Vec::new())?[0],
        width: 64,
        dims: vec![2],
    };
    let key_counter = binary(e, hlo::MULTIPLY, &seed_offset, &words(1, 2)?)?;
    let out = e.build(
        hlo::RNG_BIT_GENERATOR,
        &[key_counter.v],
        &[uty(e, 64, &[2]), uty(e, width, dims)],
        &[("rng_algorithm", e.attr("#stablehlo<rng_algorithm THREE_FRY>")?)],
        Vec::new(),
    )?;
    let advance = (values.max(0) as u64).div_ceil(4) * 4;
    let next = bitcast(e, &binary(e, hlo::ADD, &seed_offset, &words(0, advance)?)?, DType::I64)?;
    Ok((next, Bits { v: out[1], width, dims: dims.to_vec() }))
}

/// The dtype a float draw is computed in: f64 for f64, f32 otherwise.
fn compute(t: DType) -> DType {
    if t == DType::F64 {
        DType::F64
    } else {
        DType::F32
    }
}

fn width(compute: DType) -> u32 {
    if compute == DType::F64 {
        64
    } else {
        32
    }
}

/// Floats uniform in `[0, 1)` (f32 from 32-bit words, f64 from 64-bit ones): the top mantissa
/// bits under the exponent of 1.0 are a float in `[1, 2)`, minus 1.
fn unit<'c, 'a>(e: &Emitter<'c, 'a>, b: &Bits<'c, 'a>) -> RuleResult<Tv<'c, 'a>> {
    let (f, mantissa, one) =
        if b.width == 32 { (DType::F32, 23, 0x3F80_0000) } else { (DType::F64, 52, 0x3FF0_0000_0000_0000) };
    let shift = splat(e, b.width, u64::from(b.width - mantissa), &b.dims)?;
    let top = binary(e, hlo::SHIFT_RIGHT_LOGICAL, b, &shift)?;
    let in_one_two = binary(e, hlo::OR, &top, &splat(e, b.width, one, &b.dims)?)?;
    let x = bitcast(e, &in_one_two, f)?;
    e.ew(hlo::SUBTRACT, &[&x, &e.constant(f, &b.dims, Scalar::F(1.0))?], f)
}

/// `x * scale + shift`, in `x`'s dtype (a scale of 1 and a shift of 0 are left out).
fn affine<'c, 'a>(e: &Emitter<'c, 'a>, x: &Tv<'c, 'a>, scale: f64, shift: f64) -> RuleResult<Tv<'c, 'a>> {
    let d = x.dtype;
    let mut y = x.clone();
    if scale != 1.0 {
        y = e.ew(hlo::MULTIPLY, &[&y, &e.constant(d, &x.dims, Scalar::F(scale))?], d)?;
    }
    if shift != 0.0 {
        y = e.ew(hlo::ADD, &[&y, &e.constant(d, &x.dims, Scalar::F(shift))?], d)?;
    }
    Ok(y)
}

fn results<'n>(n: &'n NodeCtx<'_, '_, '_>) -> RuleResult<(DType, &'n [i64])> {
    match n.results.as_slice() {
        [_, (t, dims)] => Ok((*t, dims)),
        r => bad!("expects 2 results (state, values), got {}", r.len()),
    }
}

/// `tpu.rng_uniform(%state) {low, high}`.
pub fn uniform<'c, 'a>(e: &Emitter<'c, 'a>, n: &NodeCtx<'c, 'a, '_>) -> R<'c, 'a> {
    let (t, dims) = results(n)?;
    let (low, high) = (n.get_or(LOW, 0.0)?, n.get_or(HIGH, 1.0)?);
    let Some((floor, cap)) = inner_bounds(t, low, high) else {
        return bad!("no {t} value lies in [{low}, {high}) (refused by `uniform_legal`)");
    };
    let c = compute(t);
    let (state, bits) = draw(e, n.arg(0)?, width(c), dims, dims.iter().product())?;
    let u = unit(e, &bits)?;
    let v = e.convert(&affine(e, &u, high - low, low)?, t)?;
    // Rounding (of the product, the sum or the conversion) may reach `high` or fall below an
    // unrepresentable `low`: clamp into the dtype's values in [low, high).
    let v = e.ew(hlo::MAXIMUM, &[&v, &e.constant(t, dims, Scalar::F(floor))?], t)?;
    let v = e.ew(hlo::MINIMUM, &[&v, &e.constant(t, dims, Scalar::F(cap))?], t)?;
    Ok(vec![state, v])
}

/// `tpu.rng_normal(%state) {mean, std}`.
pub fn normal<'c, 'a>(e: &Emitter<'c, 'a>, n: &NodeCtx<'c, 'a, '_>) -> R<'c, 'a> {
    let (t, dims) = results(n)?;
    let (mean, std) = (n.get_or(MEAN, 0.0)?, n.get_or(STD, 1.0)?);
    let c = compute(t);
    let mut pair = vec![2];
    pair.extend_from_slice(dims);
    let (state, bits) = draw(e, n.arg(0)?, width(c), &pair, dims.iter().product())?;
    let u = unit(e, &bits)?;
    let half = |i: i64| -> RuleResult<Tv<'c, 'a>> {
        let mut start = vec![0; pair.len()];
        start[0] = i;
        let mut limit = pair.clone();
        limit[0] = i + 1;
        e.reshape(&e.slice(&u, &start, &limit, &vec![1; pair.len()])?, dims)
    };
    let (u1, u2) = (half(0)?, half(1)?);
    let one = e.constant(c, dims, Scalar::F(1.0))?;
    let open = e.ew(hlo::SUBTRACT, &[&one, &u1], c)?; // (0, 1]
    let log = e.ew(hlo::LOG, &[&open], c)?;
    let r = e.ew(hlo::SQRT, &[&e.ew(hlo::MULTIPLY, &[&log, &e.constant(c, dims, Scalar::F(-2.0))?], c)?], c)?;
    let theta = e.ew(hlo::MULTIPLY, &[&u2, &e.constant(c, dims, Scalar::F(std::f64::consts::TAU))?], c)?;
    let z = e.ew(hlo::MULTIPLY, &[&r, &e.ew(hlo::COSINE, &[&theta], c)?], c)?;
    Ok(vec![state, e.convert(&affine(e, &z, std, mean)?, t)?])
}

/// `tpu.rng_integers(%state) {low, high}`.
pub fn integers<'c, 'a>(e: &Emitter<'c, 'a>, n: &NodeCtx<'c, 'a, '_>) -> R<'c, 'a> {
    let (t, dims) = results(n)?;
    let (low, high) = (n.get(LOW_INT)?, n.get(HIGH_INT)?);
    if low >= high {
        return bad!("low {low} must be below high {high} (refused by `integers_legal`)");
    }
    // high - low <= 2^64 - 1: it fits a u64, and so does every word modulo it.
    let range = (i128::from(high) - i128::from(low)) as u64;
    let (state, bits) = draw(e, n.arg(0)?, 64, dims, dims.iter().product())?;
    // The modulo bias, at most range / 2^64, is negligible: 64-bit words are drawn for every dtype.
    let r = binary(e, hlo::REMAINDER, &bits, &splat(e, 64, range, dims)?)?;
    // low + r in two's complement: the u64 sum wraps exactly where the i64 one would not.
    let x = binary(e, hlo::ADD, &r, &splat(e, 64, low as u64, dims)?)?;
    let x = bitcast(e, &x, DType::I64)?;
    // In range for `t` (checked by `integers_legal`): the conversion is exact, bool is x != 0.
    Ok(vec![state, e.convert(&x, t)?])
}

// ---- legality ----

/// The state operand and result are i64[2] and there are two results; the dtype drawn.
fn state_legal(c: &Check) -> Result<DType, String> {
    let i64x2 = TensorType::fixed(DType::I64, &[2]);
    match c.operands.as_slice() {
        [s] if **s == i64x2 => {}
        [s] => return Err(format!("the state operand must be i64[2], got {s}")),
        o => return Err(format!("expects one operand (the state), got {}", o.len())),
    }
    match c.node.results.as_slice() {
        [s, v] if *s == i64x2 => Ok(v.dtype),
        [s, _] => Err(format!("result 0 (the next state) must be i64[2], got {s}")),
        r => Err(format!("expects 2 results (state, values), got {}", r.len())),
    }
}

fn finite(c: &Check, key: AttrKey<Number>) -> Result<f64, String> {
    let name = key.name;
    match c.raw(key) {
        None => Err(format!("missing attribute '{name}'")),
        Some(a) => match a.as_number() {
            Some(x) if x.is_finite() => Ok(x),
            _ => Err(format!("'{name}' must be a finite number, got {a:?}")),
        },
    }
}

fn int(c: &Check, key: AttrKey<Int>) -> Result<i64, String> {
    let name = key.name;
    match c.raw(key) {
        Some(Attr::Int(i)) => Ok(*i),
        None => Err(format!("missing attribute '{name}'")),
        Some(a) => Err(format!("'{name}' must be an int, got {a:?}")),
    }
}

fn float_draw(c: &Check) -> Result<DType, String> {
    let t = state_legal(c)?;
    if !t.is_float() {
        return Err(format!("draws floats (f16, bf16, f32, f64), not {t}"));
    }
    Ok(t)
}

/// `tpu.rng_uniform`: a float dtype, finite `low < high` with a value of the dtype in between
/// and a range `high - low` finite in the compute dtype.
pub fn uniform_legal(c: &Check) -> Result<(), String> {
    let t = float_draw(c)?;
    let (low, high) = (finite(c, LOW)?, finite(c, HIGH)?);
    if low >= high {
        return Err(format!("low {low} must be below high {high}"));
    }
    let range = high - low;
    if !range.is_finite() || (compute(t) == DType::F32 && !(range as f32).is_finite()) {
        return Err(format!("high - low = {range} overflows {}", compute(t)));
    }
    if inner_bounds(t, low, high).is_none() {
        return Err(format!("no {t} value lies in [{low}, {high})"));
    }
    Ok(())
}

/// `tpu.rng_normal`: a float dtype, finite `mean` and finite `std >= 0`.
pub fn normal_legal(c: &Check) -> Result<(), String> {
    float_draw(c)?;
    finite(c, MEAN)?;
    let std = finite(c, STD)?;
    if std < 0.0 {
        return Err(format!("std {std} must be >= 0"));
    }
    Ok(())
}

/// `tpu.rng_integers`: an integer, float or bool dtype; `low < high` with every value of
/// `[low, high)` exact in the dtype (bool: `0 <= low < high <= 2`; floats: within
/// `±2^digits`, PyTorch's bound for `random_`).
pub fn integers_legal(c: &Check) -> Result<(), String> {
    let t = state_legal(c)?;
    let (low, high) = (int(c, LOW_INT)?, int(c, HIGH_INT)?);
    if low >= high {
        return Err(format!("low {low} must be below high {high}"));
    }
    let (min, max): (i128, i128) = match t {
        DType::Bool => (0, 1),
        DType::U8 => (0, 255),
        DType::I8 => (i8::MIN.into(), i8::MAX.into()),
        DType::I16 => (i16::MIN.into(), i16::MAX.into()),
        DType::I32 => (i32::MIN.into(), i32::MAX.into()),
        DType::I64 => (i64::MIN.into(), i64::MAX.into()),
        DType::F16 => (-(1 << 11), 1 << 11),
        DType::BF16 => (-(1 << 8), 1 << 8),
        DType::F32 => (-(1 << 24), 1 << 24),
        DType::F64 => (-(1 << 53), 1 << 53),
        _ => return Err(format!("draws integers into integer, float or bool tensors, not {t}")),
    };
    if i128::from(low) < min || i128::from(high) - 1 > max {
        return Err(format!("[{low}, {high}) does not fit {t} (its values must lie in [{min}, {max}])"));
    }
    Ok(())
}

// ---- the values of a float dtype, in order ----

/// The largest finite value of `t` as an index into its ordered values: index `k >= 0` is the
/// bit pattern `k` (positive floats order as their bits), `-k` its negation.
fn max_index(t: DType) -> i128 {
    match t {
        DType::F16 => 0x7BFF,
        DType::BF16 => 0x7F7F,
        DType::F32 => 0x7F7F_FFFF,
        _ => 0x7FEF_FFFF_FFFF_FFFF,
    }
}

/// The value of `t` at index `k` (exact in f64).
fn value_at(t: DType, k: i128) -> f64 {
    let bits = k.unsigned_abs() as u64;
    let x = match t {
        DType::F16 => {
            let (exp, mant) = ((bits >> 10) as i32, (bits & 0x3FF) as f64);
            if exp == 0 {
                mant * 2f64.powi(-24)
            } else {
                (1.0 + mant / 1024.0) * 2f64.powi(exp - 15)
            }
        }
        DType::BF16 => f64::from(f32::from_bits((bits as u32) << 16)),
        DType::F32 => f64::from(f32::from_bits(bits as u32)),
        _ => f64::from_bits(bits),
    };
    if k < 0 {
        -x
    } else {
        x
    }
}

/// The smallest index whose value satisfies the monotone predicate `ok`, if any.
fn first(t: DType, ok: impl Fn(f64) -> bool) -> Option<i128> {
    let (mut lo, mut hi) = (-max_index(t), max_index(t));
    if !ok(value_at(t, hi)) {
        return None;
    }
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if ok(value_at(t, mid)) {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    Some(lo)
}

/// The smallest and the largest finite value of float dtype `t` in `[low, high)`, if any.
fn inner_bounds(t: DType, low: f64, high: f64) -> Option<(f64, f64)> {
    let floor = first(t, |x| x >= low)?;
    // The largest value below high is the one before the first value >= high (or the largest).
    let cap = match first(t, |x| x >= high) {
        Some(k) => k - 1,
        None => max_index(t),
    };
    (floor <= cap && cap >= -max_index(t)).then(|| (value_at(t, floor), value_at(t, cap)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inner_bounds_stay_inside() {
        assert_eq!(inner_bounds(DType::F32, 0.0, 1.0), Some((0.0, f64::from(1.0f32 - f32::EPSILON / 2.0))));
        assert_eq!(inner_bounds(DType::BF16, 0.0, 1.0), Some((0.0, 1.0 - 1.0 / 256.0)));
        assert_eq!(inner_bounds(DType::F16, -1.0, 1.0), Some((-1.0, 1.0 - 1.0 / 2048.0)));
        assert_eq!(inner_bounds(DType::F64, 0.0, 1.0), Some((0.0, 1.0 - f64::EPSILON / 2.0)));
        // Unrepresentable bounds move inwards.
        let (lo, hi) = inner_bounds(DType::F32, 0.1, 0.2).unwrap();
        assert!(lo >= 0.1 && hi < 0.2 && (lo as f32) as f64 == lo && (hi as f32) as f64 == hi);
        // Past the dtype's range: clamped to its largest finite values, or nothing.
        assert_eq!(inner_bounds(DType::F16, -1e6, 1e6), Some((-65504.0, 65504.0)));
        assert_eq!(inner_bounds(DType::F16, 1e5, 1e6), None);
        assert_eq!(inner_bounds(DType::BF16, 1.0, 1.001), Some((1.0, 1.0)));
        assert_eq!(inner_bounds(DType::BF16, 1.001, 1.002), None);
    }
}
