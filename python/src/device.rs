//! Device buffers for the eager `tpu` device (`torchtpu.device`): a `DeviceBuffer` owns one
//! PJRT buffer on one of the engine's devices (`tpu:N` is the N-th) and is freed with its
//! Python object. Live and peak bytes, and the allocations and frees behind them, are counted
//! here, per device, where buffers are made and dropped (`torch.tpu.memory_stats`).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::OnceLock;

use pyo3::prelude::*;
use pyo3::types::PyCapsule;
use torchtpu_engine::DType;
use torchtpu_engine::EngineError;
use torchtpu_runtime::{Buffer, ElementType};

use crate::{default_engine, dlpack, engine_error, guarded, py_error, some, Program};

/// Live and peak bytes of one device's `DeviceBuffer`s, and the allocations and frees (count
/// and bytes) since the process began or `reset_device_accumulated`.
#[derive(Default)]
struct Counter {
    live: AtomicUsize,
    peak: AtomicUsize,
    allocations: AtomicUsize,
    frees: AtomicUsize,
    bytes_allocated: AtomicUsize,
    bytes_freed: AtomicUsize,
}

impl Counter {
    fn add(&self, nbytes: usize) {
        let live = self.live.fetch_add(nbytes, Ordering::Relaxed) + nbytes;
        self.peak.fetch_max(live, Ordering::Relaxed);
        self.allocations.fetch_add(1, Ordering::Relaxed);
        self.bytes_allocated.fetch_add(nbytes, Ordering::Relaxed);
    }

    fn remove(&self, nbytes: usize) {
        self.live.fetch_sub(nbytes, Ordering::Relaxed);
        self.frees.fetch_add(1, Ordering::Relaxed);
        self.bytes_freed.fetch_add(nbytes, Ordering::Relaxed);
    }
}

/// One counter per device of the default engine (every `DeviceBuffer` is on one of them).
fn counters() -> &'static [Counter] {
    static COUNTERS: OnceLock<Vec<Counter>> = OnceLock::new();
    COUNTERS.get_or_init(|| {
        let n = torchtpu_engine::default_engine().map_or(1, |e| e.devices().len().max(1));
        (0..n).map(|_| Counter::default()).collect()
    })
}

/// An array in device memory: `dtype` (the IR's name, e.g. "f32"), `shape`, and `device`, the
/// index of the engine device it lives on (`tpu:device`).
#[pyclass(frozen, weakref)]
pub struct DeviceBuffer {
    pub(crate) buffer: Buffer,
    pub(crate) device: usize,
    dtype: DType,
    pub(crate) nbytes: usize,
    // Given to an execution (`Program.run_device(donate=...)`): its memory is the output's
    // now, so it no longer counts as live and must not be read.
    donated: AtomicBool,
    /// Its entry in the live buffers' list (`memory.rs`).
    id: u64,
}

impl DeviceBuffer {
    /// Wraps `buffer`, which lives on engine device `device` (the caller knows: it put it
    /// there, or ran the program there), and counts its bytes on that device.
    pub(crate) fn new(buffer: Buffer, dtype: DType, device: usize) -> DeviceBuffer {
        let nbytes = torchtpu_runtime::dense_byte_size(buffer.element_type(), buffer.dims()).unwrap_or(0);
        counters()[device].add(nbytes);
        let id = crate::memory::register(device, nbytes, buffer.dims(), dtype);
        DeviceBuffer { buffer, device, dtype, nbytes, donated: AtomicBool::new(false), id }
    }

    pub(crate) fn mark_donated(&self) {
        if !self.donated.swap(true, Ordering::Relaxed) {
            counters()[self.device].remove(self.nbytes);
            crate::memory::forget(self.id);
        }
    }

    /// Whether an execution took it (then it must not be read).
    pub(crate) fn donated_now(&self) -> bool {
        self.donated.load(Ordering::Relaxed)
    }

    pub(crate) fn check_usable(&self, py: Python<'_>) -> PyResult<()> {
        if self.donated.load(Ordering::Relaxed) {
            return Err(py_error(py, "input", "this device buffer was donated to an execution and holds no data", &[]));
        }
        Ok(())
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        if !self.donated.load(Ordering::Relaxed) {
            counters()[self.device].remove(self.nbytes);
            crate::memory::forget(self.id);
        }
    }
}

/// Bytes of live buffers on tpu:`device` now.
pub(crate) fn live_bytes(device: usize) -> usize {
    counters().get(device).map_or(0, |c| c.live.load(Ordering::Relaxed))
}

/// The IR dtype a PJRT element type carries (None for the unsigned types the IR lacks): the
/// inverse of the engine's `element_type`, not a second table.
fn dtype_of(ty: ElementType) -> Option<DType> {
    DType::ALL.iter().copied().find(|&d| torchtpu_engine::element_type(d) == ty)
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

    /// The index of the engine device holding it (`tpu:device`).
    #[getter]
    fn device(&self) -> usize {
        self.device
    }

    /// A copy on engine device `device` (another one than its own), made by the plugin device
    /// to device (`PJRT_Buffer_CopyToDevice`), never through the host.
    fn copy_to(&self, py: Python<'_>, device: usize) -> PyResult<DeviceBuffer> {
        self.check_usable(py)?;
        if device == self.device {
            let why = format!("copy_to: the buffer is already on device {device}");
            return Err(py_error(py, "input", &why, &[]));
        }
        guarded(py, "execute", || {
            let engine = default_engine(py)?;
            let copy = py.detach(|| engine.copy_to_device(&self.buffer, device)).map_err(|e| engine_error(py, &e))?;
            Ok(DeviceBuffer::new(copy, self.dtype, device))
        })
    }

    /// Whether an execution took this buffer (`Program.run_device(donate=...)`).
    #[getter]
    fn donated(&self) -> bool {
        self.donated.load(Ordering::Relaxed)
    }

    /// Waits until the contents are computed; a failed asynchronous execution raises here
    /// (`torchtpu.errors.ExecutionError`).
    pub(crate) fn wait(&self, py: Python<'_>) -> PyResult<()> {
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
            let in_host_memory = default_engine(py)?.platform().buffers_in_host_memory();
            let read = || if in_host_memory { self.buffer.read_host_memory() } else { self.buffer.to_host() };
            let data = py.detach(read).map_err(|e| engine_error(py, &EngineError::Execute(e)))?;
            dlpack::host_capsule(py, data, self.buffer.element_type(), self.buffer.dims().to_vec())
                .map_err(|e| engine_error(py, &EngineError::Execute(e)))
        })
    }
}

/// Copies a dense row-major CPU tensor (or DLPack capsule) to engine device `device`.
#[pyfunction]
#[pyo3(signature = (tensor, device = 0))]
pub fn device_put(py: Python<'_>, tensor: Bound<'_, PyAny>, device: usize) -> PyResult<DeviceBuffer> {
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
        check_device(py, engine, device)?;
        crate::memory::check_room(py, device, live_bytes(device), data.len(), || {
            format!("a copy to the device of {} {:?}", dtype.name(), dims)
        })?;
        let buffer = py.detach(|| engine.upload_to(data, dtype, &dims, device)).map_err(|e| engine_error(py, &e))?;
        Ok(DeviceBuffer::new(buffer, dtype, device))
    })
}

fn check_device(py: Python<'_>, engine: &torchtpu_engine::Engine, device: usize) -> PyResult<()> {
    let n = engine.devices().len();
    if device >= n {
        let why =
            format!("device {device} does not exist: the {} plugin has {n} devices", engine.client().platform_name());
        return Err(py_error(py, "input", &why, &[]));
    }
    Ok(())
}

/// `(live, peak)` bytes of the device buffers on engine device `device` held by
/// `DeviceBuffer`s in this process.
#[pyfunction]
#[pyo3(signature = (device = 0))]
pub fn device_memory(py: Python<'_>, device: usize) -> PyResult<(usize, usize)> {
    check_device(py, default_engine(py)?, device)?;
    let c = &counters()[device];
    Ok((c.live.load(Ordering::Relaxed), c.peak.load(Ordering::Relaxed)))
}

/// Device `device`'s counters: `(live, peak, allocations, frees, bytes_allocated, bytes_freed)`.
#[pyfunction]
#[pyo3(signature = (device = 0))]
pub fn device_memory_counters(py: Python<'_>, device: usize) -> PyResult<(usize, usize, usize, usize, usize, usize)> {
    check_device(py, default_engine(py)?, device)?;
    let c = &counters()[device];
    let get = |a: &AtomicUsize| a.load(Ordering::Relaxed);
    Ok((get(&c.live), get(&c.peak), get(&c.allocations), get(&c.frees), get(&c.bytes_allocated), get(&c.bytes_freed)))
}

/// Zeroes device `device`'s allocation and free counts (live and peak bytes stay).
#[pyfunction]
#[pyo3(signature = (device = 0))]
pub fn reset_device_accumulated(py: Python<'_>, device: usize) -> PyResult<()> {
    check_device(py, default_engine(py)?, device)?;
    let c = &counters()[device];
    for a in [&c.allocations, &c.frees, &c.bytes_allocated, &c.bytes_freed] {
        a.store(0, Ordering::Relaxed);
    }
    Ok(())
}

/// Resets device `device`'s peak to the bytes live there now.
#[pyfunction]
#[pyo3(signature = (device = 0))]
pub fn reset_device_peak(py: Python<'_>, device: usize) -> PyResult<()> {
    check_device(py, default_engine(py)?, device)?;
    let c = &counters()[device];
    c.peak.store(c.live.load(Ordering::Relaxed), Ordering::Relaxed);
    Ok(())
}

/// `Program.run_device`: executes on device buffers (checked against the compiled input
/// types) and returns the outputs as device buffers, no host copy either way. It runs on
/// `device`, else on the device of its inputs (all on one: inputs on two devices are an input
/// error), else (no inputs) on device 0; the outputs live there. The inputs at `donate` may be
/// donated (each is marked so, and no longer counts as live).
pub fn run_device(
    py: Python<'_>,
    program: &Program,
    inputs: Vec<PyRef<'_, DeviceBuffer>>,
    wait: bool,
    donate: &[usize],
    device: Option<usize>,
) -> PyResult<Vec<DeviceBuffer>> {
    for b in &inputs {
        b.check_usable(py)?;
    }
    let target = device.or_else(|| inputs.first().map(|b| b.device)).unwrap_or(0);
    if let Some((index, b)) = inputs.iter().enumerate().find(|(_, b)| b.device != target) {
        let why = format!(
            "Expected all tensors to be on the same device, but input {index} is on tpu:{} and the program runs on \
             tpu:{target}",
            b.device
        );
        return Err(py_error(py, "input", &why, &[("index", some(py, index))]));
    }
    guarded(py, "execute", || {
        let engine = default_engine(py)?;
        check_device(py, engine, target)?;
        let on = engine.device(target).map_err(|e| engine_error(py, &e))?;
        let donated_bytes = donate.iter().filter_map(|&i| inputs.get(i)).map(|b| b.nbytes).sum();
        crate::memory::check_program(py, &program.compiled, target, donated_bytes)?;
        let refs: Vec<&Buffer> = inputs.iter().map(|b| &b.buffer).collect();
        let outs = py
            .detach(|| program.compiled.execute_buffers_on(&refs, donate, wait, on))
            .map_err(|e| engine_error(py, &e))?;
        crate::EXECUTIONS.fetch_add(1, Ordering::Relaxed);
        // Before the outputs count: a donated input's memory may be an output's now.
        for &i in donate {
            inputs[i].mark_donated();
        }
        let types = program.compiled.output_types();
        Ok(outs.into_iter().zip(types).map(|(b, t)| DeviceBuffer::new(b, t.dtype, target)).collect())
    })
}
