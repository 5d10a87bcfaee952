//! The one table of ops. Each line declares an op once: traits, verifier signature and
//! decomposition policy. Adding an op is one line here, plus its line in each layer's side
//! table that has a rule for it (`lower/table.rs`, `sharding/table.rs`,
//! `passes/layout_rules.rs`).

use super::attrs::*;
use super::{Decomposition as D, OpDef, Signature, Traits as T};
use crate::ir::ops::Arity::{AtLeast, Between, Exactly};
use crate::ir::ops::ShapeRule;

const fn op(name: &'static str) -> OpDef {
    OpDef::new(name)
}

const fn sig(
    operands: crate::ir::ops::Arity,
    results: usize,
    required_attrs: &'static [AttrSpec],
    shape: ShapeRule,
) -> Signature {
    Signature { operands, results: Exactly(results), required_attrs, shape }
}

const UNARY: Signature = sig(Exactly(1), 1, &[], ShapeRule::SameShape);
// Scalar operands of binary ops are attributes (`other`), so one or two operands.
const BINARY: Signature = sig(Between(1, 2), 1, &[], ShapeRule::Broadcast);
const COMPARE: Signature = sig(Between(1, 2), 1, &[], ShapeRule::Compare);
const WHERE: Signature = sig(Between(1, 3), 1, &[], ShapeRule::Broadcast);
const CLAMP: Signature = sig(Between(1, 3), 1, &[], ShapeRule::Broadcast);
const COPY: Signature = sig(Exactly(1), 1, &[], ShapeRule::SameShape);
// Tensor.view(dtype): another element size scales the last dim.
const VIEW_OF_DTYPE: Signature = sig(Exactly(1), 1, &[], ShapeRule::Free);
const REDUCE: Signature = sig(Exactly(1), 1, &[], ShapeRule::Free);
const MM: Signature = sig(Exactly(2), 1, &[], ShapeRule::MatMul);
const BMM: Signature = sig(Exactly(2), 1, &[], ShapeRule::BatchMatMul);
const ADDMM: Signature = sig(Exactly(3), 1, &[], ShapeRule::AddMm);
const RESHAPE: Signature = sig(Exactly(1), 1, &[SIZE.spec()], ShapeRule::Reshape);
const PERMUTE: Signature = sig(Exactly(1), 1, &[DIMS.spec()], ShapeRule::Permute);
const TRANSPOSE: Signature = sig(Exactly(1), 1, &[DIM0.spec(), DIM1.spec()], ShapeRule::Free);
const VIEWLIKE: Signature = sig(Exactly(1), 1, &[], ShapeRule::Free);
const LAYER_NORM: Signature = sig(Between(1, 3), 3, &[NORMALIZED_SHAPE.spec(), EPS.spec()], ShapeRule::Free);
const DROPOUT: Signature = sig(Exactly(1), 2, &[P.spec()], ShapeRule::SameShape);
const SOFTMAX: Signature = sig(Exactly(1), 1, &[DIM.spec()], ShapeRule::SameShape);
const FULL: Signature = sig(Exactly(0), 1, &[SIZE.spec(), FILL_VALUE.spec()], ShapeRule::Free);
const SCALAR_TENSOR: Signature = sig(Exactly(0), 1, &[S.spec()], ShapeRule::Free);
const ARANGE: Signature = sig(Exactly(0), 1, &[END.spec()], ShapeRule::Free);
const CAT: Signature = sig(AtLeast(1), 1, &[DIM.spec()], ShapeRule::Free);
// Collectives of replicated programs (`lower/ops/collective.rs`): the replica groups are required.
const COLLECTIVE: Signature = sig(Exactly(1), 1, &[GROUPS_LIST.spec(), GROUP_SIZE.spec()], ShapeRule::Free);
const CONSTANT: Signature = sig(Exactly(0), 1, &[VALUE.spec()], ShapeRule::Constant);
// Device random draws: (state) -> (next state, values); `lower/ops/random.rs` checks the types.
const RNG_RANGE: Signature = sig(Exactly(1), 2, &[LOW.spec(), HIGH.spec()], ShapeRule::Free);
// `quantized-linear`'s node: (x f32[M, K], w int8[N, K], scale f32[N]) -> f32[M, N] in the
// form the pass chose (`lower/ops/quant.rs`).
const QUANTIZED_LINEAR: Signature = sig(Exactly(3), 1, &[FORM.spec()], ShapeRule::Free);
// `host-matmul`'s node: a [batched] matmul, either operand stored transposed, in the kernel
// the target measured fastest (`lower/ops/host_matmul.rs`).
const MATMUL: Signature = sig(Exactly(2), 1, &[TRANSPOSE_A.spec(), TRANSPOSE_B.spec(), FORM.spec()], ShapeRule::Free);
const RNG_NORMAL: Signature = sig(Exactly(1), 2, &[MEAN.spec(), STD.spec()], ShapeRule::Free);

// One line per op: the table reads as a table.
#[rustfmt::skip]
pub(super) static OPS: &[OpDef] = &[
    // elementwise unary
    op("aten.abs").traits(T::ELEMENTWISE).sig(UNARY).decomposition(D::Lowering),
    op("aten.neg").traits(T::ELEMENTWISE).sig(UNARY).decomposition(D::Lowering),
    op("aten.ceil").traits(T::ELEMENTWISE).sig(UNARY).decomposition(D::Lowering),
    op("aten.floor").traits(T::ELEMENTWISE).sig(UNARY).decomposition(D::Lowering),
    op("aten.round").traits(T::ELEMENTWISE).sig(UNARY).decomposition(D::Lowering),
    op("aten.trunc").traits(T::ELEMENTWISE).sig(UNARY).decomposition(D::Lowering),
    op("aten.sign").traits(T::ELEMENTWISE).sig(UNARY).decomposition(D::Lowering),
    op("aten.sqrt").traits(T::ELEMENTWISE).sig(UNARY).decomposition(D::Lowering),
    op("aten.rsqrt").traits(T::ELEMENTWISE).sig(UNARY).decomposition(D::Lowering),
    op("aten.exp").traits(T::ELEMENTWISE).sig(UNARY).decomposition(D::Lowering),
    op("aten.exp2").traits(T::ELEMENTWISE).sig(UNARY).decomposition(D::Lowering),
    op("aten.expm1").traits(T::ELEMENTWISE).sig(UNARY).decomposition(D::Lowering),
    op("aten.log").traits(T::ELEMENTWISE).sig(UNARY).decomposition(D::Lowering),
    op("aten.log2").traits(T::ELEMENTWISE).sig(UNARY).decomposition(D::Lowering),
    op("aten.log10").traits(T::ELEMENTWISE).sig(UNARY).decomposition(D::Lowering),
    op("aten.log1p").traits(T::ELEMENTWISE).sig(UNARY).decomposition(D::Lowering),
    op("aten.sin").traits(T::ELEMENTWISE).sig(UNARY).decomposition(D::Lowering),
    op("aten.cos").traits(T::ELEMENTWISE).sig(UNARY).decomposition(D::Lowering),
    op("aten.tan").traits(T::ELEMENTWISE).sig(UNARY).decomposition(D::Lowering),
    op("aten.asin").traits(T::ELEMENTWISE).sig(UNARY).decomposition(D::Lowering),
    op("aten.acos").traits(T::ELEMENTWISE).sig(UNARY).decomposition(D::Lowering),
    op("aten.atan").traits(T::ELEMENTWISE).sig(UNARY).decomposition(D::Lowering),
    op("aten.sinh").traits(T::ELEMENTWISE).sig(UNARY).decomposition(D::Lowering),
    op("aten.cosh").traits(T::ELEMENTWISE).sig(UNARY).decomposition(D::Lowering),
    op("aten.tanh").traits(T::ELEMENTWISE).sig(UNARY).decomposition(D::Lowering),
    op("aten.asinh").traits(T::ELEMENTWISE).sig(UNARY).decomposition(D::Lowering),
    op("aten.acosh").traits(T::ELEMENTWISE).sig(UNARY).decomposition(D::Lowering),
    op("aten.atanh").traits(T::ELEMENTWISE).sig(UNARY).decomposition(D::Lowering),
    op("aten.sigmoid").traits(T::ELEMENTWISE).sig(UNARY).decomposition(D::Lowering),
    op("aten.erf").traits(T::ELEMENTWISE).sig(UNARY).decomposition(D::Lowering),
    op("aten.erfc").traits(T::ELEMENTWISE).sig(UNARY).decomposition(D::Lowering),
    op("aten.erfinv").traits(T::ELEMENTWISE).sig(UNARY).decomposition(D::Lowering),
    op("aten.lgamma").traits(T::ELEMENTWISE).sig(UNARY).decomposition(D::Lowering),
    op("aten.digamma").traits(T::ELEMENTWISE).sig(UNARY).decomposition(D::Lowering),
    op("aten.reciprocal").traits(T::ELEMENTWISE).sig(UNARY).decomposition(D::Lowering),
    op("aten.relu").traits(T::ELEMENTWISE).sig(UNARY).decomposition(D::Lowering),
    op("aten.gelu").traits(T::ELEMENTWISE).sig(UNARY).decomposition(D::Lowering),
    op("aten.silu").traits(T::ELEMENTWISE).sig(UNARY).decomposition(D::Python),
    op("aten.logical_not").traits(T::ELEMENTWISE).sig(UNARY).decomposition(D::Lowering),
    op("aten.bitwise_not").traits(T::ELEMENTWISE).sig(UNARY).decomposition(D::Lowering),
    // elementwise binary
    op("aten.add").traits(T::ELEMENTWISE).sig(BINARY).decomposition(D::Lowering),
    op("aten.sub").traits(T::ELEMENTWISE).sig(BINARY).decomposition(D::Lowering),
    op("aten.rsub").traits(T::ELEMENTWISE).sig(BINARY).decomposition(D::Python),
    op("aten.mul").traits(T::ELEMENTWISE).sig(BINARY).decomposition(D::Lowering),
    op("aten.div").traits(T::ELEMENTWISE).sig(BINARY).decomposition(D::Lowering),
    op("aten.floor_divide").traits(T::ELEMENTWISE).sig(BINARY).decomposition(D::Python),
    op("aten.pow").traits(T::ELEMENTWISE).sig(BINARY).decomposition(D::Lowering),
    op("aten.maximum").traits(T::ELEMENTWISE).sig(BINARY).decomposition(D::Lowering),
    op("aten.minimum").traits(T::ELEMENTWISE).sig(BINARY).decomposition(D::Lowering),
    op("aten.atan2").traits(T::ELEMENTWISE).sig(BINARY).decomposition(D::Lowering),
    op("aten.fmod").traits(T::ELEMENTWISE).sig(BINARY).decomposition(D::Lowering),
    op("aten.remainder").traits(T::ELEMENTWISE).sig(BINARY).decomposition(D::Lowering),
    op("aten.bitwise_and").traits(T::ELEMENTWISE).sig(BINARY).decomposition(D::Lowering),
    op("aten.bitwise_or").traits(T::ELEMENTWISE).sig(BINARY).decomposition(D::Lowering),
    op("aten.bitwise_xor").traits(T::ELEMENTWISE).sig(BINARY).decomposition(D::Lowering),
    op("aten.eq").traits(T::ELEMENTWISE).sig(COMPARE).decomposition(D::Lowering),
    op("aten.ne").traits(T::ELEMENTWISE).sig(COMPARE).decomposition(D::Lowering),
    op("aten.lt").traits(T::ELEMENTWISE).sig(COMPARE).decomposition(D::Lowering),
    op("aten.le").traits(T::ELEMENTWISE).sig(COMPARE).decomposition(D::Lowering),
    op("aten.gt").traits(T::ELEMENTWISE).sig(COMPARE).decomposition(D::Lowering),
    op("aten.ge").traits(T::ELEMENTWISE).sig(COMPARE).decomposition(D::Lowering),
    op("aten.logical_and").traits(T::ELEMENTWISE).sig(BINARY).decomposition(D::Lowering),
    op("aten.logical_or").traits(T::ELEMENTWISE).sig(BINARY).decomposition(D::Lowering),
    op("aten.logical_xor").traits(T::ELEMENTWISE).sig(BINARY).decomposition(D::Lowering),
    op("aten.where").traits(T::ELEMENTWISE).sig(WHERE).decomposition(D::Python),
    op("aten.clamp").traits(T::ELEMENTWISE).sig(CLAMP).decomposition(D::Lowering),
    op("aten.clamp_min").traits(T::ELEMENTWISE).sig(BINARY).decomposition(D::Python),
    op("aten.clamp_max").traits(T::ELEMENTWISE).sig(BINARY).decomposition(D::Python),
    op("aten.hardtanh").traits(T::ELEMENTWISE).sig(UNARY).decomposition(D::Lowering),
    op("aten.isnan").traits(T::ELEMENTWISE).sig(UNARY).decomposition(D::Lowering),
    op("aten.isinf").traits(T::ELEMENTWISE).sig(UNARY).decomposition(D::Lowering),
    op("aten.isfinite").traits(T::ELEMENTWISE).sig(UNARY).decomposition(D::Python),
    op("aten._to_copy").traits(T::ELEMENTWISE).sig(COPY).decomposition(D::Lowering),
    op("aten.to").traits(T::ELEMENTWISE),
    op("aten.alias").traits(T::ELEMENTWISE.union(T::VIEW)).sig(COPY).decomposition(D::Lowering),
    op("aten.clone").traits(T::ELEMENTWISE).sig(COPY).decomposition(D::Lowering),
    op("aten.contiguous").traits(T::ELEMENTWISE).sig(COPY),
    op("aten.detach").traits(T::ELEMENTWISE.union(T::VIEW)).decomposition(D::Python),
    op("aten.lift_fresh_copy").traits(T::ELEMENTWISE),
    op("aten.complex").traits(T::ELEMENTWISE).sig(BINARY).decomposition(D::Lowering),
    // reductions
    op("aten.sum").traits(T::REDUCTION).sig(REDUCE).decomposition(D::Python),
    op("aten.mean").traits(T::REDUCTION).sig(REDUCE).decomposition(D::Lowering),
    op("aten.prod").traits(T::REDUCTION).sig(REDUCE).decomposition(D::Lowering),
    op("aten.amax").traits(T::REDUCTION).sig(REDUCE).decomposition(D::Lowering),
    op("aten.amin").traits(T::REDUCTION).sig(REDUCE).decomposition(D::Lowering),
    op("aten.any").traits(T::REDUCTION).sig(REDUCE).decomposition(D::Lowering),
    op("aten.all").traits(T::REDUCTION).decomposition(D::Python),
    op("aten.argmax").traits(T::REDUCTION).sig(REDUCE),
    op("aten.argmin").traits(T::REDUCTION).sig(REDUCE),
    op("aten.max").traits(T::REDUCTION).decomposition(D::Python),
    op("aten.min").traits(T::REDUCTION).decomposition(D::Python),
    op("aten.var").traits(T::REDUCTION).sig(REDUCE).decomposition(D::Python),
    // linear algebra
    op("aten.mm").sig(MM),
    op("aten.bmm").sig(BMM),
    op("aten._int_mm").sig(MM),
    op("aten.addmm").sig(ADDMM).decomposition(D::Lowering),
    op("aten.linalg_solve_triangular"),
    op("aten.triangular_solve"),
    // shapes and data movement
    op("aten.view").traits(T::VIEW).sig(RESHAPE).decomposition(D::Lowering),
    op("aten.reshape").traits(T::VIEW).sig(RESHAPE),
    op("aten._unsafe_view").traits(T::VIEW).sig(RESHAPE).decomposition(D::Python),
    op("aten.squeeze").traits(T::VIEW).sig(VIEWLIKE).decomposition(D::Python),
    op("aten.unsqueeze").traits(T::VIEW).sig(VIEWLIKE).decomposition(D::Lowering),
    op("aten.flatten").traits(T::VIEW),
    op("aten.permute").traits(T::VIEW).sig(PERMUTE).decomposition(D::Lowering),
    op("aten.transpose").traits(T::VIEW).sig(TRANSPOSE).decomposition(D::Python),
    op("aten.t").traits(T::VIEW).sig(VIEWLIKE).decomposition(D::Python),
    op("aten.expand").traits(T::VIEW).sig(VIEWLIKE).decomposition(D::Lowering),
    op("aten.broadcast_to").traits(T::VIEW),
    op("aten.slice").traits(T::VIEW).sig(VIEWLIKE).decomposition(D::Lowering),
    op("aten.select").traits(T::VIEW).sig(VIEWLIKE),
    op("aten.cat").sig(CAT).decomposition(D::Lowering),
    op("aten.stack").sig(CAT).decomposition(D::Python),
    op("aten.split_with_sizes").traits(T::VIEW).decomposition(D::Lowering),
    op("aten.split").traits(T::VIEW).decomposition(D::Python),
    op("aten.chunk").traits(T::VIEW),
    op("aten.unbind").traits(T::VIEW).decomposition(D::Python),
    op("aten.flip").decomposition(D::Lowering),
    op("aten.constant_pad_nd").decomposition(D::Lowering),
    // factories
    op("aten.full").sig(FULL).decomposition(D::Lowering),
    op("aten.full_like"),
    op("aten.new_full").decomposition(D::Python),
    op("aten.zeros").decomposition(D::Python),
    op("aten.zeros_like").decomposition(D::Python),
    op("aten.new_zeros").decomposition(D::Python),
    op("aten.ones").decomposition(D::Python),
    op("aten.ones_like").decomposition(D::Python),
    op("aten.new_ones").decomposition(D::Python),
    op("aten.empty"),
    op("aten.empty_like").decomposition(D::Python),
    op("aten.new_empty").decomposition(D::Python),
    op("aten.empty_permuted"),
    op("aten.empty_strided").decomposition(D::Lowering),
    op("aten.new_empty_strided").decomposition(D::Lowering),
    op("aten.scalar_tensor").sig(SCALAR_TENSOR),
    op("aten.arange").sig(ARANGE).decomposition(D::Python),
    op("tpu.constant").sig(CONSTANT),
    // neural-network ops
    op("aten._softmax").sig(SOFTMAX).decomposition(D::Lowering),
    op("aten._log_softmax").sig(SOFTMAX).decomposition(D::Lowering),
    op("aten.native_layer_norm").sig(LAYER_NORM).decomposition(D::Lowering),
    op("aten._native_batch_norm_legit_no_training").decomposition(D::Lowering),
    op("aten._native_batch_norm_legit_functional").decomposition(D::Lowering),
    op("aten._native_batch_norm_legit").decomposition(D::Lowering),
    op("aten.native_dropout").traits(T::RANDOM).sig(DROPOUT).decomposition(D::Lowering),
    op("aten.convolution"),
    op("aten.max_pool2d_with_indices").decomposition(D::Lowering),
    op("aten.avg_pool2d"),
    op("aten.avg_pool2d_backward"),
    // indexing
    op("aten.embedding").decomposition(D::Lowering),
    op("aten.index_select").decomposition(D::Lowering),
    op("aten.gather"),
    op("aten.scatter"),
    op("aten.scatter_add"),
    op("aten.scatter_reduce"),
    op("aten.index_reduce"),
    op("aten.index_put"),
    op("aten._unsafe_index_put").decomposition(D::Python),
    op("aten.index"),
    op("aten._unsafe_index").decomposition(D::Python),
    op("aten.slice_scatter").decomposition(D::Lowering),
    op("aten.select_scatter").decomposition(D::Python),
    op("aten.cumsum").decomposition(D::Lowering),
    op("aten.cumprod").decomposition(D::Lowering),
    op("aten.as_strided").traits(T::VIEW),
    op("aten.as_strided_scatter").decomposition(D::Lowering),
    op("aten.put"),
    op("aten.masked_scatter"),
    op("aten.nonzero_static"),
    op("aten.logcumsumexp"),
    op("aten.histc"),
    op("prims.as_strided_scatter"),
    // prims left by PyTorch's reference decompositions, special functions
    op("prims.sum").traits(T::REDUCTION),
    op("prims.var").traits(T::REDUCTION),
    op("prims.broadcast_in_dim").traits(T::VIEW),
    op("prims.where").traits(T::ELEMENTWISE),
    op("prims.div").traits(T::ELEMENTWISE),
    op("prims.fma").traits(T::ELEMENTWISE),
    op("prims.convert_element_type").traits(T::ELEMENTWISE).sig(COPY),
    op("prims.view_of_dtype").traits(T::VIEW).sig(VIEW_OF_DTYPE),
    op("prims.abs").traits(T::ELEMENTWISE).sig(UNARY),
    op("prims.neg").traits(T::ELEMENTWISE).sig(UNARY),
    op("prims.erfc").traits(T::ELEMENTWISE).sig(UNARY),
    op("prims.bessel_i1e").traits(T::ELEMENTWISE).sig(UNARY),
    op("prims.signbit").traits(T::ELEMENTWISE).sig(UNARY),
    op("aten.signbit").traits(T::ELEMENTWISE).sig(UNARY).decomposition(D::Lowering),
    op("prims.fmax").traits(T::ELEMENTWISE).sig(BINARY),
    op("aten.fmax").traits(T::ELEMENTWISE).sig(BINARY).decomposition(D::Lowering),
    op("prims.fmin").traits(T::ELEMENTWISE).sig(BINARY),
    op("aten.fmin").traits(T::ELEMENTWISE).sig(BINARY).decomposition(D::Lowering),
    op("prims.shift_left").traits(T::ELEMENTWISE).sig(BINARY),
    op("prims.shift_right_arithmetic").traits(T::ELEMENTWISE).sig(BINARY),
    op("prims.zeta").traits(T::ELEMENTWISE).sig(BINARY),
    op("prims.hypot").traits(T::ELEMENTWISE).sig(BINARY),
    op("aten.hypot").traits(T::ELEMENTWISE).sig(BINARY).decomposition(D::Lowering),
    op("aten.polygamma").traits(T::ELEMENTWISE),
    op("prims.erfcx").traits(T::ELEMENTWISE).sig(UNARY),
    op("aten.special_erfcx").traits(T::ELEMENTWISE).sig(UNARY).decomposition(D::Lowering),
    op("prims.ndtri").traits(T::ELEMENTWISE).sig(UNARY),
    op("aten.special_ndtri").traits(T::ELEMENTWISE).sig(UNARY).decomposition(D::Lowering),
    op("prims.spherical_bessel_j0").traits(T::ELEMENTWISE).sig(UNARY),
    op("aten.special_spherical_bessel_j0").traits(T::ELEMENTWISE).sig(UNARY).decomposition(D::Lowering),
    op("prims.bessel_i1").traits(T::ELEMENTWISE).sig(UNARY),
    op("aten.special_modified_bessel_i1").traits(T::ELEMENTWISE).sig(UNARY),
    op("prims.bessel_i0").traits(T::ELEMENTWISE).sig(UNARY),
    op("prims.bessel_i0e").traits(T::ELEMENTWISE).sig(UNARY),
    op("aten.i0").traits(T::ELEMENTWISE).sig(UNARY).decomposition(D::Lowering),
    op("aten.special_i0e").traits(T::ELEMENTWISE).sig(UNARY).decomposition(D::Lowering),
    op("aten.special_modified_bessel_i0").traits(T::ELEMENTWISE).sig(UNARY),
    op("prims.nextafter").traits(T::ELEMENTWISE).sig(BINARY),
    op("aten.nextafter").traits(T::ELEMENTWISE).sig(BINARY).decomposition(D::Lowering),
    op("prims.gcd").traits(T::ELEMENTWISE).sig(BINARY),
    op("aten.gcd").traits(T::ELEMENTWISE).sig(BINARY).decomposition(D::Lowering),
    op("aten.lcm").traits(T::ELEMENTWISE).sig(BINARY).decomposition(D::Lowering),
    op("aten.angle").traits(T::ELEMENTWISE).sig(UNARY),
    op("aten.copy").traits(T::ELEMENTWISE),
    // Fourier transforms and complex parts
    op("aten._fft_r2c"),
    op("aten._fft_c2r"),
    op("aten._fft_c2c"),
    op("aten._conj").traits(T::ELEMENTWISE.union(T::VIEW)).sig(UNARY),
    op("aten._conj_physical").traits(T::ELEMENTWISE).sig(UNARY),
    op("aten.conj_physical").traits(T::ELEMENTWISE).sig(UNARY).decomposition(D::Lowering),
    op("aten.real").traits(T::ELEMENTWISE.union(T::VIEW)).sig(UNARY),
    op("aten.imag").traits(T::ELEMENTWISE.union(T::VIEW)).sig(UNARY),
    op("aten.view_as_real").traits(T::VIEW),
    op("aten.view_as_complex").traits(T::VIEW),
    // orthogonal polynomials
    op("aten.special_chebyshev_polynomial_t").traits(T::ELEMENTWISE).sig(BINARY),
    op("aten.special_chebyshev_polynomial_u").traits(T::ELEMENTWISE).sig(BINARY),
    op("aten.special_chebyshev_polynomial_v").traits(T::ELEMENTWISE).sig(BINARY),
    op("aten.special_chebyshev_polynomial_w").traits(T::ELEMENTWISE).sig(BINARY),
    op("aten.special_shifted_chebyshev_polynomial_t").traits(T::ELEMENTWISE).sig(BINARY),
    op("aten.special_shifted_chebyshev_polynomial_u").traits(T::ELEMENTWISE).sig(BINARY),
    op("aten.special_shifted_chebyshev_polynomial_v").traits(T::ELEMENTWISE).sig(BINARY),
    op("aten.special_shifted_chebyshev_polynomial_w").traits(T::ELEMENTWISE).sig(BINARY),
    op("aten.special_hermite_polynomial_h").traits(T::ELEMENTWISE).sig(BINARY),
    op("aten.special_hermite_polynomial_he").traits(T::ELEMENTWISE).sig(BINARY),
    op("aten.special_laguerre_polynomial_l").traits(T::ELEMENTWISE).sig(BINARY),
    op("aten.special_legendre_polynomial_p").traits(T::ELEMENTWISE).sig(BINARY),
    // sorting
    op("aten.sort"),
    op("aten.topk"),
    op("aten.kthvalue").traits(T::REDUCTION),
    op("aten.median").traits(T::REDUCTION),
    op("aten.nanmedian").traits(T::REDUCTION),
    op("aten.searchsorted"),
    op("aten.bucketize").decomposition(D::Lowering),
    op("aten.cummax"),
    op("aten.cummin"),
    // layouts of SPMD programs (effects, so that CSE keeps constraints whose layouts differ)
    op("tpu.sharding_constraint").traits(T::SIDE_EFFECTS).sig(COPY),
    op("tpu.reshard").traits(T::SIDE_EFFECTS).sig(COPY),
    // cross-replica collectives of replicated programs (PyTorch's functional collectives)
    op("c10d.all_reduce").sig(COLLECTIVE),
    op("c10d.reduce_scatter").sig(COLLECTIVE),
    op("c10d.all_gather").sig(COLLECTIVE),
    op("c10d.all_to_all").sig(COLLECTIVE),
    op("c10d.broadcast").sig(COLLECTIVE),
    // device random draws with explicit state. Pure, not `random`: every result is a function
    // of the state operand alone (the same state gives the same numbers, the advanced state is
    // result 0), so CSE merging two draws from one state and DCE dropping an unread draw are
    // both correct; the hidden-generator trait would only forbid those.
    op("tpu.quantized_linear").sig(QUANTIZED_LINEAR),
    op("tpu.matmul").sig(MATMUL),
    op("tpu.rng_uniform").sig(RNG_RANGE),
    op("tpu.rng_normal").sig(RNG_NORMAL),
    op("tpu.rng_integers").sig(RNG_RANGE),
    // known, not lowered: random draws and effects (for CSE and DCE)
    op("aten.dropout").traits(T::RANDOM),
    op("aten.bernoulli").traits(T::RANDOM),
    op("aten.rand").traits(T::RANDOM),
    op("aten.randn").traits(T::RANDOM),
    op("aten.rand_like").traits(T::RANDOM),
    op("aten.randn_like").traits(T::RANDOM),
    op("aten.randint").traits(T::RANDOM),
    op("aten.randint_like").traits(T::RANDOM),
    op("aten.randperm").traits(T::RANDOM),
    op("aten.normal").traits(T::RANDOM),
    op("aten.uniform").traits(T::RANDOM),
    op("aten.multinomial").traits(T::RANDOM),
    op("aten.exponential").traits(T::RANDOM),
    op("aten.poisson").traits(T::RANDOM),
    op("aten._assert_async").traits(T::SIDE_EFFECTS),
    op("aten.print").traits(T::SIDE_EFFECTS),
];
