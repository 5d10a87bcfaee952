//! One op on the native path: key it, find its recipe, and launch it; or leave a pending key
//! for the Python path to bind a recipe to (`learn`).

use std::collections::HashMap;
use std::ffi::CStr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use pyo3::prelude::*;
use pyo3::types::PyWeakrefReference;
use torchtpu_engine::DType;
use torchtpu_runtime::Buffer;

use torchtpu_eager::cache::Found;
use torchtpu_eager::calls::{self, Missed};
use torchtpu_eager::donation;
use torchtpu_eager::key::View;
use torchtpu_eager::layout::contiguous;
use torchtpu_eager::mode;

use super::cache::{self, OutType, Recipe, Results, Source, Write};
use super::defer::{self, Recorded};
use super::key::{self, Arg, Flat, Leaf, Scalar, Written};
use super::slot::Slot;
use super::{Answer, Made};
use crate::device::DeviceBuffer;
use crate::{default_engine, engine_error};

pub fn call(py: Python<'_>, op: u64, name: &CStr, args: &[Arg<'_, '_>]) -> PyResult<Answer> {
    let recording = mode::defer() && defer::recording(py)?;
    let Some(flat) = key::flatten(op, mode::checks(), recording, args) else {
        return Ok(Answer::Skip);
    };
    if flat.device.is_none() {
        return Ok(Answer::Skip); // no tpu tensor to say where it runs: factories stay in Python
    }
    let float_bits: Vec<u64> = flat.floats.iter().map(|f| f.to_bits()).collect();
    let found = cache::with(|c| {
        let found = c.find(&flat.key, &float_bits);
        if matches!(found, Found::Miss { .. }) {
            c.counters.misses += 1;
        }
        found
    });
    let recipe = match found {
        Found::Run { recipe, .. } => recipe,
        Found::Python => return Ok(Answer::Skip),
        Found::Miss { baked } => {
            calls::missed(Missed {
                key: flat.key,
                baked,
                name: name.to_string_lossy().into_owned(),
                n_leaves: flat.leaves.len(),
                float_bits,
            });
            return Ok(Answer::Miss);
        }
    };
    let mut flat = flat;
    if !give_zeros(py, &mut flat, recording)? {
        return Ok(Answer::Skip);
    }
    let made = if recording { record_op(py, &recipe, &flat)? } else { launch(py, &recipe, &flat)? };
    if made.is_some() {
        cache::with(|c| c.counters.hits += 1);
    }
    Ok(made.map_or(Answer::Skip, Answer::Hit))
}

/// Gives each unwritten storage among the leaves its zeros, as `_storage.buffer_of` does: small
/// ones uploaded (`zeros`), larger ones the Python path's zeros program's output (a device buffer,
/// or while recording a pending value).
fn give_zeros<'py>(py: Python<'py>, flat: &mut Flat<'_, 'py>, recording: bool) -> PyResult<bool> {
    for leaf in flat.leaves.iter_mut() {
        let Leaf::Unwritten(slot) = leaf else { continue };
        let (code, shape, device) = {
            let s = slot.borrow();
            (s.code, s.shape.clone(), s.device as usize)
        };
        let given = slot.borrow().buffer.bind(py).clone();
        let data = if !given.is_none() {
            given // the storage is an earlier leaf too: it has its zeros already
        } else if let Some(buffer) = zeros(py, code, &shape, device)? {
            buffer.into_any()
        } else {
            let dtype = slot.borrow().dtype.clone_ref(py);
            let programs = py.import(pyo3::intern!(py, "torchtpu.device._programs"))?;
            programs.getattr(pyo3::intern!(py, "zeros"))?.call1((shape, dtype, device))?
        };
        slot.borrow_mut().buffer = data.clone().unbind();
        *leaf = match data.cast_into::<DeviceBuffer>() {
            Ok(buffer) => Leaf::Device { buffer },
            Err(e) => match e.into_inner().cast_into::<defer::Pending>() {
                Ok(p) if recording => Leaf::Pending(p),
                _ => return Ok(false),
            },
        };
    }
    Ok(true)
}

/// Zeros of ScalarType `code` and `shape` on tpu:`device`, uploaded (not kept: the storage owns
/// them, so the device memory it frees is freed); None past `ZEROS_MAX_BYTES` (a zeros program
/// computes larger ones on the device instead of copying them there), or for a dtype the device
/// lacks.
pub fn zeros<'py>(
    py: Python<'py>,
    code: i32,
    shape: &[i64],
    device: usize,
) -> PyResult<Option<Bound<'py, DeviceBuffer>>> {
    let Some(dtype) = crate::dtypes::of_scalar_type(py, code)? else { return Ok(None) };
    let bytes = shape.iter().product::<i64>().max(0) as usize * dtype.size_bytes();
    if bytes > ZEROS_MAX_BYTES {
        return Ok(None);
    }
    let engine = default_engine(py)?;
    let data = vec![0u8; bytes];
    let buffer = py.detach(|| engine.upload_to(&data, dtype, shape, device)).map_err(|e| engine_error(py, &e))?;
    Ok(Some(Bound::new(py, DeviceBuffer::new(buffer, dtype, device))?))
}

/// Zeros up to this size are uploaded (a larger unwritten tensor gets the zeros program's output).
pub const ZEROS_MAX_BYTES: usize = 4096;

/// Ends this thread's innermost call that missed: a key the Python path gave no recipe for is
/// its from now on.
pub fn done() {
    cache::with(calls::done);
}

/// `dst.copy_(src)` where it is only a buffer's reuse (buffers are immutable): both tpu tensors
/// on one device, one dtype and shape, both all of their storage, neither conjugate nor negative
/// view, `src` computed. Returns whether it did it (else the Python kernel does the copy).
pub fn copy(py: Python<'_>, dst: &Arg<'_, '_>, src: &Arg<'_, '_>) -> bool {
    let (Arg::Tensor(dt), Arg::Tensor(st)) = (dst, src) else { return false };
    let (Some(dslot), Some(sslot)) = (&dt.slot, &st.slot) else { return false };
    let (d, s) = (&dt.view, &st.view);
    if d.dtype != s.dtype || d.sizes != s.sizes || dt.device != st.device || d.conj || d.neg || s.conj || s.neg {
        return false;
    }
    let whole = |t: &View<'_>, slot: &Slot| {
        t.offset == 0
            && slot.code == t.dtype
            && slot.numel == t.sizes.iter().product::<i64>()
            && contiguous(t.sizes, t.strides)
    };
    let buffer = {
        let sref = sslot.borrow();
        if !whole(s, &sref) || sref.shape != s.sizes {
            return false;
        }
        let data = sref.buffer.bind(py);
        match data.cast::<DeviceBuffer>() {
            Ok(b) if b.get().donated_now() => return false,
            Ok(b) => b.clone().into_any().unbind(),
            // DeferAndFuse: the destination holds the same pending value.
            Err(_) if data.cast::<defer::Pending>().is_ok() => data.clone().unbind(),
            Err(_) => return false,
        }
    };
    if dslot.is(sslot) {
        return true; // a storage copied onto itself
    }
    let mut dref = dslot.borrow_mut();
    if !whole(d, &dref) {
        return false;
    }
    dref.buffer = buffer;
    dref.shape = d.sizes.to_vec();
    true
}

/// Binds `recipe` (how the Python path just ran the call of `name`; `baked`: its floats are
/// attributes, kept per value) to the pending key of that call, if it is the innermost pending
/// one and its leaves are the ones the recipe reads. Returns whether it did.
pub fn learn(name: &str, recipe: Recipe, baked: bool) -> bool {
    let (n_leaves, n_floats) = (recipe.leaf_dtypes.len(), recipe.n_floats);
    // A refused recipe is dropped here, after the cache's lock is let go.
    cache::with(|c| calls::learn(c, name, n_leaves, n_floats, baked, Arc::new(recipe))).is_ok()
}

/// Runs `recipe` on the call's leaves; None where this call cannot (a constant on another
/// device): the Python path runs it.
fn launch(py: Python<'_>, recipe: &Recipe, flat: &Flat<'_, '_>) -> PyResult<Option<Vec<Made>>> {
    let device = flat.device.unwrap_or(0);
    let Some(values) = leaf_values(py, recipe, flat, device)? else { return Ok(None) };
    let mut leaves: Vec<Bound<'_, DeviceBuffer>> = Vec::with_capacity(values.len());
    for v in values {
        match v.cast_into::<DeviceBuffer>() {
            Ok(b) => leaves.push(b),
            Err(_) => return Ok(None), // never: a pending value is a leaf only while recording
        }
    }
    let mut inputs: Vec<&Buffer> = Vec::with_capacity(recipe.sources.len());
    for source in &recipe.sources {
        inputs.push(match source {
            Source::Leaf(i) => match leaves.get(*i) {
                Some(b) => &b.get().buffer,
                None => return Ok(None),
            },
            Source::Const(b) if b.get().device == device => &b.get().buffer,
            Source::Const(_) => return Ok(None),
        });
    }
    let targets = targets(recipe, flat);
    if let Results::InPlace(writes) | Results::Out(writes) = &recipe.results {
        // A view's write reads its storage's buffer: it must be there before anything runs.
        for (w, t) in writes.iter().zip(targets) {
            if matches!(w, Write::Strided(_)) && t.slot.borrow().buffer.bind(py).cast::<DeviceBuffer>().is_err() {
                return Ok(None);
            }
        }
    }
    let donate = donations(recipe, flat, &leaves);
    let program = if donate.is_empty() { recipe.compiled(py)? } else { recipe.donating(py)? };
    let donated: Vec<&DeviceBuffer> = donate
        .iter()
        .filter_map(|&i| match recipe.sources[i] {
            Source::Leaf(l) => Some(leaves[l].get()),
            Source::Const(_) => None,
        })
        .collect();
    let buffers = execute_donating(py, &program.get().compiled, &inputs, &donate, &donated, device)?;
    if !donated.is_empty() {
        cache::with(|c| c.counters.donated += donated.len() as u64);
    }
    let outs = take_flag(py, recipe, buffers.into_iter().map(Bound::into_any).collect())?;
    // The leaves are the program's: the writes' donation counts only what holds a buffer after.
    drop(inputs);
    drop(leaves);
    match &recipe.results {
        Results::New(types) => new_slots(py, outs, types, device).map(Some),
        Results::InPlace(writes) | Results::Out(writes) => {
            for ((buffer, target), w) in outs.into_iter().zip(targets).zip(writes) {
                write(py, w, buffer.cast_into::<DeviceBuffer>()?, target, flat, device)?;
            }
            Ok(Some(Vec::new()))
        }
    }
}

/// The smallest in-place target an op's program donates, in bytes (`torchtpu_eager::donation`).
#[pyfunction]
pub fn eager_donate_min_bytes() -> usize {
    donation::min_bytes()
}

/// Sets `eager_donate_min_bytes` (0: every target; a huge value: none), returning the old one;
/// `benches/inplace_peak.py` moves it to measure donation.
#[pyfunction]
pub fn eager_set_donate_min_bytes(bytes: usize) -> usize {
    donation::set_min_bytes(bytes)
}

/// The program inputs (positions in `recipe.sources`) to donate, by `torchtpu_eager::donation`'s
/// rule, for an in-place or out= op: each target as this path sees it (`Write::Whole` or
/// `Write::Base` replace its storage's buffer; the other holders are the buffer's references
/// beyond its slot, this call's `leaves` and its keyed leaves).
fn donations(recipe: &Recipe, flat: &Flat<'_, '_>, leaves: &[Bound<'_, DeviceBuffer>]) -> Vec<usize> {
    let (Results::InPlace(writes) | Results::Out(writes)) = &recipe.results else { return Vec::new() };
    let described: Vec<donation::Target> = writes
        .iter()
        .zip(targets(recipe, flat))
        .map(|(w, target)| {
            let replaces_buffer = matches!(w, Write::Whole | Write::Base);
            let held = target.slot.borrow().buffer.as_ptr();
            // A strided write keeps the buffer: nothing more to look up for it (a hot path).
            let buffer = if replaces_buffer { leaves.iter().find(|b| b.as_ptr() == held) } else { None };
            let Some(buffer) = buffer else {
                return donation::Target { replaces_buffer, read_by: Vec::new(), nbytes: 0, other_holders: 0 };
            };
            let read_by = recipe
                .sources
                .iter()
                .enumerate()
                .filter(|(_, s)| matches!(s, Source::Leaf(l) if leaves.get(*l).is_some_and(|b| b.as_ptr() == held)))
                .map(|(i, _)| i)
                .collect();
            let in_leaves = leaves.iter().filter(|b| b.as_ptr() == held).count();
            donation::Target {
                replaces_buffer,
                read_by,
                nbytes: buffer.get().nbytes,
                other_holders: other_holders(buffer, in_leaves, flat),
            }
        })
        .collect();
    donation::donations(&described, donation::min_bytes())
}

/// A target storage's `buffer`'s holders beyond the storage's slot, the caller's `local`
/// references and this call's keyed leaves: another storage (a copy_ shares buffers), a pending
/// value, a Python variable.
fn other_holders(buffer: &Bound<'_, DeviceBuffer>, local: usize, flat: &Flat<'_, '_>) -> usize {
    let keyed = flat.leaves.iter().filter(|l| matches!(l, Leaf::Device { buffer: b } if b.is(buffer))).count();
    (buffer.get_refcnt() as usize).abs_diff(1 + local + keyed)
}

/// Records `recipe`'s program on the call's leaves in the open DeferAndFuse region, as
/// `_defer.record` does; None where the Python path must (a region open on another device, an
/// untraced program, a write into a view).
fn record_op(py: Python<'_>, recipe: &Recipe, flat: &Flat<'_, '_>) -> PyResult<Option<Vec<Made>>> {
    let Some(recordable) = &recipe.record else { return Ok(None) };
    if let Results::InPlace(writes) | Results::Out(writes) = &recipe.results {
        if writes.iter().any(|w| matches!(w, Write::Strided(_))) {
            return Ok(None);
        }
    }
    let device = flat.device.unwrap_or(0);
    let Some(leaves) = leaf_values(py, recipe, flat, device)? else { return Ok(None) };
    defer::note_backward(py)?;
    let program = recipe.program.bind(py);
    let what = Recorded { program, serial: recordable.serial, nbytes: &recordable.nbytes };
    let Some((region, outs, n)) = defer::record(py, device, &what, &leaves)? else { return Ok(None) };
    drop(leaves); // not a use of the inputs for the size check's live scan
    let outs = take_flag(py, recipe, outs.into_iter().map(Bound::into_any).collect())?;
    let made = match &recipe.results {
        Results::New(types) => new_slots(py, outs, types, device)?,
        Results::InPlace(writes) | Results::Out(writes) => {
            for ((pending, target), w) in outs.into_iter().zip(targets(recipe, flat)).zip(writes) {
                let mut s = target.slot.borrow_mut();
                s.buffer = pending.unbind();
                if matches!(w, Write::Whole) {
                    s.shape = target.sizes.to_vec();
                }
            }
            Vec::new()
        }
    };
    defer::after_record(py, &region, n)?;
    Ok(Some(made))
}

/// The program's leaves for this call, in the Python path's order: each tensor leaf's device
/// buffer (or, while recording, pending value), each CPU scalar uploaded as the recipe says, then
/// the floats as 0-d f64 inputs where the recipe takes them. None where this call cannot give
/// them (a float count or scalar the recipe does not take, an unwritten storage left).
fn leaf_values<'py>(
    py: Python<'py>,
    recipe: &Recipe,
    flat: &Flat<'_, 'py>,
    device: usize,
) -> PyResult<Option<Vec<Bound<'py, PyAny>>>> {
    if recipe.n_floats != 0 && recipe.n_floats != flat.floats.len() {
        return Ok(None);
    }
    let mut values = Vec::with_capacity(flat.leaves.len() + recipe.n_floats);
    for (i, leaf) in flat.leaves.iter().enumerate() {
        values.push(match leaf {
            Leaf::Device { buffer } => buffer.clone().into_any(),
            Leaf::Pending(p) => p.clone().into_any(),
            Leaf::Unwritten(_) => return Ok(None), // given zeros before (`give_zeros`)
            Leaf::Cpu(v) => {
                let Some(dtype) = recipe.leaf_dtypes[i] else { return Ok(None) };
                let Some(b) = scalar_buffer(py, dtype, v, device)? else { return Ok(None) };
                b.into_any()
            }
        });
    }
    if recipe.n_floats != 0 {
        for &f in &flat.floats {
            let Some(b) = scalar_buffer(py, DType::F64, &Scalar::Float(f), device)? else { return Ok(None) };
            values.push(b.into_any());
        }
    }
    Ok(Some(values))
}

/// The tensors an in-place or out= recipe writes: the first tpu leaves, or the out= tensors.
fn targets<'f, 'a, 'py>(recipe: &Recipe, flat: &'f Flat<'a, 'py>) -> &'f [Written<'a, 'py>] {
    match &recipe.results {
        Results::New(_) => &[],
        Results::InPlace(_) => &flat.tensors,
        Results::Out(_) => &flat.outs,
    }
}

/// A program's outputs without its index checks' flag (the last one, if it checks), which goes
/// to the pending checks.
fn take_flag<'py>(
    py: Python<'py>,
    recipe: &Recipe,
    mut outs: Vec<Bound<'py, PyAny>>,
) -> PyResult<Vec<Bound<'py, PyAny>>> {
    if let Some(sites) = &recipe.checks {
        let flag = outs.pop().expect("a checking program's last output is its flag");
        add_check(py, flag, sites)?;
    }
    Ok(outs)
}

/// New result tensors' slots holding `outs` (device buffers, or pending values).
fn new_slots(py: Python<'_>, outs: Vec<Bound<'_, PyAny>>, types: &[OutType], device: usize) -> PyResult<Vec<Made>> {
    let mut made = Vec::with_capacity(types.len());
    for (data, t) in outs.into_iter().zip(types) {
        let slot = Slot::new(data.unbind(), t.shape.clone(), t.dtype.clone_ref(py), t.code, device as i64);
        made.push(Made { slot: Py::new(py, slot)?, code: t.code, shape: t.shape.clone(), device });
    }
    Ok(made)
}

/// Hands an index-checking program's flag (a device buffer, or while recording a pending value)
/// to the pending checks, read at the next host read (`_checks.add_native`, which names the
/// user's line).
fn add_check(py: Python<'_>, flag: Bound<'_, PyAny>, sites: &Py<PyAny>) -> PyResult<()> {
    static ADD: pyo3::sync::PyOnceLock<Py<PyAny>> = pyo3::sync::PyOnceLock::new();
    let add = ADD.get_or_try_init(py, || -> PyResult<Py<PyAny>> {
        Ok(py.import("torchtpu.device._checks")?.getattr("add_native")?.unbind())
    })?;
    add.bind(py).call1((flag, sites))?;
    Ok(())
}

/// Writes `result` into `target`'s storage (one after another: two targets may share one).
fn write(
    py: Python<'_>,
    w: &Write,
    result: Bound<'_, DeviceBuffer>,
    target: &Written<'_, '_>,
    flat: &Flat<'_, '_>,
    device: usize,
) -> PyResult<()> {
    let new = match w {
        Write::Whole => {
            let mut s = target.slot.borrow_mut();
            s.buffer = result.into_any().unbind();
            s.shape = target.sizes.to_vec();
            return Ok(());
        }
        Write::Base => result,
        Write::Strided(scatter) => {
            let base = target.slot.borrow().buffer.bind(py).cast::<DeviceBuffer>()?.clone();
            let inputs = [&base.get().buffer, &result.get().buffer];
            // The storage's buffer (held here by `base` too) is donated to the scatter where
            // it can be: the view's write costs the view, not a copy of the storage.
            let target = donation::Target {
                replaces_buffer: true,
                read_by: vec![0],
                nbytes: base.get().nbytes,
                other_holders: other_holders(&base, 1, flat),
            };
            if donation::donated_input(&target, donation::min_bytes()).is_some() && !base.is(&result) {
                let program = scatter.donating(py)?;
                cache::with(|c| c.counters.donated += 1);
                execute_donating(py, &program.get().compiled, &inputs, &[0], &[base.get()], device)?.remove(0)
            } else {
                execute(py, &scatter.program.get().compiled, &inputs, device)?.remove(0)
            }
        }
    };
    target.slot.borrow_mut().buffer = new.into_any().unbind();
    Ok(())
}

/// Runs `compiled` on tpu:`device` without waiting; its outputs as device buffers there.
fn execute<'py>(
    py: Python<'py>,
    compiled: &torchtpu_engine::CompiledGraph,
    inputs: &[&Buffer],
    device: usize,
) -> PyResult<Vec<Bound<'py, DeviceBuffer>>> {
    execute_donating(py, compiled, inputs, &[], &[], device)
}

/// `execute`, donating the inputs at `donate`, whose buffers (`donated`) are marked so before
/// the outputs count: a donated input's memory may be an output's now.
pub(super) fn execute_donating<'py>(
    py: Python<'py>,
    compiled: &torchtpu_engine::CompiledGraph,
    inputs: &[&Buffer],
    donate: &[usize],
    donated: &[&DeviceBuffer],
    device: usize,
) -> PyResult<Vec<Bound<'py, DeviceBuffer>>> {
    let engine = default_engine(py)?;
    let on = engine.device(device).map_err(|e| engine_error(py, &e))?;
    crate::memory::check_program(py, compiled, device, donated.iter().map(|b| b.nbytes).sum())?;
    let outs =
        py.detach(|| compiled.execute_buffers_on(inputs, donate, false, on)).map_err(|e| engine_error(py, &e))?;
    for b in donated {
        b.mark_donated();
    }
    crate::EXECUTIONS.fetch_add(1, Ordering::Relaxed);
    let buffers = outs
        .into_iter()
        .zip(compiled.output_types())
        .map(|(b, t)| Bound::new(py, DeviceBuffer::new(b, t.dtype, device)))
        .collect::<PyResult<Vec<_>>>()?;
    mark_last(&buffers)?;
    Ok(buffers)
}

/// The last execution's outputs, held weakly: `torch.tpu.synchronize` waits for them
/// (`wait_last`), as for the Python path's (`_programs.mark_last`).
static LAST: Mutex<Vec<Py<PyWeakrefReference>>> = Mutex::new(Vec::new());

fn mark_last(buffers: &[Bound<'_, DeviceBuffer>]) -> PyResult<()> {
    let refs = buffers.iter().map(|b| PyWeakrefReference::new(b).map(Bound::unbind)).collect::<PyResult<Vec<_>>>()?;
    // The old references are dropped after the lock is let go (with the GIL held).
    let old = std::mem::replace(&mut *LAST.lock().unwrap_or_else(|e| e.into_inner()), refs);
    drop(old);
    Ok(())
}

pub fn wait_last(py: Python<'_>) -> PyResult<()> {
    let last = std::mem::take(&mut *LAST.lock().unwrap_or_else(|e| e.into_inner()));
    for r in last {
        if let Some(b) = r.bind(py).upgrade_as::<DeviceBuffer>()? {
            let buffer = b.get();
            if !buffer.donated_now() {
                py.detach(|| buffer.buffer.wait_ready())
                    .map_err(|e| engine_error(py, &torchtpu_engine::EngineError::Execute(e)))?;
            }
        }
    }
    Ok(())
}

type ScalarKey = (DType, u64, usize);

/// CPU scalars and floats as 0-d device buffers, uploaded once per (dtype, value, device).
static SCALARS: Mutex<Option<HashMap<ScalarKey, Py<DeviceBuffer>>>> = Mutex::new(None);
const SCALAR_LIMIT: usize = 4096;

pub fn clear_scalars() {
    *SCALARS.lock().unwrap_or_else(|e| e.into_inner()) = None;
}

pub fn scalar_buffer<'py>(
    py: Python<'py>,
    dtype: DType,
    v: &Scalar,
    device: usize,
) -> PyResult<Option<Bound<'py, DeviceBuffer>>> {
    let Some(bytes) = scalar_bytes(dtype, v) else { return Ok(None) };
    let mut bits = [0u8; 8];
    bits[..bytes.len()].copy_from_slice(&bytes);
    let key = (dtype, u64::from_le_bytes(bits), device);
    if let Some(b) = SCALARS.lock().unwrap_or_else(|e| e.into_inner()).as_ref().and_then(|m| m.get(&key)) {
        return Ok(Some(b.bind(py).clone()));
    }
    let engine = default_engine(py)?;
    let buffer = py.detach(|| engine.upload_to(&bytes, dtype, &[], device)).map_err(|e| engine_error(py, &e))?;
    let b = Bound::new(py, DeviceBuffer::new(buffer, dtype, device))?;
    let mut guard = SCALARS.lock().unwrap_or_else(|e| e.into_inner());
    let map = guard.get_or_insert_with(HashMap::new);
    if map.len() >= SCALAR_LIMIT {
        map.clear();
    }
    map.insert(key, b.clone().unbind());
    Ok(Some(b))
}

/// `v` in `dtype`, little-endian, as PyTorch converts a number to a 0-d tensor of that dtype;
/// None for a dtype the native path leaves to Python (half precision, complex) or a float that
/// an integer dtype would truncate.
fn scalar_bytes(dtype: DType, v: &Scalar) -> Option<Vec<u8>> {
    Some(match (dtype, v) {
        (DType::F64, Scalar::Float(f)) => f.to_le_bytes().to_vec(),
        (DType::F64, Scalar::Int(i)) => (*i as f64).to_le_bytes().to_vec(),
        (DType::F32, Scalar::Float(f)) => (*f as f32).to_le_bytes().to_vec(),
        (DType::F32, Scalar::Int(i)) => (*i as f32).to_le_bytes().to_vec(),
        (DType::I64, Scalar::Int(i)) => i.to_le_bytes().to_vec(),
        (DType::I32, Scalar::Int(i)) => (*i as i32).to_le_bytes().to_vec(),
        (DType::I16, Scalar::Int(i)) => (*i as i16).to_le_bytes().to_vec(),
        (DType::I8, Scalar::Int(i)) => (*i as i8).to_le_bytes().to_vec(),
        (DType::U8, Scalar::Int(i)) => vec![*i as u8],
        (DType::Bool, Scalar::Int(i)) => vec![(*i != 0) as u8],
        _ => return None,
    })
}
