//! Device buffers for the eager `tpu` device (`torchtpu.device`): a `DeviceBuffer` owns one
//! PJRT buffer on the engine's device and is freed with its Python object. Live and peak
//! bytes are counted here, where buffers are made and dropped.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use pyo3::prelude::*;
use pyo3::types::PyCapsule;
use torchtpu_engine::ir::DType;
use torchtpu_engine::EngineError;
use torchtpu_runtime::{Buffer, ElementType};

use crate::{default_engine, dlpack, engine_error, guarded, py_error, some, Program};

static LIVE_BYTES: AtomicUsize = AtomicUsize::new(0);
static PEAK_BYTES: AtomicUsize = AtomicUsize::new(0);

/// An array in device memory: `dtype` (the IR's name, e.g. "f32") and `shape`.
#[pyclass(frozen, weakref)]
pub struct DeviceBuffer {
    buffer: Buffer,
    dtype: DType,
    nbytes: usize,
    // Given to an execution (`Program.run_device(donate=...)`): its memory is the output's
    // now, so it no longer counts as live and must not be read.
    donated: AtomicBool,
}

impl DeviceBuffer {
    fn new(buffer: Buffer, dtype: DType) -> DeviceBuffer {
        let nbytes = torchtpu_runtime::dense_byte_size(buffer.element_type(), buffer.dims()).unwrap_or(0);
        let live = LIVE_BYTES.fetch_add(nbytes, Ordering::Relaxed) + nbytes;
        PEAK_BYTES.fetch_max(live, Ordering::Relaxed);
        DeviceBuffer { buffer, dtype, nbytes, donated: AtomicBool::new(false) }
    }

    fn mark_donated(&self) {
        if !self.donated.swap(true, Ordering::Relaxed) {
            LIVE_BYTES.fetch_sub(self.nbytes, Ordering::Relaxed);
        }
    }

    fn check_usable(&self, py: Python<'_>) -> PyResult<()> {
        if self.donated.load(Ordering::Relaxed) {
            return Err(py_error(py, "input", "this device buffer was donated to an execution and holds no data", &[]));
        }
        Ok(())
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        if !self.donated.load(Ordering::Relaxed) {
            LIVE_BYTES.fetch_sub(self.nbytes, Ordering::Relaxed);
        }
    }
}

/// The IR dtype of a PJRT element type (None for the unsigned types the IR lacks).
fn dtype_of(ty: ElementType) -> Option<DType> {
    Some(match ty {
        ElementType::Pred => DType::Bool,
        ElementType::S8 => DType::I8,
        ElementType::S16 => DType::I16,
        ElementType::S32 => DType::I32,
        ElementType::S64 => DType::I64,
        ElementType::U8 => DType::U8,
        ElementType::F16 => DType::F16,
        ElementType::BF16 => DType::BF16,
        ElementType::F32 => DType::F32,
        ElementType::F64 => DType::F64,
        ElementType::C64 => DType::C64,
        ElementType::C128 => DType::C128,
        ElementType::U16 | ElementType::U32 | ElementType::U64 => return None,
    })
}

#[pymethods]
impl DeviceBuffer {
    #[getter]
    fn dtype(&self) -> &'static str {
        self.dtype.name()
    }

    #[getter]
    fn shape(&self) -> Vec<i64> {
        self.buffer.dims().to_vec()
    }

    #[getter]
    fn nbytes(&self) -> usize {
        self.nbytes
    }

    /// Whether an execution took this buffer (`Program.run_device(donate=...)`).
    #[getter]
    fn donated(&self) -> bool {
        self.donated.load(Ordering::Relaxed)
    }

    /// Waits until the contents are computed; a failed asynchronous execution raises here
    /// (`torchtpu.errors.ExecutionError`).
    fn wait(&self, py: Python<'_>) -> PyResult<()> {
        self.check_usable(py)?;
        guarded(py, "execute", || {
            py.detach(|| self.buffer.wait_ready()).map_err(|e| engine_error(py, &EngineError::Execute(e)))
        })
    }

    /// A host copy as a DLPack capsule (`torch.from_dlpack`). Always a copy: a device buffer
    /// may later be read by programs while the host tensor is changed.
    fn to_host(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        self.check_usable(py)?;
        guarded(py, "execute", || {
            let data = py.detach(|| self.buffer.to_host()).map_err(|e| engine_error(py, &EngineError::Execute(e)))?;
            dlpack::host_capsule(py, data, self.buffer.element_type(), self.buffer.dims().to_vec())
                .map_err(|e| engine_error(py, &EngineError::Execute(e)))
        })
    }
}

/// Copies a dense row-major CPU tensor (or DLPack capsule) to the device.
#[pyfunction]
pub fn device_put(py: Python<'_>, tensor: Bound<'_, PyAny>) -> PyResult<DeviceBuffer> {
    guarded(py, "execute", || {
        let capsule = match tensor.cast_into::<PyCapsule>() {
            Ok(c) => c,
            Err(e) => {
                py.import("torch")?.getattr("_C")?.getattr("_to_dlpack")?.call1((e.into_inner(),))?.cast_into()?
            }
        };
        let view = dlpack::view(&capsule)?;
        let bad = |why: String| py_error(py, "input", &format!("device_put: {why}"), &[("index", some(py, 0))]);
        let ty = view.element_type().ok_or_else(|| bad(format!("unsupported dtype ({})", view.describe())))?;
        let dtype = dtype_of(ty).ok_or_else(|| bad(format!("unsupported dtype ({})", view.describe())))?;
        let dims = view.shape().to_vec();
        let data = view.dense_bytes(ty, &dims).map_err(|why| bad(format!("{} ({why})", view.describe())))?;
        let engine = default_engine(py)?;
        let buffer = py.detach(|| engine.upload(data, dtype, &dims)).map_err(|e| engine_error(py, &e))?;
        Ok(DeviceBuffer::new(buffer, dtype))
    })
}

/// `(live, peak)` bytes of device buffers held by `DeviceBuffer`s in this process.
#[pyfunction]
pub fn device_memory() -> (usize, usize) {
    (LIVE_BYTES.load(Ordering::Relaxed), PEAK_BYTES.load(Ordering::Relaxed))
}

/// Resets the peak to the bytes live now.
#[pyfunction]
pub fn reset_device_peak() {
    PEAK_BYTES.store(LIVE_BYTES.load(Ordering::Relaxed), Ordering::Relaxed);
}

/// `Program.run_device`: executes on device buffers (checked against the compiled input
/// types) and returns the outputs as device buffers, no host copy either way. The inputs at
/// `donate` may be donated (each is marked so, and no longer counts as live).
pub fn run_device(
    py: Python<'_>,
    program: &Program,
    inputs: Vec<PyRef<'_, DeviceBuffer>>,
    wait: bool,
    donate: &[usize],
) -> PyResult<Vec<DeviceBuffer>> {
    for b in &inputs {
        b.check_usable(py)?;
    }
    guarded(py, "execute", || {
        let refs: Vec<&Buffer> = inputs.iter().map(|b| &b.buffer).collect();
        let outs = py
            .detach(|| program.compiled.execute_buffers_donating(&refs, donate, wait))
            .map_err(|e| engine_error(py, &e))?;
        crate::EXECUTIONS.fetch_add(1, Ordering::Relaxed);
        // Before the outputs count: a donated input's memory may be an output's now.
        for &i in donate {
            inputs[i].mark_donated();
        }
        let types = program.compiled.output_types();
        Ok(outs.into_iter().zip(types).map(|(b, t)| DeviceBuffer::new(b, t.dtype)).collect())
    })
}
