//! Every op name the lowering emits, each written once: rules and the emitter name ops by
//! these constants, never by a string literal (`compiler/tests/layering.rs` checks). The
//! dialects are not registered in our MLIR context (toolchain.md: the generic builder), so a
//! misspelt name would only fail inside PJRT; `engine/tests/emitted_names.rs` instead checks
//! [`ALL`] against the op names the installed PJRT plugin's dialects register.

/// Declares each dialect's op names, once each, and [`ALL`], every one of them: complete by
/// construction, so a name added to a dialect is checked against the plugin with the rest.
macro_rules! op_names {
    ($($(#[$doc:meta])* $module:ident { $($name:ident = $text:literal,)* })*) => {
        $($(#[$doc])* pub mod $module { $(pub const $name: &str = $text;)* })*

        /// Every op name the lowering can emit (not the custom-call targets: those are
        /// [`custom_call`]'s, the runtime's kernels).
        pub const ALL: &[&str] = &[$($($module::$name,)*)*];
    };
}

op_names! {
    /// StableHLO ops.
    hlo {
        ABS = "stablehlo.abs",
        ADD = "stablehlo.add",
        ALL_GATHER = "stablehlo.all_gather",
        ALL_REDUCE = "stablehlo.all_reduce",
        ALL_TO_ALL = "stablehlo.all_to_all",
        AND = "stablehlo.and",
        ATAN2 = "stablehlo.atan2",
        BITCAST_CONVERT = "stablehlo.bitcast_convert",
        BROADCAST_IN_DIM = "stablehlo.broadcast_in_dim",
        CEIL = "stablehlo.ceil",
        COMPARE = "stablehlo.compare",
        COMPLEX = "stablehlo.complex",
        CONCATENATE = "stablehlo.concatenate",
        CONSTANT = "stablehlo.constant",
        CONVERT = "stablehlo.convert",
        CONVOLUTION = "stablehlo.convolution",
        CUSTOM_CALL = "stablehlo.custom_call",
        COSINE = "stablehlo.cosine",
        DIVIDE = "stablehlo.divide",
        DOT_GENERAL = "stablehlo.dot_general",
        DYNAMIC_UPDATE_SLICE = "stablehlo.dynamic_update_slice",
        EXPONENTIAL = "stablehlo.exponential",
        EXPONENTIAL_MINUS_ONE = "stablehlo.exponential_minus_one",
        FFT = "stablehlo.fft",
        FLOOR = "stablehlo.floor",
        GATHER = "stablehlo.gather",
        IMAG = "stablehlo.imag",
        IOTA = "stablehlo.iota",
        LOG = "stablehlo.log",
        LOG_PLUS_ONE = "stablehlo.log_plus_one",
        LOGISTIC = "stablehlo.logistic",
        MAXIMUM = "stablehlo.maximum",
        MINIMUM = "stablehlo.minimum",
        MULTIPLY = "stablehlo.multiply",
        NEGATE = "stablehlo.negate",
        NOT = "stablehlo.not",
        OR = "stablehlo.or",
        PAD = "stablehlo.pad",
        POWER = "stablehlo.power",
        REAL = "stablehlo.real",
        REDUCE = "stablehlo.reduce",
        REDUCE_SCATTER = "stablehlo.reduce_scatter",
        REDUCE_WINDOW = "stablehlo.reduce_window",
        REMAINDER = "stablehlo.remainder",
        RESHAPE = "stablehlo.reshape",
        RETURN = "stablehlo.return",
        REVERSE = "stablehlo.reverse",
        RNG = "stablehlo.rng",
        RNG_BIT_GENERATOR = "stablehlo.rng_bit_generator",
        ROUND_NEAREST_EVEN = "stablehlo.round_nearest_even",
        RSQRT = "stablehlo.rsqrt",
        SCATTER = "stablehlo.scatter",
        SELECT = "stablehlo.select",
        SHIFT_LEFT = "stablehlo.shift_left",
        SHIFT_RIGHT_ARITHMETIC = "stablehlo.shift_right_arithmetic",
        SHIFT_RIGHT_LOGICAL = "stablehlo.shift_right_logical",
        SIGN = "stablehlo.sign",
        SINE = "stablehlo.sine",
        SLICE = "stablehlo.slice",
        SORT = "stablehlo.sort",
        SQRT = "stablehlo.sqrt",
        SUBTRACT = "stablehlo.subtract",
        TAN = "stablehlo.tan",
        TANH = "stablehlo.tanh",
        TRANSPOSE = "stablehlo.transpose",
        TRIANGULAR_SOLVE = "stablehlo.triangular_solve",
        WHILE = "stablehlo.while",
        XOR = "stablehlo.xor",
    }
    /// CHLO ops (decomposed by XLA).
    chlo {
        ACOS = "chlo.acos",
        ACOSH = "chlo.acosh",
        ASIN = "chlo.asin",
        ASINH = "chlo.asinh",
        ATANH = "chlo.atanh",
        BESSEL_I1E = "chlo.bessel_i1e",
        COSH = "chlo.cosh",
        DIGAMMA = "chlo.digamma",
        ERF = "chlo.erf",
        ERF_INV = "chlo.erf_inv",
        ERFC = "chlo.erfc",
        LGAMMA = "chlo.lgamma",
        NEXT_AFTER = "chlo.next_after",
        POLYGAMMA = "chlo.polygamma",
        SINH = "chlo.sinh",
        ZETA = "chlo.zeta",
    }
    /// Shardy ops.
    sdy {
        MESH = "sdy.mesh",
        SHARDING_CONSTRAINT = "sdy.sharding_constraint",
    }
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

/// The argument and result attribute that gives `@main`'s values their Shardy sharding (an
/// attribute name, not an op: not in [`ALL`]).
pub const SDY_SHARDING_ATTR: &str = "sdy.sharding";
