//! The one table of ops. Each line declares an op once: traits, verifier signature, lowering
//! (family rule and its parameter, legality check) and decomposition policy. Adding an op is
//! one line here plus, when no family rule fits, its rule in `lower/ops/`.

use super::{Decomposition as D, OpDef, Signature, Traits as T};
use crate::ir::ops::Arity::{AtLeast, Between, Exactly};
use crate::ir::ops::ShapeRule;
use crate::lower::ops::{
    elementwise, factory, fft, indexing, linalg, nn, polynomial, prims, reduce, shape, sort, RuleFn,
};

/// A rule function and its name, for `OpDef::rule`.
macro_rules! rule {
    ($module:ident :: $f:ident) => {
        ($module::$f as RuleFn, concat!(stringify!($module), "::", stringify!($f)))
    };
}

const fn op(name: &'static str) -> OpDef {
    OpDef::new(name)
}

const fn sig(
    operands: crate::ir::ops::Arity,
    results: usize,
    required_attrs: &'static [&'static str],
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
const REDUCE: Signature = sig(Exactly(1), 1, &[], ShapeRule::Free);
const MM: Signature = sig(Exactly(2), 1, &[], ShapeRule::MatMul);
const BMM: Signature = sig(Exactly(2), 1, &[], ShapeRule::BatchMatMul);
const ADDMM: Signature = sig(Exactly(3), 1, &[], ShapeRule::AddMm);
const RESHAPE: Signature = sig(Exactly(1), 1, &["size"], ShapeRule::Reshape);
const PERMUTE: Signature = sig(Exactly(1), 1, &["dims"], ShapeRule::Permute);
const TRANSPOSE: Signature = sig(Exactly(1), 1, &["dim0", "dim1"], ShapeRule::Free);
const VIEWLIKE: Signature = sig(Exactly(1), 1, &[], ShapeRule::Free);
const LAYER_NORM: Signature = sig(Between(1, 3), 3, &["normalized_shape", "eps"], ShapeRule::Free);
const DROPOUT: Signature = sig(Exactly(1), 2, &["p"], ShapeRule::SameShape);
const SOFTMAX: Signature = sig(Exactly(1), 1, &["dim"], ShapeRule::SameShape);
const FULL: Signature = sig(Exactly(0), 1, &["size", "fill_value"], ShapeRule::Free);
const SCALAR_TENSOR: Signature = sig(Exactly(0), 1, &["s"], ShapeRule::Free);
const ARANGE: Signature = sig(Exactly(0), 1, &["end"], ShapeRule::Free);
const CAT: Signature = sig(AtLeast(1), 1, &["dim"], ShapeRule::Free);
const CONSTANT: Signature = sig(Exactly(0), 1, &["value"], ShapeRule::Constant);

// One line per op: the table reads as a table.
#[rustfmt::skip]
pub(super) static OPS: &[OpDef] = &[
    // elementwise unary
    op("aten.abs").traits(T::ELEMENTWISE).sig(UNARY).rule_with(rule!(elementwise::unary), "stablehlo.abs").legal(elementwise::not_of_bool).decomposition(D::Lowering),
    op("aten.neg").traits(T::ELEMENTWISE).sig(UNARY).rule_with(rule!(elementwise::unary), "stablehlo.negate").legal(elementwise::not_of_bool).decomposition(D::Lowering),
    op("aten.ceil").traits(T::ELEMENTWISE).sig(UNARY).rule_with(rule!(elementwise::unary), "stablehlo.ceil").decomposition(D::Lowering),
    op("aten.floor").traits(T::ELEMENTWISE).sig(UNARY).rule_with(rule!(elementwise::unary), "stablehlo.floor").decomposition(D::Lowering),
    op("aten.round").traits(T::ELEMENTWISE).sig(UNARY).rule_with(rule!(elementwise::unary), "stablehlo.round_nearest_even").legal(elementwise::round_legal).decomposition(D::Lowering),
    op("aten.trunc").traits(T::ELEMENTWISE).sig(UNARY).rule(rule!(elementwise::trunc)).decomposition(D::Lowering),
    op("aten.sign").traits(T::ELEMENTWISE).sig(UNARY).rule(rule!(elementwise::sign)).legal(elementwise::sign_legal).decomposition(D::Lowering),
    op("aten.sqrt").traits(T::ELEMENTWISE).sig(UNARY).rule_with(rule!(elementwise::unary), "stablehlo.sqrt").decomposition(D::Lowering),
    op("aten.rsqrt").traits(T::ELEMENTWISE).sig(UNARY).rule_with(rule!(elementwise::unary), "stablehlo.rsqrt").decomposition(D::Lowering),
    op("aten.exp").traits(T::ELEMENTWISE).sig(UNARY).rule_with(rule!(elementwise::unary), "stablehlo.exponential").decomposition(D::Lowering),
    op("aten.exp2").traits(T::ELEMENTWISE).sig(UNARY).rule(rule!(elementwise::exp2)).decomposition(D::Lowering),
    op("aten.expm1").traits(T::ELEMENTWISE).sig(UNARY).rule_with(rule!(elementwise::unary), "stablehlo.exponential_minus_one").decomposition(D::Lowering),
    op("aten.log").traits(T::ELEMENTWISE).sig(UNARY).rule_with(rule!(elementwise::unary), "stablehlo.log").decomposition(D::Lowering),
    op("aten.log2").traits(T::ELEMENTWISE).sig(UNARY).rule_with(rule!(elementwise::log_base), "2").decomposition(D::Lowering),
    op("aten.log10").traits(T::ELEMENTWISE).sig(UNARY).rule_with(rule!(elementwise::log_base), "10").decomposition(D::Lowering),
    op("aten.log1p").traits(T::ELEMENTWISE).sig(UNARY).rule_with(rule!(elementwise::unary), "stablehlo.log_plus_one").decomposition(D::Lowering),
    op("aten.sin").traits(T::ELEMENTWISE).sig(UNARY).rule_with(rule!(elementwise::unary), "stablehlo.sine").decomposition(D::Lowering),
    op("aten.cos").traits(T::ELEMENTWISE).sig(UNARY).rule_with(rule!(elementwise::unary), "stablehlo.cosine").decomposition(D::Lowering),
    op("aten.tan").traits(T::ELEMENTWISE).sig(UNARY).rule_with(rule!(elementwise::unary), "stablehlo.tan").decomposition(D::Lowering),
    op("aten.asin").traits(T::ELEMENTWISE).sig(UNARY).rule_with(rule!(elementwise::unary), "chlo.asin").decomposition(D::Lowering),
    op("aten.acos").traits(T::ELEMENTWISE).sig(UNARY).rule_with(rule!(elementwise::unary), "chlo.acos").decomposition(D::Lowering),
    op("aten.atan").traits(T::ELEMENTWISE).sig(UNARY).rule(rule!(elementwise::atan)).decomposition(D::Lowering),
    op("aten.sinh").traits(T::ELEMENTWISE).sig(UNARY).rule_with(rule!(elementwise::unary), "chlo.sinh").decomposition(D::Lowering),
    op("aten.cosh").traits(T::ELEMENTWISE).sig(UNARY).rule_with(rule!(elementwise::unary), "chlo.cosh").decomposition(D::Lowering),
    op("aten.tanh").traits(T::ELEMENTWISE).sig(UNARY).rule_with(rule!(elementwise::unary), "stablehlo.tanh").decomposition(D::Lowering),
    op("aten.asinh").traits(T::ELEMENTWISE).sig(UNARY).rule_with(rule!(elementwise::unary), "chlo.asinh").decomposition(D::Lowering),
    op("aten.acosh").traits(T::ELEMENTWISE).sig(UNARY).rule_with(rule!(elementwise::unary), "chlo.acosh").decomposition(D::Lowering),
    op("aten.atanh").traits(T::ELEMENTWISE).sig(UNARY).rule_with(rule!(elementwise::unary), "chlo.atanh").decomposition(D::Lowering),
    op("aten.sigmoid").traits(T::ELEMENTWISE).sig(UNARY).rule_with(rule!(elementwise::unary), "stablehlo.logistic").decomposition(D::Lowering),
    op("aten.erf").traits(T::ELEMENTWISE).sig(UNARY).rule_with(rule!(elementwise::unary), "chlo.erf").decomposition(D::Lowering),
    op("aten.erfc").traits(T::ELEMENTWISE).sig(UNARY).rule_with(rule!(elementwise::unary), "chlo.erfc").decomposition(D::Lowering),
    op("aten.erfinv").traits(T::ELEMENTWISE).sig(UNARY).rule_with(rule!(elementwise::unary), "chlo.erf_inv").decomposition(D::Lowering),
    op("aten.lgamma").traits(T::ELEMENTWISE).sig(UNARY).rule_with(rule!(elementwise::unary), "chlo.lgamma").decomposition(D::Lowering),
    op("aten.digamma").traits(T::ELEMENTWISE).sig(UNARY).rule_with(rule!(elementwise::unary), "chlo.digamma").decomposition(D::Lowering),
    op("aten.reciprocal").traits(T::ELEMENTWISE).sig(UNARY).rule(rule!(elementwise::reciprocal)).decomposition(D::Lowering),
    op("aten.relu").traits(T::ELEMENTWISE).sig(UNARY).rule(rule!(elementwise::relu)).decomposition(D::Lowering),
    op("aten.gelu").traits(T::ELEMENTWISE).sig(UNARY).rule(rule!(elementwise::gelu_rule)).decomposition(D::Lowering),
    op("aten.silu").traits(T::ELEMENTWISE).sig(UNARY).rule(rule!(elementwise::silu)).decomposition(D::Python),
    op("aten.logical_not").traits(T::ELEMENTWISE).sig(UNARY).rule(rule!(elementwise::logical_not)).decomposition(D::Lowering),
    op("aten.bitwise_not").traits(T::ELEMENTWISE).sig(UNARY).rule_with(rule!(elementwise::unary), "stablehlo.not").decomposition(D::Lowering),
    // elementwise binary
    op("aten.add").traits(T::ELEMENTWISE).sig(BINARY).rule_with(rule!(elementwise::binary), "stablehlo.add").decomposition(D::Lowering),
    op("aten.sub").traits(T::ELEMENTWISE).sig(BINARY).rule_with(rule!(elementwise::binary), "stablehlo.subtract").legal(elementwise::subtract_legal).decomposition(D::Lowering),
    op("aten.rsub").traits(T::ELEMENTWISE).sig(BINARY).rule(rule!(elementwise::rsub)).legal(elementwise::subtract_legal).decomposition(D::Python),
    op("aten.mul").traits(T::ELEMENTWISE).sig(BINARY).rule_with(rule!(elementwise::binary), "stablehlo.multiply").decomposition(D::Lowering),
    op("aten.div").traits(T::ELEMENTWISE).sig(BINARY).rule_with(rule!(elementwise::binary), "stablehlo.divide").decomposition(D::Lowering),
    op("aten.floor_divide").traits(T::ELEMENTWISE).sig(BINARY).rule(rule!(elementwise::floor_divide)).decomposition(D::Python),
    op("aten.pow").traits(T::ELEMENTWISE).sig(BINARY).rule_with(rule!(elementwise::binary), "stablehlo.power").decomposition(D::Lowering),
    op("aten.maximum").traits(T::ELEMENTWISE).sig(BINARY).rule_with(rule!(elementwise::extremum), "max").decomposition(D::Lowering),
    op("aten.minimum").traits(T::ELEMENTWISE).sig(BINARY).rule_with(rule!(elementwise::extremum), "min").decomposition(D::Lowering),
    op("aten.atan2").traits(T::ELEMENTWISE).sig(BINARY).rule_with(rule!(elementwise::binary), "stablehlo.atan2").decomposition(D::Lowering),
    op("aten.fmod").traits(T::ELEMENTWISE).sig(BINARY).rule_with(rule!(elementwise::binary), "stablehlo.remainder").decomposition(D::Lowering),
    op("aten.remainder").traits(T::ELEMENTWISE).sig(BINARY).rule(rule!(elementwise::remainder)).decomposition(D::Lowering),
    op("aten.bitwise_and").traits(T::ELEMENTWISE).sig(BINARY).rule_with(rule!(elementwise::binary), "stablehlo.and").decomposition(D::Lowering),
    op("aten.bitwise_or").traits(T::ELEMENTWISE).sig(BINARY).rule_with(rule!(elementwise::binary), "stablehlo.or").decomposition(D::Lowering),
    op("aten.bitwise_xor").traits(T::ELEMENTWISE).sig(BINARY).rule_with(rule!(elementwise::binary), "stablehlo.xor").decomposition(D::Lowering),
    op("aten.eq").traits(T::ELEMENTWISE).sig(COMPARE).rule_with(rule!(elementwise::compare), "EQ").decomposition(D::Lowering),
    op("aten.ne").traits(T::ELEMENTWISE).sig(COMPARE).rule_with(rule!(elementwise::compare), "NE").decomposition(D::Lowering),
    op("aten.lt").traits(T::ELEMENTWISE).sig(COMPARE).rule_with(rule!(elementwise::compare), "LT").legal(elementwise::ordered_legal).decomposition(D::Lowering),
    op("aten.le").traits(T::ELEMENTWISE).sig(COMPARE).rule_with(rule!(elementwise::compare), "LE").legal(elementwise::ordered_legal).decomposition(D::Lowering),
    op("aten.gt").traits(T::ELEMENTWISE).sig(COMPARE).rule_with(rule!(elementwise::compare), "GT").legal(elementwise::ordered_legal).decomposition(D::Lowering),
    op("aten.ge").traits(T::ELEMENTWISE).sig(COMPARE).rule_with(rule!(elementwise::compare), "GE").legal(elementwise::ordered_legal).decomposition(D::Lowering),
    op("aten.logical_and").traits(T::ELEMENTWISE).sig(BINARY).rule_with(rule!(elementwise::logical), "stablehlo.and").decomposition(D::Lowering),
    op("aten.logical_or").traits(T::ELEMENTWISE).sig(BINARY).rule_with(rule!(elementwise::logical), "stablehlo.or").decomposition(D::Lowering),
    op("aten.logical_xor").traits(T::ELEMENTWISE).sig(BINARY).rule_with(rule!(elementwise::logical), "stablehlo.xor").decomposition(D::Lowering),
    op("aten.where").traits(T::ELEMENTWISE).sig(WHERE).rule(rule!(elementwise::where_)).decomposition(D::Python),
    op("aten.clamp").traits(T::ELEMENTWISE).sig(CLAMP).rule_with(rule!(elementwise::clamp), "min_max").decomposition(D::Lowering),
    op("aten.clamp_min").traits(T::ELEMENTWISE).sig(BINARY).rule_with(rule!(elementwise::clamp), "min").decomposition(D::Python),
    op("aten.clamp_max").traits(T::ELEMENTWISE).sig(BINARY).rule_with(rule!(elementwise::clamp), "max").decomposition(D::Python),
    op("aten.hardtanh").traits(T::ELEMENTWISE).sig(UNARY).rule(rule!(elementwise::hardtanh)).decomposition(D::Lowering),
    op("aten.isnan").traits(T::ELEMENTWISE).sig(UNARY).rule_with(rule!(elementwise::classify), "isnan").decomposition(D::Lowering),
    op("aten.isinf").traits(T::ELEMENTWISE).sig(UNARY).rule_with(rule!(elementwise::classify), "isinf").decomposition(D::Lowering),
    op("aten.isfinite").traits(T::ELEMENTWISE).sig(UNARY).rule_with(rule!(elementwise::classify), "isfinite").decomposition(D::Python),
    op("aten._to_copy").traits(T::ELEMENTWISE).sig(COPY).rule(rule!(elementwise::convert)).decomposition(D::Lowering),
    op("aten.to").traits(T::ELEMENTWISE).rule(rule!(elementwise::convert)),
    op("aten.alias").traits(T::ELEMENTWISE.union(T::VIEW)).sig(COPY).rule(rule!(elementwise::identity)).decomposition(D::Lowering),
    op("aten.clone").traits(T::ELEMENTWISE).sig(COPY).rule(rule!(elementwise::identity)).decomposition(D::Lowering),
    op("aten.contiguous").traits(T::ELEMENTWISE).sig(COPY).rule(rule!(elementwise::identity)),
    op("aten.detach").traits(T::ELEMENTWISE.union(T::VIEW)).rule(rule!(elementwise::identity)).decomposition(D::Python),
    op("aten.lift_fresh_copy").traits(T::ELEMENTWISE).rule(rule!(elementwise::identity)),
    op("aten.complex").traits(T::ELEMENTWISE).sig(BINARY).rule(rule!(elementwise::complex)).decomposition(D::Lowering),
    // reductions
    op("aten.sum").traits(T::REDUCTION).sig(REDUCE).rule_with(rule!(reduce::simple), "sum").decomposition(D::Python),
    op("aten.mean").traits(T::REDUCTION).sig(REDUCE).rule_with(rule!(reduce::simple), "mean").legal(reduce::mean_legal).decomposition(D::Lowering),
    op("aten.prod").traits(T::REDUCTION).sig(REDUCE).rule_with(rule!(reduce::simple), "prod").decomposition(D::Lowering),
    op("aten.amax").traits(T::REDUCTION).sig(REDUCE).rule_with(rule!(reduce::simple), "max").decomposition(D::Lowering),
    op("aten.amin").traits(T::REDUCTION).sig(REDUCE).rule_with(rule!(reduce::simple), "min").decomposition(D::Lowering),
    op("aten.any").traits(T::REDUCTION).sig(REDUCE).rule_with(rule!(reduce::simple), "or").decomposition(D::Lowering),
    op("aten.all").traits(T::REDUCTION).rule_with(rule!(reduce::simple), "and").decomposition(D::Python),
    op("aten.argmax").traits(T::REDUCTION).sig(REDUCE).rule_with(rule!(reduce::arg), "argmax"),
    op("aten.argmin").traits(T::REDUCTION).sig(REDUCE).rule_with(rule!(reduce::arg), "argmin"),
    op("aten.max").traits(T::REDUCTION).rule_with(rule!(reduce::arg), "max").decomposition(D::Python),
    op("aten.min").traits(T::REDUCTION).rule_with(rule!(reduce::arg), "min").decomposition(D::Python),
    op("aten.var").traits(T::REDUCTION).sig(REDUCE).rule(rule!(reduce::var)).legal(reduce::float_result).decomposition(D::Python),
    // linear algebra
    op("aten.mm").sig(MM).rule(rule!(linalg::mm)),
    op("aten.bmm").sig(BMM).rule(rule!(linalg::mm)),
    op("aten.addmm").sig(ADDMM).rule(rule!(linalg::addmm)).decomposition(D::Lowering),
    // shapes and data movement
    op("aten.view").traits(T::VIEW).sig(RESHAPE).rule(rule!(shape::reshape)).decomposition(D::Lowering),
    op("aten.reshape").traits(T::VIEW).sig(RESHAPE).rule(rule!(shape::reshape)),
    op("aten._unsafe_view").traits(T::VIEW).sig(RESHAPE).rule(rule!(shape::reshape)).decomposition(D::Python),
    op("aten.squeeze").traits(T::VIEW).sig(VIEWLIKE).rule(rule!(shape::reshape)).decomposition(D::Python),
    op("aten.unsqueeze").traits(T::VIEW).sig(VIEWLIKE).rule(rule!(shape::reshape)).decomposition(D::Lowering),
    op("aten.flatten").traits(T::VIEW).rule(rule!(shape::reshape)),
    op("aten.permute").traits(T::VIEW).sig(PERMUTE).rule(rule!(shape::permute)).decomposition(D::Lowering),
    op("aten.transpose").traits(T::VIEW).sig(TRANSPOSE).rule(rule!(shape::transpose)).decomposition(D::Python),
    op("aten.t").traits(T::VIEW).sig(VIEWLIKE).rule(rule!(shape::transpose)).decomposition(D::Python),
    op("aten.expand").traits(T::VIEW).sig(VIEWLIKE).rule(rule!(shape::expand)).decomposition(D::Lowering),
    op("aten.broadcast_to").traits(T::VIEW).rule(rule!(shape::expand)),
    op("aten.slice").traits(T::VIEW).sig(VIEWLIKE).rule(rule!(shape::slice)).decomposition(D::Lowering),
    op("aten.select").traits(T::VIEW).sig(VIEWLIKE).rule(rule!(shape::select)),
    op("aten.cat").sig(CAT).rule(rule!(shape::cat)).decomposition(D::Lowering),
    op("aten.stack").sig(CAT).rule(rule!(shape::stack)).decomposition(D::Python),
    op("aten.split_with_sizes").traits(T::VIEW).rule_with(rule!(shape::split), "split").decomposition(D::Lowering),
    op("aten.split").traits(T::VIEW).rule_with(rule!(shape::split), "split").decomposition(D::Python),
    op("aten.chunk").traits(T::VIEW).rule_with(rule!(shape::split), "split"),
    op("aten.unbind").traits(T::VIEW).rule_with(rule!(shape::split), "unbind").decomposition(D::Python),
    op("aten.flip").rule(rule!(shape::flip)).decomposition(D::Lowering),
    op("aten.constant_pad_nd").rule(rule!(shape::constant_pad)).decomposition(D::Lowering),
    // factories
    op("aten.full").sig(FULL).rule_with(rule!(factory::fill), "fill_value").decomposition(D::Lowering),
    op("aten.full_like").rule_with(rule!(factory::fill), "fill_value"),
    op("aten.new_full").rule_with(rule!(factory::fill), "fill_value").decomposition(D::Python),
    op("aten.zeros").rule_with(rule!(factory::fill), "0").decomposition(D::Python),
    op("aten.zeros_like").rule_with(rule!(factory::fill), "0").decomposition(D::Python),
    op("aten.new_zeros").rule_with(rule!(factory::fill), "0").decomposition(D::Python),
    op("aten.ones").rule_with(rule!(factory::fill), "1").decomposition(D::Python),
    op("aten.ones_like").rule_with(rule!(factory::fill), "1").decomposition(D::Python),
    op("aten.new_ones").rule_with(rule!(factory::fill), "1").decomposition(D::Python),
    op("aten.empty").rule_with(rule!(factory::fill), "0"),
    op("aten.empty_like").rule_with(rule!(factory::fill), "0").decomposition(D::Python),
    op("aten.new_empty").rule_with(rule!(factory::fill), "0").decomposition(D::Python),
    op("aten.empty_permuted").rule_with(rule!(factory::fill), "0"),
    op("aten.empty_strided").rule_with(rule!(factory::fill), "0").decomposition(D::Lowering),
    op("aten.new_empty_strided").rule_with(rule!(factory::fill), "0").decomposition(D::Lowering),
    op("aten.scalar_tensor").sig(SCALAR_TENSOR).rule_with(rule!(factory::fill), "s"),
    op("aten.arange").sig(ARANGE).rule(rule!(factory::arange)).decomposition(D::Python),
    op("tpu.constant").sig(CONSTANT).rule(rule!(factory::constant)).legal(factory::literal_legal),
    // neural-network ops
    op("aten._softmax").sig(SOFTMAX).rule_with(rule!(nn::softmax), "softmax").decomposition(D::Lowering),
    op("aten._log_softmax").sig(SOFTMAX).rule_with(rule!(nn::softmax), "log").decomposition(D::Lowering),
    op("aten.native_layer_norm").sig(LAYER_NORM).rule(rule!(nn::layer_norm)).decomposition(D::Lowering),
    op("aten._native_batch_norm_legit_no_training").rule_with(rule!(nn::batch_norm), "no_training").decomposition(D::Lowering),
    op("aten._native_batch_norm_legit_functional").rule_with(rule!(nn::batch_norm), "functional").decomposition(D::Lowering),
    op("aten._native_batch_norm_legit").rule_with(rule!(nn::batch_norm), "legit").decomposition(D::Lowering),
    op("aten.native_dropout").traits(T::RANDOM).sig(DROPOUT).rule(rule!(nn::dropout)).decomposition(D::Lowering),
    op("aten.convolution").rule(rule!(nn::convolution)).legal(nn::convolution_legal),
    op("aten.max_pool2d_with_indices").rule(rule!(nn::max_pool2d)).decomposition(D::Lowering),
    op("aten.avg_pool2d").rule(rule!(nn::avg_pool2d)),
    op("aten.avg_pool2d_backward").rule(rule!(nn::avg_pool2d_backward)),
    // indexing
    op("aten.embedding").rule(rule!(indexing::embedding)).decomposition(D::Lowering),
    op("aten.index_select").rule(rule!(indexing::index_select)).decomposition(D::Lowering),
    op("aten.gather").rule(rule!(indexing::gather)),
    op("aten.scatter").rule_with(rule!(indexing::scatter), "replace").legal(indexing::scatter_legal),
    op("aten.scatter_add").rule_with(rule!(indexing::scatter), "add"),
    op("aten.scatter_reduce").rule(rule!(indexing::scatter_reduce)).legal(indexing::scatter_reduce_legal),
    op("aten.index_reduce").rule(rule!(indexing::index_reduce)).legal(indexing::index_reduce_legal),
    op("aten.index_put").rule(rule!(indexing::index_put)).legal(indexing::index_put_legal),
    op("aten._unsafe_index_put").rule(rule!(indexing::index_put)).legal(indexing::index_put_legal).decomposition(D::Python),
    op("aten.index").rule(rule!(indexing::index)).legal(indexing::index_legal),
    op("aten._unsafe_index").rule(rule!(indexing::index)).legal(indexing::index_legal).decomposition(D::Python),
    op("aten.slice_scatter").rule_with(rule!(indexing::slice_scatter), "slice").decomposition(D::Lowering),
    op("aten.select_scatter").rule_with(rule!(indexing::slice_scatter), "select").decomposition(D::Python),
    op("aten.cumsum").rule_with(rule!(indexing::cumsum), "sum").decomposition(D::Lowering),
    op("aten.cumprod").rule_with(rule!(indexing::cumsum), "prod").decomposition(D::Lowering),
    op("aten.as_strided").traits(T::VIEW).rule(rule!(indexing::as_strided)),
    op("aten.as_strided_scatter").rule(rule!(indexing::as_strided_scatter)).decomposition(D::Lowering),
    op("aten.put").rule(rule!(indexing::put)),
    op("aten.masked_scatter").rule(rule!(indexing::masked_scatter)),
    op("aten.nonzero_static").rule(rule!(indexing::nonzero_static)),
    op("aten.logcumsumexp").rule(rule!(indexing::logcumsumexp)).legal(reduce::float_result),
    op("aten.histc").rule(rule!(indexing::histc)).legal(reduce::float_result),
    op("prims.as_strided_scatter").rule(rule!(indexing::as_strided_scatter)),
    // prims left by PyTorch's reference decompositions, special functions
    op("prims.sum").traits(T::REDUCTION).rule_with(rule!(prims::reduction), "sum"),
    op("prims.var").traits(T::REDUCTION).rule_with(rule!(prims::reduction), "var").legal(reduce::float_result),
    op("prims.broadcast_in_dim").traits(T::VIEW).rule(rule!(prims::broadcast_in_dim)),
    op("prims.where").traits(T::ELEMENTWISE).rule(rule!(prims::where_)),
    op("prims.div").traits(T::ELEMENTWISE).rule(rule!(prims::div)).legal(prims::not_bool_legal),
    op("prims.fma").traits(T::ELEMENTWISE).rule(rule!(prims::fma)).legal(prims::not_bool_legal),
    op("prims.convert_element_type").traits(T::ELEMENTWISE).sig(COPY).rule(rule!(elementwise::convert)),
    op("prims.abs").traits(T::ELEMENTWISE).sig(UNARY).rule_with(rule!(elementwise::unary), "stablehlo.abs").legal(elementwise::not_of_bool),
    op("prims.neg").traits(T::ELEMENTWISE).sig(UNARY).rule_with(rule!(elementwise::unary), "stablehlo.negate").legal(elementwise::not_of_bool),
    op("prims.erfc").traits(T::ELEMENTWISE).sig(UNARY).rule_with(rule!(elementwise::unary), "chlo.erfc"),
    op("prims.bessel_i1e").traits(T::ELEMENTWISE).sig(UNARY).rule_with(rule!(elementwise::unary), "chlo.bessel_i1e"),
    op("prims.signbit").traits(T::ELEMENTWISE).sig(UNARY).rule(rule!(prims::signbit)),
    op("aten.signbit").traits(T::ELEMENTWISE).sig(UNARY).rule(rule!(prims::signbit)).decomposition(D::Lowering),
    op("prims.fmax").traits(T::ELEMENTWISE).sig(BINARY).rule_with(rule!(prims::fminmax), "max"),
    op("aten.fmax").traits(T::ELEMENTWISE).sig(BINARY).rule_with(rule!(prims::fminmax), "max").decomposition(D::Lowering),
    op("prims.fmin").traits(T::ELEMENTWISE).sig(BINARY).rule_with(rule!(prims::fminmax), "min"),
    op("aten.fmin").traits(T::ELEMENTWISE).sig(BINARY).rule_with(rule!(prims::fminmax), "min").decomposition(D::Lowering),
    op("prims.shift_left").traits(T::ELEMENTWISE).sig(BINARY).rule_with(rule!(prims::binary), "stablehlo.shift_left"),
    op("prims.shift_right_arithmetic").traits(T::ELEMENTWISE).sig(BINARY).rule_with(rule!(prims::binary), "stablehlo.shift_right_arithmetic"),
    op("prims.zeta").traits(T::ELEMENTWISE).sig(BINARY).rule_with(rule!(prims::binary), "chlo.zeta"),
    op("prims.hypot").traits(T::ELEMENTWISE).sig(BINARY).rule(rule!(prims::hypot)),
    op("aten.hypot").traits(T::ELEMENTWISE).sig(BINARY).rule(rule!(prims::hypot)).decomposition(D::Lowering),
    op("aten.polygamma").traits(T::ELEMENTWISE).rule(rule!(prims::polygamma)),
    op("prims.erfcx").traits(T::ELEMENTWISE).sig(UNARY).rule_with(rule!(prims::special_unary), "erfcx"),
    op("aten.special_erfcx").traits(T::ELEMENTWISE).sig(UNARY).rule_with(rule!(prims::special_unary), "erfcx").decomposition(D::Lowering),
    op("prims.ndtri").traits(T::ELEMENTWISE).sig(UNARY).rule_with(rule!(prims::special_unary), "ndtri"),
    op("aten.special_ndtri").traits(T::ELEMENTWISE).sig(UNARY).rule_with(rule!(prims::special_unary), "ndtri").decomposition(D::Lowering),
    op("prims.spherical_bessel_j0").traits(T::ELEMENTWISE).sig(UNARY).rule_with(rule!(prims::special_unary), "spherical_bessel_j0"),
    op("aten.special_spherical_bessel_j0").traits(T::ELEMENTWISE).sig(UNARY).rule_with(rule!(prims::special_unary), "spherical_bessel_j0").decomposition(D::Lowering),
    op("prims.bessel_i1").traits(T::ELEMENTWISE).sig(UNARY).rule_with(rule!(prims::special_unary), "bessel_i1"),
    op("aten.special_modified_bessel_i1").traits(T::ELEMENTWISE).sig(UNARY).rule_with(rule!(prims::special_unary), "bessel_i1"),
    op("prims.bessel_i0").traits(T::ELEMENTWISE).sig(UNARY).rule_with(rule!(prims::special_unary), "bessel_i0"),
    op("prims.bessel_i0e").traits(T::ELEMENTWISE).sig(UNARY).rule_with(rule!(prims::special_unary), "bessel_i0e"),
    op("aten.i0").traits(T::ELEMENTWISE).sig(UNARY).rule_with(rule!(prims::special_unary), "bessel_i0").decomposition(D::Lowering),
    op("aten.special_i0e").traits(T::ELEMENTWISE).sig(UNARY).rule_with(rule!(prims::special_unary), "bessel_i0e").decomposition(D::Lowering),
    op("aten.special_modified_bessel_i0").traits(T::ELEMENTWISE).sig(UNARY).rule_with(rule!(prims::special_unary), "bessel_i0"),
    op("prims.nextafter").traits(T::ELEMENTWISE).sig(BINARY).rule(rule!(prims::nextafter)),
    op("aten.nextafter").traits(T::ELEMENTWISE).sig(BINARY).rule(rule!(prims::nextafter)).decomposition(D::Lowering),
    op("prims.gcd").traits(T::ELEMENTWISE).sig(BINARY).rule_with(rule!(prims::gcd), "gcd").legal(prims::integer_legal),
    op("aten.gcd").traits(T::ELEMENTWISE).sig(BINARY).rule_with(rule!(prims::gcd), "gcd").legal(prims::integer_legal).decomposition(D::Lowering),
    op("aten.lcm").traits(T::ELEMENTWISE).sig(BINARY).rule_with(rule!(prims::gcd), "lcm").legal(prims::integer_legal).decomposition(D::Lowering),
    op("aten.angle").traits(T::ELEMENTWISE).sig(UNARY).rule(rule!(prims::angle)),
    op("aten.copy").traits(T::ELEMENTWISE).rule(rule!(prims::copy)),
    // Fourier transforms and complex parts
    op("aten._fft_r2c").rule(rule!(fft::r2c)),
    op("aten._fft_c2r").rule(rule!(fft::c2r)),
    op("aten._fft_c2c").rule(rule!(fft::c2c)),
    op("aten._conj").traits(T::ELEMENTWISE.union(T::VIEW)).sig(UNARY).rule(rule!(fft::conj)),
    op("aten._conj_physical").traits(T::ELEMENTWISE).sig(UNARY).rule(rule!(fft::conj)),
    op("aten.conj_physical").traits(T::ELEMENTWISE).sig(UNARY).rule(rule!(fft::conj)).decomposition(D::Lowering),
    op("aten.real").traits(T::ELEMENTWISE.union(T::VIEW)).sig(UNARY).rule_with(rule!(fft::part), "real"),
    op("aten.imag").traits(T::ELEMENTWISE.union(T::VIEW)).sig(UNARY).rule_with(rule!(fft::part), "imag"),
    op("aten.view_as_real").traits(T::VIEW).rule(rule!(fft::view_as_real)),
    op("aten.view_as_complex").traits(T::VIEW).rule(rule!(fft::view_as_complex)),
    // orthogonal polynomials
    op("aten.special_chebyshev_polynomial_t").traits(T::ELEMENTWISE).sig(BINARY).rule_with(rule!(polynomial::polynomial), "chebyshev_polynomial_t"),
    op("aten.special_chebyshev_polynomial_u").traits(T::ELEMENTWISE).sig(BINARY).rule_with(rule!(polynomial::polynomial), "chebyshev_polynomial_u"),
    op("aten.special_chebyshev_polynomial_v").traits(T::ELEMENTWISE).sig(BINARY).rule_with(rule!(polynomial::polynomial), "chebyshev_polynomial_v"),
    op("aten.special_chebyshev_polynomial_w").traits(T::ELEMENTWISE).sig(BINARY).rule_with(rule!(polynomial::polynomial), "chebyshev_polynomial_w"),
    op("aten.special_shifted_chebyshev_polynomial_t").traits(T::ELEMENTWISE).sig(BINARY).rule_with(rule!(polynomial::polynomial), "shifted_chebyshev_polynomial_t"),
    op("aten.special_shifted_chebyshev_polynomial_u").traits(T::ELEMENTWISE).sig(BINARY).rule_with(rule!(polynomial::polynomial), "shifted_chebyshev_polynomial_u"),
    op("aten.special_shifted_chebyshev_polynomial_v").traits(T::ELEMENTWISE).sig(BINARY).rule_with(rule!(polynomial::polynomial), "shifted_chebyshev_polynomial_v"),
    op("aten.special_shifted_chebyshev_polynomial_w").traits(T::ELEMENTWISE).sig(BINARY).rule_with(rule!(polynomial::polynomial), "shifted_chebyshev_polynomial_w"),
    op("aten.special_hermite_polynomial_h").traits(T::ELEMENTWISE).sig(BINARY).rule_with(rule!(polynomial::polynomial), "hermite_polynomial_h"),
    op("aten.special_hermite_polynomial_he").traits(T::ELEMENTWISE).sig(BINARY).rule_with(rule!(polynomial::polynomial), "hermite_polynomial_he"),
    op("aten.special_laguerre_polynomial_l").traits(T::ELEMENTWISE).sig(BINARY).rule_with(rule!(polynomial::polynomial), "laguerre_polynomial_l"),
    op("aten.special_legendre_polynomial_p").traits(T::ELEMENTWISE).sig(BINARY).rule_with(rule!(polynomial::polynomial), "legendre_polynomial_p"),
    // sorting
    op("aten.sort").rule(rule!(sort::sort)),
    op("aten.topk").rule(rule!(sort::topk)),
    op("aten.kthvalue").traits(T::REDUCTION).rule(rule!(sort::kthvalue)),
    op("aten.median").traits(T::REDUCTION).rule_with(rule!(sort::median), "median"),
    op("aten.nanmedian").traits(T::REDUCTION).rule_with(rule!(sort::median), "nanmedian"),
    op("aten.searchsorted").rule_with(rule!(sort::searchsorted), "searchsorted").legal(sort::searchsorted_legal),
    op("aten.bucketize").rule_with(rule!(sort::searchsorted), "bucketize").decomposition(D::Lowering),
    op("aten.cummax").rule_with(rule!(sort::cumulative_extreme), "max"),
    op("aten.cummin").rule_with(rule!(sort::cumulative_extreme), "min"),
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
