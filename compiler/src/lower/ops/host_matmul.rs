//! `tpu.matmul(a, b) {transpose_a, transpose_b, form}`: `A @ B` (rank 2, or 3 with a batch),
//! each operand stored as it is or with its last two dims swapped, in the kernel the
//! `host-matmul` pass chose by measurement:
//! - `aten`: one `stablehlo.custom_call @torchtpu_aten_matmul_{nn,nt,tn,tt}` (typed FFI), ATen's
//!   CPU GEMM reading XLA's buffers as they are. Emitted only where the target has it.
//! - `xla`: one `dot_general` contracting the stored operands' dims (no transposed copy).

use melior::ir::attribute::{DictionaryAttribute, IntegerAttribute, StringAttribute};
use melior::ir::r#type::IntegerType;

use super::{Emitter, NodeCtx, RuleResult, Tv};
use crate::ir::DType;
use crate::lower::error::bad;
use crate::lower::legality::Check;
use crate::lower::names::{custom_call, hlo};
use crate::registry::attrs::matmul_form::{ATEN, XLA};
use crate::registry::attrs::{FORM, TRANSPOSE_A, TRANSPOSE_B};

/// XLA's typed-FFI custom-call ABI (`API_VERSION_TYPED_FFI`).
const TYPED_FFI: i64 = 4;

/// The custom-call target for the operands' storage.
pub fn aten_target(transpose_a: bool, transpose_b: bool) -> &'static str {
    match (transpose_a, transpose_b) {
        (false, false) => custom_call::ATEN_MATMUL_NN,
        (false, true) => custom_call::ATEN_MATMUL_NT,
        (true, false) => custom_call::ATEN_MATMUL_TN,
        (true, true) => custom_call::ATEN_MATMUL_TT,
    }
}

pub fn matmul<'c, 'a>(e: &Emitter<'c, 'a>, n: &NodeCtx<'c, 'a, '_>) -> RuleResult<Vec<Tv<'c, 'a>>> {
    let (a, b) = (n.arg(0)?, n.arg(1)?);
    let (ta, tb) = (n.get(TRANSPOSE_A)?, n.get(TRANSPOSE_B)?);
    let rank = a.rank();
    if !(2..=3).contains(&rank) || b.rank() != rank {
        return bad!("tpu.matmul of shapes {:?} and {:?} (rank 2 or 3, equal)", a.dims, b.dims);
    }
    // The stored dims each operand contracts and keeps.
    let (a_k, a_m) = if ta { (rank - 2, rank - 1) } else { (rank - 1, rank - 2) };
    let (b_k, b_n) = if tb { (rank - 1, rank - 2) } else { (rank - 2, rank - 1) };
    if a.dims[a_k] != b.dims[b_k] || (rank == 3 && a.dims[0] != b.dims[0]) {
        return bad!("tpu.matmul shapes {:?} and {:?} do not contract (transposed: {ta}, {tb})", a.dims, b.dims);
    }
    let mut dims = if rank == 3 { vec![a.dims[0]] } else { vec![] };
    dims.extend([a.dims[a_m], b.dims[b_n]]);
    let dtype = a.dtype;
    match n.get(FORM)? {
        ATEN => {
            let ctx = e.ctx;
            let attrs = [
                ("call_target_name", StringAttribute::new(ctx, aten_target(ta, tb)).into()),
                ("api_version", IntegerAttribute::new(IntegerType::new(ctx, 32).into(), TYPED_FFI).into()),
                ("backend_config", DictionaryAttribute::new(ctx, &[]).into()),
            ];
            Ok(vec![e.op(hlo::CUSTOM_CALL, &[a, b], dtype, &dims, &attrs)?])
        }
        XLA => {
            let batch = if rank == 3 { "lhs_batching_dimensions = [0], rhs_batching_dimensions = [0], " } else { "" };
            let text = format!(
                "#stablehlo.dot<{batch}lhs_contracting_dimensions = [{a_k}], rhs_contracting_dimensions = [{b_k}]>"
            );
            Ok(vec![e.op(hlo::DOT_GENERAL, &[a, b], dtype, &dims, &[("dot_dimension_numbers", e.attr(&text)?)])?])
        }
        other => bad!("tpu.matmul form '{other}' (aten or xla)"),
    }
}

/// Floating operands and result of one dtype, a known form.
pub fn matmul_legal(c: &Check) -> Result<(), String> {
    let dtypes = (c.operand_dtype(0), c.operand_dtype(1), c.out_dtype());
    let float = matches!(dtypes.0, Some(DType::F32 | DType::F64 | DType::BF16 | DType::F16));
    if !float || dtypes.1 != dtypes.0 || dtypes.2 != dtypes.0 {
        return Err(format!("tpu.matmul of {dtypes:?} (one floating dtype: f32, f64, bf16, f16)"));
    }
    match c.get_or(FORM, "") {
        ATEN | XLA => Ok(()),
        other => Err(format!("tpu.matmul form '{other}' (aten or xla)")),
    }
}
