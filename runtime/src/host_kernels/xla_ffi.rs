//! Our own `#[repr(C)]` declarations for the part of XLA's FFI C API (`xla/ffi/api/c_api.h`,
//! API 0.x) that a typed custom-call handler reads, and of the PJRT FFI extension
//! (`pjrt_c_api_ffi_extension.h`) that registers one. Written by hand from their public
//! description: every struct starts with `struct_size` (and most with an extension pointer) and
//! grows only at its end, so a handler checks the sizes it is given before reading a field.

#![allow(non_camel_case_types, dead_code)]

use std::ffi::{c_char, c_int, c_void};

/// `XLA_FFI_Extension_Base` (also the shape of `PJRT_Extension_Base`).
#[repr(C)]
pub struct ExtensionBase {
    pub struct_size: usize,
    pub kind: c_int,
    pub next: *mut ExtensionBase,
}

/// `PJRT_Extension_Type_FFI` in the PJRT extension chain.
pub const PJRT_EXTENSION_FFI: c_int = 5;
/// `XLA_FFI_Extension_Metadata`: the call XLA makes at registration to ask a handler its
/// API version and traits.
pub const XLA_EXTENSION_METADATA: c_int = 1;

/// `XLA_FFI_Api_Version`.
#[repr(C)]
pub struct ApiVersion {
    pub struct_size: usize,
    pub extension_start: *mut ExtensionBase,
    pub major_version: c_int,
    pub minor_version: c_int,
}

/// `XLA_FFI_Metadata` (later versions append fields after `traits`).
#[repr(C)]
pub struct Metadata {
    pub struct_size: usize,
    pub api_version: ApiVersion,
    pub traits: u32,
}

/// `XLA_FFI_Metadata_Extension`.
#[repr(C)]
pub struct MetadataExtension {
    pub base: ExtensionBase,
    pub metadata: *mut Metadata,
}

/// The start of `XLA_FFI_Api`, up to the first function a handler calls.
#[repr(C)]
pub struct ApiPrefix {
    pub struct_size: usize,
    pub extension_start: *mut ExtensionBase,
    pub api_version: ApiVersion,
    pub internal_api: *mut c_void,
    pub error_create: Option<unsafe extern "C" fn(args: *mut ErrorCreateArgs) -> *mut c_void>,
}

/// `XLA_FFI_Error_Create_Args`.
#[repr(C)]
pub struct ErrorCreateArgs {
    pub struct_size: usize,
    pub extension_start: *mut ExtensionBase,
    pub message: *const c_char,
    pub errc: c_int,
}

pub const ERROR_INVALID_ARGUMENT: c_int = 3;
pub const ERROR_INTERNAL: c_int = 13;

/// `XLA_FFI_DataType` values the kernels read.
pub const DTYPE_S8: c_int = 2;
pub const DTYPE_F16: c_int = 10;
pub const DTYPE_F32: c_int = 11;
pub const DTYPE_F64: c_int = 12;
pub const DTYPE_BF16: c_int = 16;
/// `XLA_FFI_ArgType_BUFFER` / `XLA_FFI_RetType_BUFFER`.
pub const BUFFER: c_int = 1;
/// `XLA_FFI_ExecutionStage_EXECUTE`.
pub const STAGE_EXECUTE: c_int = 3;

/// `XLA_FFI_Buffer`.
#[repr(C)]
pub struct Buffer {
    pub struct_size: usize,
    pub extension_start: *mut ExtensionBase,
    pub dtype: c_int,
    pub data: *mut c_void,
    pub rank: i64,
    pub dims: *const i64,
}

/// `XLA_FFI_Args` and `XLA_FFI_Rets` (same shape).
#[repr(C)]
pub struct Values {
    pub struct_size: usize,
    pub extension_start: *mut ExtensionBase,
    pub size: i64,
    pub types: *const c_int,
    pub values: *const *mut c_void,
}

/// `XLA_FFI_Attrs`.
#[repr(C)]
pub struct Attrs {
    pub struct_size: usize,
    pub extension_start: *mut ExtensionBase,
    pub size: i64,
    pub types: *const c_int,
    pub names: *const *const c_void,
    pub attrs: *const *const c_void,
}

/// `XLA_FFI_CallFrame`, up to `attrs` (what its size covers).
#[repr(C)]
pub struct CallFrame {
    pub struct_size: usize,
    pub extension_start: *mut ExtensionBase,
    pub api: *const ApiPrefix,
    pub ctx: *mut c_void,
    pub stage: c_int,
    pub args: Values,
    pub rets: Values,
    pub attrs: Attrs,
}

/// An `XLA_FFI_Handler`.
pub type Handler = unsafe extern "C" fn(frame: *mut CallFrame) -> *mut c_void;

/// `PJRT_FFI_Register_Handler_Args` of FFI extension version 2 and later (typed handlers only:
/// the earlier `api_version` field is gone; a plugin that still has it wants a larger
/// `struct_size` and refuses this one).
#[repr(C)]
pub struct RegisterHandlerArgs {
    pub struct_size: usize,
    pub target_name: *const c_char,
    pub target_name_size: usize,
    pub handler: *mut c_void,
    pub platform_name: *const c_char,
    pub platform_name_size: usize,
    pub traits: u32,
}

impl RegisterHandlerArgs {
    /// Through `traits`, unpadded, as the C header's `PJRT_STRUCT_SIZE` computes it.
    pub const STRUCT_SIZE: usize = std::mem::offset_of!(RegisterHandlerArgs, traits) + 4;
}

/// `PJRT_FFI_Extension`.
#[repr(C)]
pub struct PjrtFfiExtension {
    pub base: ExtensionBase,
    pub type_register: *mut c_void,
    pub user_data_add: *mut c_void,
    pub register_handler: Option<unsafe extern "C" fn(args: *mut RegisterHandlerArgs) -> *mut c_void>,
}
