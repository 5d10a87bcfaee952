//! Device-resident execution for the eager `tpu` device and for compiled graphs whose inputs
//! already live on the device: buffers in, buffers out, nothing copied through the host.

use torchtpu_runtime::Buffer;

use crate::ir::DType;
use crate::{element_type, fault_injected, CompiledGraph, Engine, EngineError};

impl Engine {
    /// Copies a dense row-major host array of `dtype` and shape `dims` to the engine's device.
    pub fn upload(&self, data: &[u8], dtype: DType, dims: &[i64]) -> Result<Buffer, EngineError> {
        let ty = element_type(dtype);
        let expected = torchtpu_runtime::dense_byte_size(ty, dims).map_err(EngineError::Execute)?;
        if data.len() != expected {
            return Err(EngineError::Input {
                index: 0,
                expected: format!("{expected} bytes for {dtype:?}{dims:?}"),
                got: format!("{} bytes", data.len()),
            });
        }
        self.client.buffer_from_host(data, ty, dims, &self.device).map_err(EngineError::Execute)
    }
}

impl CompiledGraph {
    /// Runs on device buffers (each checked against the compiled input type) and returns the
    /// output buffers, still on the device. With `wait` false the call returns once the work
    /// is enqueued (where the plugin runs asynchronously); reading an output waits for it and
    /// reports a failed execution. Inputs are never donated: they may back other tensors.
    pub fn execute_buffers(&self, inputs: &[&Buffer], wait: bool) -> Result<Vec<Buffer>, EngineError> {
        if fault_injected("execute") {
            return Err(EngineError::Injected { stage: "execute" });
        }
        if self.spmd.is_some() {
            return Err(EngineError::Sharding("device buffers feed one-device programs only".into()));
        }
        if inputs.len() != self.inputs.len() {
            return Err(EngineError::Arity { expected: self.inputs.len(), got: inputs.len() });
        }
        for (index, (b, ty)) in inputs.iter().zip(&self.inputs).enumerate() {
            let dims = ty.static_dims().unwrap_or_default();
            if b.element_type() != element_type(ty.dtype) || b.dims() != dims.as_slice() {
                return Err(EngineError::Input {
                    index,
                    expected: ty.to_string(),
                    got: format!("a device buffer {:?}{:?}", b.element_type(), b.dims()),
                });
            }
        }
        let run =
            if wait { self.exe.execute_keeping(inputs, &self.all_inputs()) } else { self.exe.execute_async(inputs) };
        run.map_err(EngineError::Execute)
    }

    fn all_inputs(&self) -> Vec<i64> {
        (0..self.inputs.len() as i64).collect()
    }
}
