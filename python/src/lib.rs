//! `torchtpu._C`: the compiler's Python boundary. It reaches the compiler only through the
//! engine (`torchtpu_engine`, which re-exports the driver). Every error it raises is one of
//! `torchtpu.errors` (made by `errors.from_rust`), and a Rust panic becomes
//! `torchtpu.errors.InternalError`, never pyo3's `PanicException`.
//!
//! Module map: `device` (device buffers for the eager `tpu` device), `dlpack` (capsules in
//! and out; the ABI is the runtime's), `registry` (the op
//! registry and the per-node legality check, for `decompositions.py` and the partitioner).

// The module must be called `_C` (torchtpu._C), which is not snake case.
#![allow(non_snake_case)]

mod device;
mod distributed;
mod dlpack;
mod dtypes;
mod eager;
mod host_kernels;
mod memory;
mod profiler;
mod registry;
mod replicated;
mod sharding;

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBytes, PyCapsule, PyDict};
use pyo3::IntoPyObjectExt;
use std::collections::BTreeMap;
use std::panic::AssertUnwindSafe;
use torchtpu_engine::{
    text, DType, EngineError, ErrorKind, MemorySummary, MeshAnnotation, TensorType, TextFault, DEFAULT_PIPELINE,
};

/// The `torchtpu.errors` exception for `kind` (unsupported, compile, plugin, execution,
/// internal, ir, input, options) with its structured `fields`.
fn py_error(py: Python<'_>, kind: &str, message: &str, fields: &[(&str, Option<Py<PyAny>>)]) -> PyErr {
    let made = (|| -> PyResult<PyErr> {
        let d = PyDict::new(py);
        for (k, v) in fields {
            d.set_item(k, v)?;
        }
        let exc = py.import("torchtpu.errors")?.getattr("from_rust")?.call1((kind, message, d))?;
        Ok(PyErr::from_value(exc))
    })();
    made.unwrap_or_else(|e| e)
}

fn internal(py: Python<'_>, stage: &str, message: &str) -> PyErr {
    py_error(py, "internal", message, &[("stage", some(py, stage))])
}

fn some<'py>(py: Python<'py>, v: impl IntoPyObject<'py>) -> Option<Py<PyAny>> {
    v.into_bound_py_any(py).ok().map(Bound::unbind)
}

/// An engine error as the exception its kind maps to.
fn engine_error(py: Python<'_>, e: &EngineError) -> PyErr {
    if torchtpu_runtime::in_forked_child() {
        // Whatever failed, the cause is the fork: the plugin refuses every call here.
        return forked_error(py);
    }
    let message = e.to_string();
    match e.kind() {
        ErrorKind::Unsupported { op, node, reason, line, col } => py_error(
            py,
            "unsupported",
            &message,
            &[
                ("op", some(py, op)),
                ("node", some(py, node)),
                ("reason", reason.and_then(|r| some(py, r))),
                ("line", line.and_then(|l| some(py, l))),
                ("col", col.and_then(|c| some(py, c))),
            ],
        ),
        ErrorKind::Compile => py_error(py, "compile", &message, &[]),
        ErrorKind::Plugin => py_error(py, "plugin", &message, &[]),
        ErrorKind::Execution => py_error(py, "execution", &message, &[]),
        ErrorKind::Input => input_error(py, e),
        ErrorKind::Sharding => py_error(py, "sharding", &message, &[]),
        ErrorKind::Internal { stage } => internal(py, stage, &message),
    }
}

fn input_error(py: Python<'_>, e: &EngineError) -> PyErr {
    let index = match e {
        EngineError::Input { index, .. } => some(py, *index),
        _ => None,
    };
    py_error(py, "input", &e.to_string(), &[("index", index)])
}

/// For text the user hands in (`canonical_ir`, `run_pipeline`, the `passes` option): a parse
/// or verifier error is `torchtpu.errors.IRError` (a ValueError, with line and col), a bad
/// pipeline an `OptionsError` (a ValueError); anything else as `engine_error` says.
fn user_text_error(py: Python<'_>, e: &EngineError) -> PyErr {
    match e.text_fault() {
        Some(TextFault::Ir { line, col }) => py_error(
            py,
            "ir",
            &e.to_string(),
            &[("line", line.and_then(|l| some(py, l))), ("col", col.and_then(|c| some(py, c)))],
        ),
        Some(TextFault::Pipeline) => py_error(py, "options", &e.to_string(), &[]),
        None => engine_error(py, e),
    }
}

/// Runs `f`, turning a Rust panic into `InternalError(stage=stage)`.
fn guarded<T>(py: Python<'_>, stage: &str, f: impl FnOnce() -> PyResult<T>) -> PyResult<T> {
    match std::panic::catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(payload) => {
            let what = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic without a message".into());
            Err(internal(py, stage, &format!("torchtpu panicked (a bug): {what}")))
        }
    }
}

fn forked_error(py: Python<'_>) -> PyErr {
    py_error(py, "forked", &torchtpu_runtime::RuntimeError::ForkedChild.to_string(), &[])
}

fn default_engine(py: Python<'_>) -> PyResult<&'static torchtpu_engine::Engine> {
    if torchtpu_runtime::in_forked_child() {
        return Err(forked_error(py));
    }
    torchtpu_engine::default_engine().map_err(|e| engine_error(py, &e))
}

/// Parses IR text, verifies it, and prints it back in canonical form.
#[pyfunction]
fn canonical_ir(py: Python<'_>, text: &str) -> PyResult<String> {
    guarded(py, "parse", || text::canonical_ir(text).map_err(|e| user_text_error(py, &e)))
}

/// Runs a pass pipeline (`"canonicalize,cse,dce"`) over IR text and returns the result.
#[pyfunction]
fn run_pipeline(py: Python<'_>, text: &str, pipeline: &str) -> PyResult<String> {
    guarded(py, "passes", || text::run_pipeline(text, pipeline).map_err(|e| user_text_error(py, &e)))
}

/// Checks a pass pipeline (syntax, pass names, their options) without running it: a bad one
/// is `torchtpu.errors.OptionsError`.
#[pyfunction]
fn check_pipeline(py: Python<'_>, pipeline: &str) -> PyResult<()> {
    guarded(py, "passes", || text::check_pipeline(pipeline).map_err(|e| user_text_error(py, &e)))
}

/// Lowers IR text (after `pipeline`) to StableHLO text, in one driver run; with `with_ir`,
/// returns `(IR after the passes, StableHLO text)`. `choose_kernels` as for `compile` (the
/// matmuls measured now if new: `torchtpu.explain`).
#[pyfunction]
#[pyo3(signature = (text, pipeline = DEFAULT_PIPELINE, donate = None, with_ir = false, choose_kernels = false))]
fn lower_ir(
    py: Python<'_>,
    text: &str,
    pipeline: &str,
    donate: Option<bool>,
    with_ir: bool,
    choose_kernels: bool,
) -> PyResult<Py<PyAny>> {
    guarded(py, "lower", || {
        let donate = match donate {
            Some(d) => d,
            None => default_engine(py)?.donates_by_default(),
        };
        let mut options = torchtpu_engine::Options::with_pipeline(pipeline).donating(donate);
        options.choose_kernels = choose_kernels;
        // Lowered for the default engine's platform, as its compiles are (its host kernels);
        // without a plugin, for the compiler's default target.
        if !torchtpu_runtime::in_forked_child() {
            if let Ok(engine) = torchtpu_engine::default_engine() {
                options.compiler.target = engine.target_for(&options);
            }
        }
        let (ir, hlo) = text::lower_text(text, &options).map_err(|e| engine_error(py, &e))?;
        if with_ir {
            Ok((ir, hlo).into_pyobject(py)?.into_any().unbind())
        } else {
            Ok(hlo.into_pyobject(py)?.into_any().unbind())
        }
    })
}

/// A host tensor crossing the boundary: (dtype name as in the IR, dims, row-major bytes).
type WireTensor = (String, Vec<i64>, Vec<u8>);
/// An output crossing back: (dtype name, dims, bytes).
type WireOutput = (String, Vec<i64>, Py<PyBytes>);

/// Compiles IR text on the default engine (cached) and runs it on host tensors.
#[pyfunction]
#[pyo3(signature = (text, inputs, pipeline = DEFAULT_PIPELINE))]
fn run_ir(py: Python<'_>, text: &str, inputs: Vec<WireTensor>, pipeline: &str) -> PyResult<Vec<WireOutput>> {
    guarded(py, "execute", || {
        let mut host = Vec::with_capacity(inputs.len());
        for (index, (d, dims, data)) in inputs.into_iter().enumerate() {
            let dtype = DType::from_name(&d).ok_or_else(|| {
                py_error(py, "input", &format!("input {index}: unknown dtype '{d}'"), &[("index", some(py, index))])
            })?;
            host.push(torchtpu_engine::HostTensor { dtype, dims, data });
        }
        let options = torchtpu_engine::Options::with_pipeline(pipeline);
        let engine = default_engine(py)?;
        let outs = py.detach(|| engine.compile_text(text, &options)?.run(&host)).map_err(|e| engine_error(py, &e))?;
        Ok(outs.into_iter().map(|t| (t.dtype.name().to_string(), t.dims, PyBytes::new(py, &t.data).unbind())).collect())
    })
}

/// A graph compiled for the default PJRT device. `run` takes the input tensors themselves
/// (or DLPack capsules), checks them against the compiled types in Rust and returns the
/// outputs as DLPack capsules. Attributes say how it was compiled: `source`,
/// `compile_seconds_saved`, `memory`, `timings`.
#[pyclass(frozen)]
struct Program {
    compiled: torchtpu_engine::CompiledGraph,
    /// Outputs live in host memory (a CPU plugin): handed to PyTorch without a copy.
    outputs_on_host: bool,
}

fn types_of(ts: &[TensorType]) -> Vec<(String, Vec<i64>)> {
    ts.iter().map(|t| (t.dtype.name().to_string(), t.static_dims().unwrap_or_default())).collect()
}

/// `torch._C._to_dlpack`: a capsule over a tensor's memory (~0.2 us, against ~1.8 us for
/// `Tensor.__dlpack__`).
static TO_DLPACK: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

fn memory_dict<'py>(py: Python<'py>, m: &MemorySummary) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("peak_bytes", m.peak_bytes)?;
    d.set_item("peak_at", m.peak_at.clone().unwrap_or_default())?;
    d.set_item("input_bytes", m.input_bytes)?;
    d.set_item("output_bytes", m.output_bytes)?;
    d.set_item("allocated_bytes", m.allocated_bytes)?;
    d.set_item("buffers", m.buffers)?;
    d.set_item("donated_inputs", m.donated_inputs)?;
    d.set_item("donated_bytes", m.donated_bytes)?;
    d.set_item("peak_bytes_without_donation", m.peak_bytes_without_donation)?;
    d.set_item("has_symbolic", m.has_symbolic)?;
    Ok(d)
}

#[pymethods]
impl Program {
    /// `(dtype name, dims)` of each input.
    #[getter]
    fn input_types(&self, py: Python<'_>) -> PyResult<Vec<(String, Vec<i64>)>> {
        guarded(py, "execute", || Ok(types_of(self.compiled.input_types())))
    }

    /// Dense byte length of each input.
    #[getter]
    fn input_bytes(&self) -> Vec<usize> {
        self.compiled.input_bytes().to_vec()
    }

    /// `(dtype name, dims)` of each output.
    #[getter]
    fn output_types(&self, py: Python<'_>) -> PyResult<Vec<(String, Vec<i64>)>> {
        guarded(py, "execute", || Ok(types_of(self.compiled.output_types())))
    }

    /// Where the executable came from: "compiled", "memory", "disk", or "waited" (from disk,
    /// after waiting for another process that was compiling the same program).
    #[getter]
    fn source(&self) -> &'static str {
        self.compiled.source().name()
    }

    /// XLA compile seconds a disk hit saved (0 otherwise).
    #[getter]
    fn compile_seconds_saved(&self) -> f64 {
        self.compiled.source().compile_seconds_saved()
    }

    /// Whether the graph cache had the lowered module (no passes or lowering ran).
    #[getter]
    fn graph_cache_hit(&self) -> bool {
        self.compiled.graph_cache_hit()
    }

    /// The peak-memory estimate of the graph as lowered (after the passes, with donation):
    /// peak_bytes, peak_at (the printed node, e.g. "%12 (aten.mm.default)"), input_bytes,
    /// output_bytes, allocated_bytes, buffers, donated_inputs, donated_bytes,
    /// peak_bytes_without_donation, has_symbolic.
    #[getter]
    fn memory<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        guarded(py, "analyses", || memory_dict(py, self.compiled.memory()))
    }

    /// Seconds per stage of this compile (parse, graph_cache, verify, passes, analyses,
    /// lower, compile; those that ran) and their total.
    #[getter]
    fn timings<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        guarded(py, "compile", || {
            let t = self.compiled.timings();
            let d = PyDict::new(py);
            for (stage, dt) in &t.stages {
                d.set_item(*stage, dt.as_secs_f64())?;
            }
            d.set_item("total", t.total().as_secs_f64())?;
            Ok(d)
        })
    }

    /// The SPMD plan (mesh, num_partitions, inputs, outputs, collectives,
    /// total_bytes_per_device), or None for a one-device program.
    #[getter]
    fn sharding<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        guarded(py, "analyses", || self.compiled.sharding().map(|p| sharding::plan_dict(py, p)).transpose())
    }

    /// Per device, the shapes of the input buffers it read and the output buffers it returned
    /// in the last execution (None for a one-device program).
    fn partition_shapes(&self) -> Option<torchtpu_engine::PartitionShapes> {
        self.compiled.partition_shapes()
    }

    /// The collectives in XLA's optimised (partitioned) program: `[(kind, bytes_per_device)]`.
    fn compiled_collectives(&self, py: Python<'_>) -> PyResult<Vec<(String, u64)>> {
        guarded(py, "compile", || {
            let found = self.compiled.compiled_collectives().map_err(|e| engine_error(py, &e))?;
            Ok(found.into_iter().map(|c| (c.kind, c.bytes_per_device)).collect())
        })
    }

    /// Executes on device buffers (`torchtpu._C.DeviceBuffer`, checked against the compiled
    /// input types) and returns the outputs as device buffers: no host copy either way. With
    /// `wait` false it returns once the work is enqueued where the plugin runs
    /// asynchronously; `DeviceBuffer.wait` (or any read) then reports a failed execution.
    /// `donate` lists inputs the caller will never read again: where the program aliases one
    /// to an output, PJRT may write the output into its memory (the buffer is then marked
    /// `donated` and refuses reads). It runs on engine device `device`, else on its inputs'
    /// device (all must be on one), else on device 0; the outputs live there.
    #[pyo3(signature = (inputs, wait = true, donate = Vec::new(), device = None))]
    fn run_device(
        &self,
        py: Python<'_>,
        inputs: Vec<PyRef<'_, device::DeviceBuffer>>,
        wait: bool,
        donate: Vec<usize>,
        device: Option<usize>,
    ) -> PyResult<Vec<device::DeviceBuffer>> {
        device::run_device(py, self, inputs, wait, &donate, device)
    }

    /// Executes on `inputs`: one torch tensor (or DLPack capsule) per input. Rust checks
    /// each against the compiled type (host memory, dtype, shape, dense row-major strides,
    /// byte size) before reading it: a mismatch is `torchtpu.errors.InputError`. Returns one
    /// DLPack capsule per output (`torch.from_dlpack`): on a CPU plugin the tensor shares
    /// PJRT's output memory, no copy. Inputs are read in place where the plugin allows and
    /// their buffers kept between calls that pass the same memory.
    fn run<'py>(&self, py: Python<'py>, inputs: Vec<Bound<'py, PyAny>>) -> PyResult<Vec<Py<PyAny>>> {
        guarded(py, "execute", || {
            let to_dlpack = TO_DLPACK.get_or_try_init(py, || -> PyResult<Py<PyAny>> {
                Ok(py.import("torch")?.getattr("_C")?.getattr("_to_dlpack")?.unbind())
            })?;
            let mut capsules: Vec<Bound<'py, PyCapsule>> = Vec::with_capacity(inputs.len());
            for (index, obj) in inputs.into_iter().enumerate() {
                let capsule = match obj.cast_into::<PyCapsule>() {
                    Ok(c) => Ok(c),
                    Err(e) => to_dlpack
                        .bind(py)
                        .call1((e.into_inner(),))
                        .and_then(|c| c.cast_into::<PyCapsule>().map_err(PyErr::from)),
                };
                capsules.push(capsule.map_err(|e| {
                    let message = format!("input {index}: not a CPU tensor or DLPack capsule: {e}");
                    py_error(py, "input", &message, &[("index", some(py, index))])
                })?);
            }
            let views = capsules
                .iter()
                .enumerate()
                .map(|(index, c)| {
                    dlpack::view(c).map_err(|e| {
                        let message = format!("input {index}: not an unconsumed DLPack capsule: {e}");
                        py_error(py, "input", &message, &[("index", some(py, index))])
                    })
                })
                .collect::<PyResult<Vec<_>>>()?;
            let memory = self.compiled.check_dlpack(&views).map_err(|e| engine_error(py, &e))?;
            if self.compiled.sharding().is_some() {
                // SPMD: each device reads its block; outputs come back assembled on the host.
                let outs = py.detach(|| self.compiled.execute_sharded(&memory)).map_err(|e| engine_error(py, &e))?;
                EXECUTIONS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                return outs
                    .into_iter()
                    .map(|o| {
                        dlpack::host_capsule(py, o.data, o.ty, o.dims)
                            .map_err(|e| engine_error(py, &EngineError::Execute(e)))
                    })
                    .collect();
            }
            // `capsules` keeps every input alive (and its memory valid) until the call returns.
            let outs = py.detach(|| self.compiled.execute_host(&memory)).map_err(|e| engine_error(py, &e))?;
            EXECUTIONS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            outs.into_iter()
                .map(|b| {
                    dlpack::to_capsule(py, b, self.outputs_on_host)
                        .map_err(|e| engine_error(py, &EngineError::Execute(e)))
                })
                .collect()
        })
    }
}

/// Program executions in this process (torchtpu.stats()["executions"]).
static EXECUTIONS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

#[pyfunction]
fn executions() -> u64 {
    // An atomic load: nothing to panic.
    EXECUTIONS.load(std::sync::atomic::Ordering::Relaxed)
}

/// Compiles IR text (after `pipeline`) on the default engine, through the graph and
/// executable caches, in one driver run. Returns the `Program`; its `source`,
/// `compile_seconds_saved`, `memory` and `timings` say how. With `mesh` (`[(axis, size)]`)
/// the program is SPMD over that many devices, its inputs laid out by `input_shardings`
/// (per input None or the axes of each dim) and the outputs `output_shardings` names pinned
/// to those layouts; a bad layout or too few devices is `torchtpu.errors.ShardingError`.
/// `choose_kernels`: where the platform has a second kernel for an op (ATen's matmul on the
/// host, once `install_host_kernels` ran), the one measured faster per shape.
#[pyfunction]
#[pyo3(signature = (text, pipeline = DEFAULT_PIPELINE, donate = None, mesh = None, input_shardings = None, output_shardings = None, xla_options = None, choose_kernels = false))]
#[allow(clippy::too_many_arguments)]
fn compile(
    py: Python<'_>,
    text: &str,
    pipeline: &str,
    donate: Option<bool>,
    mesh: Option<sharding::WireMesh>,
    input_shardings: Option<sharding::WireShardings>,
    output_shardings: Option<sharding::WireShardings>,
    xla_options: Option<BTreeMap<String, WireXlaOption>>,
    choose_kernels: bool,
) -> PyResult<Program> {
    guarded(py, "compile", || {
        let engine = default_engine(py)?;
        let mut options = torchtpu_engine::Options::with_pipeline(pipeline)
            .donating(donate.unwrap_or_else(|| engine.donates_by_default()));
        options.xla_options = xla_options.unwrap_or_default().into_iter().map(|(k, v)| (k, v.into())).collect();
        options.choose_kernels = choose_kernels;
        if let Some(axes) = mesh {
            options = options.with_mesh(MeshAnnotation { axes, inputs: input_shardings, outputs: output_shardings });
        }
        let compiled = py.detach(|| engine.compile_text(text, &options)).map_err(|e| engine_error(py, &e))?;
        let outputs_on_host = engine.platform().buffers_in_host_memory();
        Ok(Program { compiled, outputs_on_host })
    })
}

/// `compile(text, donate=donate)` for the crate's own callers (the eager path's donating
/// programs): the default pipeline, no mesh.
pub(crate) fn compile_text(py: Python<'_>, text: &str, donate: bool) -> PyResult<Program> {
    compile(py, text, DEFAULT_PIPELINE, Some(donate), None, None, None, None, false)
}

/// How many devices the default engine's plugin has (SPMD meshes use the first N).
#[pyfunction]
fn device_count(py: Python<'_>) -> PyResult<usize> {
    guarded(py, "compile", || Ok(default_engine(py)?.client().addressable_devices().len()))
}

/// Whether this process was forked from one that had started the plugin (`torch.tpu._is_in_bad_fork`).
#[pyfunction]
fn in_bad_fork() -> bool {
    torchtpu_runtime::in_forked_child()
}

/// The default engine's platform ("cpu", "cuda", "tpu"): whether the device is an accelerator.
#[pyfunction]
fn platform_name(py: Python<'_>) -> PyResult<String> {
    guarded(py, "compile", || Ok(default_engine(py)?.client().platform_name().to_string()))
}

/// Whether graphs alias outputs to inputs unless told (`donate=None`): not on the CPU plugin,
/// which reads inputs in place and never donates them (`torchtpu_engine::Platform::donation_pays`).
#[pyfunction]
fn donates_by_default(py: Python<'_>) -> PyResult<bool> {
    guarded(py, "compile", || Ok(default_engine(py)?.donates_by_default()))
}

/// An XLA option override's value from Python: a bool, an int or a string (in that order:
/// `True` is also an int).
#[derive(FromPyObject)]
enum WireXlaOption {
    Bool(bool),
    Int(i64),
    Str(String),
}

impl From<WireXlaOption> for torchtpu_engine::XlaOption {
    fn from(v: WireXlaOption) -> Self {
        match v {
            WireXlaOption::Bool(b) => torchtpu_engine::XlaOption::Bool(b),
            WireXlaOption::Int(i) => torchtpu_engine::XlaOption::Int(i),
            WireXlaOption::Str(s) => torchtpu_engine::XlaOption::Str(s),
        }
    }
}

/// The executable caches' counters: memory_hits, disk_hits (of which disk_hits_after_wait:
/// read after waiting for another process compiling the same program), misses,
/// compile_seconds, compile_seconds_saved, lock_wait_seconds, lock_timeouts, disk_discarded,
/// disk_writes, disk_errors, and the disk cache's folder (None when disabled); the graph
/// level's graph_* counters. Empty when no engine was started.
#[pyfunction]
fn cache_stats(py: Python<'_>) -> PyResult<Py<PyDict>> {
    guarded(py, "compile", || {
        let d = PyDict::new(py);
        if let (false, Ok(engine)) = (torchtpu_runtime::in_forked_child(), torchtpu_engine::default_engine()) {
            let s = engine.cache().stats();
            d.set_item("memory_hits", s.memory_hits)?;
            d.set_item("disk_hits", s.disk_hits)?;
            d.set_item("disk_hits_after_wait", s.disk_hits_after_wait)?;
            d.set_item("lock_wait_seconds", s.lock_wait_seconds)?;
            d.set_item("lock_timeouts", s.lock_timeouts)?;
            d.set_item("misses", s.misses)?;
            d.set_item("compile_seconds", s.compile_seconds)?;
            d.set_item("compile_seconds_saved", s.compile_seconds_saved)?;
            d.set_item("disk_discarded", s.disk_discarded)?;
            d.set_item("disk_writes", s.disk_writes)?;
            d.set_item("disk_errors", s.disk_errors)?;
            d.set_item("disk_dir", engine.cache().disk().map(|c| c.root().display().to_string()))?;
            let g = engine.graph_cache().stats();
            d.set_item("graph_memory_hits", g.memory_hits)?;
            d.set_item("graph_disk_hits", g.disk_hits)?;
            d.set_item("graph_disk_hits_after_wait", g.disk_hits_after_wait)?;
            d.set_item("graph_misses", g.misses)?;
            d.set_item("graph_discarded", g.discarded)?;
        }
        Ok(d.unbind())
    })
}

/// Warnings the disk cache collected since the last call (corrupt entries discarded, I/O
/// failures), one line each; the caller logs them.
#[pyfunction]
fn cache_warnings(py: Python<'_>) -> PyResult<Vec<String>> {
    guarded(py, "compile", || {
        Ok(torchtpu_engine::default_engine()
            .map(|e| {
                let mut w: Vec<String> = e.cache().take_warnings().iter().map(|w| w.to_string()).collect();
                w.extend(e.graph_cache().take_warnings());
                w
            })
            .unwrap_or_default())
    })
}

/// The ATen ops the lowering table covers (`aten.add`, ...), without overloads.
#[pyfunction]
fn supported_ops(py: Python<'_>) -> PyResult<Vec<&'static str>> {
    guarded(py, "lower", || Ok(torchtpu_engine::supported_ops()))
}

/// Whether the lowering runs a convolution as patches times a matmul (see
/// `weight_layout.py`: such a convolution's weight is not relaid).
#[pyfunction]
fn convolution_runs_as_matmul(input_spatial: Vec<i64>, kernel_spatial: Vec<i64>, groups: i64) -> bool {
    torchtpu_engine::convolution_runs_as_matmul(&input_spatial, &kernel_spatial, groups)
}

/// The PJRT plugin the default engine loads (or would load).
#[pyfunction]
fn plugin_path(py: Python<'_>) -> PyResult<String> {
    guarded(py, "compile", || Ok(torchtpu_runtime::plugin_path().display().to_string()))
}

/// `(name, description)` of every registered pass.
#[pyfunction]
fn list_passes(py: Python<'_>) -> PyResult<Vec<(&'static str, &'static str)>> {
    guarded(py, "passes", || Ok(torchtpu_engine::list_passes()))
}

/// Whether `TORCHTPU_INJECT_FAULT` names `stage`: the engine's own reading of it, for the
/// Python stages (`trace`, `export`).
#[pyfunction]
fn fault_injected(stage: &str) -> bool {
    torchtpu_engine::fault_injected(stage)
}

/// Panics inside Rust, for the test that checks a panic becomes `InternalError`.
#[pyfunction]
fn _panic_for_tests(py: Python<'_>) -> PyResult<()> {
    guarded(py, "execute", || panic!("a deliberate panic"))
}

#[pymodule]
fn _C(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    // The default PJRT plugin is looked for in this interpreter's environment first
    // (`make setup` installs it under `.venv/pjrt`); the runtime knows no source folder.
    let prefix: String = m.py().import("sys")?.getattr("prefix")?.extract()?;
    torchtpu_runtime::set_python_environment(std::path::Path::new(&prefix));
    m.add("FAULT_ENV", torchtpu_engine::FAULT_ENV)?;
    m.add_function(wrap_pyfunction!(fault_injected, m)?)?;
    m.add_function(wrap_pyfunction!(canonical_ir, m)?)?;
    m.add_function(wrap_pyfunction!(run_pipeline, m)?)?;
    m.add_function(wrap_pyfunction!(check_pipeline, m)?)?;
    m.add("DEFAULT_PIPELINE", DEFAULT_PIPELINE)?;
    m.add_function(wrap_pyfunction!(list_passes, m)?)?;
    m.add_function(wrap_pyfunction!(dtypes::ir_dtypes, m)?)?;
    m.add_function(wrap_pyfunction!(lower_ir, m)?)?;
    m.add_function(wrap_pyfunction!(run_ir, m)?)?;
    m.add_function(wrap_pyfunction!(compile, m)?)?;
    m.add_function(wrap_pyfunction!(cache_stats, m)?)?;
    m.add_function(wrap_pyfunction!(cache_warnings, m)?)?;
    m.add_function(wrap_pyfunction!(supported_ops, m)?)?;
    m.add_function(wrap_pyfunction!(convolution_runs_as_matmul, m)?)?;
    m.add_function(wrap_pyfunction!(registry::op_registry, m)?)?;
    m.add_function(wrap_pyfunction!(registry::check_lowerable, m)?)?;
    m.add_function(wrap_pyfunction!(plugin_path, m)?)?;
    m.add_function(wrap_pyfunction!(executions, m)?)?;
    m.add_function(wrap_pyfunction!(host_kernels::install_host_kernels, m)?)?;
    m.add_function(wrap_pyfunction!(host_kernels::kernel_choices, m)?)?;
    m.add_function(wrap_pyfunction!(device_count, m)?)?;
    m.add_function(wrap_pyfunction!(in_bad_fork, m)?)?;
    m.add_function(wrap_pyfunction!(platform_name, m)?)?;
    m.add_function(wrap_pyfunction!(donates_by_default, m)?)?;
    m.add_function(wrap_pyfunction!(_panic_for_tests, m)?)?;
    m.add_function(wrap_pyfunction!(device::device_put, m)?)?;
    m.add_function(wrap_pyfunction!(memory::set_device_memory_limit, m)?)?;
    m.add_function(wrap_pyfunction!(memory::device_memory_limit, m)?)?;
    m.add_function(wrap_pyfunction!(memory::live_buffers, m)?)?;
    m.add_function(wrap_pyfunction!(memory::record_memory_history, m)?)?;
    m.add_function(wrap_pyfunction!(memory::memory_snapshot, m)?)?;
    m.add_function(wrap_pyfunction!(device::device_memory, m)?)?;
    m.add_function(wrap_pyfunction!(device::reset_device_peak, m)?)?;
    m.add_function(wrap_pyfunction!(device::device_memory_counters, m)?)?;
    m.add_function(wrap_pyfunction!(device::reset_device_accumulated, m)?)?;
    m.add_class::<Program>()?;
    eager::register(m)?;
    m.add_class::<device::DeviceBuffer>()?;
    m.add_class::<replicated::ReplicatedProgram>()?;
    m.add_function(wrap_pyfunction!(replicated::compile_replicated, m)?)?;
    distributed::register(m)?;
    profiler::register(m)?;
    Ok(())
}
