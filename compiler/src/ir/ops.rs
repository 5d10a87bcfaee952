//! The vocabulary of op signatures the verifier checks: operand/result counts and shape
//! rules. Which op has which signature is declared in the op registry (`crate::registry`).

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
