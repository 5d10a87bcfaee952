//! The sharding side table: for each op of the vocabulary with a sharding rule, its family
//! rule (`sharding::rules`) and the name explain reports as the origin of every layout it
//! decides. Ops without one are replicated. Keyed by `OpId` (`registry::SideTable`).

use super::rules::{self, ShardingFn};
use crate::ir::OpName;
use crate::registry::SideTable;

/// How an op's layouts over a device mesh follow from its operands' (`sharding::rules`):
/// the family rule and its name (`elementwise`, `dot`, ...).
#[derive(Clone, Copy)]
pub struct ShardingRule {
    pub rule: ShardingFn,
    pub name: &'static str,
}

/// The sharding rules by family, named as explain reports them.
#[allow(non_snake_case)]
mod S {
    use super::{rules, ShardingRule};
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

static RULES: SideTable<ShardingRule> = SideTable::new(|| TABLE.iter().map(|(op, r)| (*op, r)).collect());

/// The sharding rule of `op` (any overload), or None: its inputs are gathered and its
/// results replicated.
pub fn sharding_rule(op: &OpName) -> Option<&'static ShardingRule> {
    RULES.of(op)
}

/// The sharding rule of the op `id`.
pub fn sharding_rule_of(id: crate::registry::OpId) -> Option<&'static ShardingRule> {
    RULES.get(id)
}

// One line per op: the table reads as a table.
#[rustfmt::skip]
static TABLE: &[(&str, ShardingRule)] = &[
    // elementwise unary
    ("aten.abs", S::ELEMENTWISE),
    ("aten.neg", S::ELEMENTWISE),
    ("aten.ceil", S::ELEMENTWISE),
    ("aten.floor", S::ELEMENTWISE),
    ("aten.round", S::ELEMENTWISE),
    ("aten.trunc", S::ELEMENTWISE),
    ("aten.sign", S::ELEMENTWISE),
    ("aten.sqrt", S::ELEMENTWISE),
    ("aten.rsqrt", S::ELEMENTWISE),
    ("aten.exp", S::ELEMENTWISE),
    ("aten.exp2", S::ELEMENTWISE),
    ("aten.expm1", S::ELEMENTWISE),
    ("aten.log", S::ELEMENTWISE),
    ("aten.log2", S::ELEMENTWISE),
    ("aten.log10", S::ELEMENTWISE),
    ("aten.log1p", S::ELEMENTWISE),
    ("aten.sin", S::ELEMENTWISE),
    ("aten.cos", S::ELEMENTWISE),
    ("aten.tan", S::ELEMENTWISE),
    ("aten.asin", S::ELEMENTWISE),
    ("aten.acos", S::ELEMENTWISE),
    ("aten.atan", S::ELEMENTWISE),
    ("aten.sinh", S::ELEMENTWISE),
    ("aten.cosh", S::ELEMENTWISE),
    ("aten.tanh", S::ELEMENTWISE),
    ("aten.asinh", S::ELEMENTWISE),
    ("aten.acosh", S::ELEMENTWISE),
    ("aten.atanh", S::ELEMENTWISE),
    ("aten.sigmoid", S::ELEMENTWISE),
    ("aten.erf", S::ELEMENTWISE),
    ("aten.erfc", S::ELEMENTWISE),
    ("aten.erfinv", S::ELEMENTWISE),
    ("aten.lgamma", S::ELEMENTWISE),
    ("aten.digamma", S::ELEMENTWISE),
    ("aten.reciprocal", S::ELEMENTWISE),
    ("aten.relu", S::ELEMENTWISE),
    ("aten.gelu", S::ELEMENTWISE),
    ("aten.silu", S::ELEMENTWISE),
    ("aten.logical_not", S::ELEMENTWISE),
    ("aten.bitwise_not", S::ELEMENTWISE),
    // elementwise binary
    ("aten.add", S::ELEMENTWISE),
    ("aten.sub", S::ELEMENTWISE),
    ("aten.rsub", S::ELEMENTWISE),
    ("aten.mul", S::ELEMENTWISE),
    ("aten.div", S::ELEMENTWISE),
    ("aten.floor_divide", S::ELEMENTWISE),
    ("aten.pow", S::ELEMENTWISE),
    ("aten.maximum", S::ELEMENTWISE),
    ("aten.minimum", S::ELEMENTWISE),
    ("aten.atan2", S::ELEMENTWISE),
    ("aten.fmod", S::ELEMENTWISE),
    ("aten.remainder", S::ELEMENTWISE),
    ("aten.bitwise_and", S::ELEMENTWISE),
    ("aten.bitwise_or", S::ELEMENTWISE),
    ("aten.bitwise_xor", S::ELEMENTWISE),
    ("aten.eq", S::ELEMENTWISE),
    ("aten.ne", S::ELEMENTWISE),
    ("aten.lt", S::ELEMENTWISE),
    ("aten.le", S::ELEMENTWISE),
    ("aten.gt", S::ELEMENTWISE),
    ("aten.ge", S::ELEMENTWISE),
    ("aten.logical_and", S::ELEMENTWISE),
    ("aten.logical_or", S::ELEMENTWISE),
    ("aten.logical_xor", S::ELEMENTWISE),
    ("aten.where", S::ELEMENTWISE),
    ("aten.clamp", S::ELEMENTWISE),
    ("aten.clamp_min", S::ELEMENTWISE),
    ("aten.clamp_max", S::ELEMENTWISE),
    ("aten.hardtanh", S::ELEMENTWISE),
    ("aten.isnan", S::ELEMENTWISE),
    ("aten.isinf", S::ELEMENTWISE),
    ("aten.isfinite", S::ELEMENTWISE),
    ("aten._to_copy", S::ELEMENTWISE),
    ("aten.to", S::ELEMENTWISE),
    ("aten.alias", S::ELEMENTWISE),
    ("aten.clone", S::ELEMENTWISE),
    ("aten.contiguous", S::ELEMENTWISE),
    ("aten.detach", S::ELEMENTWISE),
    ("aten.lift_fresh_copy", S::ELEMENTWISE),
    ("aten.complex", S::ELEMENTWISE),
    // reductions
    ("aten.sum", S::REDUCE),
    ("aten.mean", S::REDUCE),
    ("aten.prod", S::REDUCE),
    ("aten.amax", S::REDUCE),
    ("aten.amin", S::REDUCE),
    ("aten.any", S::REDUCE),
    ("aten.all", S::REDUCE),
    ("aten.argmax", S::REDUCE_GATHERED),
    ("aten.argmin", S::REDUCE_GATHERED),
    ("aten.max", S::REDUCE_GATHERED),
    ("aten.min", S::REDUCE_GATHERED),
    ("aten.var", S::REDUCE_GATHERED),
    // linear algebra
    ("aten.mm", S::DOT),
    ("aten.bmm", S::DOT),
    ("aten._int_mm", S::DOT),
    ("aten.addmm", S::DOT),
    // shapes and data movement
    ("aten.view", S::RESHAPE),
    ("aten.reshape", S::RESHAPE),
    ("aten._unsafe_view", S::RESHAPE),
    ("aten.squeeze", S::RESHAPE),
    ("aten.unsqueeze", S::RESHAPE),
    ("aten.flatten", S::RESHAPE),
    ("aten.permute", S::PERMUTE),
    ("aten.transpose", S::PERMUTE),
    ("aten.t", S::PERMUTE),
    ("aten.expand", S::BROADCAST),
    ("aten.broadcast_to", S::BROADCAST),
    ("aten.slice", S::ALONG_DIM),
    ("aten.select", S::ALONG_DIM),
    ("aten.cat", S::ALONG_DIM),
    ("aten.split_with_sizes", S::ALONG_DIM),
    ("aten.split", S::ALONG_DIM),
    ("aten.chunk", S::ALONG_DIM),
    // factories
    ("aten.full", S::FACTORY),
    ("aten.full_like", S::FACTORY),
    ("aten.new_full", S::FACTORY),
    ("aten.zeros", S::FACTORY),
    ("aten.zeros_like", S::FACTORY),
    ("aten.new_zeros", S::FACTORY),
    ("aten.ones", S::FACTORY),
    ("aten.ones_like", S::FACTORY),
    ("aten.new_ones", S::FACTORY),
    ("aten.empty", S::FACTORY),
    ("aten.empty_like", S::FACTORY),
    ("aten.new_empty", S::FACTORY),
    ("aten.empty_permuted", S::FACTORY),
    ("aten.empty_strided", S::FACTORY),
    ("aten.new_empty_strided", S::FACTORY),
    ("aten.scalar_tensor", S::FACTORY),
    ("aten.arange", S::FACTORY),
    ("tpu.constant", S::FACTORY),
    // neural-network ops
    ("aten._softmax", S::NORMALIZE),
    ("aten._log_softmax", S::NORMALIZE),
    ("aten.native_layer_norm", S::NORMALIZE),
    ("aten.convolution", S::CONVOLUTION),
    // indexing
    ("aten.embedding", S::EMBEDDING),
    ("aten.index_select", S::ALONG_DIM),
    ("aten.gather", S::ALONG_DIM),
    ("aten.scatter", S::ALONG_DIM),
    ("aten.scatter_add", S::ALONG_DIM),
    ("aten.index_put", S::INDEX_PUT),
    ("aten._unsafe_index_put", S::INDEX_PUT),
    ("aten.slice_scatter", S::ALONG_DIM),
    ("aten.select_scatter", S::ALONG_DIM),
    ("aten.cumsum", S::ALONG_DIM),
    ("aten.cumprod", S::ALONG_DIM),
    // prims left by PyTorch's reference decompositions, special functions
    ("prims.sum", S::REDUCE),
    ("prims.var", S::REDUCE_GATHERED),
    ("prims.broadcast_in_dim", S::BROADCAST),
    ("prims.where", S::ELEMENTWISE),
    ("prims.div", S::ELEMENTWISE),
    ("prims.fma", S::ELEMENTWISE),
    ("prims.convert_element_type", S::ELEMENTWISE),
    ("prims.abs", S::ELEMENTWISE),
    ("prims.neg", S::ELEMENTWISE),
    ("prims.erfc", S::ELEMENTWISE),
    ("prims.bessel_i1e", S::ELEMENTWISE),
    ("prims.signbit", S::ELEMENTWISE),
    ("aten.signbit", S::ELEMENTWISE),
    ("prims.fmax", S::ELEMENTWISE),
    ("aten.fmax", S::ELEMENTWISE),
    ("prims.fmin", S::ELEMENTWISE),
    ("aten.fmin", S::ELEMENTWISE),
    ("prims.shift_left", S::ELEMENTWISE),
    ("prims.shift_right_arithmetic", S::ELEMENTWISE),
    ("prims.zeta", S::ELEMENTWISE),
    ("prims.hypot", S::ELEMENTWISE),
    ("aten.hypot", S::ELEMENTWISE),
    ("aten.polygamma", S::ELEMENTWISE),
    ("prims.erfcx", S::ELEMENTWISE),
    ("aten.special_erfcx", S::ELEMENTWISE),
    ("prims.ndtri", S::ELEMENTWISE),
    ("aten.special_ndtri", S::ELEMENTWISE),
    ("prims.spherical_bessel_j0", S::ELEMENTWISE),
    ("aten.special_spherical_bessel_j0", S::ELEMENTWISE),
    ("prims.bessel_i1", S::ELEMENTWISE),
    ("aten.special_modified_bessel_i1", S::ELEMENTWISE),
    ("prims.bessel_i0", S::ELEMENTWISE),
    ("prims.bessel_i0e", S::ELEMENTWISE),
    ("aten.i0", S::ELEMENTWISE),
    ("aten.special_i0e", S::ELEMENTWISE),
    ("aten.special_modified_bessel_i0", S::ELEMENTWISE),
    ("prims.nextafter", S::ELEMENTWISE),
    ("aten.nextafter", S::ELEMENTWISE),
    ("prims.gcd", S::ELEMENTWISE),
    ("aten.gcd", S::ELEMENTWISE),
    ("aten.lcm", S::ELEMENTWISE),
    ("aten.angle", S::ELEMENTWISE),
    ("aten.copy", S::ELEMENTWISE),
    // Fourier transforms and complex parts
    ("aten._conj_physical", S::ELEMENTWISE),
    ("aten.conj_physical", S::ELEMENTWISE),
    // orthogonal polynomials
    ("aten.special_chebyshev_polynomial_t", S::ELEMENTWISE),
    ("aten.special_chebyshev_polynomial_u", S::ELEMENTWISE),
    ("aten.special_chebyshev_polynomial_v", S::ELEMENTWISE),
    ("aten.special_chebyshev_polynomial_w", S::ELEMENTWISE),
    ("aten.special_shifted_chebyshev_polynomial_t", S::ELEMENTWISE),
    ("aten.special_shifted_chebyshev_polynomial_u", S::ELEMENTWISE),
    ("aten.special_shifted_chebyshev_polynomial_v", S::ELEMENTWISE),
    ("aten.special_shifted_chebyshev_polynomial_w", S::ELEMENTWISE),
    ("aten.special_hermite_polynomial_h", S::ELEMENTWISE),
    ("aten.special_hermite_polynomial_he", S::ELEMENTWISE),
    ("aten.special_laguerre_polynomial_l", S::ELEMENTWISE),
    ("aten.special_legendre_polynomial_p", S::ELEMENTWISE),
    // sorting
    ("aten.sort", S::ALONG_DIM),
    ("aten.topk", S::ALONG_DIM),
    ("aten.kthvalue", S::REDUCE_GATHERED),
    ("aten.median", S::REDUCE_GATHERED),
    ("aten.nanmedian", S::REDUCE_GATHERED),
    ("aten.cummax", S::ALONG_DIM),
    ("aten.cummin", S::ALONG_DIM),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_rule_names_a_declared_op_once() {
        // Building the side table panics on an undeclared or repeated op.
        assert_eq!(RULES.len(), TABLE.len());
        assert_eq!(sharding_rule(&OpName::parse("aten.mm.default").unwrap()).map(|r| r.name), Some("dot"));
    }
}
