//! DLPack capsules ("dltensor", the protocol `torch.from_dlpack` and `torch._C._to_dlpack`
//! speak), both ways. The DLPack ABI and the pointer reading live in the runtime
//! (`torchtpu_runtime::dlpack`); this file only puts pointers into capsules and takes them out.

use pyo3::prelude::*;
use pyo3::types::PyCapsule;
use torchtpu_engine::TensorView;
use torchtpu_runtime::dlpack::{delete_managed, Exported, CAPSULE_NAME};
use torchtpu_runtime::Buffer;

/// Frees a capsule nobody consumed (a consumer renames it to "used_dltensor" and takes over).
unsafe extern "C" fn capsule_destructor(capsule: *mut pyo3::ffi::PyObject) {
    // SAFETY: called by Python with our capsule; the name check says whether it is still ours,
    // and then its pointer is the `DLManagedTensor` made by `Exported::into_raw`.
    unsafe {
        if pyo3::ffi::PyCapsule_IsValid(capsule, CAPSULE_NAME.as_ptr()) == 1 {
            delete_managed(pyo3::ffi::PyCapsule_GetPointer(capsule, CAPSULE_NAME.as_ptr()));
        } else {
            pyo3::ffi::PyErr_Clear();
        }
    }
}

/// A "dltensor" capsule owning host memory torchtpu assembled (an SPMD program's output).
pub fn host_capsule(
    py: Python<'_>,
    data: Vec<u8>,
    ty: torchtpu_runtime::ElementType,
    dims: Vec<i64>,
) -> Result<Py<PyAny>, torchtpu_runtime::RuntimeError> {
    capsule(py, Exported::from_host(data, ty, dims).into_raw())
}

/// A "dltensor" capsule over a PJRT buffer's memory when it is host memory (`on_host`: a CPU
/// plugin), else over a host copy of it. PyTorch's tensor made from it keeps the buffer alive.
pub fn to_capsule(py: Python<'_>, buffer: Buffer, on_host: bool) -> Result<Py<PyAny>, torchtpu_runtime::RuntimeError> {
    capsule(py, Exported::new(buffer, on_host)?.into_raw())
}

/// Puts a `DLManagedTensor*` made by `Exported::into_raw` into a capsule (freed with it
/// unless a consumer takes it over).
fn capsule(py: Python<'_>, managed: *mut std::ffi::c_void) -> Result<Py<PyAny>, torchtpu_runtime::RuntimeError> {
    // SAFETY: a valid pointer and a static name; the destructor frees the tensor unless a
    // consumer took it over.
    let capsule = unsafe { pyo3::ffi::PyCapsule_New(managed, CAPSULE_NAME.as_ptr(), Some(capsule_destructor)) };
    if capsule.is_null() {
        // SAFETY: the capsule was not made, so nobody else owns `managed`.
        unsafe { delete_managed(managed) };
        // Only on memory exhaustion; the Python error set by PyCapsule_New is cleared.
        let _ = PyErr::take(py);
        return Err(torchtpu_runtime::RuntimeError::HostAlloc { bytes: std::mem::size_of::<usize>() });
    }
    // SAFETY: PyCapsule_New returned a new reference.
    Ok(unsafe { Bound::from_owned_ptr(py, capsule) }.unbind())
}

/// The tensor an unconsumed "dltensor" capsule holds, borrowed while the capsule lives.
pub fn view<'a>(capsule: &'a Bound<'_, PyCapsule>) -> PyResult<TensorView<'a>> {
    let ptr = capsule.pointer_checked(Some(CAPSULE_NAME))?;
    // SAFETY: a capsule named "dltensor" holds a `DLManagedTensor` that its producer keeps
    // valid until the capsule is consumed or freed; `capsule` is borrowed for 'a and not
    // consumed here.
    Ok(unsafe { TensorView::from_managed(ptr) })
}
