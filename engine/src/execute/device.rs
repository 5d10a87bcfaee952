//! Device-resident execution for the eager `tpu` device and for compiled graphs whose inputs
//! already live on the device: buffers in, buffers out, nothing copied through the host.
//! One-device programs are portable executables, so each runs on the device the caller names
//! (`tpu:N` is the client's N-th addressable device, `Engine::device`) and its outputs live there.

use torchtpu_runtime::{Buffer, Device};

use crate::ir::TensorType;
use crate::{element_type, fault_injected, CompiledGraph, EngineError};

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
        self.execute_buffers_on(inputs, donate, wait, &self.device)
    }

    /// [`CompiledGraph::execute_buffers_donating`] on `device` (one of the engine's devices,
    /// [`Engine::device`]): every input must live there (PJRT refuses others), and the outputs
    /// do.
    pub fn execute_buffers_on(
        &self,
        inputs: &[&Buffer],
        donate: &[usize],
        wait: bool,
        device: &Device,
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
        check_buffer_types(inputs, &self.inputs, "")?;
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
        self.exe.execute_on(inputs, &keep, device, wait).map_err(EngineError::Execute)
    }
}

/// Refuses device buffers whose element type or shape is not the compiled input type's;
/// `whose` says whose inputs they are in the message (" (replica 1)").
pub(crate) fn check_buffer_types(inputs: &[&Buffer], types: &[TensorType], whose: &str) -> Result<(), EngineError> {
    for (index, (b, ty)) in inputs.iter().zip(types).enumerate() {
        let dims = ty.static_dims().unwrap_or_default();
        if b.element_type() != element_type(ty.dtype) || b.dims() != dims.as_slice() {
            return Err(EngineError::Input {
                index,
                expected: format!("{ty}{whose}"),
                got: format!("a device buffer {:?}{:?}", b.element_type(), b.dims()),
            });
        }
    }
    Ok(())
}
