//! ATen's kernels for XLA programs (`torchtpu_runtime::host_kernels::aten`): the device shim's
//! table handed to the runtime, and the engine's measured choices read back for the stats.

use pyo3::prelude::*;
use pyo3::types::{PyCapsule, PyDict};

use crate::{guarded, py_error};

const CAPSULE_NAME: &std::ffi::CStr = c"torchtpu._device_shim.host_kernel_api";

/// Installs the device shim's table of ATen kernels (`_device_shim.host_kernel_api()`), so
/// that programs compiled with `choose_kernels=True` may call them. The capsule is kept for
/// the process: the runtime holds its pointer.
#[pyfunction]
pub fn install_host_kernels(py: Python<'_>, capsule: Bound<'_, PyCapsule>) -> PyResult<()> {
    let ptr = capsule.pointer_checked(Some(CAPSULE_NAME))?;
    // SAFETY: the shim's capsule points at a static table; the capsule is leaked below, so the
    // pointer outlives every program.
    unsafe { torchtpu_runtime::host_kernels::aten::install(ptr.as_ptr()) }
        .map_err(|why| py_error(py, "plugin", &why, &[]))?;
    std::mem::forget(capsule.unbind());
    Ok(())
}

/// Every matmul shape the default engine measured for its choice between XLA's dot and ATen's
/// GEMM: `[{"op", "shape", "xla_us", "aten_us", "kernel", "note"}]`, then each program raced
/// with ATen's kernels against all XLA's (`op` "program", `shape` the graph's name, `kernel`
/// the program kept); empty without an engine (one
/// that could not start measured nothing: `torchtpu.stats()` works without a plugin).
#[pyfunction]
pub fn kernel_choices(py: Python<'_>) -> PyResult<Vec<Bound<'_, PyDict>>> {
    if torchtpu_runtime::in_forked_child() || !torchtpu_engine::engine_started() {
        return Ok(Vec::new());
    }
    guarded(py, "compile", || {
        let Ok(engine) = torchtpu_engine::default_engine() else { return Ok(Vec::new()) };
        let entry = |op: &str, shape: String, xla: f64, aten: f64, chosen: bool, note: Option<String>| {
            let d = PyDict::new(py);
            d.set_item("op", op)?;
            d.set_item("shape", shape)?;
            d.set_item("xla_us", xla * 1e6)?;
            d.set_item("aten_us", aten * 1e6)?;
            d.set_item("kernel", if chosen { "aten" } else { "xla" })?;
            d.set_item("note", note)?;
            Ok(d)
        };
        let shapes = engine.kernel_choices().into_iter().map(|m| {
            let op = if m.shape.batch.is_some() { "bmm" } else { "mm" };
            entry(op, m.shape.to_string(), m.xla_seconds, m.aten_seconds, m.aten, m.note)
        });
        let programs = engine
            .kernel_programs()
            .into_iter()
            .map(|p| entry("program", p.graph, p.xla_seconds, p.aten_seconds, p.aten, p.note));
        shapes.chain(programs).collect()
    })
}
