//! `torchtpu._C`: the compiler's Python boundary. Errors become Python exceptions with the
//! compiler's message; nothing panics across the boundary.

// The module must be called `_C` (torchtpu._C), which is not snake case.
#![allow(non_snake_case)]

use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::types::PyBytes;
use pyo3::prelude::*;
use torchtpu_compiler::ir::{parse_graph, print_graph, verify};
use torchtpu_compiler::passes::{PassManager, PipelineOptions, REGISTRY};

/// Parses IR text, verifies it, and prints it back in canonical form.
#[pyfunction]
fn canonical_ir(text: &str) -> PyResult<String> {
    let g = parse_graph(text).map_err(|e| PyValueError::new_err(format!("parse error at {e}")))?;
    verify(&g).map_err(|e| PyValueError::new_err(format!("invalid IR: {e}")))?;
    Ok(print_graph(&g))
}

/// Runs a pass pipeline (`"canonicalize,cse,dce"`) over IR text and returns the result.
#[pyfunction]
fn run_pipeline(text: &str, pipeline: &str) -> PyResult<String> {
    let mut g = parse_graph(text).map_err(|e| PyValueError::new_err(format!("parse error at {e}")))?;
    verify(&g).map_err(|e| PyValueError::new_err(format!("invalid IR: {e}")))?;
    let pm = PassManager::from_pipeline(pipeline, PipelineOptions::default())
        .map_err(|e| PyValueError::new_err(e.to_string()))?;
    pm.run(&mut g, &mut std::io::sink()).map_err(|e| PyValueError::new_err(e.to_string()))?;
    Ok(print_graph(&g))
}

/// Lowers IR text (after `pipeline`) to StableHLO text.
#[pyfunction]
#[pyo3(signature = (text, pipeline = torchtpu_compiler::passes::DEFAULT_PIPELINE))]
fn lower_ir(text: &str, pipeline: &str) -> PyResult<String> {
    let g = parse_graph(text).map_err(|e| PyValueError::new_err(format!("parse error at {e}")))?;
    let options = torchtpu_engine::Options { pipeline: pipeline.to_string() };
    let (_, hlo) = torchtpu_engine::lower(&g, &options, torchtpu_compiler::lower::Format::Text)
        .map_err(|e| PyValueError::new_err(e.to_string()))?;
    Ok(hlo.text().unwrap_or_default().to_string())
}

/// A host tensor crossing the boundary: (dtype name as in the IR, dims, row-major bytes).
type WireTensor = (String, Vec<i64>, Vec<u8>);

/// Compiles IR text on the default engine (cached) and runs it on host tensors.
#[pyfunction]
#[pyo3(signature = (text, inputs, pipeline = torchtpu_compiler::passes::DEFAULT_PIPELINE))]
fn run_ir(py: Python<'_>, text: &str, inputs: Vec<WireTensor>, pipeline: &str) -> PyResult<Vec<(String, Vec<i64>, Py<PyBytes>)>> {
    use torchtpu_compiler::ir::DType;
    let g = parse_graph(text).map_err(|e| PyValueError::new_err(format!("parse error at {e}")))?;
    let host: Vec<torchtpu_engine::HostTensor> = inputs
        .into_iter()
        .map(|(d, dims, data)| {
            let dtype = DType::from_name(&d).ok_or_else(|| PyValueError::new_err(format!("unknown dtype '{d}'")))?;
            Ok(torchtpu_engine::HostTensor { dtype, dims, data })
        })
        .collect::<PyResult<_>>()?;
    let options = torchtpu_engine::Options { pipeline: pipeline.to_string() };
    let outs = py
        .detach(|| {
            let engine = torchtpu_engine::default_engine()?;
            engine.compile(&g, &options)?.run(&host)
        })
        .map_err(|e: torchtpu_engine::EngineError| PyRuntimeError::new_err(e.to_string()))?;
    Ok(outs.into_iter().map(|t| (t.dtype.name().to_string(), t.dims, PyBytes::new(py, &t.data).unbind())).collect())
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
    m.add_function(wrap_pyfunction!(lower_ir, m)?)?;
    m.add_function(wrap_pyfunction!(run_ir, m)?)?;
    Ok(())
}
