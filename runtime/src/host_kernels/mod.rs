//! Host kernels that XLA programs call as typed FFI custom calls, registered with the CPU
//! plugin through its PJRT FFI extension. The compiler emits a call to one only when the
//! engine says the plugin in use has it ([`crate::Plugin::host_kernels`]); see
//! docs/quantization.md.

mod handler;
pub mod int8_matmul;
mod xla_ffi;

use std::ffi::c_void;

pub(crate) use xla_ffi::{ExtensionBase, PjrtFfiExtension, RegisterHandlerArgs, PJRT_EXTENSION_FFI};

/// `torchtpu_int8_matmul(x: f32[M, K], w: s8[N, K], scale: f32[N]) -> f32[M, N]`,
/// `x · (w · diag(scale))ᵀ`: a weight-only int8 linear layer that reads its weight as int8.
pub const INT8_MATMUL: &str = "torchtpu_int8_matmul";

/// The XLA platform the kernels run on (the CPU plugin's).
pub(crate) const PLATFORM: &str = "Host";

/// Every host kernel: custom-call target and its handler.
pub(crate) fn kernels() -> [(&'static str, *mut c_void); 1] {
    [(INT8_MATMUL, handler::int8_matmul as xla_ffi::Handler as *mut c_void)]
}

/// A one-call program per kernel, compiled once by `Client::host_kernels` to prove that XLA
/// accepted the handler: a plugin's registration can succeed while XLA itself refuses the
/// handler (an FFI API version it no longer supports is only logged), and a program calling
/// it would then fail to compile.
pub(crate) fn probe_program(name: &str) -> Option<&'static str> {
    match name {
        INT8_MATMUL => Some(
            r#"func.func @main(%x: tensor<1x4xf32>, %w: tensor<2x4xi8>, %s: tensor<2xf32>) -> tensor<1x2xf32> {
  %0 = stablehlo.custom_call @torchtpu_int8_matmul(%x, %w, %s) {api_version = 4 : i32, backend_config = {}} : (tensor<1x4xf32>, tensor<2x4xi8>, tensor<2xf32>) -> tensor<1x2xf32>
  return %0 : tensor<1x2xf32>
}"#,
        ),
        _ => None,
    }
}
