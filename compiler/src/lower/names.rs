//! Every op name the lowering emits, each written once: rules and the emitter name ops by
//! these constants, never by a string literal (`compiler/tests/layering.rs` checks). The
//! dialects are not registered in our MLIR context (toolchain.md: the generic builder), so a
//! misspelt name would only fail inside PJRT; `engine/tests/emitted_names.rs` instead checks
//! [`ALL`] against the op names the installed PJRT plugin's dialects register.

/// StableHLO ops.
pub mod hlo {
    pub const ABS: &str = "stablehlo.abs";
    pub const ADD: &str = "stablehlo.add";
    pub const ALL_GATHER: &str = "stablehlo.all_gather";
    pub const ALL_REDUCE: &str = "stablehlo.all_reduce";
    pub const ALL_TO_ALL: &str = "stablehlo.all_to_all";
    pub const AND: &str = "stablehlo.and";
    pub const ATAN2: &str = "stablehlo.atan2";
    pub const BITCAST_CONVERT: &str = "stablehlo.bitcast_convert";
    pub const BROADCAST_IN_DIM: &str = "stablehlo.broadcast_in_dim";
    pub const CEIL: &str = "stablehlo.ceil";
    pub const COMPARE: &str = "stablehlo.compare";
    pub const COMPLEX: &str = "stablehlo.complex";
    pub const CONCATENATE: &str = "stablehlo.concatenate";
    pub const CONSTANT: &str = "stablehlo.constant";
    pub const CONVERT: &str = "stablehlo.convert";
    pub const CONVOLUTION: &str = "stablehlo.convolution";
    pub const CUSTOM_CALL: &str = "stablehlo.custom_call";
    pub const COSINE: &str = "stablehlo.cosine";
    pub const DIVIDE: &str = "stablehlo.divide";
    pub const DOT_GENERAL: &str = "stablehlo.dot_general";
    pub const DYNAMIC_UPDATE_SLICE: &str = "stablehlo.dynamic_update_slice";
    pub const EXPONENTIAL: &str = "stablehlo.exponential";
    pub const EXPONENTIAL_MINUS_ONE: &str = "stablehlo.exponential_minus_one";
    pub const FFT: &str = "stablehlo.fft";
    pub const FLOOR: &str = "stablehlo.floor";
    pub const GATHER: &str = "stablehlo.gather";
    pub const IMAG: &str = "stablehlo.imag";
    pub const IOTA: &str = "stablehlo.iota";
    pub const LOG: &str = "stablehlo.log";
    pub const LOG_PLUS_ONE: &str = "stablehlo.log_plus_one";
    pub const LOGISTIC: &str = "stablehlo.logistic";
    pub const MAXIMUM: &str = "stablehlo.maximum";
    pub const MINIMUM: &str = "stablehlo.minimum";
    pub const MULTIPLY: &str = "stablehlo.multiply";
    pub const NEGATE: &str = "stablehlo.negate";
    pub const NOT: &str = "stablehlo.not";
    pub const OR: &str = "stablehlo.or";
    pub const PAD: &str = "stablehlo.pad";
    pub const POWER: &str = "stablehlo.power";
    pub const REAL: &str = "stablehlo.real";
    pub const REDUCE: &str = "stablehlo.reduce";
    pub const REDUCE_SCATTER: &str = "stablehlo.reduce_scatter";
    pub const REDUCE_WINDOW: &str = "stablehlo.reduce_window";
    pub const REMAINDER: &str = "stablehlo.remainder";
    pub const RESHAPE: &str = "stablehlo.reshape";
    pub const RETURN: &str = "stablehlo.return";
    pub const REVERSE: &str = "stablehlo.reverse";
    pub const RNG: &str = "stablehlo.rng";
    pub const RNG_BIT_GENERATOR: &str = "stablehlo.rng_bit_generator";
    pub const ROUND_NEAREST_EVEN: &str = "stablehlo.round_nearest_even";
    pub const RSQRT: &str = "stablehlo.rsqrt";
    pub const SCATTER: &str = "stablehlo.scatter";
    pub const SELECT: &str = "stablehlo.select";
    pub const SHIFT_LEFT: &str = "stablehlo.shift_left";
    pub const SHIFT_RIGHT_ARITHMETIC: &str = "stablehlo.shift_right_arithmetic";
    pub const SHIFT_RIGHT_LOGICAL: &str = "stablehlo.shift_right_logical";
    pub const SIGN: &str = "stablehlo.sign";
    pub const SINE: &str = "stablehlo.sine";
    pub const SLICE: &str = "stablehlo.slice";
    pub const SORT: &str = "stablehlo.sort";
    pub const SQRT: &str = "stablehlo.sqrt";
    pub const SUBTRACT: &str = "stablehlo.subtract";
    pub const TAN: &str = "stablehlo.tan";
    pub const TANH: &str = "stablehlo.tanh";
    pub const TRANSPOSE: &str = "stablehlo.transpose";
    pub const TRIANGULAR_SOLVE: &str = "stablehlo.triangular_solve";
    pub const WHILE: &str = "stablehlo.while";
    pub const XOR: &str = "stablehlo.xor";
}

/// CHLO ops (decomposed by XLA).
pub mod chlo {
    pub const ACOS: &str = "chlo.acos";
    pub const ACOSH: &str = "chlo.acosh";
    pub const ASIN: &str = "chlo.asin";
    pub const ASINH: &str = "chlo.asinh";
    pub const ATANH: &str = "chlo.atanh";
    pub const BESSEL_I1E: &str = "chlo.bessel_i1e";
    pub const COSH: &str = "chlo.cosh";
    pub const DIGAMMA: &str = "chlo.digamma";
    pub const ERF: &str = "chlo.erf";
    pub const ERF_INV: &str = "chlo.erf_inv";
    pub const ERFC: &str = "chlo.erfc";
    pub const LGAMMA: &str = "chlo.lgamma";
    pub const NEXT_AFTER: &str = "chlo.next_after";
    pub const POLYGAMMA: &str = "chlo.polygamma";
    pub const SINH: &str = "chlo.sinh";
    pub const ZETA: &str = "chlo.zeta";
}

/// Targets of `stablehlo.custom_call`: torchtpu's host kernels, which the runtime registers
/// with the plugin under these names (`torchtpu_runtime::host_kernels`; the engine's tests check
/// that the two agree). Emitted only where `target::Target::host_kernels` says so.
pub mod custom_call {
    pub const INT8_MATMUL: &str = "torchtpu_int8_matmul";
    /// ATen's matmul, by which operands come transposed (a, b).
    pub const ATEN_MATMUL_NN: &str = "torchtpu_aten_matmul_nn";
    pub const ATEN_MATMUL_NT: &str = "torchtpu_aten_matmul_nt";
    pub const ATEN_MATMUL_TN: &str = "torchtpu_aten_matmul_tn";
    pub const ATEN_MATMUL_TT: &str = "torchtpu_aten_matmul_tt";
}

/// Shardy ops.
pub mod sdy {
    pub const MESH: &str = "sdy.mesh";
    pub const SHARDING_CONSTRAINT: &str = "sdy.sharding_constraint";
}

/// The argument and result attribute that gives `@main`'s values their Shardy sharding (an
/// attribute name, not an op: not in [`ALL`]).
pub const SDY_SHARDING_ATTR: &str = "sdy.sharding";

/// Every op name above.
pub const ALL: &[&str] = &[
    hlo::ABS,
    hlo::ADD,
    hlo::ALL_GATHER,
    hlo::ALL_REDUCE,
    hlo::ALL_TO_ALL,
    hlo::AND,
    hlo::ATAN2,
    hlo::BITCAST_CONVERT,
    hlo::BROADCAST_IN_DIM,
    hlo::CEIL,
    hlo::COMPARE,
    hlo::COMPLEX,
    hlo::CONCATENATE,
    hlo::CONSTANT,
    hlo::CONVERT,
    hlo::CONVOLUTION,
    hlo::CUSTOM_CALL,
    hlo::COSINE,
    hlo::DIVIDE,
    hlo::DOT_GENERAL,
    hlo::DYNAMIC_UPDATE_SLICE,
    hlo::EXPONENTIAL,
    hlo::EXPONENTIAL_MINUS_ONE,
    hlo::FFT,
    hlo::FLOOR,
    hlo::GATHER,
    hlo::IMAG,
    hlo::IOTA,
    hlo::LOG,
    hlo::LOG_PLUS_ONE,
    hlo::LOGISTIC,
    hlo::MAXIMUM,
    hlo::MINIMUM,
    hlo::MULTIPLY,
    hlo::NEGATE,
    hlo::NOT,
    hlo::OR,
    hlo::PAD,
    hlo::POWER,
    hlo::REAL,
    hlo::REDUCE,
    hlo::REDUCE_SCATTER,
    hlo::REDUCE_WINDOW,
    hlo::REMAINDER,
    hlo::RESHAPE,
    hlo::RETURN,
    hlo::REVERSE,
    hlo::RNG,
    hlo::RNG_BIT_GENERATOR,
    hlo::ROUND_NEAREST_EVEN,
    hlo::RSQRT,
    hlo::SCATTER,
    hlo::SELECT,
    hlo::SHIFT_LEFT,
    hlo::SHIFT_RIGHT_ARITHMETIC,
    hlo::SHIFT_RIGHT_LOGICAL,
    hlo::SIGN,
    hlo::SINE,
    hlo::SLICE,
    hlo::SORT,
    hlo::SQRT,
    hlo::SUBTRACT,
    hlo::TAN,
    hlo::TANH,
    hlo::TRANSPOSE,
    hlo::TRIANGULAR_SOLVE,
    hlo::WHILE,
    hlo::XOR,
    chlo::ACOS,
    chlo::ACOSH,
    chlo::ASIN,
    chlo::ASINH,
    chlo::ATANH,
    chlo::BESSEL_I1E,
    chlo::COSH,
    chlo::DIGAMMA,
    chlo::ERF,
    chlo::ERF_INV,
    chlo::ERFC,
    chlo::LGAMMA,
    chlo::NEXT_AFTER,
    chlo::POLYGAMMA,
    chlo::SINH,
    chlo::ZETA,
    sdy::MESH,
    sdy::SHARDING_CONSTRAINT,
];
