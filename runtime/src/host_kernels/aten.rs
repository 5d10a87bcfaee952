//! ATen's CPU kernels as host kernels: `torchtpu_aten_matmul_{nn,nt,tn,tt}` (`a @ b`, either
//! operand given transposed). The kernels themselves live with PyTorch: the device shim
//! (python/torchtpu/csrc/host_kernels.cpp) hands over a table of C functions, installed here
//! once per process ([`install`]); the handler checks XLA's call frame and passes XLA's
//! buffers to the table's function, which writes the result in place (no copy either way).
//! Without a table the handler fails the call with a message, and the engine never offers
//! the kernels to the compiler (`installed`).

use std::ffi::{c_char, c_void, CStr};
use std::sync::OnceLock;

/// The table's version this runtime reads (`kHostKernelApiVersion` in host_kernel_api.h).
pub const API_VERSION: u32 = 1;

/// Custom-call targets, by which operands come transposed (`a`, `b`).
pub const MATMUL_NN: &str = "torchtpu_aten_matmul_nn";
pub const MATMUL_NT: &str = "torchtpu_aten_matmul_nt";
pub const MATMUL_TN: &str = "torchtpu_aten_matmul_tn";
pub const MATMUL_TT: &str = "torchtpu_aten_matmul_tt";

pub(super) const TRANSPOSE_A: u32 = 1;
pub(super) const TRANSPOSE_B: u32 = 2;

/// `HostDtype` of host_kernel_api.h.
#[repr(i32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum HostDtype {
    F32 = 0,
    F64 = 1,
    BF16 = 2,
    F16 = 3,
}

/// `HostTensor` of host_kernel_api.h: one dense row-major buffer.
#[repr(C)]
pub(super) struct HostTensor {
    pub data: *mut c_void,
    pub dtype: i32,
    pub rank: i32,
    pub dims: *const i64,
}

type MatmulFn = unsafe extern "C" fn(
    flags: u32,
    a: *const HostTensor,
    b: *const HostTensor,
    out: *const HostTensor,
    error: *mut c_char,
    error_size: usize,
) -> i32;

/// `HostKernelApi` of host_kernel_api.h.
#[repr(C)]
pub struct HostKernelApi {
    version: u32,
    matmul: Option<MatmulFn>,
}

static API: OnceLock<&'static HostKernelApi> = OnceLock::new();

/// Installs the device shim's table (the pointer its capsule holds, which lives as long as the
/// process). The first table wins; a table of another version is refused.
///
/// # Safety
/// `table` points at a `HostKernelApi` that is never freed.
pub unsafe fn install(table: *const c_void) -> Result<(), String> {
    // SAFETY: the caller promises a live, never-freed table.
    let api = unsafe { (table as *const HostKernelApi).as_ref() }.ok_or("null host kernel table")?;
    if api.version != API_VERSION {
        return Err(format!(
            "the device shim's host kernel table is version {}, the runtime's {API_VERSION}; rebuild both (make setup)",
            api.version
        ));
    }
    if api.matmul.is_none() {
        return Err("the device shim's host kernel table has no matmul".into());
    }
    let _ = API.set(api);
    Ok(())
}

/// Whether ATen's kernels are installed, so programs may call them.
pub fn installed() -> bool {
    API.get().is_some()
}

/// Runs the installed matmul on XLA's buffers.
pub(super) fn matmul(flags: u32, a: &HostTensor, b: &HostTensor, out: &HostTensor) -> Result<(), String> {
    let api = API.get().ok_or("ATen's host kernels are not installed in this process (torchtpu._device_shim)")?;
    let run = api.matmul.ok_or("no matmul in the host kernel table")?;
    let mut message = [0 as c_char; 512];
    // SAFETY: the tensors describe XLA's live buffers for this call; the function writes at
    // most `message.len()` bytes, NUL-terminated.
    let status = unsafe { run(flags, a, b, out, message.as_mut_ptr(), message.len()) };
    if status == 0 {
        return Ok(());
    }
    // SAFETY: snprintf terminated it within the buffer.
    let text = unsafe { CStr::from_ptr(message.as_ptr()) }.to_string_lossy().into_owned();
    Err(format!("ATen matmul failed: {text}"))
}
