//! Host kernels that XLA programs call as typed FFI custom calls, registered with the CPU
//! plugin through its PJRT FFI extension. The compiler emits a call to one only when the
//! engine says the plugin in use has it ([`crate::Plugin::host_kernels`]); see
//! docs/quantization.md.

pub mod aten;
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

/// Every host kernel: custom-call target and its handler. ATen's are registered whether or
/// not the device shim installed its table (`aten::installed` says whether they may be called).
pub(crate) fn kernels() -> [(&'static str, *mut c_void); 5] {
    use aten::{MATMUL_NN, MATMUL_NT, MATMUL_TN, MATMUL_TT, TRANSPOSE_A as A, TRANSPOSE_B as B};
    let h = |f: xla_ffi::Handler| f as *mut c_void;
    [
        (INT8_MATMUL, h(handler::int8_matmul)),
        (MATMUL_NN, h(handler::aten_matmul::<0>)),
        (MATMUL_NT, h(handler::aten_matmul::<B>)),
        (MATMUL_TN, h(handler::aten_matmul::<A>)),
        (MATMUL_TT, h(handler::aten_matmul::<{ A | B }>)),
    ]
}

/// A one-call program per kernel, compiled once by `Client::host_kernels` to prove that XLA
/// accepted the handler: a plugin's registration can succeed while XLA itself refuses the
/// handler (an FFI API version it no longer supports is only logged), and a program calling
/// it would then fail to compile. ATen's four matmuls share one handler and one probe (None:
/// proven by its family's probe).
pub(crate) fn probe_program(name: &str) -> Option<&'static str> {
    match name {
        aten::MATMUL_NN => Some(
            r#"func.func @main(%a: tensor<2x4xf32>, %b: tensor<4x3xf32>) -> tensor<2x3xf32> {
  %0 = stablehlo.custom_call @torchtpu_aten_matmul_nn(%a, %b) {api_version = 4 : i32, backend_config = {}} : (tensor<2x4xf32>, tensor<4x3xf32>) -> tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}"#,
        ),
        INT8_MATMUL => Some(
            r#"func.func @main(%x: tensor<1x4xf32>, %w: tensor<2x4xi8>, %s: tensor<2xf32>) -> tensor<1x2xf32> {
  %0 = stablehlo.custom_call @torchtpu_int8_matmul(%x, %w, %s) {api_version = 4 : i32, backend_config = {}} : (tensor<1x4xf32>, tensor<2x4xi8>, tensor<2xf32>) -> tensor<1x2xf32>
  return %0 : tensor<1x2xf32>
}"#,
        ),
        _ => None,
    }
}
