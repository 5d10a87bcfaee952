//! Our own `#[repr(C)]` declarations for the subset of the PJRT C API this crate calls.
//!
//! Written by hand from the public description of `pjrt_c_api.h` (OpenXLA, major version 0):
//! every argument struct starts with `struct_size` and an extension pointer, and new fields
//! (and new entries of the `PJRT_Api` function table) are only ever appended. The table below
//! is declared up to the last function we call; every unused slot is a plain pointer so the
//! offsets of the ones we use stay right. Argument structs are declared up to the last field
//! that the measured plugin (API 0.115) expects: it rejects a `struct_size` smaller than its own.
//!
//! Nothing here is safe to use directly: `plugin.rs` checks the table's size before reading a
//! slot, and the wrapper modules own every pointer.

#![allow(non_snake_case, non_camel_case_types, dead_code)]

use std::ffi::{c_char, c_int, c_void};

// ---------------------------------------------------------------- opaque handles

macro_rules! opaque {
    ($($name:ident),* $(,)?) => {
        $(
            /// Opaque PJRT handle; only ever used behind a pointer.
            #[repr(C)]
            pub struct $name {
                _private: [u8; 0],
            }
        )*
    };
}

opaque!(
    PJRT_Error,
    PJRT_Event,
    PJRT_Client,
    PJRT_Device,
    PJRT_DeviceDescription,
    PJRT_Memory,
    PJRT_Executable,
    PJRT_LoadedExecutable,
    PJRT_Buffer,
    PJRT_ExecuteContext,
    PJRT_Extension_Base,
    PJRT_Buffer_MemoryLayout,
    PJRT_SerializedExecutable,
);

/// `PJRT_Buffer_Type` values (a C enum, so `int`-sized).
pub type PJRT_Buffer_Type = c_int;
/// `PJRT_Error_Code` values (a C enum).
pub type PJRT_Error_Code = c_int;
/// `PJRT_HostBufferSemantics` values (a C enum).
pub type PJRT_HostBufferSemantics = c_int;

pub const HOST_BUFFER_IMMUTABLE_ONLY_DURING_CALL: PJRT_HostBufferSemantics = 0;
/// The buffer may alias the host memory for its whole life (the runtime never writes it);
/// a plugin that cannot alias (e.g. misaligned data) copies instead.
pub const HOST_BUFFER_IMMUTABLE_ZERO_COPY: PJRT_HostBufferSemantics = 2;

/// Every PJRT entry point: takes its args struct, returns an owned error or null.
pub type PjrtFn<A> = Option<unsafe extern "C" fn(args: *mut A) -> *mut PJRT_Error>;
/// An entry of the function table that this crate never calls.
pub type Unused = *const c_void;

// ---------------------------------------------------------------- version and table

#[repr(C)]
pub struct PJRT_Api_Version {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub major_version: c_int,
    pub minor_version: c_int,
}

/// The `PJRT_Api` function table, declared up to `PJRT_Buffer_UnsafePointer`.
#[repr(C)]
pub struct PJRT_Api {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub pjrt_api_version: PJRT_Api_Version,

    pub PJRT_Error_Destroy: Option<unsafe extern "C" fn(args: *mut PJRT_Error_Destroy_Args)>,
    pub PJRT_Error_Message: Option<unsafe extern "C" fn(args: *mut PJRT_Error_Message_Args)>,
    pub PJRT_Error_GetCode: PjrtFn<PJRT_Error_GetCode_Args>,

    pub PJRT_Plugin_Initialize: PjrtFn<PJRT_Plugin_Initialize_Args>,
    pub PJRT_Plugin_Attributes: Unused,

    pub PJRT_Event_Destroy: PjrtFn<PJRT_Event_Destroy_Args>,
    pub PJRT_Event_IsReady: Unused,
    pub PJRT_Event_Error: Unused,
    pub PJRT_Event_Await: PjrtFn<PJRT_Event_Await_Args>,
    pub PJRT_Event_OnReady: PjrtFn<PJRT_Event_OnReady_Args>,

    pub PJRT_Client_Create: PjrtFn<PJRT_Client_Create_Args>,
    pub PJRT_Client_Destroy: PjrtFn<PJRT_Client_Destroy_Args>,
    pub PJRT_Client_PlatformName: PjrtFn<PJRT_Client_PlatformName_Args>,
    pub PJRT_Client_ProcessIndex: Unused,
    pub PJRT_Client_PlatformVersion: PjrtFn<PJRT_Client_PlatformVersion_Args>,
    pub PJRT_Client_Devices: Unused,
    pub PJRT_Client_AddressableDevices: PjrtFn<PJRT_Client_AddressableDevices_Args>,
    pub PJRT_Client_LookupDevice: Unused,
    pub PJRT_Client_LookupAddressableDevice: Unused,
    pub PJRT_Client_AddressableMemories: Unused,
    pub PJRT_Client_Compile: PjrtFn<PJRT_Client_Compile_Args>,
    pub PJRT_Client_DefaultDeviceAssignment: Unused,
    pub PJRT_Client_BufferFromHostBuffer: PjrtFn<PJRT_Client_BufferFromHostBuffer_Args>,

    pub PJRT_DeviceDescription_Id: PjrtFn<PJRT_DeviceDescription_Id_Args>,
    pub PJRT_DeviceDescription_ProcessIndex: Unused,
    pub PJRT_DeviceDescription_Attributes: Unused,
    pub PJRT_DeviceDescription_Kind: PjrtFn<PJRT_DeviceDescription_Kind_Args>,
    pub PJRT_DeviceDescription_DebugString: Unused,
    pub PJRT_DeviceDescription_ToString: Unused,

    pub PJRT_Device_GetDescription: PjrtFn<PJRT_Device_GetDescription_Args>,
    pub PJRT_Device_IsAddressable: Unused,
    pub PJRT_Device_LocalHardwareId: Unused,
    pub PJRT_Device_AddressableMemories: Unused,
    pub PJRT_Device_DefaultMemory: Unused,
    pub PJRT_Device_MemoryStats: Unused,

    pub PJRT_Memory_Id: Unused,
    pub PJRT_Memory_Kind: Unused,
    pub PJRT_Memory_DebugString: Unused,
    pub PJRT_Memory_ToString: Unused,
    pub PJRT_Memory_AddressableByDevices: Unused,

    pub PJRT_Executable_Destroy: PjrtFn<PJRT_Executable_Destroy_Args>,
    pub PJRT_Executable_Name: Unused,
    pub PJRT_Executable_NumReplicas: Unused,
    pub PJRT_Executable_NumPartitions: Unused,
    pub PJRT_Executable_NumOutputs: PjrtFn<PJRT_Executable_NumOutputs_Args>,
    pub PJRT_Executable_SizeOfGeneratedCodeInBytes: Unused,
    pub PJRT_Executable_GetCostAnalysis: Unused,
    pub PJRT_Executable_OutputMemoryKinds: Unused,
    pub PJRT_Executable_OptimizedProgram: PjrtFn<PJRT_Executable_OptimizedProgram_Args>,
    pub PJRT_Executable_Serialize: PjrtFn<PJRT_Executable_Serialize_Args>,

    pub PJRT_LoadedExecutable_Destroy: PjrtFn<PJRT_LoadedExecutable_Destroy_Args>,
    pub PJRT_LoadedExecutable_GetExecutable: PjrtFn<PJRT_LoadedExecutable_GetExecutable_Args>,
    pub PJRT_LoadedExecutable_AddressableDevices: Unused,
    pub PJRT_LoadedExecutable_Delete: Unused,
    pub PJRT_LoadedExecutable_IsDeleted: Unused,
    pub PJRT_LoadedExecutable_Execute: PjrtFn<PJRT_LoadedExecutable_Execute_Args>,
    pub PJRT_Executable_DeserializeAndLoad: PjrtFn<PJRT_Executable_DeserializeAndLoad_Args>,
    pub PJRT_LoadedExecutable_Fingerprint: Unused,

    pub PJRT_Buffer_Destroy: PjrtFn<PJRT_Buffer_Destroy_Args>,
    pub PJRT_Buffer_ElementType: PjrtFn<PJRT_Buffer_ElementType_Args>,
    pub PJRT_Buffer_Dimensions: PjrtFn<PJRT_Buffer_Dimensions_Args>,
    pub PJRT_Buffer_UnpaddedDimensions: Unused,
    pub PJRT_Buffer_DynamicDimensionIndices: Unused,
    pub PJRT_Buffer_GetMemoryLayout: Unused,
    pub PJRT_Buffer_OnDeviceSizeInBytes: Unused,
    pub PJRT_Buffer_Device: PjrtFn<PJRT_Buffer_Device_Args>,
    pub PJRT_Buffer_Memory: Unused,
    pub PJRT_Buffer_Delete: Unused,
    pub PJRT_Buffer_IsDeleted: Unused,
    pub PJRT_Buffer_CopyToDevice: PjrtFn<PJRT_Buffer_CopyToDevice_Args>,
    pub PJRT_Buffer_ToHostBuffer: PjrtFn<PJRT_Buffer_ToHostBuffer_Args>,
    pub PJRT_Buffer_IsOnCpu: Unused,
    pub PJRT_Buffer_ReadyEvent: PjrtFn<PJRT_Buffer_ReadyEvent_Args>,
    pub PJRT_Buffer_UnsafePointer: PjrtFn<PJRT_Buffer_UnsafePointer_Args>,
}

// ---------------------------------------------------------------- errors

#[repr(C)]
pub struct PJRT_Error_Destroy_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub error: *mut PJRT_Error,
}

#[repr(C)]
pub struct PJRT_Error_Message_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub error: *const PJRT_Error,
    pub message: *const c_char,
    pub message_size: usize,
}

#[repr(C)]
pub struct PJRT_Error_GetCode_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub error: *const PJRT_Error,
    pub code: PJRT_Error_Code,
}

// ---------------------------------------------------------------- plugin and events

#[repr(C)]
pub struct PJRT_Plugin_Initialize_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
}

#[repr(C)]
pub struct PJRT_Event_Destroy_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub event: *mut PJRT_Event,
}

#[repr(C)]
pub struct PJRT_Event_Await_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub event: *mut PJRT_Event,
}

/// Called once when an event is ready, with its error (owned by the callback; null on
/// success) and the registered `user_arg`.
pub type PJRT_Event_OnReadyCallback = Option<extern "C" fn(error: *mut PJRT_Error, user_arg: *mut c_void)>;

#[repr(C)]
pub struct PJRT_Event_OnReady_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub event: *mut PJRT_Event,
    pub callback: PJRT_Event_OnReadyCallback,
    pub user_arg: *mut c_void,
}

// ---------------------------------------------------------------- client

/// `PJRT_NamedValue_Type`: which member of the value union is set.
pub type PJRT_NamedValue_Type = c_int;
pub const NAMED_VALUE_INT64: PJRT_NamedValue_Type = 1;
pub const NAMED_VALUE_BOOL: PJRT_NamedValue_Type = 4;

/// A named option value (client create options). The value is a C union of a string pointer,
/// an int64, an int64 array pointer, a float and a bool: 8 bytes, read as `value_type` says.
#[repr(C)]
pub struct PJRT_NamedValue {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub name: *const c_char,
    pub name_size: usize,
    pub value_type: PJRT_NamedValue_Type,
    pub value: u64,
    /// Elements of a list or string value; 1 for scalars.
    pub value_size: usize,
}

// ---------------------------------------------------------------- key-value store callbacks
//
// A multi-process client (GPU plugins' `node_id` / `num_nodes`) shares its topology and
// communicator ids through a key-value store the caller provides as callbacks. Each callback
// gets its args struct (filled by the plugin, `struct_size` the plugin's) and returns null or
// a `PJRT_Error` made with the plugin's `callback_error`. A value handed back is owned by the
// plugin until it calls `value_deleter_callback` on it (after copying it).

/// `PJRT_CallbackError`: the plugin's function that makes a `PJRT_Error` for a callback to
/// return. It copies `message`.
pub type PJRT_CallbackError =
    Option<unsafe extern "C" fn(code: PJRT_Error_Code, message: *const c_char, message_size: usize) -> *mut PJRT_Error>;

/// Frees a value a get/try-get callback returned (`PJRT_KeyValueGetCallback_ValueDeleter`,
/// same shape for try-get): the pointer only, no size.
pub type PJRT_KeyValue_ValueDeleter = Option<unsafe extern "C" fn(value: *mut c_char)>;

/// `PJRT_KeyValueGetCallback_Args`: blocks until `key` is set or `timeout_in_ms` passes.
#[repr(C)]
pub struct PJRT_KeyValueGetCallback_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub key: *const c_char,
    pub key_size: usize,
    pub timeout_in_ms: c_int,
    /// A pointer to the plugin's error maker (a pointer to a function pointer).
    pub callback_error: *mut PJRT_CallbackError,
    pub user_arg: *mut c_void,
    /// Out: allocated by the callback, freed by the plugin through `value_deleter_callback`.
    pub value: *mut c_char,
    pub value_size: usize,
    pub value_deleter_callback: PJRT_KeyValue_ValueDeleter,
}

/// `PJRT_KeyValueTryGetCallback_Args`: as get, but NOT_FOUND at once when `key` is unset.
#[repr(C)]
pub struct PJRT_KeyValueTryGetCallback_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub key: *const c_char,
    pub key_size: usize,
    pub callback_error: *mut PJRT_CallbackError,
    pub user_arg: *mut c_void,
    pub value: *mut c_char,
    pub value_size: usize,
    pub value_deleter_callback: PJRT_KeyValue_ValueDeleter,
}

/// `PJRT_KeyValuePutCallback_Args`: `value` lives only for the call.
#[repr(C)]
pub struct PJRT_KeyValuePutCallback_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub key: *const c_char,
    pub key_size: usize,
    pub value: *const c_char,
    pub value_size: usize,
    pub callback_error: *mut PJRT_CallbackError,
    pub user_arg: *mut c_void,
}

pub type PJRT_KeyValueGetCallback =
    Option<unsafe extern "C" fn(args: *mut PJRT_KeyValueGetCallback_Args) -> *mut PJRT_Error>;
pub type PJRT_KeyValueTryGetCallback =
    Option<unsafe extern "C" fn(args: *mut PJRT_KeyValueTryGetCallback_Args) -> *mut PJRT_Error>;
pub type PJRT_KeyValuePutCallback =
    Option<unsafe extern "C" fn(args: *mut PJRT_KeyValuePutCallback_Args) -> *mut PJRT_Error>;

/// The 0.115 plugin's size (88 bytes): through `kv_try_get_user_arg` (the try-get pair came
/// after `client`, so a plugin that predates it reads only the first 72 bytes).
#[repr(C)]
pub struct PJRT_Client_Create_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub create_options: *const PJRT_NamedValue,
    pub num_options: usize,
    pub kv_get_callback: PJRT_KeyValueGetCallback,
    pub kv_get_user_arg: *mut c_void,
    pub kv_put_callback: PJRT_KeyValuePutCallback,
    pub kv_put_user_arg: *mut c_void,
    pub client: *mut PJRT_Client,
    pub kv_try_get_callback: PJRT_KeyValueTryGetCallback,
    pub kv_try_get_user_arg: *mut c_void,
}

#[repr(C)]
pub struct PJRT_Client_Destroy_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub client: *mut PJRT_Client,
}

#[repr(C)]
pub struct PJRT_Client_PlatformName_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub client: *mut PJRT_Client,
    pub platform_name: *const c_char,
    pub platform_name_size: usize,
}

#[repr(C)]
pub struct PJRT_Client_PlatformVersion_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub client: *mut PJRT_Client,
    pub platform_version: *const c_char,
    pub platform_version_size: usize,
}

#[repr(C)]
pub struct PJRT_Client_AddressableDevices_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub client: *mut PJRT_Client,
    pub addressable_devices: *const *mut PJRT_Device,
    pub num_addressable_devices: usize,
}

#[repr(C)]
pub struct PJRT_Program {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    /// `char*` in C; the plugin only reads it when compiling.
    pub code: *const c_char,
    pub code_size: usize,
    pub format: *const c_char,
    pub format_size: usize,
}

#[repr(C)]
pub struct PJRT_Client_Compile_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub client: *mut PJRT_Client,
    pub program: *const PJRT_Program,
    pub compile_options: *const c_char,
    pub compile_options_size: usize,
    pub executable: *mut PJRT_LoadedExecutable,
}

#[repr(C)]
pub struct PJRT_Client_BufferFromHostBuffer_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub client: *mut PJRT_Client,
    pub data: *const c_void,
    pub type_: PJRT_Buffer_Type,
    pub dims: *const i64,
    pub num_dims: usize,
    pub byte_strides: *const i64,
    pub num_byte_strides: usize,
    pub host_buffer_semantics: PJRT_HostBufferSemantics,
    pub device: *mut PJRT_Device,
    pub memory: *mut PJRT_Memory,
    pub device_layout: *mut PJRT_Buffer_MemoryLayout,
    pub done_with_host_buffer: *mut PJRT_Event,
    pub buffer: *mut PJRT_Buffer,
}

// ---------------------------------------------------------------- devices

#[repr(C)]
pub struct PJRT_DeviceDescription_Id_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub device_description: *mut PJRT_DeviceDescription,
    pub id: c_int,
}

#[repr(C)]
pub struct PJRT_DeviceDescription_Kind_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub device_description: *mut PJRT_DeviceDescription,
    pub device_kind: *const c_char,
    pub device_kind_size: usize,
}

#[repr(C)]
pub struct PJRT_Device_GetDescription_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub device: *mut PJRT_Device,
    pub device_description: *mut PJRT_DeviceDescription,
}

// ---------------------------------------------------------------- executables

#[repr(C)]
pub struct PJRT_Executable_Destroy_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub executable: *mut PJRT_Executable,
}

#[repr(C)]
pub struct PJRT_LoadedExecutable_Destroy_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub executable: *mut PJRT_LoadedExecutable,
}

#[repr(C)]
pub struct PJRT_LoadedExecutable_GetExecutable_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub loaded_executable: *mut PJRT_LoadedExecutable,
    pub executable: *mut PJRT_Executable,
}

#[repr(C)]
pub struct PJRT_Executable_NumOutputs_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub executable: *mut PJRT_Executable,
    pub num_outputs: usize,
}

/// The optimised (for SPMD: partitioned) program. Called twice: with `program.code` null the
/// plugin sets `code_size`; then with a buffer of that size it writes the code (and sets
/// `format`, "hlo_with_config": a serialized `xla.HloModuleProtoWithConfig`).
#[repr(C)]
pub struct PJRT_Executable_OptimizedProgram_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub executable: *mut PJRT_Executable,
    pub program: *mut PJRT_Program,
}

/// Frees the plugin-owned memory behind `PJRT_Executable_Serialize_Args::serialized_bytes`.
pub type PJRT_SerializedExecutable_Deleter = Option<unsafe extern "C" fn(exec: *mut PJRT_SerializedExecutable)>;

#[repr(C)]
pub struct PJRT_Executable_Serialize_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    /// `const PJRT_Executable*` in C (from `PJRT_LoadedExecutable_GetExecutable`).
    pub executable: *const PJRT_Executable,
    /// Out: valid until `serialized_executable_deleter(serialized_executable)` is called.
    pub serialized_bytes: *const c_char,
    pub serialized_bytes_size: usize,
    /// Out: owns `serialized_bytes`.
    pub serialized_executable: *mut PJRT_SerializedExecutable,
    /// Out: must be called exactly once on `serialized_executable`.
    pub serialized_executable_deleter: PJRT_SerializedExecutable_Deleter,
}

#[repr(C)]
pub struct PJRT_Executable_DeserializeAndLoad_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub client: *mut PJRT_Client,
    pub serialized_executable: *const c_char,
    pub serialized_executable_size: usize,
    /// Out: owned by the caller (`PJRT_LoadedExecutable_Destroy`).
    pub loaded_executable: *mut PJRT_LoadedExecutable,
    /// A serialized `CompileOptionsProto` replacing the one in the blob; null keeps it.
    pub overridden_serialized_compile_options: *const c_char,
    pub overridden_serialized_compile_options_size: usize,
}

#[repr(C)]
pub struct PJRT_ExecuteOptions {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub send_callbacks: *mut *mut c_void,
    pub recv_callbacks: *mut *mut c_void,
    pub num_send_ops: usize,
    pub num_recv_ops: usize,
    pub launch_id: c_int,
    pub non_donatable_input_indices: *const i64,
    pub num_non_donatable_input_indices: usize,
    pub context: *mut PJRT_ExecuteContext,
    pub call_location: *const c_char,
    pub num_tasks: usize,
    pub task_ids: *mut c_int,
    pub incarnation_ids: *mut i64,
}

#[repr(C)]
pub struct PJRT_LoadedExecutable_Execute_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub executable: *mut PJRT_LoadedExecutable,
    pub options: *mut PJRT_ExecuteOptions,
    /// `[num_devices][num_args]`.
    pub argument_lists: *const *const *mut PJRT_Buffer,
    pub num_devices: usize,
    pub num_args: usize,
    /// `[num_devices][num_outputs]`, filled by the plugin.
    pub output_lists: *const *mut *mut PJRT_Buffer,
    pub device_complete_events: *mut *mut PJRT_Event,
    pub execute_device: *mut PJRT_Device,
}

// ---------------------------------------------------------------- buffers

#[repr(C)]
pub struct PJRT_Buffer_Destroy_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub buffer: *mut PJRT_Buffer,
}

#[repr(C)]
pub struct PJRT_Buffer_ElementType_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub buffer: *mut PJRT_Buffer,
    pub type_: PJRT_Buffer_Type,
}

#[repr(C)]
pub struct PJRT_Buffer_Dimensions_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub buffer: *mut PJRT_Buffer,
    pub dims: *const i64,
    pub num_dims: usize,
}

#[repr(C)]
pub struct PJRT_Buffer_Device_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub buffer: *mut PJRT_Buffer,
    /// Out: the device the buffer lives on (owned by the client).
    pub device: *mut PJRT_Device,
}

/// Copies a buffer to another device of the same client; the caller owns `dst_buffer`.
#[repr(C)]
pub struct PJRT_Buffer_CopyToDevice_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub buffer: *mut PJRT_Buffer,
    pub dst_device: *mut PJRT_Device,
    pub dst_buffer: *mut PJRT_Buffer,
}

#[repr(C)]
pub struct PJRT_Buffer_ToHostBuffer_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub src: *mut PJRT_Buffer,
    pub host_layout: *mut PJRT_Buffer_MemoryLayout,
    pub dst: *mut c_void,
    pub dst_size: usize,
    pub event: *mut PJRT_Event,
}

#[repr(C)]
pub struct PJRT_Buffer_UnsafePointer_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub buffer: *mut PJRT_Buffer,
    /// Out: the buffer's address (host memory on CPU plugins).
    pub buffer_pointer: usize,
}

#[repr(C)]
pub struct PJRT_Buffer_ReadyEvent_Args {
    pub struct_size: usize,
    pub extension_start: *mut PJRT_Extension_Base,
    pub buffer: *mut PJRT_Buffer,
    /// Out: fires when the buffer's contents are computed (or failed); the caller owns it.
    pub event: *mut PJRT_Event,
}

/// Implemented by every args struct: a zeroed value with `struct_size` set to our declaration.
pub trait Args: Sized {
    fn new() -> Self {
        // SAFETY: every args struct is plain old data (integers and raw pointers, or Options of
        // function pointers), for which all-zero bytes are a valid value (0 / null / None).
        let mut args: Self = unsafe { std::mem::zeroed() };
        // SAFETY: every implementor is `#[repr(C)]` with `struct_size: usize` as first field.
        unsafe { *(&mut args as *mut Self as *mut usize) = std::mem::size_of::<Self>() };
        args
    }
}

macro_rules! impl_args {
    ($($t:ty),* $(,)?) => { $(impl Args for $t {})* };
}

impl_args!(
    PJRT_Error_Destroy_Args,
    PJRT_Error_Message_Args,
    PJRT_Error_GetCode_Args,
    PJRT_Plugin_Initialize_Args,
    PJRT_Event_Destroy_Args,
    PJRT_Event_Await_Args,
    PJRT_Event_OnReady_Args,
    PJRT_Buffer_ReadyEvent_Args,
    PJRT_NamedValue,
    PJRT_Client_Create_Args,
    PJRT_KeyValueGetCallback_Args,
    PJRT_KeyValueTryGetCallback_Args,
    PJRT_KeyValuePutCallback_Args,
    PJRT_Client_Destroy_Args,
    PJRT_Client_PlatformName_Args,
    PJRT_Client_PlatformVersion_Args,
    PJRT_Client_AddressableDevices_Args,
    PJRT_Program,
    PJRT_Client_Compile_Args,
    PJRT_Client_BufferFromHostBuffer_Args,
    PJRT_DeviceDescription_Id_Args,
    PJRT_DeviceDescription_Kind_Args,
    PJRT_Device_GetDescription_Args,
    PJRT_Executable_Destroy_Args,
    PJRT_LoadedExecutable_Destroy_Args,
    PJRT_LoadedExecutable_GetExecutable_Args,
    PJRT_Executable_NumOutputs_Args,
    PJRT_Executable_OptimizedProgram_Args,
    PJRT_Executable_Serialize_Args,
    PJRT_Executable_DeserializeAndLoad_Args,
    PJRT_ExecuteOptions,
    PJRT_LoadedExecutable_Execute_Args,
    PJRT_Buffer_Destroy_Args,
    PJRT_Buffer_ElementType_Args,
    PJRT_Buffer_Dimensions_Args,
    PJRT_Buffer_ToHostBuffer_Args,
    PJRT_Buffer_UnsafePointer_Args,
    PJRT_Buffer_Device_Args,
    PJRT_Buffer_CopyToDevice_Args,
);

// glibc's allocator tuning (malloc.h): `mallopt(M_MMAP_MAX, 0)` serves every allocation from
// the heap instead of a fresh mapping, `M_TRIM_THRESHOLD` keeps freed memory for reuse.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
extern "C" {
    fn mallopt(param: c_int, value: c_int) -> c_int;
}
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const M_TRIM_THRESHOLD: c_int = -1;
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const M_MMAP_MAX: c_int = -4;

/// Makes the process's allocator keep large freed blocks instead of unmapping them. A CPU
/// plugin allocates each execution's buffers (resnet18's training forward: one 88 MiB temp)
/// with malloc; above glibc's mmap threshold (at most 32 MiB) each is a fresh mapping whose
/// pages the kernel faults in and zeroes on every call, a third of that forward's time.
/// Returns whether the tuning was applied (false off glibc, or if glibc refused it).
pub fn keep_freed_host_memory() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: mallopt only changes allocator parameters; any value is accepted or refused.
        unsafe { mallopt(M_MMAP_MAX, 0) == 1 && mallopt(M_TRIM_THRESHOLD, c_int::MAX) == 1 }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        false
    }
}

// The C allocator: values the key-value callbacks return are freed by a deleter that gets
// only the pointer, so they are `malloc`ed and the deleter `free`s them (`kv.rs`).
extern "C" {
    pub fn malloc(size: usize) -> *mut c_void;
    pub fn free(ptr: *mut c_void);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    /// Offsets fixed by the C header on LP64 targets; a typo in a declaration shows up here.
    #[test]
    #[cfg(target_pointer_width = "64")]
    fn layouts_match_the_c_header_on_lp64() {
        assert_eq!(size_of::<PJRT_Api_Version>(), 24);
        assert_eq!(offset_of!(PJRT_Api, PJRT_Error_Destroy), 40);
        // 3 error + 2 plugin + 5 event functions before the client block.
        assert_eq!(offset_of!(PJRT_Api, PJRT_Client_Create), 40 + 10 * 8);
        assert_eq!(offset_of!(PJRT_Api, PJRT_Client_BufferFromHostBuffer), 40 + 22 * 8);
        assert_eq!(offset_of!(PJRT_Api, PJRT_LoadedExecutable_Execute), 40 + 55 * 8);
        assert_eq!(offset_of!(PJRT_Api, PJRT_Executable_Serialize), 40 + 49 * 8);
        assert_eq!(offset_of!(PJRT_Api, PJRT_Executable_DeserializeAndLoad), 40 + 56 * 8);
        assert_eq!(offset_of!(PJRT_Api, PJRT_Buffer_ToHostBuffer), 40 + 70 * 8);
        assert_eq!(offset_of!(PJRT_Api, PJRT_Buffer_UnsafePointer), 40 + 73 * 8);
        assert_eq!(size_of::<PJRT_Buffer_UnsafePointer_Args>(), 32);
        assert_eq!(size_of::<PJRT_Executable_Serialize_Args>(), 56);
        assert_eq!(offset_of!(PJRT_Executable_Serialize_Args, serialized_executable_deleter), 48);
        assert_eq!(size_of::<PJRT_Executable_DeserializeAndLoad_Args>(), 64);
        assert_eq!(offset_of!(PJRT_Executable_DeserializeAndLoad_Args, loaded_executable), 40);
        assert_eq!(size_of::<PJRT_Client_Create_Args>(), 88);
        assert_eq!(offset_of!(PJRT_Client_Create_Args, kv_get_callback), 32);
        assert_eq!(offset_of!(PJRT_Client_Create_Args, client), 64);
        assert_eq!(offset_of!(PJRT_Client_Create_Args, kv_try_get_user_arg), 80);
        assert_eq!(size_of::<PJRT_KeyValueGetCallback_Args>(), 80);
        assert_eq!(offset_of!(PJRT_KeyValueGetCallback_Args, timeout_in_ms), 32);
        assert_eq!(offset_of!(PJRT_KeyValueGetCallback_Args, callback_error), 40);
        assert_eq!(offset_of!(PJRT_KeyValueGetCallback_Args, value_deleter_callback), 72);
        assert_eq!(size_of::<PJRT_KeyValueTryGetCallback_Args>(), 72);
        assert_eq!(offset_of!(PJRT_KeyValueTryGetCallback_Args, callback_error), 32);
        assert_eq!(size_of::<PJRT_KeyValuePutCallback_Args>(), 64);
        assert_eq!(offset_of!(PJRT_KeyValuePutCallback_Args, callback_error), 48);
        assert_eq!(size_of::<PJRT_NamedValue>(), 56);
        assert_eq!(offset_of!(PJRT_NamedValue, value), 40);
        assert_eq!(offset_of!(PJRT_Client_BufferFromHostBuffer_Args, type_), 32);
        assert_eq!(offset_of!(PJRT_Client_BufferFromHostBuffer_Args, dims), 40);
        assert_eq!(offset_of!(PJRT_Client_BufferFromHostBuffer_Args, host_buffer_semantics), 72);
        assert_eq!(size_of::<PJRT_Client_BufferFromHostBuffer_Args>(), 120);
        assert_eq!(offset_of!(PJRT_ExecuteOptions, launch_id), 48);
        assert_eq!(size_of::<PJRT_LoadedExecutable_Execute_Args>(), 80);
        assert_eq!(size_of::<PJRT_Buffer_ToHostBuffer_Args>(), 56);
        assert_eq!(offset_of!(PJRT_Api, PJRT_Executable_OptimizedProgram), 40 + 48 * 8);
        assert_eq!(size_of::<PJRT_Executable_OptimizedProgram_Args>(), 32);
        assert_eq!(offset_of!(PJRT_Api, PJRT_Buffer_Device), 40 + 65 * 8);
        assert_eq!(offset_of!(PJRT_Api, PJRT_Buffer_CopyToDevice), 40 + 69 * 8);
        assert_eq!(size_of::<PJRT_Buffer_Device_Args>(), 32);
        assert_eq!(size_of::<PJRT_Buffer_CopyToDevice_Args>(), 40);
        assert_eq!(offset_of!(PJRT_LoadedExecutable_Execute_Args, execute_device), 72);
    }

    #[test]
    fn new_sets_struct_size_and_zeroes_the_rest() {
        let a = PJRT_Buffer_ToHostBuffer_Args::new();
        assert_eq!(a.struct_size, size_of::<PJRT_Buffer_ToHostBuffer_Args>());
        assert!(a.dst.is_null() && a.event.is_null() && a.dst_size == 0);
    }
}
