//! The compiler driver, after Cranelift's `Context`: one way through the compiler for every
//! caller (`torchtpu-opt`, the engine, `torchtpu-run`, the Python extension through the
//! engine). A [`Context`] keeps what is costly to make (the MLIR context behind [`Lowering`])
//! and runs, once per compile:
//!
//! parse (or take a built [`Graph`]) -> verify -> pass pipeline -> analyses (memory estimate
//! with and without donation, donation pairs; sharding next) -> lower (text or bytecode),
//!
//! returning one [`Compiled`]: the IR after the passes, the StableHLO, the analyses and the
//! time of each stage. Each stage fails with its own [`DriverError`] variant.

pub use crate::analysis::memory::MemorySummary;
pub use crate::ir::{ParseError, VerifyError};
pub use crate::lower::{Format, LowerError, StableHlo};
pub use crate::passes::{PassRun, PipelineError, PipelineOptions, DEFAULT_PIPELINE};

use crate::analysis::memory;
use crate::ir::{parse_graph, verify, Graph};
use crate::lower::{Lowering, MAX_TENSOR_BYTES};
use crate::passes::PassManager;
use std::io::Write;
use std::time::{Duration, Instant};

/// `TORCHTPU_INJECT_FAULT=lower|compile|execute` (comma-separated for several) makes that
/// stage fail with an internal error, for tests of the error paths (docs/backend.md).
pub const FAULT_ENV: &str = "TORCHTPU_INJECT_FAULT";

/// Whether `TORCHTPU_INJECT_FAULT` names `stage`. Read at every call (tests toggle it at run
/// time); unset, it costs one environment lookup.
pub fn fault_injected(stage: &str) -> bool {
    match std::env::var_os(FAULT_ENV) {
        None => false,
        Some(v) => v.to_str().is_some_and(|v| v.split(',').any(|s| s.trim() == stage)),
    }
}

/// A failure, by stage. `Display` is one line; callers that know a file name put it in front
/// of parse and verifier positions (`torchtpu-opt`).
#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    /// The text form did not parse (`ParseError` holds line and column).
    #[error("parse error at {0}")]
    Parse(ParseError),
    /// The graph broke an invariant before any pass ran (located when it came from text).
    #[error("invalid IR: {}", .0.located())]
    Verify(VerifyError),
    /// A malformed or unknown pipeline, a failing pass, or IR broken by a pass.
    #[error(transparent)]
    Pipeline(PipelineError),
    /// An analysis could not run (a cycle: only unverified graphs have one).
    #[error("{analysis} analysis failed: {message}")]
    Analysis { analysis: &'static str, message: String },
    /// Lowering refused (`LowerError::Unsupported`, `TooLarge`) or failed.
    #[error(transparent)]
    Lower(LowerError),
    /// `TORCHTPU_INJECT_FAULT` named this stage.
    #[error("fault injected at stage '{stage}' ({FAULT_ENV})")]
    Injected { stage: &'static str },
}

impl DriverError {
    /// The stage that failed: parse, verify, passes, analyses or lower.
    pub fn stage(&self) -> &'static str {
        match self {
            DriverError::Parse(_) => "parse",
            DriverError::Verify(_) => "verify",
            DriverError::Pipeline(_) => "passes",
            DriverError::Analysis { .. } => "analyses",
            DriverError::Lower(_) => "lower",
            DriverError::Injected { stage } => stage,
        }
    }
}

/// What to run and how.
#[derive(Clone, Debug)]
pub struct Options {
    /// The pass pipeline (`torchtpu-opt --pass-pipeline` syntax; "" runs none).
    pub pipeline: String,
    /// Verification and IR printing around the passes.
    pub pipeline_options: PipelineOptions,
    /// Pair outputs with inputs of their type for buffer donation (`memory::donation_pairs`):
    /// lowered as `tf.aliasing_output`, and counted by the memory estimate.
    pub donate_inputs: bool,
    /// The largest tensor the lowering emits (`Lowering::set_max_tensor_bytes`).
    pub max_tensor_bytes: u64,
    /// Run the analyses (memory estimate, donation pairs).
    pub analyze: bool,
    /// Also estimate memory before the passes (`torchtpu-opt --print-memory`).
    pub memory_before: bool,
    /// Lower to this format; None stops after the analyses.
    pub emit: Option<Format>,
    /// What the target's partitioner does, for the `propagate-sharding` the driver adds to a
    /// graph with a mesh (its costs are predictions of XLA's collectives).
    pub target: crate::sharding::Target,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            pipeline: DEFAULT_PIPELINE.to_string(),
            pipeline_options: PipelineOptions::default(),
            donate_inputs: true,
            max_tensor_bytes: MAX_TENSOR_BYTES,
            analyze: true,
            memory_before: false,
            emit: Some(Format::Bytecode),
            target: crate::sharding::Target::default(),
        }
    }
}

impl Options {
    /// The default options with `pipeline`.
    pub fn with_pipeline(pipeline: &str) -> Options {
        Options { pipeline: pipeline.to_string(), ..Options::default() }
    }
}

/// The time of each stage that ran, in order (`parse`, `verify`, `passes`, `analyses`,
/// `lower`; callers above the driver append theirs, e.g. the engine's `compile`).
#[derive(Clone, Debug, Default)]
pub struct Timings {
    pub stages: Vec<(&'static str, Duration)>,
    /// Each pass of the pipeline (what `torchtpu-opt --timing` prints).
    pub passes: Vec<PassRun>,
}

impl Timings {
    pub fn record(&mut self, stage: &'static str, d: Duration) {
        self.stages.push((stage, d));
    }

    /// The time of `stage`, if it ran.
    pub fn get(&self, stage: &str) -> Option<Duration> {
        self.stages.iter().find(|(s, _)| *s == stage).map(|(_, d)| *d)
    }

    pub fn total(&self) -> Duration {
        self.stages.iter().map(|(_, d)| *d).sum()
    }
}

pub use crate::sharding::{PlannedCollective, ShardingPlan};

/// What the analyses found, on the IR after the passes.
#[derive(Clone, Debug, Default)]
pub struct Analyses {
    /// The peak-memory estimate, with donation when the options donate.
    pub memory: Option<MemorySummary>,
    /// The estimate before the passes (`Options::memory_before`).
    pub memory_before: Option<MemorySummary>,
    /// `(input, output)` pairs lowered as donations (empty without donation).
    pub donation: Vec<(usize, usize)>,
    /// The layouts and collectives of a graph with a mesh (`ShardingPlan::of`).
    pub sharding: Option<ShardingPlan>,
}

/// One compile's result.
#[derive(Debug)]
pub struct Compiled {
    /// The IR after the passes (what was lowered).
    pub graph: Graph,
    pub analyses: Analyses,
    /// The lowered module, when `Options::emit` asked for one.
    pub hlo: Option<StableHlo>,
    pub timings: Timings,
}

/// Keeps the MLIR context across compiles (made on first lowering: it costs milliseconds).
/// Not thread-safe (MLIR contexts are not): one per thread.
#[derive(Default)]
pub struct Context {
    lowering: Option<Lowering>,
}

impl Context {
    pub fn new() -> Context {
        Context::default()
    }

    /// Parses and verifies IR text: the first two stages on their own (`canonical_ir`,
    /// `torchtpu-opt --verify-only`).
    pub fn check_text(&self, text: &str, timings: &mut Timings) -> Result<Graph, DriverError> {
        let t = Instant::now();
        let graph = parse_graph(text).map_err(DriverError::Parse)?;
        timings.record("parse", t.elapsed());
        let t = Instant::now();
        verify(&graph).map_err(DriverError::Verify)?;
        timings.record("verify", t.elapsed());
        Ok(graph)
    }

    /// Every stage from IR text. IR dumps of the pipeline go to `dump`.
    pub fn compile_text(
        &mut self,
        text: &str,
        options: &Options,
        dump: &mut dyn Write,
    ) -> Result<Compiled, DriverError> {
        let mut timings = Timings::default();
        let graph = self.check_text(text, &mut timings)?;
        self.run_verified(graph, options, dump, timings)
    }

    /// Every stage from a built graph (verified first).
    pub fn compile_graph(
        &mut self,
        graph: Graph,
        options: &Options,
        dump: &mut dyn Write,
    ) -> Result<Compiled, DriverError> {
        let mut timings = Timings::default();
        let t = Instant::now();
        verify(&graph).map_err(DriverError::Verify)?;
        timings.record("verify", t.elapsed());
        self.run_verified(graph, options, dump, timings)
    }

    fn run_verified(
        &mut self,
        mut graph: Graph,
        options: &Options,
        dump: &mut dyn Write,
        mut timings: Timings,
    ) -> Result<Compiled, DriverError> {
        // The estimate before the passes is taken now: the passes may remove the peak node.
        let mut analyses = Analyses::default();
        if options.memory_before {
            let est = memory::estimate(&graph).map_err(cycle)?;
            analyses.memory_before = Some(MemorySummary::of(&graph, &est));
        }

        let t = Instant::now();
        let pm = PassManager::from_pipeline(&options.pipeline, options.pipeline_options.clone())
            .map_err(DriverError::Pipeline)?;
        timings.passes = pm.run_verified(&mut graph, dump).map_err(DriverError::Pipeline)?;
        // The passes the graph requires that the pipeline left out (`propagate-sharding` for a
        // graph with a mesh), built with the typed target, not written as pipeline text.
        let required = pm.required_after(&graph, &options.target);
        timings.passes.extend(required.run_verified(&mut graph, dump).map_err(DriverError::Pipeline)?);
        let sharded = graph.mesh.is_some();
        timings.record("passes", t.elapsed());

        let t = Instant::now();
        // SPMD inputs are built per device from host memory each call: nothing to donate.
        if options.donate_inputs && !sharded {
            analyses.donation = memory::donation_pairs(&graph);
        }
        if options.analyze {
            let donated: Vec<usize> = analyses.donation.iter().map(|&(i, _)| i).collect();
            analyses.memory = Some(MemorySummary::with_donation(&graph, &donated).map_err(cycle)?);
            analyses.sharding = ShardingPlan::of(&graph);
        }
        timings.record("analyses", t.elapsed());

        let hlo = match options.emit {
            None => None,
            Some(format) => {
                if fault_injected("lower") {
                    return Err(DriverError::Injected { stage: "lower" });
                }
                let t = Instant::now();
                let lowering = self.lowering.get_or_insert_with(Lowering::new);
                lowering.set_max_tensor_bytes(options.max_tensor_bytes);
                // With `verify_each` the graph was verified at entry and after each pass that
                // changed it; without, the lowering verifies what the passes left.
                let hlo = if options.pipeline_options.verify_each {
                    lowering.lower_verified(&graph, format, &analyses.donation)
                } else {
                    lowering.lower_aliased(&graph, format, &analyses.donation)
                }
                .map_err(DriverError::Lower)?;
                timings.record("lower", t.elapsed());
                Some(hlo)
            }
        };
        Ok(Compiled { graph, analyses, hlo, timings })
    }
}

fn cycle(_: crate::ir::NodeId) -> DriverError {
    DriverError::Analysis { analysis: "memory", message: "the graph has a cycle".into() }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MLP: &str = "graph @g(%x: f32[4, 16], %w: f32[8, 16]) -> (f32[4, 8]) {\n  %t = aten.permute.default(%w) {dims = [1, 0]} : f32[16, 8]\n  %tt = aten.permute.default(%t) {dims = [1, 0]} : f32[8, 16]\n  %t2 = aten.permute.default(%tt) {dims = [1, 0]} : f32[16, 8]\n  %y = aten.mm.default(%x, %t2) : f32[4, 8]\n  return %y\n}\n";

    #[test]
    fn one_run_gives_ir_analyses_stablehlo_and_timings() {
        let mut cx = Context::new();
        let options = Options { emit: Some(Format::Text), ..Options::with_pipeline("canonicalize,dce") };
        let c = cx.compile_text(MLP, &options, &mut std::io::sink()).unwrap();
        assert_eq!(c.graph.op_count(), 2, "{}", crate::ir::print_graph(&c.graph));
        let mem = c.analyses.memory.as_ref().unwrap();
        assert_eq!(mem.peak_at.as_deref(), Some("%1 (aten.mm.default)"));
        assert!(c.hlo.as_ref().unwrap().text().unwrap().contains("stablehlo.dot_general"));
        let stages: Vec<&str> = c.timings.stages.iter().map(|(s, _)| *s).collect();
        assert_eq!(stages, ["parse", "verify", "passes", "analyses", "lower"]);
        assert_eq!(c.timings.passes.len(), 2);
        assert!(c.analyses.sharding.is_none());
    }

    #[test]
    fn a_compile_verifies_at_entry_and_after_each_pass_that_changed_the_graph_only() {
        use crate::ir::verifier::VERIFIED;
        let count = |options: &Options| {
            VERIFIED.with(|n| n.set(0));
            let c = Context::new().compile_text(MLP, options, &mut std::io::sink()).unwrap();
            let changed = c.timings.passes.iter().filter(|r| r.changed).count();
            (VERIFIED.with(|n| n.get()), changed)
        };
        let options = Options { emit: Some(Format::Text), ..Options::with_pipeline("canonicalize,dce") };
        let (verified, changed) = count(&options);
        assert!(changed >= 1);
        assert_eq!(verified, 1 + changed, "the entry's, one per changed pass, none in the lowering");
        // Without verify_each the lowering verifies what the passes left, once.
        let mut unchecked = options.clone();
        unchecked.pipeline_options.verify_each = false;
        assert_eq!(count(&unchecked).0, 2);
    }

    #[test]
    fn each_stage_fails_with_its_own_variant() {
        let mut cx = Context::new();
        let o = Options::default();
        let e = cx.compile_text("graph @g(%a: f33[2]) -> () { return }", &o, &mut std::io::sink()).unwrap_err();
        assert!(matches!(&e, DriverError::Parse(p) if (p.line, p.col) == (1, 14)), "{e}");
        assert!(e.to_string().starts_with("parse error at 1:14: unknown dtype 'f33'"), "{e}");
        let bad = "graph @g(%a: f32[2, 3]) -> () {\n %0 = aten.mm.default(%a, %a) : f32[2, 2]\n return\n}";
        let e = cx.compile_text(bad, &o, &mut std::io::sink()).unwrap_err();
        assert!(matches!(e, DriverError::Verify(_)) && e.to_string().starts_with("invalid IR: 2:2: node %0"), "{e}");
        let e = cx.compile_text(MLP, &Options::with_pipeline("nope"), &mut std::io::sink()).unwrap_err();
        assert_eq!(
            (e.stage(), matches!(e, DriverError::Pipeline(PipelineError::UnknownPass { .. }))),
            ("passes", true)
        );
        let unknown = "graph @g(%a: f32[2]) -> (f32[2]) {\n  %0 = aten.xyz.default(%a) : f32[2]\n  return %0\n}\n";
        let e = cx.compile_text(unknown, &o, &mut std::io::sink()).unwrap_err();
        assert!(matches!(e, DriverError::Lower(LowerError::Unsupported { .. })), "{e}");
    }

    #[test]
    fn without_emit_nothing_is_lowered() {
        let c = Context::new()
            .compile_text(
                MLP,
                &Options { emit: None, donate_inputs: false, ..Options::default() },
                &mut std::io::sink(),
            )
            .unwrap();
        assert!(c.hlo.is_none() && c.analyses.donation.is_empty());
        assert_eq!(c.analyses.memory.unwrap().donated_inputs, 0);
    }
}
