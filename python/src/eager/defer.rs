//! DeferAndFuse's records (`torchtpu.device._defer`): the open region and its pending values as
//! native objects, and recording an op into it. The native per-op path records a cached op here
//! with no Python (`path::call`); the Python path records through `defer_record`, so both write
//! the same records, from which `_region.py` builds the region's IR at a cut.

use std::collections::HashMap;
use std::time::Instant;

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyList, PyTuple};
use pyo3::{PyTraverseError, PyVisit};

use torchtpu_eager::region::Token;

/// A value of the open region: output `index` of its recorded programs. `buffer` is the device
/// buffer once the region ran (storages holding the Pending then use it).
#[pyclass(module = "torchtpu._C", freelist = 1024)]
pub struct Pending {
    region: Option<Py<Region>>,
    #[pyo3(get)]
    index: usize,
    #[pyo3(get)]
    nbytes: usize,
    buffer: Option<Py<PyAny>>,
    /// Where its region runs, as a DeviceBuffer's `device`.
    #[pyo3(get)]
    device: usize,
}

impl Pending {
    /// Gives it the buffer its region computed.
    pub(super) fn set_computed(&mut self, buffer: Py<PyAny>) {
        self.buffer = Some(buffer);
    }

    /// The device buffer its region computed, if it ran.
    pub fn computed(&self, py: Python<'_>) -> Option<Py<PyAny>> {
        self.buffer.as_ref().map(|b| b.clone_ref(py))
    }
}

#[pymethods]
impl Pending {
    #[getter]
    fn region(&self, py: Python<'_>) -> Option<Py<Region>> {
        self.region.as_ref().map(|r| r.clone_ref(py))
    }

    #[getter]
    fn buffer(&self, py: Python<'_>) -> Option<Py<PyAny>> {
        self.computed(py)
    }

    #[setter]
    fn set_buffer(&mut self, buffer: Option<Py<PyAny>>) {
        self.buffer = buffer;
    }

    /// Its buffer, cutting the region first where it is still pending (`reason`, one of
    /// `_defer.CUT_REASONS`).
    fn _value(slf: &Bound<'_, Self>, reason: &str) -> PyResult<Py<PyAny>> {
        let py = slf.py();
        if let Some(b) = slf.borrow().computed(py) {
            return Ok(b);
        }
        Ok(defer_module(py)?.getattr("resolve")?.call1((slf, reason))?.unbind())
    }

    // What callers of a DeviceBuffer use, each a cut when the value is still pending.
    fn to_host(slf: &Bound<'_, Self>) -> PyResult<Py<PyAny>> {
        let b = Self::_value(slf, "host_read")?;
        Ok(b.bind(slf.py()).call_method0("to_host")?.unbind())
    }

    fn wait(slf: &Bound<'_, Self>) -> PyResult<Py<PyAny>> {
        let b = Self::_value(slf, "synchronize")?;
        Ok(b.bind(slf.py()).call_method0("wait")?.unbind())
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.region)?;
        visit.call(&self.buffer)
    }

    fn __clear__(&mut self) {
        self.region = None;
        self.buffer = None;
    }
}

/// The ops recorded since the last cut.
#[pyclass(module = "torchtpu._C")]
pub struct Region {
    /// The tpu device the region's program runs on.
    #[pyo3(get)]
    pub(super) device: usize,
    /// (program, wiring, first value index) per recorded program. The wiring names each input:
    /// an earlier value (>= 0) or the k-th distinct external buffer (-1 - k).
    #[pyo3(get, set)]
    pub(super) records: Option<Py<PyList>>,
    /// (program serial, wiring) per recorded program: the key's op part.
    #[pyo3(get, set)]
    pub(super) tokens: Option<Py<PyList>>,
    /// Per value, its Pending. The region's reference is not counted as use: a value is live
    /// when something else (a storage, a Python variable) holds it.
    #[pyo3(get, set)]
    pub(super) values: Option<Py<PyList>>,
    /// The device buffers read, in first-use order.
    #[pyo3(get, set)]
    pub(super) externals: Option<Py<PyList>>,
    /// An external's address -> its index (the list keeps each alive, so addresses are stable).
    ext_index: HashMap<usize, usize>,
    /// `tokens` as the native cut hashes them (`cut::RegionKey`).
    pub(super) key_tokens: Vec<Token>,
    started: Instant,
    /// Why compiling or running the region failed, for its values' readers.
    #[pyo3(get, set)]
    error: Option<Py<PyAny>>,
    /// Cut (`_defer.flush`): nothing more is recorded into it.
    #[pyo3(get, set)]
    closed: bool,
}

#[pymethods]
impl Region {
    #[new]
    #[pyo3(signature = (device = 0))]
    fn new(py: Python<'_>, device: usize) -> Region {
        Region {
            device,
            records: Some(PyList::empty(py).unbind()),
            tokens: Some(PyList::empty(py).unbind()),
            values: Some(PyList::empty(py).unbind()),
            externals: Some(PyList::empty(py).unbind()),
            ext_index: HashMap::new(),
            key_tokens: Vec::new(),
            started: Instant::now(),
            error: None,
            closed: false,
        }
    }

    /// Milliseconds since the region's first op.
    fn record_ms(&self) -> f64 {
        self.started.elapsed().as_secs_f64() * 1e3
    }

    /// How many programs are recorded.
    fn __len__(&self, py: Python<'_>) -> usize {
        self.records.as_ref().map_or(0, |r| r.bind(py).len())
    }

    /// Forgets the externals (the region held the last references to what it donates).
    fn drop_externals(&mut self) {
        self.externals = None;
        self.forget_externals();
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.records)?;
        visit.call(&self.tokens)?;
        visit.call(&self.values)?;
        visit.call(&self.externals)?;
        visit.call(&self.error)
    }

    fn __clear__(&mut self) {
        self.records = None;
        self.tokens = None;
        self.values = None;
        self.externals = None;
        self.ext_index.clear();
        self.key_tokens.clear();
        self.error = None;
    }
}

impl Region {
    /// The external buffers' index (with the list: `cut::run` takes that).
    pub(super) fn forget_externals(&mut self) {
        self.ext_index.clear();
    }
}

/// What a recorded program is, for the records: the Python `Program` (its traced graph is what
/// the region splices in), its serial and the byte size of each IR output.
pub struct Recorded<'a, 'py> {
    pub program: &'a Bound<'py, PyAny>,
    pub serial: i64,
    pub nbytes: &'a [usize],
}

/// Records `what` run on `leaves` (device buffers or Pending values on tpu:`device`) in the calling
/// thread's open region, opened if there is none; returns the region, the Pending values of the
/// program's IR outputs and how many programs the region holds. None where the open region runs
/// on another device (the caller cuts it first).
pub fn record<'py>(
    py: Python<'py>,
    device: usize,
    what: &Recorded<'_, 'py>,
    leaves: &[Bound<'py, PyAny>],
) -> PyResult<Option<RecordedIn<'py>>> {
    // Values pending in another region (another thread's) are computed first: a region reads only
    // its own values and device buffers. That runs Python (and lets other threads run, which may
    // cut this thread's region), so it is done until the leaves hold no such value for the region
    // the op goes into, before anything is kept.
    let mut leaves: Vec<Bound<'py, PyAny>> = leaves.to_vec();
    let region = loop {
        let open = thread_state(py)?.getattr(pyo3::intern!(py, "region"))?;
        for leaf in leaves.iter_mut() {
            if let Some(p) = foreign(leaf, open.as_ptr()) {
                *leaf = Pending::_value(&p, "another_thread")?.into_bound(py);
            }
        }
        let Some(region) = open_region(py, device)? else { return Ok(None) };
        if leaves.iter().all(|leaf| foreign(leaf, region.as_ptr()).is_none()) {
            break region;
        }
    };
    let mut r = region.borrow_mut();
    let (Some(records), Some(tokens), Some(values), Some(externals)) =
        (r.records.as_ref(), r.tokens.as_ref(), r.values.as_ref(), r.externals.as_ref())
    else {
        return Err(crate::internal(py, "record", "an op was recorded into a region that already ran"));
    };
    let (records, tokens, values, externals) =
        (records.bind(py).clone(), tokens.bind(py).clone(), values.bind(py).clone(), externals.bind(py).clone());
    let mut wiring = Vec::with_capacity(leaves.len());
    for leaf in &leaves {
        let mut buffer = leaf.clone();
        if let Ok(p) = leaf.cast::<Pending>() {
            let p = p.borrow();
            match p.computed(py) {
                Some(b) => buffer = b.into_bound(py),
                None => {
                    wiring.push(p.index as i64); // this region's own value (`foreign` said so)
                    continue;
                }
            }
        }
        let address = buffer.as_ptr() as usize;
        let k = match r.ext_index.get(&address) {
            Some(&k) => k,
            None => {
                let k = externals.len();
                externals.append(&buffer)?;
                r.ext_index.insert(address, k);
                k
            }
        };
        wiring.push(-1 - k as i64);
    }
    let wiring_ids = wiring.clone();
    let wiring = PyTuple::new(py, wiring)?;
    let base = values.len();
    let owner = region.clone().unbind();
    let mut outs = Vec::with_capacity(what.nbytes.len());
    for (i, &nbytes) in what.nbytes.iter().enumerate() {
        let p = Bound::new(
            py,
            Pending { region: Some(owner.clone_ref(py)), index: base + i, nbytes, buffer: None, device: r.device },
        )?;
        values.append(&p)?;
        outs.push(p);
    }
    records.append((what.program, &wiring, base))?;
    tokens.append((what.serial, &wiring))?;
    r.key_tokens.push((what.serial, wiring_ids.into_boxed_slice()));
    let n = records.len();
    drop(r);
    Ok(Some((region, outs, n)))
}

/// `leaf` as a value still pending in another region than the one at `region` (None: a buffer,
/// a computed value, or one of that region's).
fn foreign<'py>(leaf: &Bound<'py, PyAny>, region: *mut pyo3::ffi::PyObject) -> Option<Bound<'py, Pending>> {
    let p = leaf.cast::<Pending>().ok()?;
    let b = p.borrow();
    let other = b.buffer.is_none() && b.region.as_ref().is_none_or(|own| own.as_ptr() != region);
    drop(b);
    other.then(|| p.clone())
}

/// The region an op was recorded in, its Pending results and the region's program count.
pub type RecordedIn<'py> = (Bound<'py, Region>, Vec<Bound<'py, Pending>>, usize);

/// `record` for the Python path (`_defer.record`): `program` is a traced `_programs.Program`.
/// Returns the region, the Pending values and how many programs the region holds now, or None
/// where the open region runs on another device.
#[pyfunction]
pub fn defer_record<'py>(
    py: Python<'py>,
    program: &Bound<'py, PyAny>,
    leaves: Vec<Bound<'py, PyAny>>,
    device: usize,
) -> PyResult<Option<RecordedIn<'py>>> {
    let serial: i64 = program.getattr("serial")?.extract()?;
    let nbytes: Vec<usize> = program.getattr("ir_nbytes")?.extract()?;
    record(py, device, &Recorded { program, serial, nbytes: &nbytes }, &leaves)
}

/// `torchtpu.device._defer`, where the mode's state lives.
pub fn defer_module(py: Python<'_>) -> PyResult<&Bound<'_, PyModule>> {
    static MODULE: PyOnceLock<Py<PyModule>> = PyOnceLock::new();
    MODULE.get_or_try_init(py, || py.import("torchtpu.device._defer").map(Bound::unbind)).map(|m| m.bind(py))
}

/// The calling thread's recording state (`torchtpu.device._state.state`, a `threading.local`).
fn thread_state(py: Python<'_>) -> PyResult<&Bound<'_, PyAny>> {
    static STATE: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    STATE
        .get_or_try_init(py, || -> PyResult<Py<PyAny>> {
            Ok(py.import("torchtpu.device._state")?.getattr("state")?.unbind())
        })
        .map(|s| s.bind(py))
}

/// Whether the calling thread records ops now (`state.active`: the mode, outside a host read's
/// own data movement).
pub fn recording(py: Python<'_>) -> PyResult<bool> {
    thread_state(py)?.getattr(pyo3::intern!(py, "active"))?.is_truthy()
}

/// The calling thread's open region, opened on tpu:`device` if there is none (or it was cut);
/// None where it runs on another device (the Python path cuts it first).
pub fn open_region(py: Python<'_>, device: usize) -> PyResult<Option<Bound<'_, Region>>> {
    let state = thread_state(py)?;
    let region = state.getattr(pyo3::intern!(py, "region"))?;
    if let Ok(r) = region.cast_into::<Region>() {
        let (closed, on) = {
            let b = r.borrow();
            (b.closed, b.device)
        };
        if !closed {
            return Ok((on == device).then_some(r));
        }
    }
    let r = Bound::new(py, Region::new(py, device))?;
    state.setattr(pyo3::intern!(py, "region"), &r)?;
    Ok(Some(r))
}

/// Inside a backward pass the mode does not cut at the end of yet (a new graph task), queues
/// that cut (`_defer._queue_backward_cut`), as `_defer.record` does.
pub fn note_backward(py: Python<'_>) -> PyResult<()> {
    static TASK_ID: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    let task_id = TASK_ID.get_or_try_init(py, || -> PyResult<Py<PyAny>> {
        Ok(py.import("torch")?.getattr("_C")?.getattr("_current_graph_task_id")?.unbind())
    })?;
    let task: i64 = task_id.bind(py).call0()?.extract()?;
    if task == -1 {
        return Ok(());
    }
    let seen = thread_state(py)?.getattr(pyo3::intern!(py, "backward_task"))?;
    if seen.is_none() || seen.extract::<i64>()? != task {
        defer_module(py)?.getattr(pyo3::intern!(py, "_queue_backward_cut"))?.call1((task,))?;
    }
    Ok(())
}

/// After an op was recorded: the size checks of `_defer.after_record` when they are due (at the
/// op cap, and every `_LIVE_CHECK_EVERY` ops).
pub fn after_record(py: Python<'_>, region: &Bound<'_, Region>, n: usize) -> PyResult<()> {
    let module = defer_module(py)?;
    let cap: usize = module.getattr(pyo3::intern!(py, "MAX_OPS"))?.extract()?;
    let every: usize = module.getattr(pyo3::intern!(py, "_LIVE_CHECK_EVERY"))?.extract()?;
    if n >= cap || (every != 0 && n % every == 0) {
        module.getattr(pyo3::intern!(py, "after_record"))?.call1((region, n))?;
    }
    Ok(())
}
