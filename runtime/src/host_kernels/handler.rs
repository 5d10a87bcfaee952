//! The `XLA_FFI_Handler`s XLA calls for the host kernels: each reads its call frame (checking
//! every size, type and shape it is given) into slices and hands them to a safe kernel. All of
//! the module's `unsafe` is reading XLA's structs; no panic crosses back into XLA.

use std::ffi::{c_int, c_void, CString};
use std::mem::size_of;
use std::sync::OnceLock;

use super::aten::{self, HostDtype, HostTensor, TRANSPOSE_A, TRANSPOSE_B};
use super::int8_matmul::{self, Int8Matmul, RowDot4, Shape};
use super::xla_ffi::*;

/// The XLA FFI API version the handlers are written against (major, minor).
const FFI_API_VERSION: (c_int, c_int) = (0, 1);

/// `torchtpu_int8_matmul(x: f32[M, K], w: s8[N, K], scale: f32[N]) -> f32[M, N]`.
///
/// # Safety
/// Called by XLA with a call frame that lives for the call.
pub(super) unsafe extern "C" fn int8_matmul(frame: *mut CallFrame) -> *mut c_void {
    // SAFETY: XLA owns the frame for this synchronous call.
    let outcome = std::panic::catch_unwind(|| unsafe { int8_matmul_frame(frame) });
    match outcome {
        Ok(Ok(())) => std::ptr::null_mut(),
        Ok(Err(message)) => unsafe { error(frame, ERROR_INVALID_ARGUMENT, &message) },
        Err(_) => unsafe { error(frame, ERROR_INTERNAL, "torchtpu_int8_matmul panicked") },
    }
}

unsafe fn int8_matmul_frame(frame: *mut CallFrame) -> Result<(), String> {
    // SAFETY (whole function): every pointer read below comes from XLA's call frame and is
    // checked for null, and every struct for its size, before it is read.
    let f = unsafe { frame.as_ref() }.ok_or("null XLA FFI call frame")?;
    if f.struct_size < size_of::<CallFrame>() {
        return Err(format!("XLA FFI call frame of {} bytes, expected {}", f.struct_size, size_of::<CallFrame>()));
    }
    if unsafe { answer_metadata(f.extension_start) } || f.stage != STAGE_EXECUTE {
        return Ok(());
    }
    let [x, w, scale] = unsafe { buffers::<3>(&f.args, "operands")? };
    let [out] = unsafe { buffers::<1>(&f.rets, "results")? };
    let (m, k) = matrix(x, DTYPE_F32, "x (f32)")?;
    let (n, k_w) = matrix(w, DTYPE_S8, "w (int8)")?;
    let dims_s = unsafe { dims(scale) }?;
    if scale.dtype != DTYPE_F32 || dims_s != [n as i64] {
        return Err(format!("scale must be f32[{n}], got dtype {} dims {dims_s:?}", scale.dtype));
    }
    let (m_o, n_o) = matrix(out, DTYPE_F32, "the result (f32)")?;
    if k_w != k || (m_o, n_o) != (m, n) {
        return Err(format!("shapes do not agree: x [{m}, {k}], w [{n}, {k_w}], result [{m_o}, {n_o}]"));
    }
    let shape = Shape { m, n, k };
    let (x, w, scale, out) = unsafe {
        (slice::<f32>(x, m * k)?, slice::<i8>(w, n * k)?, slice::<f32>(scale, n)?, slice_mut::<f32>(out, m * n)?)
    };
    Int8Matmul::new(shape, x, w, scale)?.run(out, row_dot());
    Ok(())
}

/// `torchtpu_aten_matmul_*(a, b) -> a @ b`, rank 2 or 3 (a batch), `FLAGS` saying which operand
/// comes transposed: ATen's kernel through the device shim's table (`aten::matmul`).
///
/// # Safety
/// Called by XLA with a call frame that lives for the call.
pub(super) unsafe extern "C" fn aten_matmul<const FLAGS: u32>(frame: *mut CallFrame) -> *mut c_void {
    // SAFETY: XLA owns the frame for this synchronous call.
    let outcome = std::panic::catch_unwind(|| unsafe { aten_matmul_frame(frame, FLAGS) });
    match outcome {
        Ok(Ok(())) => std::ptr::null_mut(),
        Ok(Err(message)) => unsafe { error(frame, ERROR_INVALID_ARGUMENT, &message) },
        Err(_) => unsafe { error(frame, ERROR_INTERNAL, "torchtpu_aten_matmul panicked") },
    }
}

unsafe fn aten_matmul_frame(frame: *mut CallFrame, flags: u32) -> Result<(), String> {
    // SAFETY (whole function): as `int8_matmul_frame`: every pointer is XLA's, checked first.
    let f = unsafe { frame.as_ref() }.ok_or("null XLA FFI call frame")?;
    if f.struct_size < size_of::<CallFrame>() {
        return Err(format!("XLA FFI call frame of {} bytes, expected {}", f.struct_size, size_of::<CallFrame>()));
    }
    if unsafe { answer_metadata(f.extension_start) } || f.stage != STAGE_EXECUTE {
        return Ok(());
    }
    let [a, b] = unsafe { buffers::<2>(&f.args, "operands")? };
    let [out] = unsafe { buffers::<1>(&f.rets, "results")? };
    let (da, db, dout) = unsafe { (dims(a)?, dims(b)?, dims(out)?) };
    let dtype = host_dtype(a.dtype)?;
    if b.dtype != a.dtype || out.dtype != a.dtype {
        return Err(format!("operand and result dtypes differ: {}, {}, {}", a.dtype, b.dtype, out.dtype));
    }
    let rank = da.len();
    if !(2..=3).contains(&rank) || db.len() != rank || dout.len() != rank {
        return Err(format!("matmul of ranks {}, {} -> {} (2 or 3, all equal)", da.len(), db.len(), dout.len()));
    }
    let swap = |d: &[i64], t: bool| if t { (d[rank - 1], d[rank - 2]) } else { (d[rank - 2], d[rank - 1]) };
    let ((m, k), (k_b, n)) = (swap(da, flags & TRANSPOSE_A != 0), swap(db, flags & TRANSPOSE_B != 0));
    let batch_ok = rank == 2 || (da[0] == db[0] && da[0] == dout[0]);
    if k != k_b || (dout[rank - 2], dout[rank - 1]) != (m, n) || !batch_ok {
        return Err(format!("matmul shapes do not agree: {da:?} x {db:?} -> {dout:?} (flags {flags})"));
    }
    for (what, buffer) in [("a", a), ("b", b), ("the result", out)] {
        if buffer.data.is_null() && unsafe { dims(buffer) }?.iter().product::<i64>() > 0 {
            return Err(format!("{what}: null data"));
        }
    }
    let tensor = |buffer: &Buffer, d: &[i64]| HostTensor {
        data: buffer.data,
        dtype: dtype as i32,
        rank: rank as i32,
        dims: d.as_ptr(),
    };
    aten::matmul(flags, &tensor(a, da), &tensor(b, db), &tensor(out, dout))
}

fn host_dtype(dtype: c_int) -> Result<HostDtype, String> {
    match dtype {
        DTYPE_F32 => Ok(HostDtype::F32),
        DTYPE_F64 => Ok(HostDtype::F64),
        DTYPE_BF16 => Ok(HostDtype::BF16),
        DTYPE_F16 => Ok(HostDtype::F16),
        other => Err(format!("matmul of XLA dtype {other} (f32, f64, bf16, f16 only)")),
    }
}

/// Answers XLA's registration-time question (a metadata extension in the frame): the API
/// version and no traits. True if the frame was that question.
unsafe fn answer_metadata(ext: *mut ExtensionBase) -> bool {
    // SAFETY: the caller passes the frame's extension chain.
    let Some(base) = (unsafe { ext.as_ref() }) else { return false };
    if base.kind != XLA_EXTENSION_METADATA || base.struct_size < size_of::<MetadataExtension>() {
        return false;
    }
    // SAFETY: the tag and size say this is a metadata extension.
    let metadata = unsafe { (*(ext as *mut MetadataExtension)).metadata };
    // SAFETY: XLA's metadata struct, checked for size before writing.
    if let Some(md) = unsafe { metadata.as_mut() } {
        // The C side's size ends at `traits` (no trailing padding).
        if md.struct_size >= std::mem::offset_of!(Metadata, traits) + size_of::<u32>() {
            md.api_version.major_version = FFI_API_VERSION.0;
            md.api_version.minor_version = FFI_API_VERSION.1;
            md.traits = 0;
        }
    }
    true
}

/// The `N` buffers of an argument or result table, refusing any other count or kind.
unsafe fn buffers<'f, const N: usize>(values: &'f Values, what: &str) -> Result<[&'f Buffer; N], String> {
    if values.struct_size < size_of::<Values>() || values.size != N as i64 {
        return Err(format!("expected {N} {what}, got {}", values.size));
    }
    if values.types.is_null() || values.values.is_null() {
        return Err(format!("the {what} table is null"));
    }
    let mut out: [Option<&Buffer>; N] = [None; N];
    for (i, slot) in out.iter_mut().enumerate() {
        // SAFETY: the tables hold `size` entries.
        let (kind, ptr) = unsafe { (*values.types.add(i), *values.values.add(i)) };
        // SAFETY: a buffer entry points at an `XLA_FFI_Buffer`.
        let buffer = unsafe { (ptr as *const Buffer).as_ref() };
        match buffer {
            Some(b) if kind == BUFFER && b.struct_size >= size_of::<Buffer>() => *slot = Some(b),
            _ => return Err(format!("{what} {i} is not a dense buffer")),
        }
    }
    Ok(out.map(|b| b.expect("filled above")))
}

unsafe fn dims(b: &Buffer) -> Result<&[i64], String> {
    if b.rank < 0 || (b.rank > 0 && b.dims.is_null()) {
        return Err("malformed buffer dims".into());
    }
    // SAFETY: `rank` dims behind a non-null pointer.
    Ok(if b.rank == 0 { &[] } else { unsafe { std::slice::from_raw_parts(b.dims, b.rank as usize) } })
}

fn matrix(b: &Buffer, dtype: c_int, what: &str) -> Result<(usize, usize), String> {
    // SAFETY: `b` came from `buffers`.
    let d = unsafe { dims(b) }?;
    match (b.dtype == dtype, d) {
        (true, &[rows, cols]) if rows >= 0 && cols >= 0 => Ok((rows as usize, cols as usize)),
        _ => Err(format!("{what} must be a matrix of dtype {dtype}, got dtype {} dims {d:?}", b.dtype)),
    }
}

unsafe fn slice<T>(b: &Buffer, len: usize) -> Result<&[T], String> {
    if len == 0 {
        return Ok(&[]);
    }
    if b.data.is_null() || (b.data as usize) % std::mem::align_of::<T>() != 0 {
        return Err("buffer data is null or misaligned".into());
    }
    // SAFETY: XLA's buffer holds `len` elements of its checked dtype for the call.
    Ok(unsafe { std::slice::from_raw_parts(b.data as *const T, len) })
}

/// The result buffer's data (its pointer, not the `XLA_FFI_Buffer` describing it, is what
/// is written), valid for the call.
unsafe fn slice_mut<'call, T>(b: &Buffer, len: usize) -> Result<&'call mut [T], String> {
    if len == 0 {
        return Ok(&mut []);
    }
    if b.data.is_null() || (b.data as usize) % std::mem::align_of::<T>() != 0 {
        return Err("result data is null or misaligned".into());
    }
    // SAFETY: the result buffer is XLA's, written by this call only; XLA does not alias a
    // custom call's result with its operands unless asked to (we never ask).
    let data = b.data as *mut T;
    Ok(unsafe { std::slice::from_raw_parts_mut(data, len) })
}

/// An `XLA_FFI_Error` carrying `message`, made by XLA's own constructor.
unsafe fn error(frame: *mut CallFrame, errc: c_int, message: &str) -> *mut c_void {
    // SAFETY: a frame that reached a handler carries XLA's API table.
    let api = unsafe { frame.as_ref().and_then(|f| f.api.as_ref()) };
    let Some(create) = api.filter(|a| a.struct_size >= size_of::<ApiPrefix>()).and_then(|a| a.error_create) else {
        return std::ptr::null_mut();
    };
    let text = CString::new(message.replace('\0', " ")).unwrap_or_default();
    let mut args = ErrorCreateArgs {
        struct_size: size_of::<ErrorCreateArgs>(),
        extension_start: std::ptr::null_mut(),
        message: text.as_ptr(),
        errc,
    };
    // SAFETY: XLA copies the message into the error it returns.
    unsafe { create(&mut args) }
}

/// The inner loop for this CPU: a copy of the portable one built for AVX-512 or AVX2 (with
/// FMA) where the CPU has them (XLA's own kernels use the widest), else the portable one.
fn row_dot() -> RowDot4 {
    static CHOICE: OnceLock<RowDot4> = OnceLock::new();
    *CHOICE.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::is_x86_feature_detected as has;
            if has!("avx512f") && has!("avx512bw") && has!("fma") {
                return row_dot4_avx512;
            }
            if has!("avx2") && has!("fma") {
                return row_dot4_avx2;
            }
        }
        int8_matmul::row_dot4::<false, 16>
    })
}

#[cfg(target_arch = "x86_64")]
fn row_dot4_avx2(x: &[f32], w: [&[i8]; 4], ahead: &[i8]) -> [f32; 4] {
    #[target_feature(enable = "avx2,fma")]
    fn build(x: &[f32], w: [&[i8]; 4], ahead: &[i8]) -> [f32; 4] {
        prefetch(ahead);
        int8_matmul::row_dot4::<true, 16>(x, w, ahead)
    }
    // SAFETY: `row_dot` hands this function out only after detecting AVX2 and FMA.
    unsafe { build(x, w, ahead) }
}

#[cfg(target_arch = "x86_64")]
fn row_dot4_avx512(x: &[f32], w: [&[i8]; 4], ahead: &[i8]) -> [f32; 4] {
    #[target_feature(enable = "avx512f,avx512bw,avx2,fma")]
    fn build(x: &[f32], w: [&[i8]; 4], ahead: &[i8]) -> [f32; 4] {
        prefetch(ahead);
        int8_matmul::row_dot4::<true, 32>(x, w, ahead)
    }
    // SAFETY: `row_dot` hands this function out only after detecting AVX-512 (F, BW) and FMA.
    unsafe { build(x, w, ahead) }
}

/// Asks the cache for `bytes`, one request per 64-byte line (a hint: it reads nothing and
/// cannot fault).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn prefetch(bytes: &[i8]) {
    use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
    for line in bytes.chunks(64) {
        // SAFETY: SSE is part of x86-64; the pointer is into a live slice.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(line.as_ptr()) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `cargo test --release -p torchtpu-runtime --lib kernel_rate -- --ignored --nocapture`:
    /// the kernel alone (no XLA), elements per second, by thread count.
    #[test]
    #[ignore = "timing"]
    fn kernel_rate() {
        let (m, n, k) = (1, 32000, 768);
        let x: Vec<f32> = (0..m * k).map(|i| ((i * 37 % 101) as f32 - 50.0) / 25.0).collect();
        let w: Vec<i8> = (0..n * k).map(|i| ((i * 91 % 255) as i32 - 127) as i8).collect();
        let s = vec![1.0f32; n];
        let mut out = vec![0f32; m * n];
        let op = Int8Matmul::new(Shape { m, n, k }, &x, &w, &s).unwrap();
        for threads in [1, 2] {
            let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
            let (mut best, mut cold) = (f64::MAX, f64::MAX);
            let mut evict = vec![0u8; 256 << 20];
            for i in 0..20 {
                // Odd rounds: caches flushed first (256 MiB written), as in a model's decode.
                if i % 2 == 1 {
                    evict.iter_mut().for_each(|b| *b = b.wrapping_add(1));
                }
                let t = std::time::Instant::now();
                pool.install(|| op.run(&mut out, row_dot()));
                let took = t.elapsed().as_secs_f64();
                if i % 2 == 1 {
                    cold = cold.min(took);
                } else {
                    best = best.min(took);
                }
            }
            println!(
                "{threads} thread(s): hot {:.3} ms ({:.1} G elements/s), cold {:.3} ms",
                best * 1e3,
                (n * k) as f64 / best / 1e9,
                cold * 1e3
            );
        }
    }
}
