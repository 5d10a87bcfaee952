//! One-device execution on host memory: inputs read in place where the plugin allows, and
//! kept resident between calls that pass the same memory.

use torchtpu_compiler::driver::fault_injected;
use torchtpu_runtime::dlpack::TensorView;
use torchtpu_runtime::Buffer;

use crate::{element_type, resident, CompiledGraph, EngineError, HostTensor};

impl CompiledGraph {
    /// The memory of each DLPack input, after checking that it is what the program was
    /// compiled for: host memory, the dtype, the shape, dense row-major strides (and so the
    /// byte size). Nothing is read before every input passed.
    pub fn check_dlpack<'a>(&self, inputs: &[TensorView<'a>]) -> Result<Vec<&'a [u8]>, EngineError> {
        if inputs.len() != self.inputs.len() {
            return Err(EngineError::Arity { expected: self.inputs.len(), got: inputs.len() });
        }
        inputs
            .iter()
            .zip(&self.inputs)
            .enumerate()
            .map(|(index, (view, ty))| {
                let dims = ty.static_dims().unwrap_or_default();
                view.dense_bytes(element_type(ty.dtype), &dims).map_err(|why| EngineError::Input {
                    index,
                    expected: format!("a dense row-major host tensor {ty}"),
                    got: format!("{} ({why})", view.describe()),
                })
            })
            .collect()
    }

    /// Runs on row-major host memory (`inputs[i]` holds input i, of its dense byte length)
    /// and returns the output buffers (on CPU plugins host memory: `dlpack::Exported` hands
    /// them out without a copy).
    ///
    /// Each input is read in place (PJRT zero-copy) where the plugin allows, and the buffer
    /// made for input i is kept: the next call that passes the same memory (address, length)
    /// for input i reuses it. That keeps parameters resident between calls, and it is exact,
    /// not a guess: an aliasing buffer reads the memory at every execution, so an in-place
    /// update of a parameter is seen. An aliased input is never donated (XLA would write into
    /// the caller's memory); where the plugin copies instead (GPU/TPU), the copy is private and
    /// the program's donations (`tf.aliasing_output`) apply.
    pub fn execute_host(&self, inputs: &[&[u8]]) -> Result<Vec<Buffer>, EngineError> {
        if fault_injected("execute") {
            return Err(EngineError::Injected { stage: "execute" });
        }
        self.check_sizes(inputs)?;
        let mut slots = self.resident.lock().unwrap_or_else(|p| p.into_inner());
        let mut copies: Vec<Option<Buffer>> = Vec::with_capacity(inputs.len());
        for (i, (&data, ty)) in inputs.iter().zip(&self.inputs).enumerate() {
            let dims = ty.static_dims().unwrap_or_default();
            // SAFETY: a kept buffer is used only in calls passing this memory again (`in_place`
            // checks it on every call) and is never donated (`in_place` below).
            let copy = unsafe {
                resident::in_place(&mut slots[i], &self.client, data, element_type(ty.dtype), &dims, &self.device)
            };
            copies.push(copy.map_err(EngineError::Execute)?);
        }
        let in_place: Vec<i64> = (0..inputs.len()).filter(|&i| copies[i].is_none()).map(|i| i as i64).collect();
        let args = resident::arguments(&copies, &slots);
        self.exe.execute_on(&args, &in_place, &self.device, true).map_err(EngineError::Execute)
    }

    /// Runs on row-major host memory: `inputs[i]` holds input i, the outputs are copied
    /// straight into `outputs[i]`. Sizes are checked against the declared types; dtypes are the
    /// caller's responsibility.
    pub fn run_into(&self, inputs: &[&[u8]], outputs: &mut [&mut [u8]]) -> Result<(), EngineError> {
        if outputs.len() != self.outputs.len() {
            return Err(EngineError::Arity { expected: self.outputs.len(), got: outputs.len() });
        }
        let outs = self.execute_host(inputs)?;
        for (b, dst) in outs.iter().zip(outputs.iter_mut()) {
            b.copy_to_host(dst).map_err(EngineError::Execute)?;
        }
        Ok(())
    }

    /// Copies the inputs to the device, executes, and copies the outputs back.
    pub fn run(&self, inputs: &[HostTensor]) -> Result<Vec<HostTensor>, EngineError> {
        if fault_injected("execute") {
            return Err(EngineError::Injected { stage: "execute" });
        }
        if inputs.len() != self.inputs.len() {
            return Err(EngineError::Arity { expected: self.inputs.len(), got: inputs.len() });
        }
        let mut buffers: Vec<Buffer> = Vec::with_capacity(inputs.len());
        for (i, (t, want)) in inputs.iter().zip(&self.inputs).enumerate() {
            // PJRT checks byte sizes only; check dtype and shape here.
            if t.dtype != want.dtype || Some(&t.dims) != want.static_dims().as_ref() {
                return Err(EngineError::Input { index: i, expected: want.to_string(), got: t.type_string() });
            }
            let buffer = self.client.buffer_from_host(&t.data, element_type(t.dtype), &t.dims, &self.device);
            buffers.push(buffer.map_err(EngineError::Execute)?);
        }
        let refs: Vec<&Buffer> = buffers.iter().collect();
        let outs = self.exe.execute_on(&refs, &[], &self.device, true).map_err(EngineError::Execute)?;
        outs.iter()
            .zip(&self.outputs)
            .map(|(b, ty)| {
                let data = b.to_host().map_err(EngineError::Execute)?;
                Ok(HostTensor { dtype: ty.dtype, dims: b.dims().to_vec(), data })
            })
            .collect()
    }
}
