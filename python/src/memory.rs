//! The tpu device's memory limit and its live buffers (issue 49). A limit per device (bytes; 0:
//! none) is set from Python (`torch.tpu.set_per_process_memory_fraction`, or
//! `TORCHTPU_DEVICE_MEMORY`, which emulates an accelerator's memory on the CPU plugin). Before a
//! program runs or an upload is made, `check_room` compares what it will add with what is free
//! and raises `torch.OutOfMemoryError` naming the largest live buffers
//! (`torchtpu.device._memory.out_of_memory` writes the message). Every `DeviceBuffer` is listed
//! here while it lives, with the user's line that made it where it is large. With
//! `torch.tpu.memory._record_memory_history()` on, each buffer keeps its Python stack and every
//! allocation, free and refusal is an event, for `_snapshot()` in the format of
//! pytorch.org/memory_viz (`device/_memory.py` shapes it).

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{SystemTime, UNIX_EPOCH};

use pyo3::prelude::*;
use torchtpu_engine::DType;

/// A buffer at least this large records the user's line that made it (a Python frame walk, a
/// few microseconds: nothing next to the buffer's own cost).
pub const SITE_MIN_BYTES: usize = 1 << 20;

/// A Python frame as memory_viz shows it: file, line, function.
type Frame = (String, i64, String);
type Stack = Arc<Vec<Frame>>;

/// One live buffer, as an out-of-memory message and a snapshot name it.
struct Live {
    device: usize,
    nbytes: usize,
    dims: Vec<i64>,
    dtype: DType,
    site: Option<String>,
    /// Its Python stack, where history was being recorded when it was made.
    stack: Option<Stack>,
}

/// One recorded event: "alloc", "free_completed" or "oom" (memory_viz's actions).
struct Event {
    action: &'static str,
    id: u64,
    device: usize,
    size: usize,
    stack: Option<Stack>,
    time_us: u64,
    /// For "oom": the bytes the device had free under its limit.
    free: usize,
}

/// `_record_memory_history`: on, and how many events are kept (the newest).
static HISTORY: AtomicBool = AtomicBool::new(false);
static MAX_EVENTS: AtomicUsize = AtomicUsize::new(100_000);
static EVENTS: Mutex<VecDeque<Event>> = Mutex::new(VecDeque::new());

fn now_us() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_micros() as u64)
}

fn push_event(action: &'static str, id: u64, device: usize, size: usize, stack: Option<Stack>, free: usize) {
    let mut events = EVENTS.lock().unwrap_or_else(|e| e.into_inner());
    events.push_back(Event { action, id, device, size, stack, time_us: now_us(), free });
    let max = MAX_EVENTS.load(Ordering::Relaxed);
    while events.len() > max {
        events.pop_front();
    }
}

/// The calling thread's Python stack (`torchtpu.device._memory.stack`), innermost first.
fn python_stack() -> Option<Stack> {
    Python::attach(|py| -> PyResult<Vec<Frame>> {
        py.import("torchtpu.device._memory")?.getattr("stack")?.call0()?.extract()
    })
    .ok()
    .map(Arc::new)
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
    // A plain load first: this runs before every execution, a swap would write each time.
    if CONFIGURED.load(Ordering::Relaxed) || CONFIGURED.swap(true, Ordering::Relaxed) {
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
    let stack = if HISTORY.load(Ordering::Relaxed) { python_stack() } else { None };
    if stack.is_some() {
        push_event("alloc", id, device, nbytes, stack.clone(), 0);
    }
    let live = Live { device, nbytes, dims: dims.to_vec(), dtype, site, stack };
    LIVE.lock().unwrap_or_else(|e| e.into_inner()).get_or_insert_with(HashMap::new).insert(id, live);
    id
}

/// Takes a buffer off the list (freed, or donated to an execution).
pub fn forget(id: u64) {
    let gone = LIVE.lock().unwrap_or_else(|e| e.into_inner()).as_mut().and_then(|map| map.remove(&id));
    if let Some(live) = gone.filter(|_| HISTORY.load(Ordering::Relaxed)) {
        push_event("free_completed", id, live.device, live.nbytes, live.stack, 0);
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
    if HISTORY.load(Ordering::Relaxed) {
        push_event("oom", 0, device, asking, python_stack(), limit.saturating_sub(live));
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

/// Turns the history on (keeping the newest `max_entries` events) or off (forgetting them).
#[pyfunction]
pub fn record_memory_history(enabled: bool, max_entries: usize) {
    MAX_EVENTS.store(max_entries, Ordering::Relaxed);
    HISTORY.store(enabled, Ordering::Relaxed);
    if !enabled {
        EVENTS.lock().unwrap_or_else(|e| e.into_inner()).clear();
    }
}

/// A buffer as a snapshot lists it: (id, device, bytes, its stack or None).
type SnapshotBuffer = (u64, usize, usize, Option<Vec<Frame>>);
/// An event as a snapshot lists it: (action, id, device, bytes, stack, microseconds, free bytes
/// for an "oom").
type SnapshotEvent = (&'static str, u64, usize, usize, Vec<Frame>, u64, usize);

/// What `_snapshot` is made of: every live buffer and the recorded events, oldest first.
#[pyfunction]
pub fn memory_snapshot() -> (Vec<SnapshotBuffer>, Vec<SnapshotEvent>) {
    let live = LIVE.lock().unwrap_or_else(|e| e.into_inner());
    let mut buffers: Vec<SnapshotBuffer> = live
        .as_ref()
        .map(|map| map.iter().map(|(&id, l)| (id, l.device, l.nbytes, l.stack.as_ref().map(|s| s.to_vec()))).collect())
        .unwrap_or_default();
    drop(live);
    buffers.sort_by_key(|b| b.0);
    let events = EVENTS.lock().unwrap_or_else(|e| e.into_inner());
    let events = events
        .iter()
        .map(|e| {
            let stack = e.stack.as_ref().map_or_else(Vec::new, |s| s.to_vec());
            (e.action, e.id, e.device, e.size, stack, e.time_us, e.free)
        })
        .collect();
    (buffers, events)
}
