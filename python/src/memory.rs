//! The tpu device's memory limit and its live buffers (issue 49). A limit per device (bytes; 0:
//! none) is set from Python (`torch.tpu.set_per_process_memory_fraction`, or
//! `TORCHTPU_DEVICE_MEMORY`, which emulates an accelerator's memory on the CPU plugin). Before a
//! program runs or an upload is made, `check_room` compares what it will add with what is free
//! and raises `torch.OutOfMemoryError` naming the largest live buffers
//! (`torchtpu.device._memory.out_of_memory` writes the message). Every `DeviceBuffer` is listed
//! here while it lives, with the user's line that made it where it is large.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

use pyo3::prelude::*;
use torchtpu_engine::DType;

/// A buffer at least this large records the user's line that made it (a Python frame walk, a
/// few microseconds: nothing next to the buffer's own cost).
pub const SITE_MIN_BYTES: usize = 1 << 20;

/// One live buffer, as an out-of-memory message names it.
struct Live {
    device: usize,
    nbytes: usize,
    dims: Vec<i64>,
    dtype: DType,
    site: Option<String>,
}

static LIVE: Mutex<Option<HashMap<u64, Live>>> = Mutex::new(None);
/// `TORCHTPU_DEVICE_MEMORY` was read (`configured`).
static CONFIGURED: AtomicBool = AtomicBool::new(false);
static NEXT: AtomicU64 = AtomicU64::new(1);

fn limits() -> &'static [AtomicUsize] {
    static LIMITS: OnceLock<Vec<AtomicUsize>> = OnceLock::new();
    LIMITS.get_or_init(|| {
        let n = torchtpu_engine::default_engine().map_or(1, |e| e.devices().len().max(1));
        (0..n).map(|_| AtomicUsize::new(0)).collect()
    })
}

/// Reads `TORCHTPU_DEVICE_MEMORY` into the limits once, at the first check (not at import: a
/// program that never uses tpu starts no engine); a malformed value is a ValueError then.
fn configured(py: Python<'_>) -> PyResult<()> {
    if CONFIGURED.swap(true, Ordering::Relaxed) {
        return Ok(());
    }
    let applied = py.import("torchtpu.device._memory").and_then(|m| m.getattr("configure")?.call1((limits().len(),)));
    if let Err(e) = applied {
        CONFIGURED.store(false, Ordering::Relaxed);
        return Err(e);
    }
    Ok(())
}

/// Lists a new buffer; returns its id for `forget`.
pub fn register(device: usize, nbytes: usize, dims: &[i64], dtype: DType) -> u64 {
    let id = NEXT.fetch_add(1, Ordering::Relaxed);
    let site = (nbytes >= SITE_MIN_BYTES).then(user_site).flatten();
    let live = Live { device, nbytes, dims: dims.to_vec(), dtype, site };
    LIVE.lock().unwrap_or_else(|e| e.into_inner()).get_or_insert_with(HashMap::new).insert(id, live);
    id
}

/// Takes a buffer off the list (freed, or donated to an execution).
pub fn forget(id: u64) {
    if let Some(map) = LIVE.lock().unwrap_or_else(|e| e.into_inner()).as_mut() {
        map.remove(&id);
    }
}

/// The user's `file:line` (`torchtpu.device._frames.user_site`), where Python can say.
fn user_site() -> Option<String> {
    Python::attach(|py| -> PyResult<Option<String>> {
        py.import("torchtpu.device._frames")?.getattr("user_site")?.call0()?.extract()
    })
    .ok()
    .flatten()
}

/// Raises `torch.OutOfMemoryError` where `asking` more bytes on `device` (with `live` bytes live
/// there now) would pass its limit; `what` says what asks (called only then).
pub fn check_room(
    py: Python<'_>,
    device: usize,
    live: usize,
    asking: usize,
    what: impl FnOnce() -> String,
) -> PyResult<()> {
    configured(py)?;
    let limit = limits().get(device).map_or(0, |l| l.load(Ordering::Relaxed));
    if limit == 0 || live.saturating_add(asking) <= limit {
        return Ok(());
    }
    let module = py.import("torchtpu.device._memory")?;
    let error = module.getattr("out_of_memory")?.call1((device, asking, what(), live, limit))?;
    Err(PyErr::from_value(error))
}

/// `check_room` for running `compiled` on tpu:`device`: its outputs' bytes, less those of the
/// inputs it is given to donate (`donated_bytes`), named with the compiler's estimate.
pub fn check_program(
    py: Python<'_>,
    compiled: &torchtpu_engine::CompiledGraph,
    device: usize,
    donated_bytes: usize,
) -> PyResult<()> {
    configured(py)?;
    if limits().get(device).is_none_or(|l| l.load(Ordering::Relaxed) == 0) {
        return Ok(());
    }
    let outputs: usize = compiled
        .output_types()
        .iter()
        .map(|t| t.static_dims().map_or(0, |d| d.iter().product::<i64>().max(0) as usize) * t.dtype.size_bytes())
        .sum();
    let live = crate::device::live_bytes(device);
    check_room(py, device, live, outputs.saturating_sub(donated_bytes), || {
        let m = compiled.memory();
        format!(
            "a program's {} outputs (the compiler's estimate: inputs {}, outputs {}, peak {} with its temporaries)",
            compiled.output_types().len(),
            mib(m.input_bytes),
            mib(m.output_bytes),
            mib(m.peak_bytes)
        )
    })
}

fn mib(bytes: u64) -> String {
    format!("{:.2} MiB", bytes as f64 / (1u64 << 20) as f64)
}

/// Sets tpu:`device`'s limit in bytes (0: none).
#[pyfunction]
pub fn set_device_memory_limit(py: Python<'_>, device: usize, limit: usize) -> PyResult<()> {
    configured(py)?; // the environment's limit first, so that this one stays
    let Some(l) = limits().get(device) else {
        return Err(pyo3::exceptions::PyValueError::new_err(format!("no tpu:{device}")));
    };
    l.store(limit, Ordering::Relaxed);
    Ok(())
}

/// tpu:`device`'s limit in bytes (0: none).
#[pyfunction]
pub fn device_memory_limit(py: Python<'_>, device: usize) -> PyResult<usize> {
    configured(py)?;
    Ok(limits().get(device).map_or(0, |l| l.load(Ordering::Relaxed)))
}

/// The `count` largest live buffers on tpu:`device`: (bytes, shape, IR dtype, the user's line
/// that made it or None), largest first.
#[pyfunction]
pub fn live_buffers(device: usize, count: usize) -> Vec<(usize, Vec<i64>, &'static str, Option<String>)> {
    let live = LIVE.lock().unwrap_or_else(|e| e.into_inner());
    let Some(map) = live.as_ref() else { return Vec::new() };
    let mut list: Vec<&Live> = map.values().filter(|l| l.device == device).collect();
    list.sort_by_key(|l| std::cmp::Reverse(l.nbytes));
    list.into_iter().take(count).map(|l| (l.nbytes, l.dims.clone(), l.dtype.name(), l.site.clone())).collect()
}
