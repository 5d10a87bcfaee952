//! Device buffers: element types, host-to-device and device-to-host copies.

use std::sync::Arc;

use crate::client::{Client, ClientInner, Device};
use crate::error::{Result, RuntimeError};
use crate::ffi::{self, Args};
use crate::plugin::pjrt_call;
use crate::trace;

/// Element types a buffer can hold (the array types of `PJRT_Buffer_Type` we model).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ElementType {
    Pred,
    S8,
    S16,
    S32,
    S64,
    U8,
    U16,
    U32,
    U64,
    F16,
    F32,
    F64,
    BF16,
    C64,
    C128,
}

impl ElementType {
    /// All modelled types, in `PJRT_Buffer_Type` order.
    pub const ALL: [ElementType; 15] = [
        ElementType::Pred,
        ElementType::S8,
        ElementType::S16,
        ElementType::S32,
        ElementType::S64,
        ElementType::U8,
        ElementType::U16,
        ElementType::U32,
        ElementType::U64,
        ElementType::F16,
        ElementType::F32,
        ElementType::F64,
        ElementType::BF16,
        ElementType::C64,
        ElementType::C128,
    ];

    /// Bytes per element in a dense host buffer (`Pred` is one byte, 0 or 1).
    pub fn byte_size(self) -> usize {
        use ElementType::*;
        match self {
            Pred | S8 | U8 => 1,
            S16 | U16 | F16 | BF16 => 2,
            S32 | U32 | F32 => 4,
            S64 | U64 | F64 | C64 => 8,
            C128 => 16,
        }
    }

    /// The MLIR element type spelling, e.g. `f32`, `i1`, `ui8`, `complex<f32>`.
    pub fn mlir_name(self) -> &'static str {
        use ElementType::*;
        match self {
            Pred => "i1",
            S8 => "i8",
            S16 => "i16",
            S32 => "i32",
            S64 => "i64",
            U8 => "ui8",
            U16 => "ui16",
            U32 => "ui32",
            U64 => "ui64",
            F16 => "f16",
            F32 => "f32",
            F64 => "f64",
            BF16 => "bf16",
            C64 => "complex<f32>",
            C128 => "complex<f64>",
        }
    }

    /// The `PJRT_Buffer_Type` value (PRED = 1 ... C128 = 15).
    pub(crate) fn to_raw(self) -> ffi::PJRT_Buffer_Type {
        Self::ALL.iter().position(|t| *t == self).map(|i| i as i32 + 1).unwrap_or(0)
    }

    pub(crate) fn from_raw(raw: ffi::PJRT_Buffer_Type) -> Result<ElementType> {
        usize::try_from(raw - 1)
            .ok()
            .and_then(|i| Self::ALL.get(i).copied())
            .ok_or(RuntimeError::UnsupportedElementType(raw))
    }
}

/// The number of bytes of a dense `ty` array of shape `dims`, or why there is none.
pub fn dense_byte_size(ty: ElementType, dims: &[i64]) -> Result<usize> {
    let mut n = ty.byte_size();
    for &d in dims {
        let d = usize::try_from(d)
            .map_err(|_| RuntimeError::InvalidArgument(format!("negative dimension {d} in shape {dims:?}")))?;
        n = n
            .checked_mul(d)
            .ok_or_else(|| RuntimeError::InvalidArgument(format!("shape {dims:?} of {ty:?} overflows usize bytes")))?;
    }
    Ok(n)
}

/// An array on a device. Keeps its client (and so the plugin) alive; freed on drop.
pub struct Buffer {
    pub(crate) client: Arc<ClientInner>,
    pub(crate) raw: *mut ffi::PJRT_Buffer,
    element_type: ElementType,
    dims: Vec<i64>,
}

// SAFETY: PJRT buffers are thread-safe handles; the pointer is owned and freed once, in Drop.
unsafe impl Send for Buffer {}
unsafe impl Sync for Buffer {}

impl Drop for Buffer {
    fn drop(&mut self) {
        let mut args = ffi::PJRT_Buffer_Destroy_Args::new();
        args.buffer = self.raw;
        let _ = pjrt_call!(self.client.plugin, PJRT_Buffer_Destroy, &mut args);
    }
}

impl std::fmt::Debug for Buffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Buffer").field("element_type", &self.element_type).field("dims", &self.dims).finish()
    }
}

impl Buffer {
    /// Takes ownership of `raw` (destroyed even if the shape queries fail).
    pub(crate) fn from_raw(client: &Arc<ClientInner>, raw: *mut ffi::PJRT_Buffer) -> Result<Buffer> {
        if raw.is_null() {
            return Err(RuntimeError::Pjrt {
                call: "PJRT_Buffer",
                code: 13,
                message: "the plugin reported success but returned no buffer".into(),
            });
        }
        let mut buffer = Buffer { client: Arc::clone(client), raw, element_type: ElementType::Pred, dims: Vec::new() };
        let plugin = &client.plugin;

        let mut ty = ffi::PJRT_Buffer_ElementType_Args::new();
        ty.buffer = raw;
        pjrt_call!(plugin, PJRT_Buffer_ElementType, &mut ty)?;
        buffer.element_type = ElementType::from_raw(ty.type_)?;

        let mut dims = ffi::PJRT_Buffer_Dimensions_Args::new();
        dims.buffer = raw;
        pjrt_call!(plugin, PJRT_Buffer_Dimensions, &mut dims)?;
        if !dims.dims.is_null() {
            // SAFETY: `num_dims` values owned by the live buffer.
            buffer.dims = unsafe { std::slice::from_raw_parts(dims.dims, dims.num_dims) }.to_vec();
        }
        Ok(buffer)
    }

    pub fn element_type(&self) -> ElementType {
        self.element_type
    }

    pub fn dims(&self) -> &[i64] {
        &self.dims
    }

    /// Number of elements (1 for a scalar); saturates at `usize::MAX`.
    pub fn element_count(&self) -> usize {
        self.dims.iter().fold(1usize, |acc, &d| acc.saturating_mul(d.max(0) as usize))
    }

    /// The buffer's address. On CPU plugins this is host memory holding the dense row-major
    /// array for as long as the buffer lives (how outputs are handed out without a copy).
    pub fn unsafe_pointer(&self) -> Result<usize> {
        let mut args = ffi::PJRT_Buffer_UnsafePointer_Args::new();
        args.buffer = self.raw;
        pjrt_call!(self.client.plugin, PJRT_Buffer_UnsafePointer, &mut args)?;
        Ok(args.buffer_pointer)
    }

    /// A copy of the contents read straight from the buffer's memory, once computed: on a CPU
    /// plugin that is host memory (`unsafe_pointer`), and this skips the plugin's
    /// `ToHostBuffer`, whose completion event costs tens of microseconds of thread hand-off.
    /// Callers must know the buffer is in host memory (`platform_name() == "cpu"`).
    pub fn read_host_memory(&self) -> Result<Vec<u8>> {
        let bytes = dense_byte_size(self.element_type, &self.dims)?;
        self.wait_ready()?;
        let started = trace::enabled().then(trace::now_ns);
        if bytes == 0 {
            return Ok(Vec::new());
        }
        let address = self.unsafe_pointer()?;
        if address == 0 {
            return Err(RuntimeError::InvalidArgument("the buffer has no host address".into()));
        }
        let mut out = Vec::new();
        out.try_reserve_exact(bytes).map_err(|_| RuntimeError::HostAlloc { bytes })?;
        // SAFETY: on a CPU plugin the buffer's memory holds its `bytes` dense bytes while the
        // buffer lives (`&self`), and it is computed (`wait_ready`); nothing writes a buffer
        // after that (PJRT buffers are immutable unless donated, and a donated one is refused
        // before this is reached).
        out.extend_from_slice(unsafe { std::slice::from_raw_parts(address as *const u8, bytes) });
        if let Some(t) = started {
            self.record_to_host(t, bytes);
        }
        Ok(out)
    }

    /// Waits until the buffer's contents are computed. An output of an asynchronous execution
    /// ([`Executable::execute_async`](crate::Executable::execute_async)) reports the
    /// execution's error here.
    pub fn wait_ready(&self) -> Result<()> {
        let event = self.ready_event()?;
        self.client.plugin.await_event("PJRT_LoadedExecutable_Execute", event)
    }

    /// An event that fires when the buffer's contents are computed; the caller owns it.
    pub(crate) fn ready_event(&self) -> Result<*mut ffi::PJRT_Event> {
        let mut args = ffi::PJRT_Buffer_ReadyEvent_Args::new();
        args.buffer = self.raw;
        pjrt_call!(self.client.plugin, PJRT_Buffer_ReadyEvent, &mut args)?;
        Ok(args.event)
    }

    /// Whether the buffer lives on `device` (`PJRT_Buffer_Device`).
    pub fn is_on(&self, device: &Device) -> Result<bool> {
        let mut args = ffi::PJRT_Buffer_Device_Args::new();
        args.buffer = self.raw;
        pjrt_call!(self.client.plugin, PJRT_Buffer_Device, &mut args)?;
        Ok(args.device == device.raw)
    }

    /// A copy of the buffer on `device` of the same client, made by the plugin device to
    /// device (`PJRT_Buffer_CopyToDevice`), not through the host. Returns once the copy is
    /// enqueued (PJRT orders it after the source's producer); reading the copy waits for it
    /// and reports a failure. PJRT refuses a copy to the device the buffer is already on.
    pub fn copy_to_device(&self, device: &Device) -> Result<Buffer> {
        if !Arc::ptr_eq(&device.client, &self.client) {
            return Err(RuntimeError::InvalidArgument(format!("device {} belongs to a different client", device.id())));
        }
        let mut args = ffi::PJRT_Buffer_CopyToDevice_Args::new();
        args.buffer = self.raw;
        args.dst_device = device.raw;
        let launched = trace::enabled().then(trace::now_ns);
        pjrt_call!(self.client.plugin, PJRT_Buffer_CopyToDevice, &mut args)?;
        let copy = Buffer::from_raw(&self.client, args.dst_buffer)?;
        if let Some(t) = launched {
            let bytes = dense_byte_size(self.element_type, &self.dims).unwrap_or(0) as u64;
            let launch = trace::Launch::of(trace::ActivityKind::DeviceToDevice, "Memcpy DtoD", device.id(), t, bytes);
            match copy.ready_event() {
                Ok(event) => launch.finish_when_ready(&self.client.plugin, event),
                Err(_) => launch.finish(),
            }
        }
        Ok(copy)
    }

    /// Copies the buffer to host memory (dense, row-major), waiting for the copy.
    pub fn to_host(&self) -> Result<Vec<u8>> {
        // Every modelled type is whole bytes, so the dense size needs no size query.
        let bytes = dense_byte_size(self.element_type, &self.dims)?;
        let mut out = Vec::new();
        out.try_reserve_exact(bytes).map_err(|_| RuntimeError::HostAlloc { bytes })?;
        out.resize(bytes, 0u8);
        self.copy_to_host(&mut out)?;
        Ok(out)
    }

    /// Copies the buffer into `dst`, which must be exactly its dense row-major size (callers
    /// pass the memory of an already allocated host tensor: no intermediate copy).
    pub fn copy_to_host(&self, dst: &mut [u8]) -> Result<()> {
        let expected = dense_byte_size(self.element_type, &self.dims)?;
        if dst.len() != expected {
            return Err(RuntimeError::InvalidArgument(format!(
                "destination is {} bytes but the buffer holds {expected}",
                dst.len()
            )));
        }
        let plugin = &self.client.plugin;
        let mut args = ffi::PJRT_Buffer_ToHostBuffer_Args::new();
        args.src = self.raw;
        args.dst = dst.as_mut_ptr().cast();
        args.dst_size = dst.len();
        let started = trace::enabled().then(trace::now_ns);
        pjrt_call!(plugin, PJRT_Buffer_ToHostBuffer, &mut args)?;
        // `dst` must stay alive until the copy's event fires.
        plugin.await_event("PJRT_Buffer_ToHostBuffer", args.event)?;
        if let Some(t) = started {
            self.record_to_host(t, dst.len());
        }
        Ok(())
    }

    /// Records a device-to-host copy of `bytes` that began at `started` and ends now.
    fn record_to_host(&self, started: i64, bytes: usize) {
        let mut args = ffi::PJRT_Buffer_Device_Args::new();
        args.buffer = self.raw;
        let device = match pjrt_call!(self.client.plugin, PJRT_Buffer_Device, &mut args) {
            Ok(()) => trace::device_id(args.device),
            Err(_) => -1,
        };
        trace::record(trace::ActivityKind::DeviceToHost, "Memcpy DtoH", device, started, bytes as u64);
    }
}

impl Client {
    /// Copies a dense, row-major host array of `ty` and shape `dims` to `device`.
    /// `data.len()` must equal the element count times `ty.byte_size()`.
    pub fn buffer_from_host(&self, data: &[u8], ty: ElementType, dims: &[i64], device: &Device) -> Result<Buffer> {
        let started = trace::enabled().then(trace::now_ns);
        let args = self.start_from_host(data, ty, dims, device, ffi::HOST_BUFFER_IMMUTABLE_ONLY_DURING_CALL)?;
        let plugin = &self.inner.plugin;
        // Own the buffer first so an event failure still frees it.
        let done = plugin.await_event("PJRT_Client_BufferFromHostBuffer", args.done_with_host_buffer);
        let buffer = Buffer::from_raw(&self.inner, args.buffer)?;
        if let Some(t) = started {
            trace::record(trace::ActivityKind::HostToDevice, "Memcpy HtoD", device.id(), t, data.len() as u64);
        }
        done.map(|()| buffer)
    }

    /// A buffer that reads `data` in place where the plugin can (CPU plugins, aligned data):
    /// no copy. Returns the buffer and whether it aliases `data`; when the plugin copied
    /// instead, the copy is complete on return.
    ///
    /// # Safety
    /// When aliased, the buffer reads `data`'s memory whenever it is used: the caller keeps
    /// that memory alive and holding the intended values for every use of the buffer, and
    /// must never donate it to an execution (PJRT would write into it).
    pub unsafe fn buffer_aliasing_host(
        &self,
        data: &[u8],
        ty: ElementType,
        dims: &[i64],
        device: &Device,
    ) -> Result<(Buffer, bool)> {
        let started = trace::enabled().then(trace::now_ns);
        let args = self.start_from_host(data, ty, dims, device, ffi::HOST_BUFFER_IMMUTABLE_ZERO_COPY)?;
        let plugin = &self.inner.plugin;
        let buffer = match Buffer::from_raw(&self.inner, args.buffer) {
            Ok(b) => b,
            Err(e) => {
                let _ = plugin.destroy_event(args.done_with_host_buffer);
                return Err(e);
            }
        };
        let aliased = !data.is_empty() && buffer.unsafe_pointer().ok() == Some(data.as_ptr() as usize);
        if aliased {
            // "Done with the host buffer" fires only when the buffer is destroyed.
            plugin.destroy_event(args.done_with_host_buffer)?;
        } else {
            plugin.await_event("PJRT_Client_BufferFromHostBuffer", args.done_with_host_buffer)?;
            if let Some(t) = started {
                trace::record(trace::ActivityKind::HostToDevice, "Memcpy HtoD", device.id(), t, data.len() as u64);
            }
        }
        Ok((buffer, aliased))
    }

    /// Checks and issues `PJRT_Client_BufferFromHostBuffer`; the caller owns the returned
    /// buffer and `done_with_host_buffer` event.
    fn start_from_host(
        &self,
        data: &[u8],
        ty: ElementType,
        dims: &[i64],
        device: &Device,
        semantics: ffi::PJRT_HostBufferSemantics,
    ) -> Result<ffi::PJRT_Client_BufferFromHostBuffer_Args> {
        let expected = dense_byte_size(ty, dims)?;
        if data.len() != expected {
            return Err(RuntimeError::InvalidArgument(format!(
                "host data is {} bytes but a {ty:?} array of shape {dims:?} needs {expected}",
                data.len()
            )));
        }
        if !self.same_client(&device.client) {
            return Err(RuntimeError::InvalidArgument(format!("device {} belongs to a different client", device.id())));
        }
        let mut args = ffi::PJRT_Client_BufferFromHostBuffer_Args::new();
        args.client = self.inner.raw;
        args.data = data.as_ptr().cast();
        args.type_ = ty.to_raw();
        args.dims = dims.as_ptr();
        args.num_dims = dims.len();
        args.host_buffer_semantics = semantics;
        args.device = device.raw;
        pjrt_call!(self.inner.plugin, PJRT_Client_BufferFromHostBuffer, &mut args)?;
        Ok(args)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raw_codes_round_trip_and_match_pjrt_numbering() {
        for ty in ElementType::ALL {
            assert_eq!(ElementType::from_raw(ty.to_raw()).unwrap(), ty);
        }
        assert_eq!(ElementType::Pred.to_raw(), 1);
        assert_eq!(ElementType::F32.to_raw(), 11);
        assert_eq!(ElementType::C128.to_raw(), 15);
        assert!(matches!(ElementType::from_raw(0), Err(RuntimeError::UnsupportedElementType(0))));
        assert!(ElementType::from_raw(16).is_err());
    }

    #[test]
    fn dense_sizes() {
        assert_eq!(dense_byte_size(ElementType::F32, &[2, 3]).unwrap(), 24);
        assert_eq!(dense_byte_size(ElementType::C128, &[]).unwrap(), 16);
        assert_eq!(dense_byte_size(ElementType::F64, &[0, 5]).unwrap(), 0);
        assert!(dense_byte_size(ElementType::F32, &[-1]).is_err());
        assert!(dense_byte_size(ElementType::F64, &[i64::MAX, i64::MAX]).is_err());
    }
}
