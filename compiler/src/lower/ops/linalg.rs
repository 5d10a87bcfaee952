//! Matrix products: mm, bmm, addmm, matmul of 2-D/3-D operands, via `stablehlo.dot_general`
//! in the result dtype.

use crate::lower::emitter::{Emitter, Tv};
use crate::lower::error::{bad, unsupported, RuleResult};
use crate::lower::node::NodeCtx;
use crate::passes::patterns::Scalar;

type R<'c, 'a> = RuleResult<Vec<Tv<'c, 'a>>>;

/// `a @ b` for rank-2 or batched rank-3 operands.
pub fn dot<'c, 'a>(e: &Emitter<'c, 'a>, a: &Tv<'c, 'a>, b: &Tv<'c, 'a>, out: crate::ir::DType) -> RuleResult<Tv<'c, 'a>> {
    let a = e.convert(a, out)?;
    let b = e.convert(b, out)?;
    let (dims, text) = match (a.rank(), b.rank()) {
        (2, 2) => {
            if a.dims[1] != b.dims[0] {
                return bad!("mm shapes {:?} and {:?} do not contract", a.dims, b.dims);
            }
            (vec![a.dims[0], b.dims[1]], "#stablehlo.dot<lhs_contracting_dimensions = [1], rhs_contracting_dimensions = [0]>")
        }
        (3, 3) => {
            if a.dims[2] != b.dims[1] || a.dims[0] != b.dims[0] {
                return bad!("bmm shapes {:?} and {:?} do not contract", a.dims, b.dims);
            }
            (
                vec![a.dims[0], a.dims[1], b.dims[2]],
                "#stablehlo.dot<lhs_batching_dimensions = [0], rhs_batching_dimensions = [0], lhs_contracting_dimensions = [2], rhs_contracting_dimensions = [1]>",
            )
        }
        (x, y) => return unsupported!("matrix product of rank {x} and rank {y} operands"),
    };
    e.op("stablehlo.dot_general", &[&a, &b], out, &dims, &[("dot_dimension_numbers", e.attr(text)?)])
}

pub fn mm<'c, 'a>(e: &Emitter<'c, 'a>, n: &NodeCtx<'c, 'a, '_>) -> R<'c, 'a> {
    Ok(vec![dot(e, n.arg(0)?, n.arg(1)?, n.out_dtype())?])
}

/// addmm(self, mat1, mat2, beta=1, alpha=1) = beta * self + alpha * (mat1 @ mat2).
/// With beta == 0, `self` is ignored (NaNs in it do not propagate), as in PyTorch.
pub fn addmm<'c, 'a>(e: &Emitter<'c, 'a>, n: &NodeCtx<'c, 'a, '_>) -> R<'c, 'a> {
    let out = n.out_dtype();
    let mut prod = dot(e, n.arg(1)?, n.arg(2)?, out)?;
    let dims = prod.dims.clone();
    let alpha = n.attr("alpha").and_then(Scalar::from_attr).unwrap_or(Scalar::I(1));
    let beta = n.attr("beta").and_then(Scalar::from_attr).unwrap_or(Scalar::I(1));
    if !alpha.is_one() {
        let c = e.constant(out, &dims, alpha)?;
        prod = e.ew("stablehlo.multiply", &[&prod, &c], out)?;
    }
    if beta.is_zero() {
        return Ok(vec![prod]);
    }
    let mut bias = e.broadcast_to(&e.convert(n.arg(0)?, out)?, &dims)?;
    if !beta.is_one() {
        let c = e.constant(out, &dims, beta)?;
        bias = e.ew("stablehlo.multiply", &[&bias, &c], out)?;
    }
    Ok(vec![e.ew("stablehlo.add", &[&bias, &prod], out)?])
}
