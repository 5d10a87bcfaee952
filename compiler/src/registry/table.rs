//! The one table of ops. Each line declares an op once: traits, verifier signature, lowering
//! (family rule and its parameter, legality check) and decomposition policy. Adding an op is
//! one line here plus, when no family rule fits, its rule in `lower/ops/`.

use super::{Decomposition as D, LayoutRule as L, OpDef, ShardingRule, Signature, Traits as T};
use crate::ir::ops::Arity::{AtLeast, Between, Exactly};
use crate::ir::ops::ShapeRule;
use crate::lower::ops::{
    collective, elementwise, factory, fft, indexing, layout, linalg, nn, polynomial, prims, random, reduce, shape,
    sort, RuleFn,
};

/// A rule function and its name, for `OpDef::rule`.
macro_rules! rule {
    ($module:ident :: $f:ident) => {
        ($module::$f as RuleFn, concat!(stringify!($module), "::", stringify!($f)))
    };
}

/// The sharding rules by family (`sharding::rules`), named as explain reports them.
#[allow(non_snake_case)]
mod S {
    use super::ShardingRule;
    use crate::sharding::rules;
    pub const ELEMENTWISE: ShardingRule = ShardingRule { rule: rules::elementwise, name: "elementwise" };
    pub const REDUCE: ShardingRule = ShardingRule { rule: rules::reduce, name: "reduce" };
    pub const REDUCE_GATHERED: ShardingRule = ShardingRule { rule: rules::reduce_gathered, name: "reduce-gathered" };
    pub const DOT: ShardingRule = ShardingRule { rule: rules::dot, name: "dot" };
    pub const PERMUTE: ShardingRule = ShardingRule { rule: rules::permute, name: "permute" };
    pub const BROADCAST: ShardingRule = ShardingRule { rule: rules::broadcast, name: "broadcast" };
    pub const RESHAPE: ShardingRule = ShardingRule { rule: rules::reshape, name: "reshape" };
    pub const ALONG_DIM: ShardingRule = ShardingRule { rule: rules::along_dim, name: "along-dim" };
    pub const EMBEDDING: ShardingRule = ShardingRule { rule: rules::embedding, name: "embedding" };
    pub const NORMALIZE: ShardingRule = ShardingRule { rule: rules::normalize, name: "normalize" };
    pub const CONVOLUTION: ShardingRule = ShardingRule { rule: rules::convolution, name: "convolution" };
    pub const INDEX_PUT: ShardingRule = ShardingRule { rule: rules::index_put, name: "index-put" };
    pub const FACTORY: ShardingRule = ShardingRule { rule: rules::factory, name: "factory" };
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
// Collectives of replicated programs (`lower/ops/collective.rs`): the replica groups are required.
const COLLECTIVE: Signature = sig(Exactly(1), 1, &["groups", "group_size"], ShapeRule::Free);
const CONSTANT: Signature = sig(Exactly(0), 1, &["value"], ShapeRule::Constant);
// Device random draws: (state) -> (next state, values); `lower/ops/random.rs` checks the types.
const RNG_RANGE: Signature = sig(Exactly(1), 2, &["low", "high"], ShapeRule::Free);
const RNG_NORMAL: Signature = sig(Exactly(1), 2, &["mean", "std"], ShapeRule::Free);

// One line per op: the table reads as a table.
#[rustfmt::skip]
pub(super) static OPS: &[OpDef] = &[
    // elementwise unary
    op("aten.abs").traits(T::ELEMENTWISE).sig(UNARY).rule_with(rule!(elementwise::unary), "stablehlo.abs").legal(elementwise::not_of_bool).shard(S::ELEMENTWISE).decomposition(D::Lowering),
    op("aten.neg").traits(T::ELEMENTWISE).sig(UNARY).rule_with(rule!(elementwise::unary), "stablehlo.negate").legal(elementwise::not_of_bool).shard(S::ELEMENTWISE).decomposition(D::Lowering),
    op("aten.ceil").traits(T::ELEMENTWISE).sig(UNARY).rule_with(rule!(elementwise::unary), "stablehlo.ceil").shard(S::ELEMENTWISE).decomposition(D::Lowering),
    op("aten.floor").traits(T::ELEMENTWISE).sig(UNARY).rule_with(rule!(elementwise::unary), "stablehlo.floor").shard(S::ELEMENTWISE).decomposition(D::Lowering),
    op("aten.round").traits(T::ELEMENTWISE).sig(UNARY).rule_with(rule!(elementwise::unary), "stablehlo.round_nearest_even").legal(elementwise::round_legal).shard(S::ELEMENTWISE).decomposition(D::Lowering),
    op("aten.trunc").traits(T::ELEMENTWISE).sig(UNARY).rule(rule!(elementwise::trunc)).shard(S::ELEMENTWISE).decomposition(D::Lowering),
    op("aten.sign").traits(T::ELEMENTWISE).sig(UNARY).rule(rule!(elementwise::sign)).legal(elementwise::sign_legal).shard(S::ELEMENTWISE).decomposition(D::Lowering),
    op("aten.sqrt").traits(T::ELEMENTWISE).sig(UNARY).rule_with(rule!(elementwise::unary), "stablehlo.sqrt").shard(S::ELEMENTWISE).decomposition(D::Lowering),
    op("aten.rsqrt").traits(T::ELEMENTWISE).sig(UNARY).rule_with(rule!(elementwise::unary), "stablehlo.rsqrt").shard(S::ELEMENTWISE).decomposition(D::Lowering),
    op("aten.exp").traits(T::ELEMENTWISE).sig(UNARY).rule_with(rule!(elementwise::unary), "stablehlo.exponential").shard(S::ELEMENTWISE).decomposition(D::Lowering),
    op("aten.exp2").traits(T::ELEMENTWISE).sig(UNARY).rule(rule!(elementwise::exp2)).shard(S::ELEMENTWISE).decomposition(D::Lowering),
    op("aten.expm1").traits(T::ELEMENTWISE).sig(UNARY).rule_with(rule!(elementwise::unary), "stablehlo.exponential_minus_one").shard(S::ELEMENTWISE).decomposition(D::Lowering),
    op("aten.log").traits(T::ELEMENTWISE).sig(UNARY).rule_with(rule!(elementwise::unary), "stablehlo.log").shard(S::ELEMENTWISE).decomposition(D::Lowering),
    op("aten.log2").traits(T::ELEMENTWISE).sig(UNARY).rule_with(rule!(elementwise::log_base), "2").shard(S::ELEMENTWISE).decomposition(D::Lowering),
    op("aten.log10").traits(T::ELEMENTWISE).sig(UNARY).rule_with(rule!(elementwise::log_base), "10").shard(S::ELEMENTWISE).decomposition(D::Lowering),
    op("aten.log1p").traits(T::ELEMENTWISE).sig(UNARY).rule_with(rule!(elementwise::unary), "stablehlo.log_plus_one").shard(S::ELEMENTWISE).decomposition(D::Lowering),
    op("aten.sin").traits(T::ELEMENTWISE).sig(UNARY).rule_with(rule!(elementwise::unary), "stablehlo.sine").shard(S::ELEMENTWISE).decomposition(D::Lowering),
    op("aten.cos").traits(T::ELEMENTWISE).sig(UNARY).rule_with(rule!(elementwise::unary), "stablehlo.cosine").shard(S::ELEMENTWISE).decomposition(D::Lowering),
    op("aten.tan").traits(T::ELEMENTWISE).sig(UNARY).rule_with(rule!(elementwise::unary), "stablehlo.tan").shard(S::ELEMENTWISE).decomposition(D::Lowering),
    op("aten.asin").traits(T::ELEMENTWISE).sig(UNARY).rule_with(rule!(elementwise::unary), "chlo.asin").shard(S::ELEMENTWISE).decomposition(D::Lowering),
    op("aten.acos").traits(T::ELEMENTWISE).sig(UNARY).rule_with(rule!(elementwise::unary), "chlo.acos").shard(S::ELEMENTWISE).decomposition(D::Lowering),
    op("aten.atan").traits(T::ELEMENTWISE).sig(UNARY).rule(rule!(elementwise::atan)).shard(S::ELEMENTWISE).decomposition(D::Lowering),
    op("aten.sinh").traits(T::ELEMENTWISE).sig(UNARY).rule_with(rule!(elementwise::unary), "chlo.sinh").shard(S::ELEMENTWISE).decomposition(D::Lowering),
    op("aten.cosh").traits(T::ELEMENTWISE).sig(UNARY).rule_with(rule!(elementwise::unary), "chlo.cosh").shard(S::ELEMENTWISE).decomposition(D::Lowering),
    op("aten.tanh").traits(T::ELEMENTWISE).sig(UNARY).rule_with(rule!(elementwise::unary), "stablehlo.tanh").shard(S::ELEMENTWISE).decomposition(D::Lowering),
    op("aten.asinh").traits(T::ELEMENTWISE).sig(UNARY).rule_with(rule!(elementwise::unary), "chlo.asinh").shard(S::ELEMENTWISE).decomposition(D::Lowering),
    op("aten.acosh").traits(T::ELEMENTWISE).sig(UNARY).rule_with(rule!(elementwise::unary), "chlo.acosh").shard(S::ELEMENTWISE).decomposition(D::Lowering),
    op("aten.atanh").traits(T::ELEMENTWISE).sig(UNARY).rule_with(rule!(elementwise::unary), "chlo.atanh").shard(S::ELEMENTWISE).decomposition(D::Lowering),
    op("aten.sigmoid").traits(T::ELEMENTWISE).sig(UNARY).rule_with(rule!(elementwise::unary), "stablehlo.logistic").shard(S::ELEMENTWISE).decomposition(D::Lowering),
    op("aten.erf").traits(T::ELEMENTWISE).sig(UNARY).rule_with(rule!(elementwise::unary), "chlo.erf").shard(S::ELEMENTWISE).decomposition(D::Lowering),
    op("aten.erfc").traits(T::ELEMENTWISE).sig(UNARY).rule_with(rule!(elementwise::unary), "chlo.erfc").shard(S::ELEMENTWISE).decomposition(D::Lowering),
    op("aten.erfinv").traits(T::ELEMENTWISE).sig(UNARY).rule_with(rule!(elementwise::unary), "chlo.erf_inv").shard(S::ELEMENTWISE).decomposition(D::Lowering),
    op("aten.lgamma").traits(T::ELEMENTWISE).sig(UNARY).rule_with(rule!(elementwise::unary), "chlo.lgamma").shard(S::ELEMENTWISE).decomposition(D::Lowering),
    op("aten.digamma").traits(T::ELEMENTWISE).sig(UNARY).rule_with(rule!(elementwise::unary), "chlo.digamma").shard(S::ELEMENTWISE).decomposition(D::Lowering),
    op("aten.reciprocal").traits(T::ELEMENTWISE).sig(UNARY).rule(rule!(elementwise::reciprocal)).shard(S::ELEMENTWISE).decomposition(D::Lowering),
    op("aten.relu").traits(T::ELEMENTWISE).sig(UNARY).rule(rule!(elementwise::relu)).shard(S::ELEMENTWISE).decomposition(D::Lowering),
    op("aten.gelu").traits(T::ELEMENTWISE).sig(UNARY).rule(rule!(elementwise::gelu_rule)).shard(S::ELEMENTWISE).decomposition(D::Lowering),
    op("aten.silu").traits(T::ELEMENTWISE).sig(UNARY).rule(rule!(elementwise::silu)).shard(S::ELEMENTWISE).decomposition(D::Python),
    op("aten.logical_not").traits(T::ELEMENTWISE).sig(UNARY).rule(rule!(elementwise::logical_not)).shard(S::ELEMENTWISE).decomposition(D::Lowering),
    op("aten.bitwise_not").traits(T::ELEMENTWISE).sig(UNARY).rule_with(rule!(elementwise::unary), "stablehlo.not").shard(S::ELEMENTWISE).decomposition(D::Lowering),
    // elementwise binary
    op("aten.add").traits(T::ELEMENTWISE).sig(BINARY).rule_with(rule!(elementwise::binary), "stablehlo.add").shard(S::ELEMENTWISE).decomposition(D::Lowering),
    op("aten.sub").traits(T::ELEMENTWISE).sig(BINARY).rule_with(rule!(elementwise::binary), "stablehlo.subtract").legal(elementwise::subtract_legal).shard(S::ELEMENTWISE).decomposition(D::Lowering),
    op("aten.rsub").traits(T::ELEMENTWISE).sig(BINARY).rule(rule!(elementwise::rsub)).legal(elementwise::subtract_legal).shard(S::ELEMENTWISE).decomposition(D::Python),
    op("aten.mul").traits(T::ELEMENTWISE).sig(BINARY).rule_with(rule!(elementwise::binary), "stablehlo.multiply").shard(S::ELEMENTWISE).decomposition(D::Lowering),
    op("aten.div").traits(T::ELEMENTWISE).sig(BINARY).rule_with(rule!(elementwise::binary), "stablehlo.divide").shard(S::ELEMENTWISE).decomposition(D::Lowering),
    op("aten.floor_divide").traits(T::ELEMENTWISE).sig(BINARY).rule(rule!(elementwise::floor_divide)).shard(S::ELEMENTWISE).decomposition(D::Python),
    op("aten.pow").traits(T::ELEMENTWISE).sig(BINARY).rule_with(rule!(elementwise::binary), "stablehlo.power").shard(S::ELEMENTWISE).decomposition(D::Lowering),
    op("aten.maximum").traits(T::ELEMENTWISE).sig(BINARY).rule_with(rule!(elementwise::extremum), "max").shard(S::ELEMENTWISE).decomposition(D::Lowering),
    op("aten.minimum").traits(T::ELEMENTWISE).sig(BINARY).rule_with(rule!(elementwise::extremum), "min").shard(S::ELEMENTWISE).decomposition(D::Lowering),
    op("aten.atan2").traits(T::ELEMENTWISE).sig(BINARY).rule_with(rule!(elementwise::binary), "stablehlo.atan2").shard(S::ELEMENTWISE).decomposition(D::Lowering),
    op("aten.fmod").traits(T::ELEMENTWISE).sig(BINARY).rule_with(rule!(elementwise::binary), "stablehlo.remainder").shard(S::ELEMENTWISE).decomposition(D::Lowering),
    op("aten.remainder").traits(T::ELEMENTWISE).sig(BINARY).rule(rule!(elementwise::remainder)).shard(S::ELEMENTWISE).decomposition(D::Lowering),
    op("aten.bitwise_and").traits(T::ELEMENTWISE).sig(BINARY).rule_with(rule!(elementwise::binary), "stablehlo.and").shard(S::ELEMENTWISE).decomposition(D::Lowering),
    op("aten.bitwise_or").traits(T::ELEMENTWISE).sig(BINARY).rule_with(rule!(elementwise::binary), "stablehlo.or").shard(S::ELEMENTWISE).decomposition(D::Lowering),
    op("aten.bitwise_xor").traits(T::ELEMENTWISE).sig(BINARY).rule_with(rule!(elementwise::binary), "stablehlo.xor").shard(S::ELEMENTWISE).decomposition(D::Lowering),
    op("aten.eq").traits(T::ELEMENTWISE).sig(COMPARE).rule_with(rule!(elementwise::compare), "EQ").shard(S::ELEMENTWISE).decomposition(D::Lowering),
    op("aten.ne").traits(T::ELEMENTWISE).sig(COMPARE).rule_with(rule!(elementwise::compare), "NE").shard(S::ELEMENTWISE).decomposition(D::Lowering),
    op("aten.lt").traits(T::ELEMENTWISE).sig(COMPARE).rule_with(rule!(elementwise::compare), "LT").legal(elementwise::ordered_legal).shard(S::ELEMENTWISE).decomposition(D::Lowering),
    op("aten.le").traits(T::ELEMENTWISE).sig(COMPARE).rule_with(rule!(elementwise::compare), "LE").legal(elementwise::ordered_legal).shard(S::ELEMENTWISE).decomposition(D::Lowering),
    op("aten.gt").traits(T::ELEMENTWISE).sig(COMPARE).rule_with(rule!(elementwise::compare), "GT").legal(elementwise::ordered_legal).shard(S::ELEMENTWISE).decomposition(D::Lowering),
    op("aten.ge").traits(T::ELEMENTWISE).sig(COMPARE).rule_with(rule!(elementwise::compare), "GE").legal(elementwise::ordered_legal).shard(S::ELEMENTWISE).decomposition(D::Lowering),
    op("aten.logical_and").traits(T::ELEMENTWISE).sig(BINARY).rule_with(rule!(elementwise::logical), "stablehlo.and").shard(S::ELEMENTWISE).decomposition(D::Lowering),
    op("aten.logical_or").traits(T::ELEMENTWISE).sig(BINARY).rule_with(rule!(elementwise::logical), "stablehlo.or").shard(S::ELEMENTWISE).decomposition(D::Lowering),
    op("aten.logical_xor").traits(T::ELEMENTWISE).sig(BINARY).rule_with(rule!(elementwise::logical), "stablehlo.xor").shard(S::ELEMENTWISE).decomposition(D::Lowering),
    op("aten.where").traits(T::ELEMENTWISE).sig(WHERE).rule(rule!(elementwise::where_)).shard(S::ELEMENTWISE).decomposition(D::Python),
    op("aten.clamp").traits(T::ELEMENTWISE).sig(CLAMP).rule_with(rule!(elementwise::clamp), "min_max").shard(S::ELEMENTWISE).decomposition(D::Lowering),
    op("aten.clamp_min").traits(T::ELEMENTWISE).sig(BINARY).rule_with(rule!(elementwise::clamp), "min").shard(S::ELEMENTWISE).decomposition(D::Python),
    op("aten.clamp_max").traits(T::ELEMENTWISE).sig(BINARY).rule_with(rule!(elementwise::clamp), "max").shard(S::ELEMENTWISE).decomposition(D::Python),
    op("aten.hardtanh").traits(T::ELEMENTWISE).sig(UNARY).rule(rule!(elementwise::hardtanh)).shard(S::ELEMENTWISE).decomposition(D::Lowering),
    op("aten.isnan").traits(T::ELEMENTWISE).sig(UNARY).rule_with(rule!(elementwise::classify), "isnan").shard(S::ELEMENTWISE).decomposition(D::Lowering),
    op("aten.isinf").traits(T::ELEMENTWISE).sig(UNARY).rule_with(rule!(elementwise::classify), "isinf").shard(S::ELEMENTWISE).decomposition(D::Lowering),
    op("aten.isfinite").traits(T::ELEMENTWISE).sig(UNARY).rule_with(rule!(elementwise::classify), "isfinite").shard(S::ELEMENTWISE).decomposition(D::Python),
    op("aten._to_copy").traits(T::ELEMENTWISE).sig(COPY).rule(rule!(elementwise::convert)).shard(S::ELEMENTWISE).decomposition(D::Lowering),
    op("aten.to").traits(T::ELEMENTWISE).rule(rule!(elementwise::convert)).shard(S::ELEMENTWISE),
    op("aten.alias").traits(T::ELEMENTWISE.union(T::VIEW)).sig(COPY).rule(rule!(elementwise::identity)).shard(S::ELEMENTWISE).decomposition(D::Lowering),
    op("aten.clone").traits(T::ELEMENTWISE).sig(COPY).rule(rule!(elementwise::identity)).shard(S::ELEMENTWISE).decomposition(D::Lowering),
    op("aten.contiguous").traits(T::ELEMENTWISE).sig(COPY).rule(rule!(elementwise::identity)).shard(S::ELEMENTWISE),
    op("aten.detach").traits(T::ELEMENTWISE.union(T::VIEW)).rule(rule!(elementwise::identity)).shard(S::ELEMENTWISE).decomposition(D::Python),
    op("aten.lift_fresh_copy").traits(T::ELEMENTWISE).rule(rule!(elementwise::identity)).shard(S::ELEMENTWISE),
    op("aten.complex").traits(T::ELEMENTWISE).sig(BINARY).rule(rule!(elementwise::complex)).shard(S::ELEMENTWISE).decomposition(D::Lowering),
    // reductions
    op("aten.sum").traits(T::REDUCTION).sig(REDUCE).rule_with(rule!(reduce::simple), "sum").shard(S::REDUCE).decomposition(D::Python).layout(L::Reduction),
    op("aten.mean").traits(T::REDUCTION).sig(REDUCE).rule_with(rule!(reduce::simple), "mean").legal(reduce::mean_legal).shard(S::REDUCE).decomposition(D::Lowering).layout(L::Reduction),
    op("aten.prod").traits(T::REDUCTION).sig(REDUCE).rule_with(rule!(reduce::simple), "prod").shard(S::REDUCE).decomposition(D::Lowering),
    op("aten.amax").traits(T::REDUCTION).sig(REDUCE).rule_with(rule!(reduce::simple), "max").shard(S::REDUCE).decomposition(D::Lowering).layout(L::Reduction),
    op("aten.amin").traits(T::REDUCTION).sig(REDUCE).rule_with(rule!(reduce::simple), "min").shard(S::REDUCE).decomposition(D::Lowering),
    op("aten.any").traits(T::REDUCTION).sig(REDUCE).rule_with(rule!(reduce::simple), "or").shard(S::REDUCE).decomposition(D::Lowering),
    op("aten.all").traits(T::REDUCTION).rule_with(rule!(reduce::simple), "and").shard(S::REDUCE).decomposition(D::Python),
    op("aten.argmax").traits(T::REDUCTION).sig(REDUCE).rule_with(rule!(reduce::arg), "argmax").shard(S::REDUCE_GATHERED),
    op("aten.argmin").traits(T::REDUCTION).sig(REDUCE).rule_with(rule!(reduce::arg), "argmin").shard(S::REDUCE_GATHERED),
    op("aten.max").traits(T::REDUCTION).rule_with(rule!(reduce::arg), "max").shard(S::REDUCE_GATHERED).decomposition(D::Python),
    op("aten.min").traits(T::REDUCTION).rule_with(rule!(reduce::arg), "min").shard(S::REDUCE_GATHERED).decomposition(D::Python),
    op("aten.var").traits(T::REDUCTION).sig(REDUCE).rule(rule!(reduce::var)).legal(reduce::float_result).shard(S::REDUCE_GATHERED).decomposition(D::Python),
    // linear algebra
    op("aten.mm").sig(MM).rule(rule!(linalg::mm)).shard(S::DOT),
    op("aten.bmm").sig(BMM).rule(rule!(linalg::mm)).shard(S::DOT),
    op("aten.addmm").sig(ADDMM).rule(rule!(linalg::addmm)).shard(S::DOT).decomposition(D::Lowering),
    op("aten.linalg_solve_triangular").rule(rule!(linalg::solve_triangular)).legal(linalg::solve_triangular_legal),
    op("aten.triangular_solve").rule_with(rule!(linalg::solve_triangular), "legacy").legal(linalg::solve_triangular_legal),
    // shapes and data movement
    op("aten.view").traits(T::VIEW).sig(RESHAPE).rule(rule!(shape::reshape)).shard(S::RESHAPE).decomposition(D::Lowering),
    op("aten.reshape").traits(T::VIEW).sig(RESHAPE).rule(rule!(shape::reshape)).shard(S::RESHAPE),
    op("aten._unsafe_view").traits(T::VIEW).sig(RESHAPE).rule(rule!(shape::reshape)).shard(S::RESHAPE).decomposition(D::Python),
    op("aten.squeeze").traits(T::VIEW).sig(VIEWLIKE).rule(rule!(shape::reshape)).shard(S::RESHAPE).decomposition(D::Python),
    op("aten.unsqueeze").traits(T::VIEW).sig(VIEWLIKE).rule(rule!(shape::reshape)).shard(S::RESHAPE).decomposition(D::Lowering),
    op("aten.flatten").traits(T::VIEW).rule(rule!(shape::reshape)).shard(S::RESHAPE),
    op("aten.permute").traits(T::VIEW).sig(PERMUTE).rule(rule!(shape::permute)).shard(S::PERMUTE).decomposition(D::Lowering),
    op("aten.transpose").traits(T::VIEW).sig(TRANSPOSE).rule(rule!(shape::transpose)).shard(S::PERMUTE).decomposition(D::Python),
    op("aten.t").traits(T::VIEW).sig(VIEWLIKE).rule(rule!(shape::transpose)).shard(S::PERMUTE).decomposition(D::Python),
    op("aten.expand").traits(T::VIEW).sig(VIEWLIKE).rule(rule!(shape::expand)).shard(S::BROADCAST).decomposition(D::Lowering),
    op("aten.broadcast_to").traits(T::VIEW).rule(rule!(shape::expand)).shard(S::BROADCAST),
    op("aten.slice").traits(T::VIEW).sig(VIEWLIKE).rule(rule!(shape::slice)).shard(S::ALONG_DIM).decomposition(D::Lowering),
    op("aten.select").traits(T::VIEW).sig(VIEWLIKE).rule(rule!(shape::select)).shard(S::ALONG_DIM),
    op("aten.cat").sig(CAT).rule(rule!(shape::cat)).shard(S::ALONG_DIM).decomposition(D::Lowering),
    op("aten.stack").sig(CAT).rule(rule!(shape::stack)).decomposition(D::Python),
    op("aten.split_with_sizes").traits(T::VIEW).rule_with(rule!(shape::split), "split").shard(S::ALONG_DIM).decomposition(D::Lowering),
    op("aten.split").traits(T::VIEW).rule_with(rule!(shape::split), "split").shard(S::ALONG_DIM).decomposition(D::Python),
    op("aten.chunk").traits(T::VIEW).rule_with(rule!(shape::split), "split").shard(S::ALONG_DIM),
    op("aten.unbind").traits(T::VIEW).rule_with(rule!(shape::split), "unbind").decomposition(D::Python),
    op("aten.flip").rule(rule!(shape::flip)).decomposition(D::Lowering),
    op("aten.constant_pad_nd").rule(rule!(shape::constant_pad)).decomposition(D::Lowering),
    // factories
    op("aten.full").sig(FULL).rule_with(rule!(factory::fill), "fill_value").shard(S::FACTORY).decomposition(D::Lowering),
    op("aten.full_like").rule_with(rule!(factory::fill), "fill_value").shard(S::FACTORY),
    op("aten.new_full").rule_with(rule!(factory::fill), "fill_value").shard(S::FACTORY).decomposition(D::Python),
    op("aten.zeros").rule_with(rule!(factory::fill), "0").shard(S::FACTORY).decomposition(D::Python),
    op("aten.zeros_like").rule_with(rule!(factory::fill), "0").shard(S::FACTORY).decomposition(D::Python),
    op("aten.new_zeros").rule_with(rule!(factory::fill), "0").shard(S::FACTORY).decomposition(D::Python),
    op("aten.ones").rule_with(rule!(factory::fill), "1").shard(S::FACTORY).decomposition(D::Python),
    op("aten.ones_like").rule_with(rule!(factory::fill), "1").shard(S::FACTORY).decomposition(D::Python),
    op("aten.new_ones").rule_with(rule!(factory::fill), "1").shard(S::FACTORY).decomposition(D::Python),
    op("aten.empty").rule_with(rule!(factory::fill), "0").shard(S::FACTORY),
    op("aten.empty_like").rule_with(rule!(factory::fill), "0").shard(S::FACTORY).decomposition(D::Python),
    op("aten.new_empty").rule_with(rule!(factory::fill), "0").shard(S::FACTORY).decomposition(D::Python),
    op("aten.empty_permuted").rule_with(rule!(factory::fill), "0").shard(S::FACTORY),
    op("aten.empty_strided").rule_with(rule!(factory::fill), "0").shard(S::FACTORY).decomposition(D::Lowering),
    op("aten.new_empty_strided").rule_with(rule!(factory::fill), "0").shard(S::FACTORY).decomposition(D::Lowering),
    op("aten.scalar_tensor").sig(SCALAR_TENSOR).rule_with(rule!(factory::fill), "s").shard(S::FACTORY),
    op("aten.arange").sig(ARANGE).rule(rule!(factory::arange)).shard(S::FACTORY).decomposition(D::Python),
    op("tpu.constant").sig(CONSTANT).rule(rule!(factory::constant)).legal(factory::literal_legal).shard(S::FACTORY),
    // neural-network ops
    op("aten._softmax").sig(SOFTMAX).rule_with(rule!(nn::softmax), "softmax").shard(S::NORMALIZE).decomposition(D::Lowering),
    op("aten._log_softmax").sig(SOFTMAX).rule_with(rule!(nn::softmax), "log").shard(S::NORMALIZE).decomposition(D::Lowering),
    op("aten.native_layer_norm").sig(LAYER_NORM).rule(rule!(nn::layer_norm)).shard(S::NORMALIZE).decomposition(D::Lowering),
    op("aten._native_batch_norm_legit_no_training").rule_with(rule!(nn::batch_norm), "no_training").decomposition(D::Lowering).layout(L::BatchNorm),
    op("aten._native_batch_norm_legit_functional").rule_with(rule!(nn::batch_norm), "functional").decomposition(D::Lowering).layout(L::BatchNorm),
    op("aten._native_batch_norm_legit").rule_with(rule!(nn::batch_norm), "legit").decomposition(D::Lowering).layout(L::BatchNorm),
    op("aten.native_dropout").traits(T::RANDOM).sig(DROPOUT).rule(rule!(nn::dropout)).decomposition(D::Lowering),
    op("aten.convolution").rule(rule!(nn::convolution)).legal(nn::convolution_legal).shard(S::CONVOLUTION).layout(L::Convolution),
    op("aten.max_pool2d_with_indices").rule(rule!(nn::max_pool2d)).decomposition(D::Lowering).layout(L::Pool),
    op("aten.avg_pool2d").rule(rule!(nn::avg_pool2d)),
    op("aten.avg_pool2d_backward").rule(rule!(nn::avg_pool2d_backward)),
    // indexing
    op("aten.embedding").rule(rule!(indexing::embedding)).shard(S::EMBEDDING).decomposition(D::Lowering),
    op("aten.index_select").rule(rule!(indexing::index_select)).shard(S::ALONG_DIM).decomposition(D::Lowering),
    op("aten.gather").rule(rule!(indexing::gather)).shard(S::ALONG_DIM),
    op("aten.scatter").rule_with(rule!(indexing::scatter), "replace").legal(indexing::scatter_legal).shard(S::ALONG_DIM),
    op("aten.scatter_add").rule_with(rule!(indexing::scatter), "add").shard(S::ALONG_DIM),
    op("aten.scatter_reduce").rule(rule!(indexing::scatter_reduce)).legal(indexing::scatter_reduce_legal),
    op("aten.index_reduce").rule(rule!(indexing::index_reduce)).legal(indexing::index_reduce_legal),
    op("aten.index_put").rule(rule!(indexing::index_put)).legal(indexing::index_put_legal).shard(S::INDEX_PUT),
    op("aten._unsafe_index_put").rule(rule!(indexing::index_put)).legal(indexing::index_put_legal).shard(S::INDEX_PUT).decomposition(D::Python),
    op("aten.index").rule(rule!(indexing::index)).legal(indexing::index_legal),
    op("aten._unsafe_index").rule(rule!(indexing::index)).legal(indexing::index_legal).decomposition(D::Python),
    op("aten.slice_scatter").rule_with(rule!(indexing::slice_scatter), "slice").shard(S::ALONG_DIM).decomposition(D::Lowering),
    op("aten.select_scatter").rule_with(rule!(indexing::slice_scatter), "select").shard(S::ALONG_DIM).decomposition(D::Python),
    op("aten.cumsum").rule_with(rule!(indexing::cumsum), "sum").shard(S::ALONG_DIM).decomposition(D::Lowering),
    op("aten.cumprod").rule_with(rule!(indexing::cumsum), "prod").shard(S::ALONG_DIM).decomposition(D::Lowering),
    op("aten.as_strided").traits(T::VIEW).rule(rule!(indexing::as_strided)),
    op("aten.as_strided_scatter").rule(rule!(indexing::as_strided_scatter)).decomposition(D::Lowering),
    op("aten.put").rule(rule!(indexing::put)),
    op("aten.masked_scatter").rule(rule!(indexing::masked_scatter)),
    op("aten.nonzero_static").rule(rule!(indexing::nonzero_static)),
    op("aten.logcumsumexp").rule(rule!(indexing::logcumsumexp)).legal(reduce::float_result),
    op("aten.histc").rule(rule!(indexing::histc)).legal(prims::not_bool_legal),
    op("prims.as_strided_scatter").rule(rule!(indexing::as_strided_scatter)),
    // prims left by PyTorch's reference decompositions, special functions
    op("prims.sum").traits(T::REDUCTION).rule_with(rule!(prims::reduction), "sum").shard(S::REDUCE),
    op("prims.var").traits(T::REDUCTION).rule_with(rule!(prims::reduction), "var").legal(reduce::float_result).shard(S::REDUCE_GATHERED),
    op("prims.broadcast_in_dim").traits(T::VIEW).rule(rule!(prims::broadcast_in_dim)).shard(S::BROADCAST),
    op("prims.where").traits(T::ELEMENTWISE).rule(rule!(prims::where_)).shard(S::ELEMENTWISE),
    op("prims.div").traits(T::ELEMENTWISE).rule(rule!(prims::div)).legal(prims::not_bool_legal).shard(S::ELEMENTWISE),
    op("prims.fma").traits(T::ELEMENTWISE).rule(rule!(prims::fma)).legal(prims::not_bool_legal).shard(S::ELEMENTWISE),
    op("prims.convert_element_type").traits(T::ELEMENTWISE).sig(COPY).rule(rule!(elementwise::convert)).shard(S::ELEMENTWISE),
    op("prims.abs").traits(T::ELEMENTWISE).sig(UNARY).rule_with(rule!(elementwise::unary), "stablehlo.abs").legal(elementwise::not_of_bool).shard(S::ELEMENTWISE),
    op("prims.neg").traits(T::ELEMENTWISE).sig(UNARY).rule_with(rule!(elementwise::unary), "stablehlo.negate").legal(elementwise::not_of_bool).shard(S::ELEMENTWISE),
    op("prims.erfc").traits(T::ELEMENTWISE).sig(UNARY).rule_with(rule!(elementwise::unary), "chlo.erfc").shard(S::ELEMENTWISE),
    op("prims.bessel_i1e").traits(T::ELEMENTWISE).sig(UNARY).rule_with(rule!(elementwise::unary), "chlo.bessel_i1e").shard(S::ELEMENTWISE),
    op("prims.signbit").traits(T::ELEMENTWISE).sig(UNARY).rule(rule!(prims::signbit)).shard(S::ELEMENTWISE),
    op("aten.signbit").traits(T::ELEMENTWISE).sig(UNARY).rule(rule!(prims::signbit)).shard(S::ELEMENTWISE).decomposition(D::Lowering),
    op("prims.fmax").traits(T::ELEMENTWISE).sig(BINARY).rule_with(rule!(prims::fminmax), "max").shard(S::ELEMENTWISE),
    op("aten.fmax").traits(T::ELEMENTWISE).sig(BINARY).rule_with(rule!(prims::fminmax), "max").shard(S::ELEMENTWISE).decomposition(D::Lowering),
    op("prims.fmin").traits(T::ELEMENTWISE).sig(BINARY).rule_with(rule!(prims::fminmax), "min").shard(S::ELEMENTWISE),
    op("aten.fmin").traits(T::ELEMENTWISE).sig(BINARY).rule_with(rule!(prims::fminmax), "min").shard(S::ELEMENTWISE).decomposition(D::Lowering),
    op("prims.shift_left").traits(T::ELEMENTWISE).sig(BINARY).rule_with(rule!(prims::binary), "stablehlo.shift_left").shard(S::ELEMENTWISE),
    op("prims.shift_right_arithmetic").traits(T::ELEMENTWISE).sig(BINARY).rule_with(rule!(prims::binary), "stablehlo.shift_right_arithmetic").shard(S::ELEMENTWISE),
    op("prims.zeta").traits(T::ELEMENTWISE).sig(BINARY).rule_with(rule!(prims::binary), "chlo.zeta").shard(S::ELEMENTWISE),
    op("prims.hypot").traits(T::ELEMENTWISE).sig(BINARY).rule(rule!(prims::hypot)).shard(S::ELEMENTWISE),
    op("aten.hypot").traits(T::ELEMENTWISE).sig(BINARY).rule(rule!(prims::hypot)).shard(S::ELEMENTWISE).decomposition(D::Lowering),
    op("aten.polygamma").traits(T::ELEMENTWISE).rule(rule!(prims::polygamma)).shard(S::ELEMENTWISE),
    op("prims.erfcx").traits(T::ELEMENTWISE).sig(UNARY).rule_with(rule!(prims::special_unary), "erfcx").shard(S::ELEMENTWISE),
    op("aten.special_erfcx").traits(T::ELEMENTWISE).sig(UNARY).rule_with(rule!(prims::special_unary), "erfcx").shard(S::ELEMENTWISE).decomposition(D::Lowering),
    op("prims.ndtri").traits(T::ELEMENTWISE).sig(UNARY).rule_with(rule!(prims::special_unary), "ndtri").shard(S::ELEMENTWISE),
    op("aten.special_ndtri").traits(T::ELEMENTWISE).sig(UNARY).rule_with(rule!(prims::special_unary), "ndtri").shard(S::ELEMENTWISE).decomposition(D::Lowering),
    op("prims.spherical_bessel_j0").traits(T::ELEMENTWISE).sig(UNARY).rule_with(rule!(prims::special_unary), "spherical_bessel_j0").shard(S::ELEMENTWISE),
    op("aten.special_spherical_bessel_j0").traits(T::ELEMENTWISE).sig(UNARY).rule_with(rule!(prims::special_unary), "spherical_bessel_j0").shard(S::ELEMENTWISE).decomposition(D::Lowering),
    op("prims.bessel_i1").traits(T::ELEMENTWISE).sig(UNARY).rule_with(rule!(prims::special_unary), "bessel_i1").shard(S::ELEMENTWISE),
    op("aten.special_modified_bessel_i1").traits(T::ELEMENTWISE).sig(UNARY).rule_with(rule!(prims::special_unary), "bessel_i1").shard(S::ELEMENTWISE),
    op("prims.bessel_i0").traits(T::ELEMENTWISE).sig(UNARY).rule_with(rule!(prims::special_unary), "bessel_i0").shard(S::ELEMENTWISE),
    op("prims.bessel_i0e").traits(T::ELEMENTWISE).sig(UNARY).rule_with(rule!(prims::special_unary), "bessel_i0e").shard(S::ELEMENTWISE),
    op("aten.i0").traits(T::ELEMENTWISE).sig(UNARY).rule_with(rule!(prims::special_unary), "bessel_i0").shard(S::ELEMENTWISE).decomposition(D::Lowering),
    op("aten.special_i0e").traits(T::ELEMENTWISE).sig(UNARY).rule_with(rule!(prims::special_unary), "bessel_i0e").shard(S::ELEMENTWISE).decomposition(D::Lowering),
    op("aten.special_modified_bessel_i0").traits(T::ELEMENTWISE).sig(UNARY).rule_with(rule!(prims::special_unary), "bessel_i0").shard(S::ELEMENTWISE),
    op("prims.nextafter").traits(T::ELEMENTWISE).sig(BINARY).rule(rule!(prims::nextafter)).shard(S::ELEMENTWISE),
    op("aten.nextafter").traits(T::ELEMENTWISE).sig(BINARY).rule(rule!(prims::nextafter)).shard(S::ELEMENTWISE).decomposition(D::Lowering),
    op("prims.gcd").traits(T::ELEMENTWISE).sig(BINARY).rule_with(rule!(prims::gcd), "gcd").legal(prims::integer_legal).shard(S::ELEMENTWISE),
    op("aten.gcd").traits(T::ELEMENTWISE).sig(BINARY).rule_with(rule!(prims::gcd), "gcd").legal(prims::integer_legal).shard(S::ELEMENTWISE).decomposition(D::Lowering),
    op("aten.lcm").traits(T::ELEMENTWISE).sig(BINARY).rule_with(rule!(prims::gcd), "lcm").legal(prims::integer_legal).shard(S::ELEMENTWISE).decomposition(D::Lowering),
    op("aten.angle").traits(T::ELEMENTWISE).sig(UNARY).rule(rule!(prims::angle)).shard(S::ELEMENTWISE),
    op("aten.copy").traits(T::ELEMENTWISE).rule(rule!(prims::copy)).shard(S::ELEMENTWISE),
    // Fourier transforms and complex parts
    op("aten._fft_r2c").rule(rule!(fft::r2c)),
    op("aten._fft_c2r").rule(rule!(fft::c2r)),
    op("aten._fft_c2c").rule(rule!(fft::c2c)),
    op("aten._conj").traits(T::ELEMENTWISE.union(T::VIEW)).sig(UNARY).rule(rule!(fft::conj)),
    op("aten._conj_physical").traits(T::ELEMENTWISE).sig(UNARY).rule(rule!(fft::conj)).shard(S::ELEMENTWISE),
    op("aten.conj_physical").traits(T::ELEMENTWISE).sig(UNARY).rule(rule!(fft::conj)).shard(S::ELEMENTWISE).decomposition(D::Lowering),
    op("aten.real").traits(T::ELEMENTWISE.union(T::VIEW)).sig(UNARY).rule_with(rule!(fft::part), "real"),
    op("aten.imag").traits(T::ELEMENTWISE.union(T::VIEW)).sig(UNARY).rule_with(rule!(fft::part), "imag"),
    op("aten.view_as_real").traits(T::VIEW).rule(rule!(fft::view_as_real)),
    op("aten.view_as_complex").traits(T::VIEW).rule(rule!(fft::view_as_complex)),
    // orthogonal polynomials
    op("aten.special_chebyshev_polynomial_t").traits(T::ELEMENTWISE).sig(BINARY).rule_with(rule!(polynomial::polynomial), "chebyshev_polynomial_t").shard(S::ELEMENTWISE),
    op("aten.special_chebyshev_polynomial_u").traits(T::ELEMENTWISE).sig(BINARY).rule_with(rule!(polynomial::polynomial), "chebyshev_polynomial_u").shard(S::ELEMENTWISE),
    op("aten.special_chebyshev_polynomial_v").traits(T::ELEMENTWISE).sig(BINARY).rule_with(rule!(polynomial::polynomial), "chebyshev_polynomial_v").shard(S::ELEMENTWISE),
    op("aten.special_chebyshev_polynomial_w").traits(T::ELEMENTWISE).sig(BINARY).rule_with(rule!(polynomial::polynomial), "chebyshev_polynomial_w").shard(S::ELEMENTWISE),
    op("aten.special_shifted_chebyshev_polynomial_t").traits(T::ELEMENTWISE).sig(BINARY).rule_with(rule!(polynomial::polynomial), "shifted_chebyshev_polynomial_t").shard(S::ELEMENTWISE),
    op("aten.special_shifted_chebyshev_polynomial_u").traits(T::ELEMENTWISE).sig(BINARY).rule_with(rule!(polynomial::polynomial), "shifted_chebyshev_polynomial_u").shard(S::ELEMENTWISE),
    op("aten.special_shifted_chebyshev_polynomial_v").traits(T::ELEMENTWISE).sig(BINARY).rule_with(rule!(polynomial::polynomial), "shifted_chebyshev_polynomial_v").shard(S::ELEMENTWISE),
    op("aten.special_shifted_chebyshev_polynomial_w").traits(T::ELEMENTWISE).sig(BINARY).rule_with(rule!(polynomial::polynomial), "shifted_chebyshev_polynomial_w").shard(S::ELEMENTWISE),
    op("aten.special_hermite_polynomial_h").traits(T::ELEMENTWISE).sig(BINARY).rule_with(rule!(polynomial::polynomial), "hermite_polynomial_h").shard(S::ELEMENTWISE),
    op("aten.special_hermite_polynomial_he").traits(T::ELEMENTWISE).sig(BINARY).rule_with(rule!(polynomial::polynomial), "hermite_polynomial_he").shard(S::ELEMENTWISE),
    op("aten.special_laguerre_polynomial_l").traits(T::ELEMENTWISE).sig(BINARY).rule_with(rule!(polynomial::polynomial), "laguerre_polynomial_l").shard(S::ELEMENTWISE),
    op("aten.special_legendre_polynomial_p").traits(T::ELEMENTWISE).sig(BINARY).rule_with(rule!(polynomial::polynomial), "legendre_polynomial_p").shard(S::ELEMENTWISE),
    // sorting
    op("aten.sort").rule(rule!(sort::sort)).shard(S::ALONG_DIM),
    op("aten.topk").rule(rule!(sort::topk)).shard(S::ALONG_DIM),
    op("aten.kthvalue").traits(T::REDUCTION).rule(rule!(sort::kthvalue)).shard(S::REDUCE_GATHERED),
    op("aten.median").traits(T::REDUCTION).rule_with(rule!(sort::median), "median").shard(S::REDUCE_GATHERED),
    op("aten.nanmedian").traits(T::REDUCTION).rule_with(rule!(sort::median), "nanmedian").shard(S::REDUCE_GATHERED),
    op("aten.searchsorted").rule_with(rule!(sort::searchsorted), "searchsorted").legal(sort::searchsorted_legal),
    op("aten.bucketize").rule_with(rule!(sort::searchsorted), "bucketize").decomposition(D::Lowering),
    op("aten.cummax").rule_with(rule!(sort::cumulative_extreme), "max").shard(S::ALONG_DIM),
    op("aten.cummin").rule_with(rule!(sort::cumulative_extreme), "min").shard(S::ALONG_DIM),
    // layouts of SPMD programs (effects, so that CSE keeps constraints whose layouts differ)
    op("tpu.sharding_constraint").traits(T::SIDE_EFFECTS).sig(COPY).rule(rule!(layout::sharding_constraint)),
    op("tpu.reshard").traits(T::SIDE_EFFECTS).sig(COPY).rule(rule!(layout::sharding_constraint)),
    // cross-replica collectives of replicated programs (PyTorch's functional collectives)
    op("c10d.all_reduce").sig(COLLECTIVE).rule(rule!(collective::all_reduce)).legal(collective::reducing_legal),
    op("c10d.reduce_scatter").sig(COLLECTIVE).rule(rule!(collective::reduce_scatter)).legal(collective::reducing_legal),
    op("c10d.all_gather").sig(COLLECTIVE).rule(rule!(collective::all_gather)).legal(collective::gather_legal),
    op("c10d.all_to_all").sig(COLLECTIVE).rule(rule!(collective::all_to_all)).legal(collective::gather_legal),
    op("c10d.broadcast").sig(COLLECTIVE).rule(rule!(collective::broadcast)).legal(collective::broadcast_legal),
    // device random draws with explicit state. Pure, not `random`: every result is a function
    // of the state operand alone (the same state gives the same numbers, the advanced state is
    // result 0), so CSE merging two draws from one state and DCE dropping an unread draw are
    // both correct; the hidden-generator trait would only forbid those.
    op("tpu.rng_uniform").sig(RNG_RANGE).rule(rule!(random::uniform)).legal(random::uniform_legal),
    op("tpu.rng_normal").sig(RNG_NORMAL).rule(rule!(random::normal)).legal(random::normal_legal),
    op("tpu.rng_integers").sig(RNG_RANGE).rule(rule!(random::integers)).legal(random::integers_legal),
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
