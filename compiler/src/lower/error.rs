//! Lowering errors. Callers tell them apart: an unsupported op falls back to eager, a bad
//! attribute or an MLIR failure is a compiler bug or bad input.

use crate::ir::{SourceLoc, VerifyError};

#[derive(Debug, thiserror::Error)]
pub enum LowerError {
    /// The op has no lowering in the registry, or this form of it is not lowered (`reason`).
    /// `loc` is where the node was written, when the graph came from text: the backend maps
    /// it back to the FX node, which then runs eagerly alone.
    #[error("unsupported op {op} at node {node}{}", reason.as_ref().map(|r| format!(": {r}")).unwrap_or_default())]
    Unsupported { op: String, node: String, reason: Option<String>, loc: Option<SourceLoc> },
    /// Symbolic dims must be specialised before lowering (one compile per concrete size).
    #[error("node {node} ({op}) has a symbolic shape {ty}; lowering needs static shapes")]
    DynamicShape { op: String, node: String, ty: String },
    #[error("node {node} ({op}): {message}")]
    BadNode { op: String, node: String, message: String },
    #[error("invalid IR: {0}")]
    Verify(#[from] VerifyError),
    /// A value, or a tensor its rule builds, is bigger than the lowering's limit
    /// (`Lowering::with_max_tensor_bytes`); XLA is never asked to compile it. `bytes`
    /// saturates at u64::MAX.
    #[error("node {node} ({op}) needs a tensor of {bytes} bytes, over the limit of {limit} bytes")]
    TooLarge { op: String, node: String, bytes: u64, limit: u64 },
    /// MLIR refused to build or verify something we emitted: a bug in a lowering rule.
    #[error("MLIR error while lowering {context}: {message}")]
    Mlir { context: String, message: String },
}

/// What a lowering rule reports; the driver adds the op and node names. Forms a rule does not
/// lower are refused before emission by the op's legality check (`legality.rs`); `Unsupported`
/// remains for what only emission finds (the emitter refusing a complex-to-real conversion).
#[derive(Debug)]
pub enum RuleError {
    Unsupported(String),
    Bad(String),
    Mlir(String),
}

impl From<melior::Error> for RuleError {
    fn from(e: melior::Error) -> Self {
        RuleError::Mlir(e.to_string())
    }
}

pub type RuleResult<T> = Result<T, RuleError>;

/// `Err(RuleError::Bad(..))` with a formatted message.
macro_rules! bad {
    ($($t:tt)*) => { Err($crate::lower::error::RuleError::Bad(format!($($t)*))) };
}
pub(crate) use bad;
