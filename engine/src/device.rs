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
        self.execute_buffers_donating(inputs, &[], wait)
    }

    /// Like [`CompiledGraph::execute_buffers`], but the inputs at `donate` (indices, each at
    /// most once) may be donated where the program aliases them to an output: the caller
    /// guarantees nothing reads them afterwards (DeferAndFuse donates the buffers only its
    /// region still held).
    pub fn execute_buffers_donating(
        &self,
        inputs: &[&Buffer],
        donate: &[usize],
        wait: bool,
    ) -> Result<Vec<Buffer>, EngineError> {
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
        let mut donated = vec![false; inputs.len()];
        for &i in donate {
            if i >= inputs.len() || std::mem::replace(&mut donated[i], true) {
                return Err(EngineError::Input {
                    index: i,
                    expected: format!("a donated input index below {}, each at most once", inputs.len()),
                    got: format!("{donate:?}"),
                });
            }
        }
        let keep: Vec<i64> = (0..inputs.len()).filter(|&i| !donated[i]).map(|i| i as i64).collect();
        let run =
            if wait { self.exe.execute_keeping(inputs, &keep) } else { self.exe.execute_async_keeping(inputs, &keep) };
        run.map_err(EngineError::Execute)
    }
}
