//! How the engine compiles a graph: the compiler driver's options (wrapped, not copied field
//! by field), the XLA overrides for PJRT, and a mesh to annotate the graph with.

use std::collections::BTreeMap;
use torchtpu_compiler::driver;
use torchtpu_compiler::lower::Format;
use torchtpu_runtime::XlaOption;

/// How a graph is compiled.
#[derive(Clone, Debug)]
pub struct Options {
    /// The driver's: the pass pipeline, donation (`donate_inputs`: outputs aliased to inputs
    /// of their type so PJRT donates the per-call input buffers), the size limit
    /// (`max_tensor_bytes`). `emit` is the engine's to set per call, and `target`
    /// the platform's (`Engine::compile` overrides both).
    pub compiler: driver::Options,
    /// XLA option overrides for this graph's compile (`CompileOptions::xla_options`).
    pub xla_options: BTreeMap<String, XlaOption>,
    /// A mesh and layouts put on the graph before it compiles, making it SPMD (`annotate.rs`).
    pub mesh: Option<MeshAnnotation>,
    /// Where the platform has a second kernel for an op (ATen's matmul on the host), use the
    /// one measured faster per shape (`kernel_choice.rs`); off: XLA's everywhere.
    pub choose_kernels: bool,
}

/// A mesh and the layouts of a graph's inputs and outputs, as a user or the exporter states them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MeshAnnotation {
    /// `(axis, size)`, major to minor.
    pub axes: Vec<(String, i64)>,
    /// Per input: None (unannotated, replicated unless propagation decides) or the mesh axes
    /// of each dim. None for all inputs unannotated.
    pub inputs: Option<Vec<Option<Vec<Vec<String>>>>>,
    /// Per output: None or the axes of each dim it is pinned to (a backward graph's gradients,
    /// in their parameters' layouts).
    pub outputs: Option<Vec<Option<Vec<Vec<String>>>>>,
}

/// 256 GiB: more than any one device holds, and below what XLA's CPU compiler survives (an
/// elementwise op on 2^39 bytes kills it with SIGFPE; past i64::MAX bytes it throws a C++
/// exception through the C API, which aborts the process). Measured on the CPU plugin 0.11.2.
pub const DEFAULT_MAX_TENSOR_BYTES: u64 = 1 << 38;

impl Options {
    pub fn with_pipeline(pipeline: &str) -> Options {
        let mut options = Options::default();
        options.compiler.pipeline = pipeline.to_string();
        options
    }

    /// These options with output-to-input donation on or off.
    pub fn donating(mut self, donate: bool) -> Options {
        self.compiler.donate_inputs = donate;
        self
    }

    /// These options with another limit on the largest tensor compiled.
    pub fn with_max_tensor_bytes(mut self, bytes: u64) -> Options {
        self.compiler.max_tensor_bytes = bytes;
        self
    }

    /// These options annotating the graph with `mesh` before it compiles.
    pub fn with_mesh(mut self, mesh: MeshAnnotation) -> Options {
        self.mesh = Some(mesh);
        self
    }

    pub fn pipeline(&self) -> &str {
        &self.compiler.pipeline
    }

    /// The driver's options for these (lowering to `format`; None stops after the analyses).
    pub fn driver(&self, format: Option<Format>) -> driver::Options {
        driver::Options { emit: format, ..self.compiler.clone() }
    }

    /// What of the options the lowered module depends on (part of the graph cache key; the
    /// mesh is in the annotated graph's text, which is keyed itself).
    pub fn cache_component(&self) -> String {
        let c = &self.compiler;
        format!(
            "{};donate_inputs={};max_tensor_bytes={};target={:?}",
            c.pipeline, c.donate_inputs, c.max_tensor_bytes, c.target
        )
    }
}

impl Default for Options {
    fn default() -> Self {
        Options {
            compiler: driver::Options { max_tensor_bytes: DEFAULT_MAX_TENSOR_BYTES, ..driver::Options::default() },
            xla_options: BTreeMap::new(),
            mesh: None,
            choose_kernels: false,
        }
    }
}
