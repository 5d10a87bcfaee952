//! Replicated programs for Python (`torchtpu._C.compile_replicated`): what the in-process
//! `tpu_dist` transport runs, one program over the devices of a group's ranks, each replica
//! fed that rank's device buffers. Marshalling only: the engine compiles and runs them.

use pyo3::prelude::*;

use torchtpu_engine::ReplicatedProgram as Compiled;
use torchtpu_runtime::Buffer;

use crate::device::DeviceBuffer;
use crate::{default_engine, engine_error, guarded, py_error};

/// A replicated program: `run([[inputs of replica 0], [inputs of replica 1], ...])`.
#[pyclass(frozen)]
pub struct ReplicatedProgram {
    compiled: Compiled,
    devices: Vec<usize>,
}

/// Compiles the IR `text` (with `c10d.*` collectives) for one replica per device of
/// `devices` (engine device indices, `tpu:N`), replica r on `devices[r]`.
#[pyfunction]
#[pyo3(signature = (text, devices, pipeline = torchtpu_engine::DEFAULT_PIPELINE))]
pub fn compile_replicated(
    py: Python<'_>,
    text: &str,
    devices: Vec<usize>,
    pipeline: &str,
) -> PyResult<ReplicatedProgram> {
    guarded(py, "compile", || {
        let engine = default_engine(py)?;
        let options = torchtpu_engine::Options::with_pipeline(pipeline);
        let compiled =
            py.detach(|| engine.compile_replicated_text(text, &options, &devices)).map_err(|e| engine_error(py, &e))?;
        Ok(ReplicatedProgram { compiled, devices })
    })
}

#[pymethods]
impl ReplicatedProgram {
    #[getter]
    fn devices(&self) -> Vec<usize> {
        self.devices.clone()
    }

    /// Runs every replica on its row of device buffers (each on that replica's device) and
    /// returns each replica's outputs as device buffers on its device.
    fn run(&self, py: Python<'_>, args: Vec<Vec<PyRef<'_, DeviceBuffer>>>) -> PyResult<Vec<Vec<DeviceBuffer>>> {
        for (r, row) in args.iter().enumerate() {
            for b in row {
                b.check_usable(py)?;
            }
            if let Some(b) = row.iter().find(|b| Some(&b.device) != self.devices.get(r)) {
                let why = format!(
                    "replica {r} runs on device {}, but one of its inputs is on device {}",
                    self.devices.get(r).map_or("none".to_string(), usize::to_string),
                    b.device
                );
                return Err(py_error(py, "input", &why, &[]));
            }
        }
        guarded(py, "execute", || {
            let rows: Vec<Vec<&Buffer>> = args.iter().map(|row| row.iter().map(|b| &b.buffer).collect()).collect();
            let outs = py.detach(|| self.compiled.execute(&rows)).map_err(|e| engine_error(py, &e))?;
            crate::EXECUTIONS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let types = self.compiled.output_types();
            Ok(outs
                .into_iter()
                .zip(&self.devices)
                .map(|(row, &d)| row.into_iter().zip(types).map(|(b, t)| DeviceBuffer::new(b, t.dtype, d)).collect())
                .collect())
        })
    }
}
