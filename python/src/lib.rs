//! `torchtpu._C`: the compiler's Python boundary. Errors become Python exceptions with the
//! compiler's message; nothing panics across the boundary.

use pyo3::exceptions::PyValueError;
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
    Ok(())
}
