//! The engine's typed errors, and what each means to a caller (`ErrorKind`).

use torchtpu_compiler::driver::{DriverError, FAULT_ENV};
use torchtpu_compiler::lower::LowerError;
use torchtpu_compiler::passes::PipelineError;
use torchtpu_runtime::RuntimeError;

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// Parse, verify, passes, analyses or lowering (`DriverError` says which).
    #[error(transparent)]
    Compiler(#[from] DriverError),
    /// The PJRT plugin could not be loaded or its client started.
    #[error("cannot start the PJRT engine: {0}")]
    Plugin(String),
    /// The PJRT plugin refused to compile the lowered module.
    #[error(transparent)]
    Compile(RuntimeError),
    /// The PJRT plugin failed making input buffers, executing, or reading outputs.
    #[error(transparent)]
    Execute(RuntimeError),
    #[error("input {index}: expected {expected}, got {got}")]
    Input { index: usize, expected: String, got: String },
    #[error("expected {expected} inputs, got {got}")]
    Arity { expected: usize, got: usize },
    /// An SPMD program the devices cannot run as asked (a mesh larger than the devices).
    #[error("{0}")]
    Sharding(String),
    /// `TORCHTPU_INJECT_FAULT` named this stage (`compile` or `execute`; `lower` comes as
    /// `DriverError::Injected`).
    #[error("fault injected at stage '{stage}' ({FAULT_ENV})")]
    Injected { stage: &'static str },
    /// A torchtpu bug the engine caught (an analysis missing where the graph needs it).
    #[error("torchtpu bug at stage '{stage}': {message}")]
    Bug { stage: &'static str, message: String },
}

/// What an error means to a caller deciding between falling back, raising and reporting a
/// bug (the Python extension maps these onto `torchtpu.errors`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// An op, or a form of it, without a lowering (also a tensor over the size limit);
    /// `line`/`col` where the node was written, when the graph came from text.
    Unsupported { op: String, node: String, reason: Option<String>, line: Option<u32>, col: Option<u32> },
    /// PJRT refused to compile.
    Compile,
    /// The plugin is missing, unloadable, of another API version, or its client failed.
    Plugin,
    /// PJRT failed running the program.
    Execution,
    /// The caller's inputs do not match the program (count, dtype, shape, layout, size).
    Input,
    /// A mesh or sharding the devices cannot run (too few devices, a bad layout).
    Sharding,
    /// A bug in torchtpu, or a fault injected at `stage` (parse, verify, passes, analyses,
    /// lower, compile, execute).
    Internal { stage: &'static str },
}

impl EngineError {
    pub fn kind(&self) -> ErrorKind {
        match self {
            EngineError::Compiler(DriverError::Lower(LowerError::Unsupported { op, node, reason, loc })) => {
                ErrorKind::Unsupported {
                    op: op.clone(),
                    node: node.clone(),
                    reason: reason.clone(),
                    line: loc.map(|l| l.line),
                    col: loc.map(|l| l.col),
                }
            }
            EngineError::Compiler(DriverError::Lower(e @ LowerError::TooLarge { op, node, .. })) => {
                let reason = Some(e.to_string());
                ErrorKind::Unsupported { op: op.clone(), node: node.clone(), reason, line: None, col: None }
            }
            EngineError::Compiler(e) => ErrorKind::Internal { stage: e.stage() },
            EngineError::Plugin(_) => ErrorKind::Plugin,
            EngineError::Compile(_) => ErrorKind::Compile,
            EngineError::Execute(_) => ErrorKind::Execution,
            EngineError::Input { .. } | EngineError::Arity { .. } => ErrorKind::Input,
            EngineError::Sharding(_) => ErrorKind::Sharding,
            EngineError::Injected { stage } | EngineError::Bug { stage, .. } => ErrorKind::Internal { stage },
        }
    }
}

/// What is wrong with IR text or a pass pipeline a user handed in (`text.rs`), as opposed to
/// a failure inside torchtpu.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TextFault {
    /// The text does not parse or verify; where, when known.
    Ir { line: Option<u32>, col: Option<u32> },
    /// The pipeline names an unknown pass, is malformed, or gives a pass a bad option.
    Pipeline,
}

impl EngineError {
    /// The user's mistake, when this error is one (None: a torchtpu failure or the device's).
    pub fn text_fault(&self) -> Option<TextFault> {
        match self {
            EngineError::Compiler(DriverError::Parse(p)) => {
                Some(TextFault::Ir { line: u32::try_from(p.line).ok(), col: u32::try_from(p.col).ok() })
            }
            EngineError::Compiler(DriverError::Verify(v)) => {
                Some(TextFault::Ir { line: v.loc.map(|l| l.line), col: v.loc.map(|l| l.col) })
            }
            EngineError::Compiler(DriverError::Pipeline(
                PipelineError::UnknownPass { .. } | PipelineError::Malformed { .. } | PipelineError::BadOptions { .. },
            )) => Some(TextFault::Pipeline),
            _ => None,
        }
    }
}
