//! Matrix products: mm, bmm, addmm, matmul of 2-D/3-D operands, via `stablehlo.dot_general`
//! in the result dtype; triangular solves via `stablehlo.triangular_solve`.

use crate::ir::{DType, Scalar};
use crate::lower::emitter::{Emitter, Tv};
use crate::lower::error::{bad, RuleResult};
use crate::lower::legality::Check;
use crate::lower::names::hlo;
use crate::lower::node::NodeCtx;
use crate::lower::param::{RuleParam, Triangular};
use crate::registry::attrs::{ALPHA, BETA, LEFT, TRANSPOSE, UNITRIANGULAR, UPPER};

type R<'c, 'a> = RuleResult<Vec<Tv<'c, 'a>>>;

/// `a @ b` for rank-2 or batched rank-3 operands. An operand that is a transpose of its last
/// two dims (`x @ w.t()`, as every nn.Linear is exported) is read untransposed, with the dot
/// contracting its other dim: XLA CPU would otherwise copy the transposed weight on every call
/// before its matmul (measured on the MLP: a `transpose_copy_fusion` per weight). Both
/// operands are read in `operands` and the products summed in `out`: an integer dot reads its
/// int8 operands as they are (`s8 x s8 -> s32`, which XLA's CPU dot and the accelerators'
/// take) instead of widening them first.
pub fn dot_in<'c, 'a>(
    e: &Emitter<'c, 'a>,
    a: &Tv<'c, 'a>,
    b: &Tv<'c, 'a>,
    operands: DType,
    out: DType,
) -> RuleResult<Tv<'c, 'a>> {
    let a = e.convert(a, operands)?;
    let b = e.convert(b, operands)?;
    let (rank_a, rank_b) = (a.rank(), b.rank());
    if rank_a != rank_b || !(2..=3).contains(&rank_a) {
        // The verifier's MatMul/BatchMatMul/AddMm signatures admit nothing else.
        return bad!("matrix product of rank {rank_a} and rank {rank_b} operands");
    }
    let batched = rank_a == 3;
    if a.dims[rank_a - 1] != b.dims[rank_b - 2] || (batched && a.dims[0] != b.dims[0]) {
        return bad!("matrix product shapes {:?} and {:?} do not contract", a.dims, b.dims);
    }
    let mut dims = a.dims[..rank_a - 1].to_vec();
    dims.push(b.dims[rank_b - 1]);
    // (operand to read, the dim of it that is contracted)
    let swap: &[usize] = if batched { &[0, 2, 1] } else { &[1, 0] };
    let (lhs, lhs_k) = match e.transpose_source(&a, swap) {
        Some(src) => (src, rank_a - 2),
        None => (a, rank_a - 1),
    };
    let (rhs, rhs_k) = match e.transpose_source(&b, swap) {
        Some(src) => (src, rank_b - 1),
        None => (b, rank_b - 2),
    };
    let batch = if batched { "lhs_batching_dimensions = [0], rhs_batching_dimensions = [0], " } else { "" };
    let text = format!(
        "#stablehlo.dot<{batch}lhs_contracting_dimensions = [{lhs_k}], rhs_contracting_dimensions = [{rhs_k}]>"
    );
    e.op(hlo::DOT_GENERAL, &[&lhs, &rhs], out, &dims, &[("dot_dimension_numbers", e.attr(&text)?)])
}

pub fn mm<'c, 'a>(e: &Emitter<'c, 'a>, n: &NodeCtx<'c, 'a, '_>) -> R<'c, 'a> {
    let (a, b, out) = (n.arg(0)?, n.arg(1)?, n.out_dtype());
    Ok(vec![dot_in(e, a, b, read_as(a, b, out), out)?])
}

/// The dtype a product reads its operands in: the result's, except that integer operands
/// narrower than an integer result (`out_dtype(mm, int32, x_i8, w_i8)`) are read as they are
/// and summed in the result.
fn read_as(a: &Tv, b: &Tv, out: DType) -> DType {
    let narrower = a.dtype.is_integer() && out.is_integer() && a.dtype.size_bytes() < out.size_bytes();
    if a.dtype == b.dtype && narrower {
        a.dtype
    } else {
        out
    }
}

/// `torch._int_mm(a, b)`: int8 matrices, their products summed in int32 (what torchao's
/// dynamically quantized linear layers run), one `s8 x s8 -> s32` dot. PyTorch's CPU kernel also
/// takes an unsigned left operand (`u8 x s8`, torchao's activations on CPUs with VNNI); both are
/// then read as int32, which holds every product exactly.
pub fn int_mm<'c, 'a>(e: &Emitter<'c, 'a>, n: &NodeCtx<'c, 'a, '_>) -> R<'c, 'a> {
    let a = n.arg(0)?;
    let read = if a.dtype == DType::U8 { DType::I32 } else { DType::I8 };
    Ok(vec![dot_in(e, a, n.arg(1)?, read, DType::I32)?])
}

/// `_int_mm` takes an int8 (or, as PyTorch's CPU kernel does, uint8) left operand and an int8
/// right one, and gives int32.
pub fn int_mm_legal(c: &Check) -> Result<(), String> {
    let dtypes = (c.operand_dtype(0), c.operand_dtype(1), c.out_dtype());
    match dtypes {
        (Some(DType::I8 | DType::U8), Some(DType::I8), Some(DType::I32)) => Ok(()),
        (a, b, out) => Err(format!(
            "_int_mm of {a:?} and {b:?} into {out:?} (an int8 or uint8 left operand, an int8 right one, an int32 result only)"
        )),
    }
}

/// addmm(self, mat1, mat2, beta=1, alpha=1) = beta * self + alpha * (mat1 @ mat2).
/// With beta == 0, `self` is ignored (NaNs in it do not propagate), as in PyTorch.
pub fn addmm<'c, 'a>(e: &Emitter<'c, 'a>, n: &NodeCtx<'c, 'a, '_>) -> R<'c, 'a> {
    let out = n.out_dtype();
    let (a, b) = (n.arg(1)?, n.arg(2)?);
    let mut prod = dot_in(e, a, b, read_as(a, b, out), out)?;
    let dims = prod.dims.clone();
    let alpha = n.raw(ALPHA).and_then(Scalar::from_attr).unwrap_or(Scalar::I(1));
    let beta = n.raw(BETA).and_then(Scalar::from_attr).unwrap_or(Scalar::I(1));
    if !alpha.is_one() {
        let c = e.constant(out, &dims, alpha)?;
        prod = e.ew(hlo::MULTIPLY, &[&prod, &c], out)?;
    }
    if beta.is_zero() {
        return Ok(vec![prod]);
    }
    let mut bias = e.broadcast_to(&e.convert(n.arg(0)?, out)?, &dims)?;
    if !beta.is_one() {
        let c = e.constant(out, &dims, beta)?;
        bias = e.ew(hlo::MULTIPLY, &[&bias, &c], out)?;
    }
    Ok(vec![e.ew(hlo::ADD, &[&bias, &prod], out)?])
}

/// Triangular solves in f32 and f64 (what XLA CPU's solver takes; CPU eager refuses half
/// precision too), real only.
pub fn solve_triangular_legal(c: &Check) -> Result<(), String> {
    match c.out_dtype() {
        Some(DType::F32 | DType::F64) | None => Ok(()),
        Some(d) => Err(format!("a {d} triangular solve (f32 and f64 only)")),
    }
}

/// linalg_solve_triangular(self=A, B, upper, left=True, unitriangular=False): X with A X = B
/// (`left`) or X A = B; and the older triangular_solve(self=B, A, upper=True, transpose=False,
/// unitriangular=False) -> (X, a copy of A), which solves op(A) X = B on the left. Batch dims
/// broadcast. The solver reads only A's triangle (and not its diagonal with `unitriangular`),
/// as LAPACK's trsm does, so what lies outside it does not matter, as in eager.
pub fn solve_triangular<'c, 'a>(e: &Emitter<'c, 'a>, n: &NodeCtx<'c, 'a, '_>) -> R<'c, 'a> {
    let legacy = n.param == Some(RuleParam::Triangular(Triangular::Legacy));
    let (a, b) = if legacy { (n.arg(1)?, n.arg(0)?) } else { (n.arg(0)?, n.arg(1)?) };
    let out = n.out_dtype();
    let dims = n.out_dims().to_vec();
    if a.rank() < 2 || b.rank() < 2 || dims.len() < 2 {
        return bad!("triangular solve of rank {} and {} operands", a.rank(), b.rank());
    }
    let m = a.dims[a.rank() - 1];
    let mut a_dims = dims[..dims.len() - 2].to_vec();
    a_dims.extend([m, m]);
    let a = e.broadcast_to(&e.convert(a, out)?, &a_dims)?;
    let b = e.broadcast_to(&e.convert(b, out)?, &dims)?;
    let left = if legacy { true } else { n.get_or(LEFT, true)? };
    let upper = n.get_or(UPPER, legacy)?;
    let unit = n.get_or(UNITRIANGULAR, false)?;
    let transpose = if legacy && n.get_or(TRANSPOSE, false)? { "TRANSPOSE" } else { "NO_TRANSPOSE" };
    let flag = |v: bool| e.attr(if v { "true" } else { "false" });
    let attrs = [
        ("left_side", flag(left)?),
        ("lower", flag(!upper)?),
        ("unit_diagonal", flag(unit)?),
        ("transpose_a", e.attr(&format!("#stablehlo<transpose {transpose}>"))?),
    ];
    let x = e.op(hlo::TRIANGULAR_SOLVE, &[&a, &b], out, &dims, &attrs)?;
    Ok(if legacy { vec![x, a] } else { vec![x] })
}
