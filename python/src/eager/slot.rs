//! A tpu storage's device data (`torchtpu.device._storage`): the buffer holding the storage's
//! elements row-major in some `shape`, its dtype and device. The storage keeps its slot in its
//! DataPtr's context (the dispatcher shim, `csrc/device_guard.cpp`), so the native per-op path
//! reads it with no Python lookup; Python reads and writes the same fields.

use std::sync::Mutex;

use pyo3::prelude::*;
use pyo3::types::PyTuple;

#[pyclass(module = "torchtpu._C")]
pub struct Slot {
    /// None (never written: zeros when first read), a `DeviceBuffer`, or a DeferAndFuse
    /// `Pending` value.
    #[pyo3(get, set)]
    pub buffer: Py<PyAny>,
    pub shape: Vec<i64>,
    /// The storage's `torch.dtype`.
    #[pyo3(get)]
    pub dtype: Py<PyAny>,
    /// `dtype` as PyTorch's `c10::ScalarType` code (what tensors' records carry).
    pub code: i32,
    #[pyo3(get, set)]
    pub numel: i64,
    /// The index of the tpu device every buffer of the storage lives on.
    #[pyo3(get, set)]
    pub device: i64,
}

impl Slot {
    pub fn new(buffer: Py<PyAny>, shape: Vec<i64>, dtype: Py<PyAny>, code: i32, device: i64) -> Slot {
        let numel = shape.iter().product();
        Slot { buffer, shape, dtype, code, numel, device }
    }
}

#[pymethods]
impl Slot {
    #[new]
    #[pyo3(signature = (shape, dtype, buffer = None, device = 0))]
    fn py_new(
        py: Python<'_>,
        shape: Vec<i64>,
        dtype: Bound<'_, PyAny>,
        buffer: Option<Py<PyAny>>,
        device: i64,
    ) -> PyResult<Slot> {
        let code = scalar_type_code(&dtype)?;
        Ok(Slot::new(buffer.unwrap_or_else(|| py.None()), shape, dtype.unbind(), code, device))
    }

    #[getter]
    fn shape<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, &self.shape)
    }

    #[setter]
    fn set_shape(&mut self, shape: Vec<i64>) {
        self.shape = shape;
    }

    /// Makes the storage's elements `dtype` in `shape`, its bytes kept (the buffer, already
    /// converted by the caller): a view of the storage as another dtype (`Tensor.view(dtype)`)
    /// adopts the view's dtype, so later accesses as that dtype read it directly.
    fn retype(&mut self, dtype: Bound<'_, PyAny>, shape: Vec<i64>) -> PyResult<()> {
        self.code = scalar_type_code(&dtype)?;
        self.dtype = dtype.unbind();
        self.numel = shape.iter().product();
        self.shape = shape;
        Ok(())
    }
}

/// PyTorch's `c10::ScalarType` code of a `torch.dtype`, asked of the dispatcher shim once per
/// dtype (dtypes are singletons: kept by address).
pub fn scalar_type_code(dtype: &Bound<'_, PyAny>) -> PyResult<i32> {
    static CODES: Mutex<Vec<(usize, i32)>> = Mutex::new(Vec::new());
    let address = dtype.as_ptr() as usize;
    if let Some(&(_, code)) = CODES.lock().unwrap().iter().find(|(a, _)| *a == address) {
        return Ok(code);
    }
    let code: i32 =
        dtype.py().import("torchtpu._device_shim")?.getattr("scalar_type_code")?.call1((dtype,))?.extract()?;
    CODES.lock().unwrap().push((address, code));
    Ok(code)
}
