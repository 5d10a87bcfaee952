//! `prims.*` ops that PyTorch's reference decompositions (torch._refs) leave in a graph, and
//! the special functions CHLO provides. Prims take already-broadcast, already-promoted
//! operands, so most rules are one StableHLO/CHLO op in the result dtype.

use crate::ir::DType;
use crate::lower::emitter::{Cmp, Emitter, Tv};
use crate::lower::error::{bad, unsupported, RuleResult};
use crate::lower::node::{dim, NodeCtx};
use crate::lower::ops::reduce::reduce_with;
use crate::passes::patterns::Scalar;

type R<'c, 'a> = RuleResult<Vec<Tv<'c, 'a>>>;

fn op_name<'n>(n: &'n NodeCtx) -> &'n str {
    n.node.op().map(|o| o.name.as_str()).unwrap_or("")
}

/// The i-th operand converted to the result dtype (a number attribute becomes a constant).
fn operand<'c, 'a>(e: &Emitter<'c, 'a>, n: &NodeCtx<'c, 'a, '_>, names: &[&str], i: usize, d: DType) -> RuleResult<Tv<'c, 'a>> {
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
    let mut dims: Vec<usize> = match n.opt_ints("dims")? {
        Some(v) => v.iter().map(|&d| dim(d, x.rank())).collect::<RuleResult<_>>()?,
        None => (0..x.rank()).collect(),
    };
    dims.sort_unstable();
    dims.dedup();
    let xc = e.convert(x, out)?;
    if op_name(n) == "sum" {
        let s = reduce_with(e, &xc, &dims, "sum")?;
        return Ok(vec![e.reshape(&s, n.out_dims())?]);
    }
    if !out.is_float() {
        return unsupported!("prims.var of a non-float result");
    }
    let correction = n.float_or("correction", 1.0)?;
    let count: i64 = dims.iter().map(|&d| x.dims[d]).product();
    let sum = reduce_with(e, &xc, &dims, "sum")?;
    let mean = e.ew("stablehlo.divide", &[&sum, &e.constant(out, &sum.dims.clone(), Scalar::I(count))?], out)?;
    let kept: Vec<i64> = (0..x.rank()).map(|i| if dims.contains(&i) { 1 } else { x.dims[i] }).collect();
    let mean = e.broadcast_to(&e.reshape(&mean, &kept)?, &x.dims)?;
    let diff = e.ew("stablehlo.subtract", &[&xc, &mean], out)?;
    let sq = e.ew("stablehlo.multiply", &[&diff, &diff], out)?;
    let ss = reduce_with(e, &sq, &dims, "sum")?;
    let denom = e.constant(out, &ss.dims.clone(), Scalar::F((count as f64 - correction).max(0.0)))?;
    let v = e.ew("stablehlo.divide", &[&ss, &denom], out)?;
    Ok(vec![e.reshape(&v, n.out_dims())?])
}

/// prims.broadcast_in_dim(a, shape, broadcast_dimensions).
pub fn broadcast_in_dim<'c, 'a>(e: &Emitter<'c, 'a>, n: &NodeCtx<'c, 'a, '_>) -> R<'c, 'a> {
    let x = n.arg(0)?;
    let mapping = n.ints("broadcast_dimensions")?;
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

/// prims.div: true division for floats, truncating for integers (StableHLO's int divide).
pub fn div<'c, 'a>(e: &Emitter<'c, 'a>, n: &NodeCtx<'c, 'a, '_>) -> R<'c, 'a> {
    let out = n.out_dtype();
    let names = ["self", "other"];
    let (a, b) = (operand(e, n, &names, 0, out)?, operand(e, n, &names, 1, out)?);
    if out == DType::Bool {
        return unsupported!("prims.div of bools");
    }
    Ok(vec![e.ew("stablehlo.divide", &[&a, &b], out)?])
}

/// Elementwise binary prims and special functions: fmax/fmin (NaN-ignoring), shifts,
/// zeta, hypot, nextafter-free ones.
pub fn binary<'c, 'a>(e: &Emitter<'c, 'a>, n: &NodeCtx<'c, 'a, '_>) -> R<'c, 'a> {
    let name = op_name(n);
    let out = n.out_dtype();
    // aten.special_zeta names its operands (self, other) like every prim here.
    let names = ["self", "other"];
    let (a, b) = (operand(e, n, &names, 0, out)?, operand(e, n, &names, 1, out)?);
    let r = match name {
        "fmax" | "fmin" => {
            let m = e.ew(if name == "fmax" { "stablehlo.maximum" } else { "stablehlo.minimum" }, &[&a, &b], out)?;
            if !out.is_float() {
                m
            } else {
                // A NaN loses to a number: take the other operand where one is NaN.
                let a_nan = e.compare(&a, &a, Cmp::Ne)?;
                let b_nan = e.compare(&b, &b, Cmp::Ne)?;
                let m = e.select(&a_nan, &b, &m)?;
                e.select(&b_nan, &a, &m)?
            }
        }
        "shift_left" => e.ew("stablehlo.shift_left", &[&a, &b], out)?,
        "shift_right_arithmetic" => e.ew("stablehlo.shift_right_arithmetic", &[&a, &b], out)?,
        "zeta" => e.ew("chlo.zeta", &[&a, &b], out)?,
        "hypot" => {
            let aa = e.ew("stablehlo.multiply", &[&a, &a], out)?;
            let bb = e.ew("stablehlo.multiply", &[&b, &b], out)?;
            let s = e.ew("stablehlo.add", &[&aa, &bb], out)?;
            e.ew("stablehlo.sqrt", &[&s], out)?
        }
        other => return unsupported!("no binary prim rule for '{other}'"),
    };
    Ok(vec![r])
}

/// polygamma(n, self): chlo.polygamma with the order as a tensor.
pub fn polygamma<'c, 'a>(e: &Emitter<'c, 'a>, n: &NodeCtx<'c, 'a, '_>) -> R<'c, 'a> {
    let out = n.out_dtype();
    let x = e.convert(n.arg(0)?, out)?;
    let order = e.constant(out, &x.dims, Scalar::I(n.int("n")?))?;
    Ok(vec![e.ew("chlo.polygamma", &[&order, &x], out)?])
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
            let as_int = e.op("stablehlo.bitcast_convert", &[x], bits, &x.dims.clone(), &[])?;
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
        return unsupported!("angle of a complex tensor");
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
    let src = e.convert(n.arg(1)?, n.out_dtype())?;
    Ok(vec![e.broadcast_to(&src, n.out_dims())?])
}
