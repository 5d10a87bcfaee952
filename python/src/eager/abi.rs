//! The ABI the dispatcher shim calls (`python/torchtpu/csrc/native_api.h` declares the same
//! structs): a table of functions in a capsule (`call`, `done`, `new_slot`, `copy`,
//! `takes_native`, `classify`). This is the only unsafe
//! code of the per-op path: it turns the shim's records into safe `Arg`s and the answer into
//! `OutRecord`s.

use std::cell::RefCell;
use std::ffi::{c_char, CStr};

use pyo3::ffi::PyObject;
use pyo3::prelude::*;
use pyo3::types::PyCapsule;

use torchtpu_eager::key::View;
use torchtpu_eager::schema;

use super::key::{Arg, Scalar, TensorArg};
use super::slot::Slot;
use super::{path, Answer};

const VERSION: u32 = 6;

const TAG_NONE: i32 = 0;
const TAG_TENSOR: i32 = 1;
const TAG_CPU_SCALAR: i32 = 2;
const TAG_INT: i32 = 3;
const TAG_BOOL: i32 = 4;
const TAG_FLOAT: i32 = 5;
const TAG_ENUM: i32 = 6;
const TAG_LIST: i32 = 7;
const TAG_STRING: i32 = 9;

const FLAG_CONJ: u32 = 1;
const FLAG_NEG: u32 = 2;
const FLAG_WRAPPED: u32 = 4;
const FLAG_OUT: u32 = 8;
const FLAG_FLOATING: u32 = 16;

const HIT: i32 = 0;
const MISS: i32 = 1;
const SKIP: i32 = 2;
const ERROR: i32 = -1;

#[repr(C)]
pub struct ArgRecord {
    tag: i32,
    dtype: i32,
    ndim: i32,
    flags: u32,
    int_value: i64,
    float_value: f64,
    sizes: *const i64,
    strides: *const i64,
    offset: i64,
    device: i32,
    slot: *mut PyObject,
    text: *const c_char,
}

#[repr(C)]
pub struct OutRecord {
    slot: *mut PyObject,
    dtype: i32,
    ndim: i32,
    device: i32,
    sizes: *const i64,
}

#[repr(C)]
pub struct SchemaParam {
    aliased: u32,
    alias: *const c_char,
    writes: u32,
    kwarg_only: u32,
}

#[repr(C)]
pub struct NativeApi {
    version: u32,
    call: unsafe extern "C" fn(u64, *const c_char, *const ArgRecord, usize, *mut OutRecord, usize, *mut usize) -> i32,
    done: unsafe extern "C" fn(),
    new_slot: unsafe extern "C" fn(i32, *mut PyObject, *const i64, usize, i32) -> *mut PyObject,
    copy: unsafe extern "C" fn(*const ArgRecord, *const ArgRecord) -> i32,
    takes_native: extern "C" fn() -> i32,
    classify: unsafe extern "C" fn(*const SchemaParam, usize, *const SchemaParam, usize, *mut u32, *mut i32) -> i32,
}

static API: NativeApi = NativeApi { version: VERSION, call, done, new_slot, copy, takes_native, classify };

/// # Safety
/// Called with the GIL held, on two valid records.
unsafe extern "C" fn copy(dst: *const ArgRecord, src: *const ArgRecord) -> i32 {
    // SAFETY: the shim holds the GIL and passes two records valid for the call.
    let py = unsafe { Python::assume_attached() };
    let (dst, src) = unsafe { (arg_of(py, &*dst), arg_of(py, &*src)) };
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| path::copy(py, &dst, &src))) {
        Ok(true) => 1,
        Ok(false) => 0,
        Err(_) => {
            crate::internal(py, "eager", "torchtpu panicked in the native copy_ (a bug)").restore(py);
            ERROR
        }
    }
}

/// The table, in a capsule named `torchtpu._C.native_api` (`_device_shim.install_native`).
pub fn capsule(py: Python<'_>) -> PyResult<Bound<'_, PyCapsule>> {
    let pointer = std::ptr::addr_of!(API).cast_mut().cast::<std::ffi::c_void>();
    // SAFETY: API is a static, valid for the process; the name is a static C string and the
    // capsule has no destructor. A null result has set a Python error.
    unsafe {
        let raw = pyo3::ffi::PyCapsule_New(pointer, c"torchtpu._C.native_api".as_ptr(), None);
        Bound::from_owned_ptr_or_err(py, raw).and_then(|b| b.cast_into::<PyCapsule>().map_err(PyErr::from))
    }
}

thread_local! {
    // The shapes of the last hit's new tensors: OutRecord.sizes points here until the next call.
    static SHAPES: RefCell<Vec<Vec<i64>>> = const { RefCell::new(Vec::new()) };
}

/// # Safety
/// Called by the shim with the GIL held; `args` holds `n` records whose pointers are valid for
/// the call, `outs` room for `max_outs` records, `name` a NUL-terminated string.
unsafe extern "C" fn call(
    op: u64,
    name: *const c_char,
    args: *const ArgRecord,
    n: usize,
    outs: *mut OutRecord,
    max_outs: usize,
    n_outs: *mut usize,
) -> i32 {
    // SAFETY: the shim holds the GIL for the call.
    let py = unsafe { Python::assume_attached() };
    // SAFETY: the shim passes `n` records and a NUL-terminated name.
    let records = unsafe { std::slice::from_raw_parts(args, n) };
    let name = unsafe { CStr::from_ptr(name) };
    let converted: Vec<Arg<'_, '_>> = records.iter().map(|r| unsafe { arg_of(py, r) }).collect();
    let answer = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| path::call(py, op, name, &converted)));
    match answer {
        Ok(Ok(Answer::Hit(made))) => {
            if made.len() > max_outs {
                return SKIP; // never: the shim makes room for one per argument record and more
            }
            SHAPES.with(|shapes| {
                let mut shapes = shapes.borrow_mut();
                shapes.clear();
                for (i, m) in made.into_iter().enumerate() {
                    shapes.push(m.shape);
                    let sizes = shapes[i].as_ptr();
                    // SAFETY: i < max_outs; the shim reads the record before its next call.
                    unsafe {
                        *outs.add(i) = OutRecord {
                            slot: m.slot.into_ptr(),
                            dtype: m.code,
                            ndim: shapes[i].len() as i32,
                            device: m.device as i32,
                            sizes,
                        };
                    }
                }
                // SAFETY: the shim passes a valid pointer.
                unsafe { *n_outs = shapes.len() };
            });
            HIT
        }
        Ok(Ok(Answer::Miss)) => MISS,
        Ok(Ok(Answer::Skip)) => SKIP,
        Ok(Err(e)) => {
            e.restore(py);
            ERROR
        }
        Err(_) => {
            let e = crate::internal(py, "eager", "torchtpu panicked in the native per-op path (a bug)");
            e.restore(py);
            ERROR
        }
    }
}

unsafe extern "C" fn done() {
    path::done();
}

/// Whether the calling thread's mode takes the native path (`torchtpu_eager::mode`: the shim
/// keeps no copy of the mode).
extern "C" fn takes_native() -> i32 {
    torchtpu_eager::mode::current().takes_native() as i32
}

/// # Safety
/// `args` and `arg_flags` hold `n_args` values, `returns` and `return_alias` `n_returns`; each
/// alias is a NUL-terminated string.
unsafe extern "C" fn classify(
    args: *const SchemaParam,
    n_args: usize,
    returns: *const SchemaParam,
    n_returns: usize,
    arg_flags: *mut u32,
    return_alias: *mut i32,
) -> i32 {
    let params = |records: *const SchemaParam, n: usize| -> Vec<schema::Param> {
        if n == 0 {
            return Vec::new();
        }
        // SAFETY: the shim passes `n` records whose aliases are NUL-terminated strings.
        let records = unsafe { std::slice::from_raw_parts(records, n) };
        records
            .iter()
            .map(|r| schema::Param {
                aliased: r.aliased != 0,
                alias: unsafe { CStr::from_ptr(r.alias) }.to_string_lossy().into_owned(),
                writes: r.writes != 0,
                kwarg_only: r.kwarg_only != 0,
            })
            .collect()
    };
    let c = schema::classify(&params(args, n_args), &params(returns, n_returns));
    for (i, out) in c.out_args.iter().enumerate() {
        // SAFETY: the shim gives room for one flag per argument.
        unsafe { *arg_flags.add(i) = if *out { FLAG_OUT } else { 0 } };
    }
    for (i, alias) in c.return_alias.iter().enumerate() {
        // SAFETY: the shim gives room for one value per return.
        unsafe { *return_alias.add(i) = alias.map_or(-1, |a| a as i32) };
    }
    c.kind.code()
}

/// # Safety
/// Called with the GIL held; `dtype` is a borrowed `torch.dtype`, `sizes` holds `ndim` values.
unsafe extern "C" fn new_slot(
    code: i32,
    dtype: *mut PyObject,
    sizes: *const i64,
    ndim: usize,
    device: i32,
) -> *mut PyObject {
    // SAFETY: the shim holds the GIL and passes valid pointers.
    let py = unsafe { Python::assume_attached() };
    let dtype = unsafe { Bound::from_borrowed_ptr(py, dtype) }.unbind();
    let shape = if ndim == 0 { Vec::new() } else { unsafe { std::slice::from_raw_parts(sizes, ndim) }.to_vec() };
    match Py::new(py, Slot::new(py.None(), shape, dtype, code, device as i64)) {
        Ok(slot) => slot.into_ptr(),
        Err(e) => {
            e.restore(py);
            std::ptr::null_mut()
        }
    }
}

/// # Safety
/// `r`'s pointers are valid for the call; `r.slot` is null or a borrowed object.
unsafe fn arg_of<'a, 'py>(py: Python<'py>, r: &'a ArgRecord) -> Arg<'a, 'py> {
    match r.tag {
        TAG_NONE => Arg::None,
        TAG_TENSOR => {
            let ndim = r.ndim.max(0) as usize;
            // SAFETY: the shim points sizes and strides at the tensor's `ndim` values.
            let (sizes, strides) = unsafe {
                if ndim == 0 {
                    (&[][..], &[][..])
                } else {
                    (std::slice::from_raw_parts(r.sizes, ndim), std::slice::from_raw_parts(r.strides, ndim))
                }
            };
            let slot = if r.slot.is_null() {
                None
            } else {
                // SAFETY: a borrowed reference the tensor's storage keeps alive for the call.
                let any = unsafe { Bound::from_borrowed_ptr(py, r.slot) };
                any.cast_into::<Slot>().ok()
            };
            Arg::Tensor(TensorArg {
                view: View {
                    dtype: r.dtype,
                    sizes,
                    strides,
                    offset: r.offset,
                    conj: r.flags & FLAG_CONJ != 0,
                    neg: r.flags & FLAG_NEG != 0,
                    out: r.flags & FLAG_OUT != 0,
                },
                device: r.device.max(0) as usize,
                slot,
            })
        }
        TAG_CPU_SCALAR => Arg::CpuScalar {
            dtype: r.dtype,
            wrapped: r.flags & FLAG_WRAPPED != 0,
            value: if r.flags & FLAG_FLOATING != 0 { Scalar::Float(r.float_value) } else { Scalar::Int(r.int_value) },
        },
        TAG_INT => Arg::Int(r.int_value),
        TAG_BOOL => Arg::Bool(r.int_value != 0),
        TAG_FLOAT => Arg::Float(r.float_value),
        TAG_ENUM => Arg::Enum(r.int_value),
        TAG_LIST => Arg::List(r.int_value),
        TAG_STRING if !r.text.is_null() && r.int_value >= 0 => {
            // SAFETY: the shim points text at the string's int_value bytes, valid for the call.
            Arg::Str(unsafe { std::slice::from_raw_parts(r.text.cast::<u8>(), r.int_value as usize) })
        }
        _ => Arg::Other,
    }
}
