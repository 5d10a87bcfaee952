//! The lowering side table: for each op of the vocabulary that lowers, its family rule (and
//! its name, for listings), what the rule is parameterised by, and its legality check. Keyed
//! by `OpId` (`registry::SideTable`); the order is the vocabulary's.

use super::legality::LegalFn;
use super::ops::{
    collective, elementwise, factory, fft, host_matmul, indexing, layout, linalg, nn, polynomial, prims, quant, random,
    reduce, shape, sort, RuleFn,
};
use crate::ir::OpName;
use crate::lower::names::{chlo, hlo};
use crate::lower::param::RuleParam as P;
use crate::lower::param::{
    ArgReduction, BatchNorm, Clamp, Classify, Cmp, Cumulative, Extreme, Fill, Gcd, LogBase, Median, Part, Polynomial,
    Reduction, RuleParam, Scatter, Search, SliceScatter, Softmax, Special, Split, Triangular,
};
use crate::registry::{OpId, SideTable};

/// How an op is lowered to StableHLO.
#[derive(Clone, Copy)]
pub struct Lowering {
    /// The family rule that emits it, and its name (`elementwise::unary`) for listings.
    pub rule: RuleFn,
    pub rule_name: &'static str,
    /// What the family rule is parameterised by (`lower::param`): the StableHLO/CHLO op it
    /// emits (`stablehlo.exponential`), a comparison direction (`LT`) or its variant (`isnan`).
    pub param: Option<RuleParam>,
    /// Refuses forms the rule does not lower (`round` with `decimals != 0`) before anything is
    /// emitted, from the node's attributes and types alone.
    pub legal: Option<LegalFn>,
}

/// One line of the table: an op and its lowering.
pub struct Entry {
    pub op: &'static str,
    pub lowering: Lowering,
}

impl Entry {
    /// The legality check of this lowering.
    const fn legal(mut self, legal: LegalFn) -> Entry {
        self.lowering.legal = Some(legal);
        self
    }
}

/// Lowered by `rule` (the table's `rule!` gives the function and its name).
const fn lowered(op: &'static str, (rule, rule_name): (RuleFn, &'static str)) -> Entry {
    Entry { op, lowering: Lowering { rule, rule_name, param: None, legal: None } }
}

/// Lowered by the family `rule`, parameterised by `param`.
const fn lowered_with(op: &'static str, (rule, rule_name): (RuleFn, &'static str), param: RuleParam) -> Entry {
    Entry { op, lowering: Lowering { rule, rule_name, param: Some(param), legal: None } }
}

/// A rule function and its name, for `lowered`.
macro_rules! rule {
    ($module:ident :: $f:ident) => {
        ($module::$f as RuleFn, concat!(stringify!($module), "::", stringify!($f)))
    };
}

static LOWERINGS: SideTable<Lowering> = SideTable::new(|| TABLE.iter().map(|e| (e.op, &e.lowering)).collect());

/// The lowering of `op` (any overload), or None: the op runs eagerly.
pub fn lowering(op: &OpName) -> Option<&'static Lowering> {
    LOWERINGS.of(op)
}

/// The lowering of the op `id`.
pub fn lowering_of(id: OpId) -> Option<&'static Lowering> {
    LOWERINGS.get(id)
}

/// Whether `op` is lowered at all (a form of it may still be refused by its legality check).
pub fn is_lowered(op: &OpName) -> bool {
    lowering(op).is_some()
}

/// The ops with a lowering (`namespace.name`), in vocabulary order: what the backend compiles.
pub fn lowered_ops() -> Vec<&'static str> {
    TABLE.iter().map(|e| e.op).collect()
}

// One line per op: the table reads as a table.
#[rustfmt::skip]
static TABLE: &[Entry] = &[
    // elementwise unary
    lowered_with("aten.abs", rule!(elementwise::unary), P::Emit(hlo::ABS)).legal(elementwise::not_of_bool),
    lowered_with("aten.neg", rule!(elementwise::unary), P::Emit(hlo::NEGATE)).legal(elementwise::not_of_bool),
    lowered_with("aten.ceil", rule!(elementwise::unary), P::Emit(hlo::CEIL)),
    lowered_with("aten.floor", rule!(elementwise::unary), P::Emit(hlo::FLOOR)),
    lowered_with("aten.round", rule!(elementwise::unary), P::Emit(hlo::ROUND_NEAREST_EVEN)).legal(elementwise::round_legal),
    lowered("aten.trunc", rule!(elementwise::trunc)),
    lowered("aten.sign", rule!(elementwise::sign)).legal(elementwise::sign_legal),
    lowered_with("aten.sqrt", rule!(elementwise::unary), P::Emit(hlo::SQRT)),
    lowered_with("aten.rsqrt", rule!(elementwise::unary), P::Emit(hlo::RSQRT)),
    lowered_with("aten.exp", rule!(elementwise::unary), P::Emit(hlo::EXPONENTIAL)),
    lowered("aten.exp2", rule!(elementwise::exp2)),
    lowered_with("aten.expm1", rule!(elementwise::unary), P::Emit(hlo::EXPONENTIAL_MINUS_ONE)),
    lowered_with("aten.log", rule!(elementwise::unary), P::Emit(hlo::LOG)),
    lowered_with("aten.log2", rule!(elementwise::log_base), P::LogBase(LogBase::Two)),
    lowered_with("aten.log10", rule!(elementwise::log_base), P::LogBase(LogBase::Ten)),
    lowered_with("aten.log1p", rule!(elementwise::unary), P::Emit(hlo::LOG_PLUS_ONE)),
    lowered_with("aten.sin", rule!(elementwise::unary), P::Emit(hlo::SINE)),
    lowered_with("aten.cos", rule!(elementwise::unary), P::Emit(hlo::COSINE)),
    lowered_with("aten.tan", rule!(elementwise::unary), P::Emit(hlo::TAN)),
    lowered_with("aten.asin", rule!(elementwise::unary), P::Emit(chlo::ASIN)),
    lowered_with("aten.acos", rule!(elementwise::unary), P::Emit(chlo::ACOS)),
    lowered("aten.atan", rule!(elementwise::atan)),
    lowered_with("aten.sinh", rule!(elementwise::unary), P::Emit(chlo::SINH)),
    lowered_with("aten.cosh", rule!(elementwise::unary), P::Emit(chlo::COSH)),
    lowered_with("aten.tanh", rule!(elementwise::unary), P::Emit(hlo::TANH)),
    lowered_with("aten.asinh", rule!(elementwise::unary), P::Emit(chlo::ASINH)),
    lowered_with("aten.acosh", rule!(elementwise::unary), P::Emit(chlo::ACOSH)),
    lowered_with("aten.atanh", rule!(elementwise::unary), P::Emit(chlo::ATANH)),
    lowered_with("aten.sigmoid", rule!(elementwise::unary), P::Emit(hlo::LOGISTIC)),
    lowered_with("aten.erf", rule!(elementwise::unary), P::Emit(chlo::ERF)),
    lowered_with("aten.erfc", rule!(elementwise::unary), P::Emit(chlo::ERFC)),
    lowered_with("aten.erfinv", rule!(elementwise::unary), P::Emit(chlo::ERF_INV)),
    lowered_with("aten.lgamma", rule!(elementwise::unary), P::Emit(chlo::LGAMMA)),
    lowered_with("aten.digamma", rule!(elementwise::unary), P::Emit(chlo::DIGAMMA)),
    lowered("aten.reciprocal", rule!(elementwise::reciprocal)),
    lowered("aten.relu", rule!(elementwise::relu)),
    lowered("aten.gelu", rule!(elementwise::gelu_rule)),
    lowered("aten.silu", rule!(elementwise::silu)),
    lowered("aten.logical_not", rule!(elementwise::logical_not)),
    lowered_with("aten.bitwise_not", rule!(elementwise::unary), P::Emit(hlo::NOT)),
    // elementwise binary
    lowered_with("aten.add", rule!(elementwise::binary), P::Emit(hlo::ADD)),
    lowered_with("aten.sub", rule!(elementwise::binary), P::Emit(hlo::SUBTRACT)).legal(elementwise::subtract_legal),
    lowered("aten.rsub", rule!(elementwise::rsub)).legal(elementwise::subtract_legal),
    lowered_with("aten.mul", rule!(elementwise::binary), P::Emit(hlo::MULTIPLY)),
    lowered_with("aten.div", rule!(elementwise::binary), P::Emit(hlo::DIVIDE)),
    lowered("aten.floor_divide", rule!(elementwise::floor_divide)),
    lowered_with("aten.pow", rule!(elementwise::binary), P::Emit(hlo::POWER)),
    lowered_with("aten.maximum", rule!(elementwise::extremum), P::Extreme(Extreme::Max)),
    lowered_with("aten.minimum", rule!(elementwise::extremum), P::Extreme(Extreme::Min)),
    lowered_with("aten.atan2", rule!(elementwise::binary), P::Emit(hlo::ATAN2)),
    lowered_with("aten.fmod", rule!(elementwise::binary), P::Emit(hlo::REMAINDER)),
    lowered("aten.remainder", rule!(elementwise::remainder)),
    lowered_with("aten.bitwise_and", rule!(elementwise::binary), P::Emit(hlo::AND)),
    lowered_with("aten.bitwise_or", rule!(elementwise::binary), P::Emit(hlo::OR)),
    lowered_with("aten.bitwise_xor", rule!(elementwise::binary), P::Emit(hlo::XOR)),
    lowered_with("aten.eq", rule!(elementwise::compare), P::Cmp(Cmp::Eq)),
    lowered_with("aten.ne", rule!(elementwise::compare), P::Cmp(Cmp::Ne)),
    lowered_with("aten.lt", rule!(elementwise::compare), P::Cmp(Cmp::Lt)).legal(elementwise::ordered_legal),
    lowered_with("aten.le", rule!(elementwise::compare), P::Cmp(Cmp::Le)).legal(elementwise::ordered_legal),
    lowered_with("aten.gt", rule!(elementwise::compare), P::Cmp(Cmp::Gt)).legal(elementwise::ordered_legal),
    lowered_with("aten.ge", rule!(elementwise::compare), P::Cmp(Cmp::Ge)).legal(elementwise::ordered_legal),
    lowered_with("aten.logical_and", rule!(elementwise::logical), P::Emit(hlo::AND)),
    lowered_with("aten.logical_or", rule!(elementwise::logical), P::Emit(hlo::OR)),
    lowered_with("aten.logical_xor", rule!(elementwise::logical), P::Emit(hlo::XOR)),
    lowered("aten.where", rule!(elementwise::where_)),
    lowered_with("aten.clamp", rule!(elementwise::clamp), P::Clamp(Clamp::MinMax)),
    lowered_with("aten.clamp_min", rule!(elementwise::clamp), P::Clamp(Clamp::Min)),
    lowered_with("aten.clamp_max", rule!(elementwise::clamp), P::Clamp(Clamp::Max)),
    lowered("aten.hardtanh", rule!(elementwise::hardtanh)),
    lowered_with("aten.isnan", rule!(elementwise::classify), P::Classify(Classify::IsNan)),
    lowered_with("aten.isinf", rule!(elementwise::classify), P::Classify(Classify::IsInf)),
    lowered_with("aten.isfinite", rule!(elementwise::classify), P::Classify(Classify::IsFinite)),
    lowered("aten._to_copy", rule!(elementwise::convert)),
    lowered("aten.to", rule!(elementwise::convert)),
    lowered("aten.alias", rule!(elementwise::identity)),
    lowered("aten.clone", rule!(elementwise::identity)),
    lowered("aten.contiguous", rule!(elementwise::identity)),
    lowered("aten.detach", rule!(elementwise::identity)),
    lowered("aten.lift_fresh_copy", rule!(elementwise::identity)),
    lowered("aten.complex", rule!(elementwise::complex)),
    // reductions
    lowered_with("aten.sum", rule!(reduce::simple), P::Reduction(Reduction::Sum)),
    lowered_with("aten.mean", rule!(reduce::simple), P::Reduction(Reduction::Mean)).legal(reduce::mean_legal),
    lowered_with("aten.prod", rule!(reduce::simple), P::Reduction(Reduction::Prod)),
    lowered_with("aten.amax", rule!(reduce::simple), P::Reduction(Reduction::Max)),
    lowered_with("aten.amin", rule!(reduce::simple), P::Reduction(Reduction::Min)),
    lowered_with("aten.any", rule!(reduce::simple), P::Reduction(Reduction::Or)),
    lowered_with("aten.all", rule!(reduce::simple), P::Reduction(Reduction::And)),
    lowered_with("aten.argmax", rule!(reduce::arg), P::ArgReduction(ArgReduction::ArgMax)),
    lowered_with("aten.argmin", rule!(reduce::arg), P::ArgReduction(ArgReduction::ArgMin)),
    lowered_with("aten.max", rule!(reduce::arg), P::ArgReduction(ArgReduction::Max)),
    lowered_with("aten.min", rule!(reduce::arg), P::ArgReduction(ArgReduction::Min)),
    lowered("aten.var", rule!(reduce::var)).legal(reduce::float_result),
    // linear algebra
    lowered("aten.mm", rule!(linalg::mm)),
    lowered("aten.bmm", rule!(linalg::mm)),
    lowered("aten._int_mm", rule!(linalg::int_mm)).legal(linalg::int_mm_legal),
    lowered("aten.addmm", rule!(linalg::addmm)),
    lowered("aten.linalg_solve_triangular", rule!(linalg::solve_triangular)).legal(linalg::solve_triangular_legal),
    lowered_with("aten.triangular_solve", rule!(linalg::solve_triangular), P::Triangular(Triangular::Legacy)).legal(linalg::solve_triangular_legal),
    // shapes and data movement
    lowered("aten.view", rule!(shape::reshape)),
    lowered("aten.reshape", rule!(shape::reshape)),
    lowered("aten._unsafe_view", rule!(shape::reshape)),
    lowered("aten.squeeze", rule!(shape::reshape)),
    lowered("aten.unsqueeze", rule!(shape::reshape)),
    lowered("aten.flatten", rule!(shape::reshape)),
    lowered("aten.permute", rule!(shape::permute)),
    lowered("aten.transpose", rule!(shape::transpose)),
    lowered("aten.t", rule!(shape::transpose)),
    lowered("aten.expand", rule!(shape::expand)),
    lowered("aten.broadcast_to", rule!(shape::expand)),
    lowered("aten.slice", rule!(shape::slice)),
    lowered("aten.select", rule!(shape::select)),
    lowered("aten.cat", rule!(shape::cat)),
    lowered("aten.stack", rule!(shape::stack)),
    lowered_with("aten.split_with_sizes", rule!(shape::split), P::Split(Split::Split)),
    lowered_with("aten.split", rule!(shape::split), P::Split(Split::Split)),
    lowered_with("aten.chunk", rule!(shape::split), P::Split(Split::Split)),
    lowered_with("aten.unbind", rule!(shape::split), P::Split(Split::Unbind)),
    lowered("aten.flip", rule!(shape::flip)),
    lowered("aten.constant_pad_nd", rule!(shape::constant_pad)),
    // factories
    lowered_with("aten.full", rule!(factory::fill), P::Fill(Fill::FillValue)),
    lowered_with("aten.full_like", rule!(factory::fill), P::Fill(Fill::FillValue)),
    lowered_with("aten.new_full", rule!(factory::fill), P::Fill(Fill::FillValue)),
    lowered_with("aten.zeros", rule!(factory::fill), P::Fill(Fill::Zero)),
    lowered_with("aten.zeros_like", rule!(factory::fill), P::Fill(Fill::Zero)),
    lowered_with("aten.new_zeros", rule!(factory::fill), P::Fill(Fill::Zero)),
    lowered_with("aten.ones", rule!(factory::fill), P::Fill(Fill::One)),
    lowered_with("aten.ones_like", rule!(factory::fill), P::Fill(Fill::One)),
    lowered_with("aten.new_ones", rule!(factory::fill), P::Fill(Fill::One)),
    lowered_with("aten.empty", rule!(factory::fill), P::Fill(Fill::Zero)),
    lowered_with("aten.empty_like", rule!(factory::fill), P::Fill(Fill::Zero)),
    lowered_with("aten.new_empty", rule!(factory::fill), P::Fill(Fill::Zero)),
    lowered_with("aten.empty_permuted", rule!(factory::fill), P::Fill(Fill::Zero)),
    lowered_with("aten.empty_strided", rule!(factory::fill), P::Fill(Fill::Zero)),
    lowered_with("aten.new_empty_strided", rule!(factory::fill), P::Fill(Fill::Zero)),
    lowered_with("aten.scalar_tensor", rule!(factory::fill), P::Fill(Fill::S)),
    lowered("aten.arange", rule!(factory::arange)),
    lowered("tpu.constant", rule!(factory::constant)).legal(factory::literal_legal),
    // neural-network ops
    lowered_with("aten._softmax", rule!(nn::softmax), P::Softmax(Softmax::Plain)),
    lowered_with("aten._log_softmax", rule!(nn::softmax), P::Softmax(Softmax::Log)),
    lowered("aten.native_layer_norm", rule!(nn::layer_norm)),
    lowered_with("aten._native_batch_norm_legit_no_training", rule!(nn::batch_norm), P::BatchNorm(BatchNorm::NoTraining)),
    lowered_with("aten._native_batch_norm_legit_functional", rule!(nn::batch_norm), P::BatchNorm(BatchNorm::Functional)),
    lowered_with("aten._native_batch_norm_legit", rule!(nn::batch_norm), P::BatchNorm(BatchNorm::Legit)),
    lowered("aten.native_dropout", rule!(nn::dropout)),
    lowered("aten.convolution", rule!(nn::convolution)).legal(nn::convolution_legal),
    lowered("aten.max_pool2d_with_indices", rule!(nn::max_pool2d)),
    lowered("aten.avg_pool2d", rule!(nn::avg_pool2d)),
    lowered("aten.avg_pool2d_backward", rule!(nn::avg_pool2d_backward)),
    // indexing
    lowered("aten.embedding", rule!(indexing::embedding)),
    lowered("aten.index_select", rule!(indexing::index_select)),
    lowered("aten.gather", rule!(indexing::gather)),
    lowered_with("aten.scatter", rule!(indexing::scatter), P::Scatter(Scatter::Replace)).legal(indexing::scatter_legal),
    lowered_with("aten.scatter_add", rule!(indexing::scatter), P::Scatter(Scatter::Add)),
    lowered("aten.scatter_reduce", rule!(indexing::scatter_reduce)).legal(indexing::scatter_reduce_legal),
    lowered("aten.index_reduce", rule!(indexing::index_reduce)).legal(indexing::index_reduce_legal),
    lowered("aten.index_put", rule!(indexing::index_put)).legal(indexing::index_put_legal),
    lowered("aten._unsafe_index_put", rule!(indexing::index_put)).legal(indexing::index_put_legal),
    lowered("aten.index", rule!(indexing::index)).legal(indexing::index_legal),
    lowered("aten._unsafe_index", rule!(indexing::index)).legal(indexing::index_legal),
    lowered_with("aten.slice_scatter", rule!(indexing::slice_scatter), P::SliceScatter(SliceScatter::Slice)),
    lowered_with("aten.select_scatter", rule!(indexing::slice_scatter), P::SliceScatter(SliceScatter::Select)),
    lowered_with("aten.cumsum", rule!(indexing::cumsum), P::Cumulative(Cumulative::Sum)),
    lowered_with("aten.cumprod", rule!(indexing::cumsum), P::Cumulative(Cumulative::Prod)),
    lowered("aten.as_strided", rule!(indexing::as_strided)),
    lowered("aten.as_strided_scatter", rule!(indexing::as_strided_scatter)),
    lowered("aten.put", rule!(indexing::put)),
    lowered("aten.masked_scatter", rule!(indexing::masked_scatter)),
    lowered("aten.nonzero_static", rule!(indexing::nonzero_static)),
    lowered("aten.logcumsumexp", rule!(indexing::logcumsumexp)).legal(reduce::float_result),
    lowered("aten.histc", rule!(indexing::histc)).legal(prims::not_bool_legal),
    lowered("prims.as_strided_scatter", rule!(indexing::as_strided_scatter)),
    // prims left by PyTorch's reference decompositions, special functions
    lowered_with("prims.sum", rule!(prims::reduction), P::Reduction(Reduction::Sum)),
    lowered_with("prims.var", rule!(prims::reduction), P::Reduction(Reduction::Var)).legal(reduce::float_result),
    lowered("prims.broadcast_in_dim", rule!(prims::broadcast_in_dim)),
    lowered("prims.where", rule!(prims::where_)),
    lowered("prims.div", rule!(prims::div)).legal(prims::not_bool_legal),
    lowered("prims.fma", rule!(prims::fma)).legal(prims::not_bool_legal),
    lowered("prims.convert_element_type", rule!(elementwise::convert)),
    lowered("prims.view_of_dtype", rule!(prims::view_of_dtype)).legal(prims::view_of_dtype_legal),
    lowered_with("prims.abs", rule!(elementwise::unary), P::Emit(hlo::ABS)).legal(elementwise::not_of_bool),
    lowered_with("prims.neg", rule!(elementwise::unary), P::Emit(hlo::NEGATE)).legal(elementwise::not_of_bool),
    lowered_with("prims.erfc", rule!(elementwise::unary), P::Emit(chlo::ERFC)),
    lowered_with("prims.bessel_i1e", rule!(elementwise::unary), P::Emit(chlo::BESSEL_I1E)),
    lowered("prims.signbit", rule!(prims::signbit)),
    lowered("aten.signbit", rule!(prims::signbit)),
    lowered_with("prims.fmax", rule!(prims::fminmax), P::Extreme(Extreme::Max)),
    lowered_with("aten.fmax", rule!(prims::fminmax), P::Extreme(Extreme::Max)),
    lowered_with("prims.fmin", rule!(prims::fminmax), P::Extreme(Extreme::Min)),
    lowered_with("aten.fmin", rule!(prims::fminmax), P::Extreme(Extreme::Min)),
    lowered_with("prims.shift_left", rule!(prims::binary), P::Emit(hlo::SHIFT_LEFT)),
    lowered_with("prims.shift_right_arithmetic", rule!(prims::binary), P::Emit(hlo::SHIFT_RIGHT_ARITHMETIC)),
    lowered_with("prims.zeta", rule!(prims::binary), P::Emit(chlo::ZETA)),
    lowered("prims.hypot", rule!(prims::hypot)),
    lowered("aten.hypot", rule!(prims::hypot)),
    lowered("aten.polygamma", rule!(prims::polygamma)),
    lowered_with("prims.erfcx", rule!(prims::special_unary), P::Special(Special::Erfcx)),
    lowered_with("aten.special_erfcx", rule!(prims::special_unary), P::Special(Special::Erfcx)),
    lowered_with("prims.ndtri", rule!(prims::special_unary), P::Special(Special::Ndtri)),
    lowered_with("aten.special_ndtri", rule!(prims::special_unary), P::Special(Special::Ndtri)),
    lowered_with("prims.spherical_bessel_j0", rule!(prims::special_unary), P::Special(Special::SphericalBesselJ0)),
    lowered_with("aten.special_spherical_bessel_j0", rule!(prims::special_unary), P::Special(Special::SphericalBesselJ0)),
    lowered_with("prims.bessel_i1", rule!(prims::special_unary), P::Special(Special::BesselI1)),
    lowered_with("aten.special_modified_bessel_i1", rule!(prims::special_unary), P::Special(Special::BesselI1)),
    lowered_with("prims.bessel_i0", rule!(prims::special_unary), P::Special(Special::BesselI0)),
    lowered_with("prims.bessel_i0e", rule!(prims::special_unary), P::Special(Special::BesselI0e)),
    lowered_with("aten.i0", rule!(prims::special_unary), P::Special(Special::BesselI0)),
    lowered_with("aten.special_i0e", rule!(prims::special_unary), P::Special(Special::BesselI0e)),
    lowered_with("aten.special_modified_bessel_i0", rule!(prims::special_unary), P::Special(Special::BesselI0)),
    lowered("prims.nextafter", rule!(prims::nextafter)),
    lowered("aten.nextafter", rule!(prims::nextafter)),
    lowered_with("prims.gcd", rule!(prims::gcd), P::Gcd(Gcd::Gcd)).legal(prims::integer_legal),
    lowered_with("aten.gcd", rule!(prims::gcd), P::Gcd(Gcd::Gcd)).legal(prims::integer_legal),
    lowered_with("aten.lcm", rule!(prims::gcd), P::Gcd(Gcd::Lcm)).legal(prims::integer_legal),
    lowered("aten.angle", rule!(prims::angle)),
    lowered("aten.copy", rule!(prims::copy)),
    // Fourier transforms and complex parts
    lowered("aten._fft_r2c", rule!(fft::r2c)),
    lowered("aten._fft_c2r", rule!(fft::c2r)),
    lowered("aten._fft_c2c", rule!(fft::c2c)),
    lowered("aten._conj", rule!(fft::conj)),
    lowered("aten._conj_physical", rule!(fft::conj)),
    lowered("aten.conj_physical", rule!(fft::conj)),
    lowered_with("aten.real", rule!(fft::part), P::Part(Part::Real)),
    lowered_with("aten.imag", rule!(fft::part), P::Part(Part::Imag)),
    lowered("aten.view_as_real", rule!(fft::view_as_real)),
    lowered("aten.view_as_complex", rule!(fft::view_as_complex)),
    // orthogonal polynomials
    lowered_with("aten.special_chebyshev_polynomial_t", rule!(polynomial::polynomial), P::Polynomial(Polynomial::ChebyshevT)),
    lowered_with("aten.special_chebyshev_polynomial_u", rule!(polynomial::polynomial), P::Polynomial(Polynomial::ChebyshevU)),
    lowered_with("aten.special_chebyshev_polynomial_v", rule!(polynomial::polynomial), P::Polynomial(Polynomial::ChebyshevV)),
    lowered_with("aten.special_chebyshev_polynomial_w", rule!(polynomial::polynomial), P::Polynomial(Polynomial::ChebyshevW)),
    lowered_with("aten.special_shifted_chebyshev_polynomial_t", rule!(polynomial::polynomial), P::Polynomial(Polynomial::ShiftedChebyshevT)),
    lowered_with("aten.special_shifted_chebyshev_polynomial_u", rule!(polynomial::polynomial), P::Polynomial(Polynomial::ShiftedChebyshevU)),
    lowered_with("aten.special_shifted_chebyshev_polynomial_v", rule!(polynomial::polynomial), P::Polynomial(Polynomial::ShiftedChebyshevV)),
    lowered_with("aten.special_shifted_chebyshev_polynomial_w", rule!(polynomial::polynomial), P::Polynomial(Polynomial::ShiftedChebyshevW)),
    lowered_with("aten.special_hermite_polynomial_h", rule!(polynomial::polynomial), P::Polynomial(Polynomial::HermiteH)),
    lowered_with("aten.special_hermite_polynomial_he", rule!(polynomial::polynomial), P::Polynomial(Polynomial::HermiteHe)),
    lowered_with("aten.special_laguerre_polynomial_l", rule!(polynomial::polynomial), P::Polynomial(Polynomial::LaguerreL)),
    lowered_with("aten.special_legendre_polynomial_p", rule!(polynomial::polynomial), P::Polynomial(Polynomial::LegendreP)),
    // sorting
    lowered("aten.sort", rule!(sort::sort)),
    lowered("aten.topk", rule!(sort::topk)),
    lowered("aten.kthvalue", rule!(sort::kthvalue)),
    lowered_with("aten.median", rule!(sort::median), P::Median(Median::Median)),
    lowered_with("aten.nanmedian", rule!(sort::median), P::Median(Median::NanMedian)),
    lowered_with("aten.searchsorted", rule!(sort::searchsorted), P::Search(Search::SearchSorted)).legal(sort::searchsorted_legal),
    lowered_with("aten.bucketize", rule!(sort::searchsorted), P::Search(Search::Bucketize)),
    lowered_with("aten.cummax", rule!(sort::cumulative_extreme), P::Extreme(Extreme::Max)),
    lowered_with("aten.cummin", rule!(sort::cumulative_extreme), P::Extreme(Extreme::Min)),
    // layouts of SPMD programs (effects, so that CSE keeps constraints whose layouts differ)
    lowered("tpu.sharding_constraint", rule!(layout::sharding_constraint)),
    lowered("tpu.reshard", rule!(layout::sharding_constraint)),
    // cross-replica collectives of replicated programs (PyTorch's functional collectives)
    lowered("c10d.all_reduce", rule!(collective::all_reduce)).legal(collective::reducing_legal),
    lowered("c10d.reduce_scatter", rule!(collective::reduce_scatter)).legal(collective::reducing_legal),
    lowered("c10d.all_gather", rule!(collective::all_gather)).legal(collective::gather_legal),
    lowered("c10d.all_to_all", rule!(collective::all_to_all)).legal(collective::gather_legal),
    lowered("c10d.broadcast", rule!(collective::broadcast)).legal(collective::broadcast_legal),
    // int8 weight-only linear layers in the form `quantized-linear` chose
    lowered("tpu.quantized_linear", rule!(quant::quantized_linear)).legal(quant::quantized_linear_legal),
    lowered("tpu.matmul", rule!(host_matmul::matmul)).legal(host_matmul::matmul_legal),
    // device random draws with explicit state. Pure, not `random`: every result is a function
    // of the state operand alone (the same state gives the same numbers, the advanced state is
    // result 0), so CSE merging two draws from one state and DCE dropping an unread draw are
    // both correct; the hidden-generator trait would only forbid those.
    lowered("tpu.rng_uniform", rule!(random::uniform)).legal(random::uniform_legal),
    lowered("tpu.rng_normal", rule!(random::normal)).legal(random::normal_legal),
    lowered("tpu.rng_integers", rule!(random::integers)).legal(random::integers_legal),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_lowering_names_a_declared_op_once() {
        // Building the side table panics on an undeclared or repeated op.
        assert_eq!(LOWERINGS.len(), TABLE.len());
        let exp = lowering(&OpName::parse("aten.exp.default").unwrap()).unwrap();
        assert_eq!((exp.rule_name, exp.param), ("elementwise::unary", Some(P::Emit(hlo::EXPONENTIAL))));
        assert!(lowering(&OpName::parse("aten.no_such_op").unwrap()).is_none());
    }
}
