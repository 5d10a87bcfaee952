//! One op on the native path: key it, find its recipe, and launch it; or leave a pending key
//! for the Python path to bind a recipe to (`learn`).

use std::collections::HashMap;
use std::ffi::CStr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use pyo3::prelude::*;
use pyo3::types::PyWeakrefReference;
use torchtpu_engine::ir::DType;
use torchtpu_runtime::Buffer;

use super::cache::{self, Entry, Lookup, Pending, Recipe, Results, Source, Write, PENDING};
use super::key::{self, Arg, Flat, Leaf, Scalar, Written};
use super::slot::Slot;
use super::{Answer, Made};
use crate::device::DeviceBuffer;
use crate::{default_engine, engine_error};

/// Whether the programs being built check their indices (`_programs.use_checks`): part of the
/// key, as the Python path keeps programs per setting.
pub static CHECKS: AtomicBool = AtomicBool::new(true);

pub fn call(py: Python<'_>, op: u64, name: &CStr, args: &[Arg<'_, '_>]) -> PyResult<Answer> {
    let Some(flat) = key::flatten(op, CHECKS.load(Ordering::Relaxed), args) else {
        return Ok(Answer::Skip);
    };
    if flat.device.is_none() {
        return Ok(Answer::Skip); // no tpu tensor to say where it runs: factories stay in Python
    }
    let float_bits: Vec<u64> = flat.floats.iter().map(|f| f.to_bits()).collect();
    let (recipe, baked) = match cache::lookup(&flat.key) {
        Some(Lookup::Run(r)) => (Some(r), false),
        Some(Lookup::Python) => return Ok(Answer::Skip),
        Some(Lookup::Baked) => match cache::lookup(&cache::with_values(&flat.key, &float_bits)) {
            Some(Lookup::Run(r)) => (Some(r), true),
            Some(Lookup::Python) => return Ok(Answer::Skip),
            _ => (None, true),
        },
        None => (None, false),
    };
    let Some(recipe) = recipe else {
        cache::with(|c| c.misses += 1);
        let pending = Pending {
            key: flat.key,
            baked,
            name: name.to_string_lossy().into_owned(),
            n_leaves: flat.leaves.len(),
            float_bits,
            learnt: false,
        };
        PENDING.with(|p| p.borrow_mut().push(pending));
        return Ok(Answer::Miss);
    };
    let made = launch(py, &recipe, &flat)?;
    if made.is_some() {
        cache::with(|c| c.hits += 1);
    }
    Ok(made.map_or(Answer::Skip, Answer::Hit))
}

/// Ends the innermost pending call: a key the Python path gave no recipe for is its from now on.
pub fn done() {
    if let Some(top) = PENDING.with(|p| p.borrow_mut().pop()) {
        if !top.learnt {
            // A baked op's other values keep their recipes: only these values are Python's.
            let key = if top.baked { cache::with_values(&top.key, &top.float_bits) } else { top.key };
            cache::insert(key, Entry::Python);
            cache::with(|c| c.python += 1);
        }
    }
}

/// `dst.copy_(src)` where it is only a buffer's reuse (buffers are immutable): both tpu tensors
/// on one device, one dtype and shape, both all of their storage, neither conjugate nor negative
/// view, `src` computed. Returns whether it did it (else the Python kernel does the copy).
pub fn copy(py: Python<'_>, dst: &Arg<'_, '_>, src: &Arg<'_, '_>) -> bool {
    let (Arg::Tensor(d), Arg::Tensor(s)) = (dst, src) else { return false };
    let (Some(dslot), Some(sslot)) = (&d.slot, &s.slot) else { return false };
    if d.dtype != s.dtype || d.sizes != s.sizes || d.device != s.device || d.conj || d.neg || s.conj || s.neg {
        return false;
    }
    let whole = |t: &key::TensorArg<'_, '_>, slot: &Slot| {
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
        let Ok(b) = sref.buffer.bind(py).cast::<DeviceBuffer>() else { return false };
        if b.get().donated_now() {
            return false;
        }
        b.clone().unbind()
    };
    if dslot.is(sslot) {
        return true; // a storage copied onto itself
    }
    let mut dref = dslot.borrow_mut();
    if !whole(d, &dref) {
        return false;
    }
    dref.buffer = buffer.into_any();
    dref.shape = d.sizes.to_vec();
    true
}

/// Whether `strides` are row-major for `sizes` (PyTorch's rule: size-1 dims may have any stride).
fn contiguous(sizes: &[i64], strides: &[i64]) -> bool {
    let mut expected = 1;
    for (&n, &s) in sizes.iter().zip(strides).rev() {
        if n != 1 && s != expected {
            return false;
        }
        expected *= n.max(1);
    }
    true
}

/// What `learn` is told by the Python path (`torchtpu.device._native.learn`).
pub struct Learnt {
    pub program: Py<crate::Program>,
    pub sources: Vec<Source>,
    pub leaf_dtypes: Vec<Option<DType>>,
    pub n_floats: usize,
    pub baked: bool,
    pub results: Results,
}

/// Binds `learnt` to the pending key of the call of `name` now in Python, if that call is the
/// innermost pending one and its leaves are the ones the recipe reads. Returns whether it did.
pub fn learn(name: &str, learnt: Learnt) -> bool {
    PENDING.with(|p| {
        let mut p = p.borrow_mut();
        let Some(top) = p.last_mut() else { return false };
        let floats_match = if learnt.baked { learnt.n_floats == 0 } else { learnt.n_floats == top.float_bits.len() };
        if top.learnt || top.name != name || top.n_leaves != learnt.leaf_dtypes.len() || !floats_match {
            return false;
        }
        top.learnt = true;
        let recipe = Entry::Run(Arc::new(Recipe {
            program: learnt.program,
            sources: learnt.sources,
            leaf_dtypes: learnt.leaf_dtypes,
            n_floats: learnt.n_floats,
            results: learnt.results,
        }));
        if learnt.baked {
            cache::insert(top.key.clone(), Entry::Baked);
            cache::insert(cache::with_values(&top.key, &top.float_bits), recipe);
        } else {
            cache::insert(top.key.clone(), recipe);
        }
        cache::with(|c| c.learnt += 1);
        true
    })
}

/// Runs `recipe` on the call's leaves; None where this call cannot (a constant on another
/// device): the Python path runs it.
fn launch(py: Python<'_>, recipe: &Recipe, flat: &Flat<'_, '_>) -> PyResult<Option<Vec<Made>>> {
    let device = flat.device.unwrap_or(0);
    let n_leaves = flat.leaves.len();
    if recipe.n_floats != 0 && recipe.n_floats != flat.floats.len() {
        return Ok(None);
    }
    let mut scalars: Vec<Bound<'_, DeviceBuffer>> = Vec::new();
    let mut inputs: Vec<&Buffer> = Vec::with_capacity(recipe.sources.len());
    // Scalars first, so that `inputs` can borrow every buffer afterwards.
    for source in &recipe.sources {
        match source {
            Source::Leaf(i) if *i < n_leaves => {
                if let Leaf::Cpu(v) = &flat.leaves[*i] {
                    let Some(dtype) = recipe.leaf_dtypes[*i] else { return Ok(None) };
                    match scalar_buffer(py, dtype, v, device)? {
                        Some(b) => scalars.push(b),
                        None => return Ok(None),
                    }
                }
            }
            Source::Leaf(i) => {
                let Some(&f) = flat.floats.get(*i - n_leaves) else { return Ok(None) };
                match scalar_buffer(py, DType::F64, &Scalar::Float(f), device)? {
                    Some(b) => scalars.push(b),
                    None => return Ok(None),
                }
            }
            Source::Const(b) => {
                if b.get().device != device {
                    return Ok(None);
                }
            }
        }
    }
    let mut next_scalar = scalars.iter();
    for source in &recipe.sources {
        let buffer = match source {
            Source::Leaf(i) if *i < n_leaves => match &flat.leaves[*i] {
                Leaf::Device { buffer } => &buffer.get().buffer,
                Leaf::Cpu(_) => &next_scalar.next().expect("one scalar per CPU leaf").get().buffer,
            },
            Source::Leaf(_) => &next_scalar.next().expect("one scalar per float").get().buffer,
            Source::Const(b) => &b.get().buffer,
        };
        inputs.push(buffer);
    }
    let targets: &[Written<'_, '_>] = match &recipe.results {
        Results::New(_) => &[],
        Results::InPlace(_) => &flat.tensors,
        Results::Out(_) => &flat.outs,
    };
    if let Results::InPlace(writes) | Results::Out(writes) = &recipe.results {
        // A view's write reads its storage's buffer: it must be there before anything runs.
        for (w, t) in writes.iter().zip(targets) {
            if matches!(w, Write::Strided(_)) && t.slot.borrow().buffer.bind(py).cast::<DeviceBuffer>().is_err() {
                return Ok(None);
            }
        }
    }
    let buffers = execute(py, &recipe.program.get().compiled, &inputs, device)?;
    let mut made = Vec::new();
    match &recipe.results {
        Results::New(types) => {
            for (buffer, t) in buffers.into_iter().zip(types) {
                let slot = Slot::new(
                    buffer.into_any().unbind(),
                    t.shape.clone(),
                    t.dtype.clone_ref(py),
                    t.code,
                    device as i64,
                );
                made.push(Made { slot: Py::new(py, slot)?, code: t.code, shape: t.shape.clone(), device });
            }
        }
        Results::InPlace(writes) | Results::Out(writes) => {
            for ((buffer, target), w) in buffers.into_iter().zip(targets).zip(writes) {
                write(py, w, buffer, target, device)?;
            }
        }
    }
    Ok(Some(made))
}

/// Writes `result` into `target`'s storage (one after another: two targets may share one).
fn write(
    py: Python<'_>,
    w: &Write,
    result: Bound<'_, DeviceBuffer>,
    target: &Written<'_, '_>,
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
            execute(py, &scatter.get().compiled, &inputs, device)?.remove(0)
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
    let engine = default_engine(py)?;
    let on = engine.device(device).map_err(|e| engine_error(py, &e))?;
    let outs = py.detach(|| compiled.execute_buffers_on(inputs, &[], false, on)).map_err(|e| engine_error(py, &e))?;
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

fn scalar_buffer<'py>(
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
