//! `tpu.quantized_linear(x f32[M, K], w int8[N, K], scale f32[N]) {form}`: a weight-only int8
//! linear layer, `(x · convert(w)ᵀ) * scale`, in the form the `quantized-linear` pass chose
//! (docs/quantization.md):
//! - `host-kernel`: one `stablehlo.custom_call @torchtpu_int8_matmul` (typed FFI), the runtime's
//!   kernel that reads the weight as int8. Emitted only where the target has the kernel.
//! - `dequantize`: `convert` the weight to f32, one `dot_general` contracting both operands'
//!   last dim (no transposed copy), then the per-row scale. XLA's dots take float operands, so
//!   this is the XLA form; for many rows its dot is faster than the kernel.

use melior::ir::attribute::{DictionaryAttribute, IntegerAttribute, StringAttribute};
use melior::ir::r#type::IntegerType;

use super::{Emitter, NodeCtx, RuleResult, Tv};
use crate::ir::DType;
use crate::lower::error::bad;
use crate::lower::legality::Check;
use crate::lower::names::{custom_call, hlo};
use crate::registry::attrs::quantized_linear_form::{DEQUANTIZE, HOST_KERNEL};
use crate::registry::attrs::FORM;

/// XLA's typed-FFI custom-call ABI (`API_VERSION_TYPED_FFI`).
const TYPED_FFI: i64 = 4;

pub fn quantized_linear<'c, 'a>(e: &Emitter<'c, 'a>, n: &NodeCtx<'c, 'a, '_>) -> RuleResult<Vec<Tv<'c, 'a>>> {
    let (x, w, scale) = (n.arg(0)?, n.arg(1)?, n.arg(2)?);
    let (&[m, k], &[rows, k_w], &[cols]) = (x.dims.as_slice(), w.dims.as_slice(), scale.dims.as_slice()) else {
        return bad!("quantized_linear of shapes {:?}, {:?}, {:?}", x.dims, w.dims, scale.dims);
    };
    if k != k_w || rows != cols {
        return bad!("quantized_linear shapes do not agree: x [{m}, {k}], w [{rows}, {k_w}], scale [{cols}]");
    }
    let dims = [m, rows];
    match n.get(FORM)? {
        HOST_KERNEL => {
            let ctx = e.ctx;
            let attrs = [
                ("call_target_name", StringAttribute::new(ctx, custom_call::INT8_MATMUL).into()),
                ("api_version", IntegerAttribute::new(IntegerType::new(ctx, 32).into(), TYPED_FFI).into()),
                ("backend_config", DictionaryAttribute::new(ctx, &[]).into()),
            ];
            Ok(vec![e.op(hlo::CUSTOM_CALL, &[x, w, scale], DType::F32, &dims, &attrs)?])
        }
        DEQUANTIZE => {
            let wf = e.convert(w, DType::F32)?;
            let numbers =
                e.attr("#stablehlo.dot<lhs_contracting_dimensions = [1], rhs_contracting_dimensions = [1]>")?;
            let y = e.op(hlo::DOT_GENERAL, &[x, &wf], DType::F32, &dims, &[("dot_dimension_numbers", numbers)])?;
            let s = e.broadcast_in_dim(scale, &dims, &[1])?;
            Ok(vec![e.ew(hlo::MULTIPLY, &[&y, &s], DType::F32)?])
        }
        other => bad!("quantized_linear form '{other}' (host-kernel or dequantize)"),
    }
}

/// f32 activations and scales, int8 weights, a known form.
pub fn quantized_linear_legal(c: &Check) -> Result<(), String> {
    let dtypes = (c.operand_dtype(0), c.operand_dtype(1), c.operand_dtype(2), c.out_dtype());
    if dtypes != (Some(DType::F32), Some(DType::I8), Some(DType::F32), Some(DType::F32)) {
        return Err(format!("quantized_linear of {dtypes:?} (f32 x, int8 w, f32 scale, f32 result only)"));
    }
    match c.get_or(FORM, "") {
        HOST_KERNEL | DEQUANTIZE => Ok(()),
        other => Err(format!("quantized_linear form '{other}' (host-kernel or dequantize)")),
    }
}
