//! `torchtpu._C`: the compiler's Python boundary. Errors become Python exceptions with the
//! compiler's message; nothing panics across the boundary.

// The module must be called `_C` (torchtpu._C), which is not snake case.
#![allow(non_snake_case)]

mod dlpack;

use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use torchtpu_compiler::ir::{parse_graph, print_graph, verify};
use torchtpu_compiler::passes::{PassManager, PipelineOptions, REGISTRY};

/// Parses IR text, verifies it, and prints it back in canonical form.
#[pyfunction]
fn canonical_ir(text: &str) -> PyResult<String> {
    let g = parse_graph(text).map_err(|e| PyValueError::new_err(format!("parse error at {e}")))?;
    verify(&g).map_err(|e| PyValueError::new_err(format!("invalid IR: {}", e.located())))?;
    Ok(print_graph(&g))
}

/// Runs a pass pipeline (`"canonicalize,cse,dce"`) over IR text and returns the result.
#[pyfunction]
fn run_pipeline(text: &str, pipeline: &str) -> PyResult<String> {
    let mut g = parse_graph(text).map_err(|e| PyValueError::new_err(format!("parse error at {e}")))?;
    verify(&g).map_err(|e| PyValueError::new_err(format!("invalid IR: {}", e.located())))?;
    let pm = PassManager::from_pipeline(pipeline, PipelineOptions::default())
        .map_err(|e| PyValueError::new_err(e.to_string()))?;
    pm.run(&mut g, &mut std::io::sink()).map_err(|e| PyValueError::new_err(e.to_string()))?;
    Ok(print_graph(&g))
}

/// Lowers IR text (after `pipeline`) to StableHLO text.
#[pyfunction]
#[pyo3(signature = (text, pipeline = torchtpu_compiler::passes::DEFAULT_PIPELINE, donate = true))]
fn lower_ir(text: &str, pipeline: &str, donate: bool) -> PyResult<String> {
    let g = parse_graph(text).map_err(|e| PyValueError::new_err(format!("parse error at {e}")))?;
    let options =
        torchtpu_engine::Options { donate_inputs: donate, ..torchtpu_engine::Options::with_pipeline(pipeline) };
    let (_, hlo) = torchtpu_engine::lower(&g, &options, torchtpu_compiler::lower::Format::Text)
        .map_err(|e| PyValueError::new_err(e.to_string()))?;
    Ok(hlo.text().unwrap_or_default().to_string())
}

/// A host tensor crossing the boundary: (dtype name as in the IR, dims, row-major bytes).
type WireTensor = (String, Vec<i64>, Vec<u8>);
/// An output crossing back: (dtype name, dims, bytes).
type WireOutput = (String, Vec<i64>, Py<PyBytes>);

/// Compiles IR text on the default engine (cached) and runs it on host tensors.
#[pyfunction]
#[pyo3(signature = (text, inputs, pipeline = torchtpu_compiler::passes::DEFAULT_PIPELINE))]
fn run_ir(py: Python<'_>, text: &str, inputs: Vec<WireTensor>, pipeline: &str) -> PyResult<Vec<WireOutput>> {
    use torchtpu_compiler::ir::DType;
    let g = parse_graph(text).map_err(|e| PyValueError::new_err(format!("parse error at {e}")))?;
    let host: Vec<torchtpu_engine::HostTensor> = inputs
        .into_iter()
        .map(|(d, dims, data)| {
            let dtype = DType::from_name(&d).ok_or_else(|| PyValueError::new_err(format!("unknown dtype '{d}'")))?;
            Ok(torchtpu_engine::HostTensor { dtype, dims, data })
        })
        .collect::<PyResult<_>>()?;
    let options = torchtpu_engine::Options::with_pipeline(pipeline);
    let outs = py
        .detach(|| {
            let engine = torchtpu_engine::default_engine()?;
            engine.compile(&g, &options)?.run(&host)
        })
        .map_err(|e: torchtpu_engine::EngineError| PyRuntimeError::new_err(e.to_string()))?;
    Ok(outs.into_iter().map(|t| (t.dtype.name().to_string(), t.dims, PyBytes::new(py, &t.data).unbind())).collect())
}

/// A graph compiled for the default PJRT device. `run` reads inputs from host memory given
/// as (address, byte length) pairs (the caller, torchtpu's executor, passes contiguous torch
/// tensors it keeps alive for the call) and returns the outputs as DLPack capsules.
#[pyclass(frozen)]
struct Program {
    compiled: torchtpu_engine::CompiledGraph,
    /// Dense byte length of each input.
    input_bytes: Vec<usize>,
    /// Outputs live in host memory (a CPU plugin): handed to PyTorch without a copy.
    outputs_on_host: bool,
}

impl Program {
    fn new(compiled: torchtpu_engine::CompiledGraph) -> Program {
        let input_bytes = compiled
            .input_types()
            .iter()
            .map(|t| t.static_dims().unwrap_or_default().iter().product::<i64>().max(0) as usize * t.dtype.size_bytes())
            .collect();
        let outputs_on_host = compiled.platform_name() == "cpu";
        Program { compiled, input_bytes, outputs_on_host }
    }
}

fn types_of(ts: &[torchtpu_compiler::ir::TensorType]) -> Vec<(String, Vec<i64>)> {
    ts.iter().map(|t| (t.dtype.name().to_string(), t.static_dims().unwrap_or_default())).collect()
}

#[pymethods]
impl Program {
    /// `(dtype name, dims)` of each input.
    #[getter]
    fn input_types(&self) -> Vec<(String, Vec<i64>)> {
        types_of(self.compiled.input_types())
    }

    /// Dense byte length of each input: what `run` reads from each address.
    #[getter]
    fn input_bytes(&self) -> Vec<usize> {
        self.input_bytes.clone()
    }

    /// `(dtype name, dims)` of each output.
    #[getter]
    fn output_types(&self) -> Vec<(String, Vec<i64>)> {
        types_of(self.compiled.output_types())
    }

    /// Executes on `inputs`: the address of each input's contiguous host memory, holding it
    /// as declared (dtype, shape: the byte length follows from them), live and unmodified for
    /// the whole call. Returns one DLPack capsule per output (`torch.from_dlpack`): on a CPU
    /// plugin the tensor shares PJRT's output memory, no copy. Inputs are read in place where
    /// the plugin allows and their buffers kept between calls that pass the same memory
    /// (`CompiledGraph::execute_host`).
    fn run(&self, py: Python<'_>, inputs: Vec<usize>) -> PyResult<Vec<Py<PyAny>>> {
        if inputs.len() != self.input_bytes.len() {
            return Err(PyValueError::new_err(format!(
                "expected {} inputs, got {}",
                self.input_bytes.len(),
                inputs.len()
            )));
        }
        if inputs.iter().zip(&self.input_bytes).any(|(&ptr, &n)| ptr == 0 && n != 0) {
            return Err(PyValueError::new_err("null input address"));
        }
        let memory: Vec<(usize, usize)> = inputs.into_iter().zip(self.input_bytes.iter().copied()).collect();
        // SAFETY: the caller's contract above (torchtpu's executor keeps the tensors alive).
        let outs = py
            .detach(|| unsafe { self.compiled.execute_host(&memory) })
            .map_err(|e| PyRuntimeError::new_err(e.to_string()))?;
        EXECUTIONS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        outs.into_iter().map(|b| dlpack::to_capsule(py, b, self.outputs_on_host)).collect()
    }
}

/// Program executions in this process (torchtpu.stats()["executions"]).
static EXECUTIONS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

#[pyfunction]
fn executions() -> u64 {
    EXECUTIONS.load(std::sync::atomic::Ordering::Relaxed)
}

/// Compiles IR text (after `pipeline`) on the default engine, through the executable
/// caches. Returns the program, where it came from ("memory", "disk" or "compiled") and the
/// XLA compile seconds a disk hit saved.
#[pyfunction]
#[pyo3(signature = (text, pipeline = torchtpu_compiler::passes::DEFAULT_PIPELINE, donate = true))]
fn compile(py: Python<'_>, text: &str, pipeline: &str, donate: bool) -> PyResult<(Program, &'static str, f64)> {
    let g = parse_graph(text).map_err(|e| PyValueError::new_err(format!("parse error at {e}")))?;
    let options =
        torchtpu_engine::Options { donate_inputs: donate, ..torchtpu_engine::Options::with_pipeline(pipeline) };
    let (compiled, source, saved) = py
        .detach(|| {
            let engine = torchtpu_engine::default_engine()?;
            let before = engine.cache().stats();
            let compiled = engine.compile(&g, &options)?;
            let after = engine.cache().stats();
            let source = if after.memory_hits > before.memory_hits {
                "memory"
            } else if after.disk_hits > before.disk_hits {
                "disk"
            } else {
                "compiled"
            };
            let saved = after.compile_seconds_saved - before.compile_seconds_saved;
            Ok::<_, torchtpu_engine::EngineError>((compiled, source, saved))
        })
        .map_err(|e| PyRuntimeError::new_err(e.to_string()))?;
    Ok((Program::new(compiled), source, saved))
}

/// The executable caches' counters: memory_hits, disk_hits, misses, compile_seconds,
/// compile_seconds_saved, disk_discarded, disk_writes, disk_errors, and the disk cache's
/// folder (None when disabled). Empty when no engine was started.
#[pyfunction]
fn cache_stats(py: Python<'_>) -> PyResult<Py<pyo3::types::PyDict>> {
    let d = pyo3::types::PyDict::new(py);
    if let Ok(engine) = torchtpu_engine::default_engine() {
        let s = engine.cache().stats();
        d.set_item("memory_hits", s.memory_hits)?;
        d.set_item("disk_hits", s.disk_hits)?;
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
        d.set_item("graph_misses", g.misses)?;
        d.set_item("graph_discarded", g.discarded)?;
    }
    Ok(d.unbind())
}

/// Warnings the disk cache collected since the last call (corrupt entries discarded, I/O
/// failures), one line each; the caller logs them.
#[pyfunction]
fn cache_warnings() -> Vec<String> {
    torchtpu_engine::default_engine()
        .map(|e| {
            let mut w: Vec<String> = e.cache().take_warnings().iter().map(|w| w.to_string()).collect();
            w.extend(e.graph_cache().take_warnings());
            w
        })
        .unwrap_or_default()
}

/// The ATen ops the lowering table covers (`aten.add`, ...), without overloads.
#[pyfunction]
fn supported_ops() -> Vec<&'static str> {
    torchtpu_compiler::lower::supported_ops()
}

/// The PJRT plugin the default engine loads (or would load).
#[pyfunction]
fn plugin_path() -> String {
    torchtpu_runtime::plugin_path().display().to_string()
}

/// The peak-memory estimate of IR text after `pipeline` (see `analysis::memory`):
/// a dict with peak_bytes, peak_at (the printed node, e.g. "%12 (aten.mm.default)"),
/// input_bytes, output_bytes, allocated_bytes and buffers; with `donate`, donated_inputs,
/// donated_bytes and peak_bytes_without_donation too (peak_bytes then counts donated inputs
/// as freed after their last reader).
#[pyfunction]
#[pyo3(signature = (text, pipeline = torchtpu_compiler::passes::DEFAULT_PIPELINE, donate = true))]
fn memory_estimate(py: Python<'_>, text: &str, pipeline: &str, donate: bool) -> PyResult<Py<pyo3::types::PyDict>> {
    use torchtpu_compiler::analysis::memory;
    let mut g = parse_graph(text).map_err(|e| PyValueError::new_err(format!("parse error at {e}")))?;
    verify(&g).map_err(|e| PyValueError::new_err(format!("invalid IR: {}", e.located())))?;
    let pm = PassManager::from_pipeline(pipeline, PipelineOptions::default())
        .map_err(|e| PyValueError::new_err(e.to_string()))?;
    pm.run(&mut g, &mut std::io::sink()).map_err(|e| PyValueError::new_err(e.to_string()))?;
    let plain = memory::estimate(&g).map_err(|_| PyValueError::new_err("graph has a cycle"))?;
    let donated: Vec<usize> =
        if donate { memory::donation_pairs(&g).into_iter().map(|(i, _)| i).collect() } else { Vec::new() };
    let est = memory::estimate_with_donation(&g, &donated).map_err(|_| PyValueError::new_err("graph has a cycle"))?;
    let report = memory::report(&g, &est);
    let peak_at = report.split(" at ").nth(1).and_then(|r| r.split(';').next()).unwrap_or("").to_string();
    let d = pyo3::types::PyDict::new(py);
    d.set_item("peak_bytes", est.peak_bytes)?;
    d.set_item("peak_at", peak_at)?;
    d.set_item("input_bytes", est.input_bytes)?;
    d.set_item("output_bytes", est.output_bytes)?;
    d.set_item("allocated_bytes", est.allocated_bytes)?;
    d.set_item("buffers", est.buffers)?;
    if donate {
        let bytes: u64 = donated.iter().map(|&i| memory::value_bytes(&g.node(g.inputs()[i]).results[0]).0).sum();
        d.set_item("donated_inputs", donated.len())?;
        d.set_item("donated_bytes", bytes)?;
        d.set_item("peak_bytes_without_donation", plain.peak_bytes)?;
    }
    Ok(d.unbind())
}

/// `(name, description)` of every registered pass.
#[pyfunction]
fn list_passes() -> Vec<(&'static str, &'static str)> {
    REGISTRY.iter().map(|p| (p.name, p.description)).collect()
}

#[pymodule]
fn _C(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_function(wrap_pyfunction!(canonical_ir, m)?)?;
    m.add_function(wrap_pyfunction!(run_pipeline, m)?)?;
    m.add_function(wrap_pyfunction!(list_passes, m)?)?;
    m.add_function(wrap_pyfunction!(memory_estimate, m)?)?;
    m.add_function(wrap_pyfunction!(lower_ir, m)?)?;
    m.add_function(wrap_pyfunction!(run_ir, m)?)?;
    m.add_function(wrap_pyfunction!(compile, m)?)?;
    m.add_function(wrap_pyfunction!(cache_stats, m)?)?;
    m.add_function(wrap_pyfunction!(cache_warnings, m)?)?;
    m.add_function(wrap_pyfunction!(supported_ops, m)?)?;
    m.add_function(wrap_pyfunction!(plugin_path, m)?)?;
    m.add_function(wrap_pyfunction!(executions, m)?)?;
    m.add_class::<Program>()?;
    Ok(())
}
