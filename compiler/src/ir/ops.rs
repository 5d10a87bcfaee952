//! What the IR knows about each op: operand and result counts, required attributes, a shape
//! rule the verifier checks, and whether the op is pure and deterministic (for DCE and CSE).
//! Ops not listed here are still valid IR (they may be unsupported later, and fall back);
//! the verifier then checks only the generic invariants.

use super::graph::OpName;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arity {
    Exactly(usize),
    AtLeast(usize),
    Between(usize, usize),
}

impl Arity {
    pub fn accepts(self, n: usize) -> bool {
        match self {
            Arity::Exactly(k) => n == k,
            Arity::AtLeast(k) => n >= k,
            Arity::Between(lo, hi) => (lo..=hi).contains(&n),
        }
    }
}

impl std::fmt::Display for Arity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Arity::Exactly(k) => write!(f, "{k}"),
            Arity::AtLeast(k) => write!(f, "at least {k}"),
            Arity::Between(lo, hi) => write!(f, "{lo} to {hi}"),
        }
    }
}

/// The shape/dtype relation between operands, attributes and results.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShapeRule {
    /// Nothing checked beyond counts.
    Free,
    /// Result has the shape of operand 0 (unary elementwise, clone, dropout's first result...).
    SameShape,
    /// Result shape is the broadcast of the operand shapes.
    Broadcast,
    /// Broadcast, and the result dtype is bool.
    Compare,
    /// `[m, k] @ [k, n] -> [m, n]`.
    MatMul,
    /// `[b, m, k] @ [b, k, n] -> [b, m, n]`.
    BatchMatMul,
    /// `addmm(bias, a, b)`: mm of operands 1 and 2, bias broadcastable to the result.
    AddMm,
    /// Reshape: static element counts agree, and a static `size` attribute equals the result.
    Reshape,
    /// `permute`: `dims` is a permutation and the result is the permuted operand.
    Permute,
    /// `tpu.constant`: the `value` literal's type is the result type.
    Constant,
}

#[derive(Clone, Copy, Debug)]
pub struct OpInfo {
    pub operands: Arity,
    pub results: Arity,
    pub required_attrs: &'static [&'static str],
    pub rule: ShapeRule,
}

const fn info(operands: Arity, results: usize, required_attrs: &'static [&'static str], rule: ShapeRule) -> OpInfo {
    OpInfo { operands, results: Arity::Exactly(results), required_attrs, rule }
}

const UNARY: [&str; 32] = [
    "abs",
    "neg",
    "ceil",
    "floor",
    "round",
    "trunc",
    "sign",
    "sqrt",
    "rsqrt",
    "exp",
    "exp2",
    "expm1",
    "log",
    "log2",
    "log10",
    "log1p",
    "sin",
    "cos",
    "tan",
    "asin",
    "acos",
    "atan",
    "sinh",
    "cosh",
    "tanh",
    "sigmoid",
    "erf",
    "reciprocal",
    "relu",
    "logical_not",
    "bitwise_not",
    "gelu",
];
const BINARY: [&str; 16] = [
    "add",
    "sub",
    "mul",
    "div",
    "pow",
    "maximum",
    "minimum",
    "remainder",
    "fmod",
    "atan2",
    "bitwise_and",
    "bitwise_or",
    "bitwise_xor",
    "logical_and",
    "logical_or",
    "logical_xor",
];
const COMPARE: [&str; 6] = ["eq", "ne", "lt", "le", "gt", "ge"];

/// Facts about `op`, or `None` for an op the IR does not describe.
pub fn op_info(op: &OpName) -> Option<OpInfo> {
    use Arity::*;
    use ShapeRule::*;
    let name = op.name.as_str();
    match op.namespace.as_str() {
        "tpu" => match name {
            "constant" => Some(info(Exactly(0), 1, &["value"], Constant)),
            _ => None,
        },
        "aten" => Some(match name {
            n if UNARY.contains(&n) => info(Exactly(1), 1, &[], SameShape),
            // Scalar operands of binary ops are attributes (`other`), so one or two operands.
            n if BINARY.contains(&n) => info(Between(1, 2), 1, &[], Broadcast),
            n if COMPARE.contains(&n) => info(Between(1, 2), 1, &[], Compare),
            "where" => info(Between(1, 3), 1, &[], Broadcast),
            "clamp" => info(Between(1, 3), 1, &[], Broadcast),
            "mm" => info(Exactly(2), 1, &[], MatMul),
            "bmm" => info(Exactly(2), 1, &[], BatchMatMul),
            "addmm" => info(Exactly(3), 1, &[], AddMm),
            "view" | "reshape" | "_unsafe_view" => info(Exactly(1), 1, &["size"], Reshape),
            "permute" => info(Exactly(1), 1, &["dims"], Permute),
            "transpose" => info(Exactly(1), 1, &["dim0", "dim1"], Free),
            "t" | "squeeze" | "unsqueeze" | "expand" | "slice" | "select" => info(Exactly(1), 1, &[], Free),
            "alias" | "clone" | "_to_copy" | "contiguous" => info(Exactly(1), 1, &[], SameShape),
            "native_layer_norm" => info(Between(1, 3), 3, &["normalized_shape", "eps"], Free),
            "native_dropout" => info(Exactly(1), 2, &["p"], SameShape),
            "_softmax" | "_log_softmax" => info(Exactly(1), 1, &["dim"], SameShape),
            "full" => info(Exactly(0), 1, &["size", "fill_value"], Free),
            "scalar_tensor" => info(Exactly(0), 1, &["s"], Free),
            "arange" => info(Exactly(0), 1, &["end"], Free),
            "sum" | "mean" | "amax" | "amin" | "prod" | "argmax" | "argmin" | "var" | "any" => {
                info(Exactly(1), 1, &[], Free)
            }
            "cat" | "stack" => info(AtLeast(1), 1, &["dim"], Free),
            _ => return None,
        }),
        _ => None,
    }
}

/// Ops whose results depend on hidden state (RNG): never merged by CSE.
pub fn is_nondeterministic(op: &OpName) -> bool {
    op.namespace == "aten"
        && matches!(
            op.name.as_str(),
            "native_dropout"
                | "dropout"
                | "bernoulli"
                | "rand"
                | "randn"
                | "rand_like"
                | "randn_like"
                | "randint"
                | "randint_like"
                | "randperm"
                | "normal"
                | "uniform"
                | "multinomial"
                | "exponential"
                | "poisson"
        )
}

/// Ops with effects beyond their results (in-place ATen ops end in `_`, plus explicit effects):
/// never removed by DCE and never merged by CSE.
pub fn has_side_effects(op: &OpName) -> bool {
    op.name.ends_with('_') || matches!(op.name.as_str(), "print" | "_assert_async")
}
