//! Hands PJRT output buffers to PyTorch without a copy, as DLPack capsules
//! (`torch.from_dlpack`). Our own declarations of the DLPack 0.8 ABI (`DLManagedTensor`, the
//! "dltensor" capsule protocol); the capsule owns the PJRT buffer until PyTorch's tensor
//! (or the unconsumed capsule) is freed.

use std::ffi::{c_void, CStr};

use pyo3::prelude::*;
use torchtpu_runtime::{Buffer, ElementType};

#[repr(C)]
struct DLDevice {
    device_type: i32,
    device_id: i32,
}

#[repr(C)]
struct DLDataType {
    code: u8,
    bits: u8,
    lanes: u16,
}

#[repr(C)]
struct DLTensor {
    data: *mut c_void,
    device: DLDevice,
    ndim: i32,
    dtype: DLDataType,
    shape: *mut i64,
    strides: *mut i64,
    byte_offset: u64,
}

#[repr(C)]
struct DLManagedTensor {
    dl_tensor: DLTensor,
    manager_ctx: *mut c_void,
    deleter: Option<unsafe extern "C" fn(*mut DLManagedTensor)>,
}

const KDL_CPU: i32 = 1;
const CAPSULE_NAME: &CStr = c"dltensor";

/// What a capsule's `manager_ctx` points at: the buffer and the shape/strides arrays the
/// `DLTensor` borrows.
struct Owner {
    /// The PJRT buffer whose memory the tensor uses (CPU), or a host copy of it.
    _memory: Memory,
    shape: Vec<i64>,
    strides: Vec<i64>,
}

enum Memory {
    Device(#[allow(dead_code)] Buffer),
    Host(#[allow(dead_code)] Vec<u8>),
}

/// (DLPack type code, bits) of an element type.
fn dl_dtype(t: ElementType) -> DLDataType {
    use ElementType::*;
    let (code, bits) = match t {
        Pred => (6, 8),
        S8 => (0, 8),
        S16 => (0, 16),
        S32 => (0, 32),
        S64 => (0, 64),
        U8 => (1, 8),
        U16 => (1, 16),
        U32 => (1, 32),
        U64 => (1, 64),
        F16 => (2, 16),
        F32 => (2, 32),
        F64 => (2, 64),
        BF16 => (4, 16),
        C64 => (5, 64),
        C128 => (5, 128),
    };
    DLDataType { code, bits, lanes: 1 }
}

unsafe extern "C" fn delete_managed(m: *mut DLManagedTensor) {
    if m.is_null() {
        return;
    }
    // SAFETY: `m` and its `manager_ctx` were made by `Box::into_raw` in `to_capsule`, and
    // DLPack calls the deleter exactly once.
    unsafe {
        let m = Box::from_raw(m);
        drop(Box::from_raw(m.manager_ctx as *mut Owner));
    }
}

/// Frees a capsule nobody consumed (a consumer renames it to "used_dltensor" and takes over).
unsafe extern "C" fn capsule_destructor(capsule: *mut pyo3::ffi::PyObject) {
    // SAFETY: called by Python with our capsule; the name check says whether it is still ours.
    unsafe {
        if pyo3::ffi::PyCapsule_IsValid(capsule, CAPSULE_NAME.as_ptr()) == 1 {
            let m = pyo3::ffi::PyCapsule_GetPointer(capsule, CAPSULE_NAME.as_ptr()) as *mut DLManagedTensor;
            delete_managed(m);
        } else {
            pyo3::ffi::PyErr_Clear();
        }
    }
}

/// A "dltensor" capsule over a PJRT buffer's memory when it is host memory (`on_host`: a CPU
/// plugin), else over a host copy of it. PyTorch's tensor made from it keeps the buffer alive.
pub fn to_capsule(py: Python<'_>, buffer: Buffer, on_host: bool) -> PyResult<Py<PyAny>> {
    let err = |e: torchtpu_runtime::RuntimeError| pyo3::exceptions::PyRuntimeError::new_err(e.to_string());
    let shape = buffer.dims().to_vec();
    let element_type = buffer.element_type();
    let (data, memory) = if on_host {
        (buffer.unsafe_pointer().map_err(err)?, Memory::Device(buffer))
    } else {
        let mut host = buffer.to_host().map_err(err)?;
        (host.as_mut_ptr() as usize, Memory::Host(host))
    };
    // Row-major strides, in elements.
    let mut strides = vec![1i64; shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        strides[d] = strides[d + 1] * shape[d + 1].max(1);
    }
    let dtype = dl_dtype(element_type);
    let mut owner = Box::new(Owner { _memory: memory, shape, strides });
    let managed = Box::new(DLManagedTensor {
        dl_tensor: DLTensor {
            data: data as *mut c_void,
            device: DLDevice { device_type: KDL_CPU, device_id: 0 },
            ndim: owner.shape.len() as i32,
            dtype,
            shape: owner.shape.as_mut_ptr(),
            strides: owner.strides.as_mut_ptr(),
            byte_offset: 0,
        },
        manager_ctx: std::ptr::null_mut(),
        deleter: Some(delete_managed),
    });
    let managed = Box::into_raw(managed);
    // SAFETY: `managed` is a fresh box; the owner box moves into its context (the Vecs' heap
    // arrays do not move with it).
    unsafe { (*managed).manager_ctx = Box::into_raw(owner) as *mut c_void };
    // SAFETY: a valid pointer and a static name; on failure we free what we made.
    let capsule = unsafe { pyo3::ffi::PyCapsule_New(managed.cast(), CAPSULE_NAME.as_ptr(), Some(capsule_destructor)) };
    if capsule.is_null() {
        // SAFETY: the capsule was not made, so nobody else owns `managed`.
        unsafe { delete_managed(managed) };
        return Err(PyErr::fetch(py));
    }
    // SAFETY: PyCapsule_New returned a new reference.
    Ok(unsafe { Bound::from_owned_ptr(py, capsule) }.unbind())
}
