//! DeferAndFuse's cut with no Python on a hit (issue 48): a region's structural key (its recorded
//! programs' tokens, which of its values something still references, which of its inputs only it
//! holds), the region programs kept per key, and, for a kept one, the run and the write-back of
//! each live value's buffer. `_defer.flush` keeps the cut's reasons and explain records; a miss
//! goes back to it, which compiles (`_region.py`), keeps the program here (`defer_keep`) and runs
//! it through the same code (`defer_run`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple};
use torchtpu_eager::region::RegionKey;
use torchtpu_runtime::Buffer;

use super::defer::{Pending, Region};
use super::path::execute_donating;
use crate::device::DeviceBuffer;
use crate::Program;

/// `RegionKey`'s Python form: `(((serial, wiring), ...), live, dead)`.
type PyKey = (Vec<(i64, Vec<i64>)>, Vec<usize>, Vec<usize>);

/// What `defer_cut` returns: the key's id, the live values, the dead externals, and on a hit the
/// program and its run's milliseconds.
type Cut<'py> = (String, Bound<'py, PyTuple>, Bound<'py, PyTuple>, Option<Py<PyAny>>, f64);

/// From `_region`'s Python form of it.
fn region_key(key: &Bound<'_, PyAny>) -> PyResult<RegionKey> {
    let (tokens, live, dead): PyKey = key.extract()?;
    Ok(RegionKey { tokens: tokens.into_iter().map(|(s, w)| (s, w.into_boxed_slice())).collect(), live, dead })
}

/// Where an IR input of a region program comes from.
enum Source {
    /// The k-th external buffer the region read.
    Ext(usize),
    /// A module attribute uploaded at compile time (on device 0: other devices get a copy).
    Const(Py<DeviceBuffer>),
}

/// What a live value becomes: an output of the program, or one of its inputs returned as is.
enum Output {
    Ir(usize),
    Input(usize),
}

/// A compiled region as the cut runs it (from `_region.RegionProgram`, which it keeps too).
struct Kept {
    program: Py<PyAny>,
    compiled: Py<Program>,
    sources: Vec<Source>,
    outputs: Vec<Output>,
    live: Vec<usize>,
    donate: Vec<usize>,
}

impl Kept {
    fn from_py(program: &Bound<'_, PyAny>) -> PyResult<Kept> {
        let py = program.py();
        let sources = program
            .getattr("sources")?
            .try_iter()?
            .map(|s| {
                let (kind, v): (String, Bound<'_, PyAny>) = s?.extract()?;
                match kind.as_str() {
                    "ext" => Ok(Source::Ext(v.extract()?)),
                    "const" => Ok(Source::Const(v.cast_into::<DeviceBuffer>()?.unbind())),
                    other => Err(crate::internal(py, "execute", &format!("region input of kind {other}"))),
                }
            })
            .collect::<PyResult<_>>()?;
        let outputs = program
            .getattr("outputs")?
            .try_iter()?
            .map(|spec| {
                let spec = spec?;
                let index: usize = spec.getattr("index")?.extract()?;
                match spec.getattr("kind")?.extract::<String>()?.as_str() {
                    "ir" => Ok(Output::Ir(index)),
                    "input" => Ok(Output::Input(index)),
                    other => Err(crate::internal(py, "execute", &format!("region output of kind {other}"))),
                }
            })
            .collect::<PyResult<_>>()?;
        Ok(Kept {
            program: program.clone().unbind(),
            compiled: program.getattr("compiled")?.cast_into::<Program>()?.unbind(),
            sources,
            outputs,
            live: program.getattr("live")?.extract()?,
            donate: program.getattr("donate")?.extract()?,
        })
    }
}

/// The kept region programs, per key (`_region.REGION_LIMIT` bounds them: `defer_forget`).
static KEPT: Mutex<Option<HashMap<RegionKey, Arc<Kept>>>> = Mutex::new(None);

fn kept(key: &RegionKey) -> Option<Arc<Kept>> {
    KEPT.lock().unwrap_or_else(|e| e.into_inner()).as_ref()?.get(key).cloned()
}

/// The cut's first half for a closed region: its key's id, its live values and dead externals
/// (what only the region references: a parameter updated in place, whose storage now holds the
/// Pending of its new value), and, where a program is kept for the key, that program
/// (`_region.RegionProgram`) and the milliseconds its run took: its live values have their
/// buffers then, and the region holds nothing more. Without one (a miss), nothing ran.
#[pyfunction]
pub fn defer_cut<'py>(py: Python<'py>, region: &Bound<'py, Region>, wait: bool) -> PyResult<Cut<'py>> {
    let key = {
        let mut r = region.borrow_mut();
        let (Some(values), Some(externals)) = (r.values.as_ref(), r.externals.as_ref()) else {
            return Err(crate::internal(py, "execute", "a region was cut twice"));
        };
        // References besides the region's list and the one `get_item` takes.
        let live = referenced(values.bind(py), |n| n > 2);
        let dead = referenced(externals.bind(py), |n| n <= 2);
        RegionKey { tokens: std::mem::take(&mut r.key_tokens), live, dead }
    };
    let id = key.id();
    let (live, dead) = (PyTuple::new(py, &key.live)?, PyTuple::new(py, &key.dead)?);
    let Some(program) = kept(&key) else { return Ok((id, live, dead, None, 0.0)) };
    let run_ms = run(py, region, &program, wait)?;
    Ok((id, live, dead, Some(program.program.clone_ref(py)), run_ms))
}

/// Indices of `list`'s items whose reference count (with the one this takes) passes `keep`.
fn referenced(list: &Bound<'_, PyList>, keep: impl Fn(isize) -> bool) -> Vec<usize> {
    list.iter().enumerate().filter(|(_, item)| keep(item.get_refcnt())).map(|(i, _)| i).collect()
}

/// Keeps `program` (`_region.RegionProgram`) for `key` (`_region`'s Python form of it).
#[pyfunction]
pub fn defer_keep(key: &Bound<'_, PyAny>, program: &Bound<'_, PyAny>) -> PyResult<()> {
    let (key, kept) = (region_key(key)?, Kept::from_py(program)?);
    KEPT.lock().unwrap_or_else(|e| e.into_inner()).get_or_insert_with(HashMap::new).insert(key, Arc::new(kept));
    Ok(())
}

/// Forgets every kept region program (`_region.clear`).
#[pyfunction]
pub fn defer_forget() {
    let old = KEPT.lock().unwrap_or_else(|e| e.into_inner()).take();
    drop(old); // after the lock is let go
}

/// The id `defer_cut` gives `key` (`_region`'s Python form of it).
#[pyfunction]
pub fn defer_key_id(key: &Bound<'_, PyAny>) -> PyResult<String> {
    Ok(region_key(key)?.id())
}

/// Runs `program` (just compiled for the region after `defer_cut` missed) as a hit would;
/// returns the milliseconds the run took.
#[pyfunction]
pub fn defer_run(py: Python<'_>, region: &Bound<'_, Region>, program: &Bound<'_, PyAny>, wait: bool) -> PyResult<f64> {
    run(py, region, &Kept::from_py(program)?, wait)
}

/// Runs `kept` on the region's externals, donating the dead ones, and gives each live Pending its
/// buffer. The region forgets its externals first (it held the last references to what it
/// donates) and its records after.
fn run(py: Python<'_>, region: &Bound<'_, Region>, kept: &Kept, wait: bool) -> PyResult<f64> {
    let (device, externals) = {
        let mut r = region.borrow_mut();
        let externals = r.externals.take();
        r.forget_externals();
        (r.device, externals)
    };
    let Some(externals) = externals else {
        return Err(crate::internal(py, "execute", "a region was run twice"));
    };
    let mut inputs: Vec<Bound<'_, DeviceBuffer>> = Vec::with_capacity(kept.sources.len());
    for source in &kept.sources {
        let b = match source {
            Source::Ext(k) => externals.bind(py).get_item(*k)?.cast_into::<DeviceBuffer>()?,
            Source::Const(b) if b.get().device == device => b.bind(py).clone(),
            Source::Const(b) => py
                .import("torchtpu.device._buffers")?
                .getattr("on_device")?
                .call1((b, device))?
                .cast_into::<DeviceBuffer>()?,
        };
        b.get().check_usable(py)?;
        inputs.push(b);
    }
    drop(externals);
    let compiled = kept.compiled.get();
    let refs: Vec<&Buffer> = inputs.iter().map(|b| &b.get().buffer).collect();
    let donated: Vec<&DeviceBuffer> = kept.donate.iter().map(|&i| inputs[i].get()).collect();
    let started = Instant::now();
    let outs = crate::guarded(py, "execute", || {
        execute_donating(py, &compiled.compiled, &refs, &kept.donate, &donated, device)
    })?;
    if wait {
        for b in &outs {
            b.get().wait(py)?;
        }
    }
    let run_ms = started.elapsed().as_secs_f64() * 1e3;
    let mut r = region.borrow_mut();
    let Some(values) = r.values.take() else {
        return Err(crate::internal(py, "execute", "a region's values were dropped before it ran"));
    };
    let values = values.bind(py);
    for (&value, output) in kept.live.iter().zip(&kept.outputs) {
        let buffer = match output {
            Output::Ir(i) => outs[*i].clone().into_any(),
            Output::Input(i) => inputs[*i].clone().into_any(),
        };
        values.get_item(value)?.cast_into::<Pending>()?.borrow_mut().set_computed(buffer.unbind());
    }
    // A resolved Pending keeps its region: keep it small.
    r.records = None;
    r.tokens = None;
    Ok(run_ms)
}
