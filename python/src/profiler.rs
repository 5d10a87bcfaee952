//! The runtime's record of device work (`torchtpu_runtime::trace`), as the C ABI the Kineto
//! bridge calls (`python/torchtpu/csrc/profiler_api.h` declares the same structs). The bridge
//! registers with `torch.profiler` as PrivateUse1's activity profiler; what it reads from here
//! becomes the profile's device events (docs/debugging.md).

use std::ffi::c_void;

use pyo3::prelude::*;
use pyo3::types::PyCapsule;
use torchtpu_runtime::trace;

const VERSION: u32 = 1;

#[repr(C)]
struct ActivityRecord {
    kind: u32,
    device: i32,
    start_ns: i64,
    end_ns: i64,
    correlation: u64,
    bytes: u64,
    name: *const u8,
    name_len: usize,
}

type ActivitySink = unsafe extern "C" fn(*mut c_void, *const ActivityRecord);

#[repr(C)]
struct ProfilerApi {
    version: u32,
    start: extern "C" fn(),
    stop: extern "C" fn(),
    push_correlation: extern "C" fn(u64),
    pop_correlation: extern "C" fn(),
    drain: unsafe extern "C" fn(ActivitySink, *mut c_void),
}

extern "C" fn start() {
    trace::start();
}

extern "C" fn stop() {
    trace::stop();
}

extern "C" fn push_correlation(id: u64) {
    trace::push_correlation(id);
}

extern "C" fn pop_correlation() {
    trace::pop_correlation();
}

/// # Safety
/// `sink` must be callable with `context` and a record valid for the call.
unsafe extern "C" fn drain(sink: ActivitySink, context: *mut c_void) {
    for a in trace::take() {
        let record = ActivityRecord {
            kind: a.kind as u32,
            device: a.device,
            start_ns: a.start_ns,
            end_ns: a.end_ns,
            correlation: a.correlation,
            bytes: a.bytes,
            name: a.name.as_ptr(),
            name_len: a.name.len(),
        };
        // SAFETY: the caller's contract; the record and its name outlive the call.
        unsafe { sink(context, &record) };
    }
}

static API: ProfilerApi = ProfilerApi { version: VERSION, start, stop, push_correlation, pop_correlation, drain };

/// The table, in a capsule named `torchtpu._C.profiler_api` (`_device_shim.install_profiler`).
#[pyfunction]
fn profiler_api(py: Python<'_>) -> PyResult<Bound<'_, PyCapsule>> {
    let pointer = std::ptr::addr_of!(API).cast_mut().cast::<c_void>();
    // SAFETY: API is a static, valid for the process; the name is a static C string and the
    // capsule has no destructor. A null result has set a Python error.
    unsafe {
        let raw = pyo3::ffi::PyCapsule_New(pointer, c"torchtpu._C.profiler_api".as_ptr(), None);
        Bound::from_owned_ptr_or_err(py, raw).and_then(|b| b.cast_into::<PyCapsule>().map_err(PyErr::from))
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(profiler_api, m)?)
}
