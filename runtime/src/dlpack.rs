//! DLPack 0.8 (`DLManagedTensor`, what a "dltensor" capsule holds), both ways, with the
//! unsafe pointer work kept here:
//!
//! - in: [`TensorView`] reads a producer's tensor (PyTorch's `torch._C._to_dlpack`) and
//!   [`TensorView::dense_bytes`] hands out its memory only after checking device (CPU),
//!   dtype, shape, strides (dense row-major) and byte size against what a program expects;
//! - out: [`Exported`] wraps a PJRT output buffer (or a host copy of it) as a
//!   `DLManagedTensor` a consumer (`torch.from_dlpack`) takes over without a copy.
//!
//! The Python extension only moves the pointers in and out of capsules.

use std::ffi::{c_void, CStr};
use std::ptr::NonNull;

use crate::buffer::{dense_byte_size, Buffer, ElementType};
use crate::error::Result;

#[repr(C)]
struct DLDevice {
    device_type: i32,
    device_id: i32,
}

#[repr(C)]
#[derive(Clone, Copy)]
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

/// `kDLCPU`.
const KDL_CPU: i32 = 1;

/// The name of a capsule holding an unconsumed `DLManagedTensor`.
pub const CAPSULE_NAME: &CStr = c"dltensor";
/// The name a consumer gives the capsule when it takes the tensor over.
pub const USED_CAPSULE_NAME: &CStr = c"used_dltensor";

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

fn element_type(d: DLDataType) -> Option<ElementType> {
    (d.lanes == 1).then_some(())?;
    ElementType::ALL.iter().copied().find(|&t| {
        let w = dl_dtype(t);
        (w.code, w.bits) == (d.code, d.bits)
    })
}

/// A producer's tensor, borrowed for `'a` (the life of the capsule that holds it).
pub struct TensorView<'a> {
    t: &'a DLTensor,
}

impl<'a> TensorView<'a> {
    /// Views the `DLManagedTensor` at `ptr`.
    ///
    /// # Safety
    /// `ptr` points to a valid `DLManagedTensor` (DLPack 0.8 layout) whose fields, shape and
    /// strides arrays and data stay valid and unchanged for `'a`: e.g. an unconsumed
    /// "dltensor" capsule kept alive for `'a`.
    pub unsafe fn from_managed(ptr: NonNull<c_void>) -> TensorView<'a> {
        // SAFETY: the caller's contract.
        let m = unsafe { &*(ptr.as_ptr() as *const DLManagedTensor) };
        TensorView { t: &m.dl_tensor }
    }

    pub fn is_cpu(&self) -> bool {
        self.t.device.device_type == KDL_CPU
    }

    /// The element type, if the runtime models it.
    pub fn element_type(&self) -> Option<ElementType> {
        element_type(self.t.dtype)
    }

    pub fn shape(&self) -> &'a [i64] {
        match usize::try_from(self.t.ndim) {
            // SAFETY: DLPack: `shape` holds `ndim` entries, valid for 'a (from_managed).
            Ok(n) if n > 0 && !self.t.shape.is_null() => unsafe { std::slice::from_raw_parts(self.t.shape, n) },
            _ => &[],
        }
    }

    /// Strides in elements; None means compact row-major (DLPack's convention for null).
    pub fn strides(&self) -> Option<&'a [i64]> {
        match usize::try_from(self.t.ndim) {
            // SAFETY: DLPack: `strides`, when not null, holds `ndim` entries, valid for 'a.
            Ok(n) if n > 0 && !self.t.strides.is_null() => {
                Some(unsafe { std::slice::from_raw_parts(self.t.strides, n) })
            }
            _ => None,
        }
    }

    /// Whether the strides are those of a dense row-major array (dims of size 1 may have any
    /// stride, as in PyTorch's `is_contiguous`; an empty array is dense).
    pub fn is_row_major(&self) -> bool {
        let (shape, Some(strides)) = (self.shape(), self.strides()) else { return true };
        if shape.contains(&0) {
            return true;
        }
        let mut expected: i64 = 1;
        for (&d, &s) in shape.iter().zip(strides).rev() {
            if d != 1 && s != expected {
                return false;
            }
            expected = expected.saturating_mul(d);
        }
        true
    }

    /// `f32[2, 3]`, with the strides when they are not row-major and the device when not CPU.
    pub fn describe(&self) -> String {
        let dtype = match self.element_type() {
            Some(t) => t.mlir_name().to_string(),
            None => format!("dlpack({}, {}, {})", self.t.dtype.code, self.t.dtype.bits, self.t.dtype.lanes),
        };
        let dims: Vec<String> = self.shape().iter().map(|d| d.to_string()).collect();
        let mut s = format!("{dtype}[{}]", dims.join(", "));
        if !self.is_row_major() {
            s.push_str(&format!(" with strides {:?}", self.strides().unwrap_or_default()));
        }
        if !self.is_cpu() {
            s.push_str(&format!(" on DLPack device type {}", self.t.device.device_type));
        }
        s
    }

    /// The tensor's memory, if it is a dense row-major array of `ty` and shape `dims` in
    /// host memory; else why not (one phrase).
    pub fn dense_bytes(&self, ty: ElementType, dims: &[i64]) -> std::result::Result<&'a [u8], String> {
        if !self.is_cpu() {
            return Err(format!("not in host memory (DLPack device type {})", self.t.device.device_type));
        }
        if self.element_type() != Some(ty) {
            return Err("a different dtype".into());
        }
        if self.shape() != dims {
            return Err("a different shape".into());
        }
        if !self.is_row_major() {
            return Err("not dense row-major (strides)".into());
        }
        let len = dense_byte_size(ty, dims).map_err(|e| e.to_string())?;
        if len == 0 {
            return Ok(&[]);
        }
        let offset = usize::try_from(self.t.byte_offset).map_err(|_| "a byte offset past usize".to_string())?;
        let data = (self.t.data as usize).checked_add(offset).filter(|&a| a != 0).ok_or("a null data pointer")?;
        if data.checked_add(len).is_none() {
            return Err("memory past the end of the address space".into());
        }
        // SAFETY: from_managed's contract: the producer's `len` dense bytes (checked: host
        // memory, this dtype and shape, row-major) at data + byte_offset stay valid for 'a.
        Ok(unsafe { std::slice::from_raw_parts(data as *const u8, len) })
    }
}

/// What an exported tensor's `manager_ctx` points at: the memory and the shape and strides
/// arrays its `DLTensor` borrows.
struct Owner {
    _memory: Memory,
    shape: Vec<i64>,
    strides: Vec<i64>,
}

enum Memory {
    Device(#[allow(dead_code)] Buffer),
    Host(#[allow(dead_code)] Vec<u8>),
}

unsafe extern "C" fn delete_exported(m: *mut DLManagedTensor) {
    if m.is_null() {
        return;
    }
    // SAFETY: `m` and its `manager_ctx` were made by `Box::into_raw` in `Exported::new`, and
    // DLPack calls the deleter exactly once.
    unsafe {
        let m = Box::from_raw(m);
        drop(Box::from_raw(m.manager_ctx as *mut Owner));
    }
}

/// A `DLManagedTensor` over a PJRT buffer, owned until [`Exported::into_raw`] hands it to a
/// consumer (freed on drop otherwise).
pub struct Exported {
    ptr: NonNull<DLManagedTensor>,
}

impl Exported {
    /// Over the buffer's own memory when it is host memory (`on_host`: a CPU plugin), else
    /// over a host copy of it.
    pub fn new(buffer: Buffer, on_host: bool) -> Result<Exported> {
        let shape = buffer.dims().to_vec();
        let dtype = dl_dtype(buffer.element_type());
        let (data, memory) = if on_host {
            (buffer.unsafe_pointer()?, Memory::Device(buffer))
        } else {
            let mut host = buffer.to_host()?;
            (host.as_mut_ptr() as usize, Memory::Host(host))
        };
        Ok(Exported::build(data, memory, shape, dtype))
    }

    /// Over host memory torchtpu owns (an SPMD program's outputs, assembled from the devices'
    /// pieces): dense row-major `ty[dims]`.
    pub fn from_host(mut host: Vec<u8>, ty: ElementType, dims: Vec<i64>) -> Exported {
        let data = host.as_mut_ptr() as usize;
        Exported::build(data, Memory::Host(host), dims, dl_dtype(ty))
    }

    fn build(data: usize, memory: Memory, shape: Vec<i64>, dtype: DLDataType) -> Exported {
        // Row-major strides, in elements.
        let mut strides = vec![1i64; shape.len()];
        for d in (0..shape.len().saturating_sub(1)).rev() {
            strides[d] = strides[d + 1] * shape[d + 1].max(1);
        }
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
            deleter: Some(delete_exported),
        });
        let managed = Box::into_raw(managed);
        // SAFETY: `managed` is a fresh box; the owner box moves into its context (the Vecs'
        // heap arrays do not move with it).
        unsafe { (*managed).manager_ctx = Box::into_raw(owner) as *mut c_void };
        // SAFETY: Box::into_raw never returns null.
        Exported { ptr: unsafe { NonNull::new_unchecked(managed) } }
    }

    /// The `DLManagedTensor*`, now the caller's: freed by calling its deleter once
    /// ([`delete_managed`]).
    pub fn into_raw(self) -> *mut c_void {
        let ptr = self.ptr.as_ptr() as *mut c_void;
        std::mem::forget(self);
        ptr
    }
}

impl Drop for Exported {
    fn drop(&mut self) {
        // SAFETY: still ours (into_raw forgets self).
        unsafe { delete_exported(self.ptr.as_ptr()) }
    }
}

/// Frees a `DLManagedTensor` through its own deleter (what a capsule's destructor does with
/// a tensor nobody consumed).
///
/// # Safety
/// `ptr` is null or a valid `DLManagedTensor*` not yet deleted, and nothing uses it after.
pub unsafe fn delete_managed(ptr: *mut c_void) {
    let m = ptr as *mut DLManagedTensor;
    if m.is_null() {
        return;
    }
    // SAFETY: the caller's contract; DLPack: the deleter frees the tensor it is given.
    unsafe {
        if let Some(deleter) = (*m).deleter {
            deleter(m);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A producer's tensor made here: `data` viewed with `shape` and `strides`.
    fn view_of<'a>(m: &'a mut DLManagedTensor) -> TensorView<'a> {
        // SAFETY: `m` lives for 'a with its arrays (the test keeps them).
        unsafe { TensorView::from_managed(NonNull::from(m).cast()) }
    }

    fn managed(data: &mut [f32], shape: &mut [i64], strides: Option<&mut [i64]>, dtype: DLDataType) -> DLManagedTensor {
        DLManagedTensor {
            dl_tensor: DLTensor {
                data: data.as_mut_ptr().cast(),
                device: DLDevice { device_type: KDL_CPU, device_id: 0 },
                ndim: shape.len() as i32,
                dtype,
                shape: shape.as_mut_ptr(),
                strides: strides.map_or(std::ptr::null_mut(), |s| s.as_mut_ptr()),
                byte_offset: 0,
            },
            manager_ctx: std::ptr::null_mut(),
            deleter: None,
        }
    }

    #[test]
    fn dense_inputs_are_read_and_everything_else_refused() {
        let mut data = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0];
        let f32_ = dl_dtype(ElementType::F32);
        let (mut shape, mut strides) = ([2i64, 3], [3i64, 1]);
        let mut m = managed(&mut data, &mut shape, Some(&mut strides), f32_);
        let v = view_of(&mut m);
        assert_eq!(v.dense_bytes(ElementType::F32, &[2, 3]).unwrap().len(), 24);
        assert_eq!(v.dense_bytes(ElementType::S32, &[2, 3]).unwrap_err(), "a different dtype");
        assert_eq!(v.dense_bytes(ElementType::F32, &[3, 2]).unwrap_err(), "a different shape");
        assert_eq!(v.describe(), "f32[2, 3]");
        // A transposed view: same shape, other strides.
        let (mut shape, mut strides) = ([2i64, 3], [1i64, 2]);
        let mut m = managed(&mut data, &mut shape, Some(&mut strides), f32_);
        let v = view_of(&mut m);
        assert_eq!(v.dense_bytes(ElementType::F32, &[2, 3]).unwrap_err(), "not dense row-major (strides)");
        assert_eq!(v.describe(), "f32[2, 3] with strides [1, 2]");
        // Size-1 dims may have any stride; null strides are row-major.
        let (mut shape, mut strides) = ([1i64, 6], [99i64, 1]);
        let mut m = managed(&mut data, &mut shape, Some(&mut strides), f32_);
        assert!(view_of(&mut m).dense_bytes(ElementType::F32, &[1, 6]).is_ok());
        let mut shape = [6i64];
        let mut m = managed(&mut data, &mut shape, None, f32_);
        assert!(view_of(&mut m).dense_bytes(ElementType::F32, &[6]).is_ok());
        // Not host memory.
        let mut m = managed(&mut data, &mut shape, None, f32_);
        m.dl_tensor.device.device_type = 2;
        assert!(view_of(&mut m).dense_bytes(ElementType::F32, &[6]).unwrap_err().contains("device type 2"));
        // Vector lanes are no element type of ours.
        let mut m = managed(&mut data, &mut shape, None, DLDataType { lanes: 4, ..f32_ });
        assert_eq!(view_of(&mut m).element_type(), None);
    }

    #[test]
    fn dtypes_round_trip() {
        for t in ElementType::ALL {
            assert_eq!(element_type(dl_dtype(t)), Some(t));
        }
    }
}
