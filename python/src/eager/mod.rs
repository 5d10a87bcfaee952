//! The eager `tpu` device's per-op path: its Python side (docs/eager.md, "How an op runs"). What
//! needs no Python (the program key, the recipe cache, the calls waiting for a recipe, the
//! per-thread mode, the region key) is the `torchtpu_eager` crate, with its tests; this module
//! marshals the shim's records and the Python path's objects for it and launches what it keeps.
//!
//! The dispatcher shim (`python/torchtpu/csrc/dispatch.cpp`) hands every non-view op that reaches
//! the tpu device here as argument records. `key` builds its program key and leaves; `cache`
//! holds, per key, a recipe: the compiled one-op program, where each input comes from and what
//! the results become; `path` launches it on the leaves' device buffers and makes or writes the
//! result slots (`slot`). A key without a recipe is a miss: the Python path
//! (`torchtpu.device._dispatch`) traces and compiles the op as before, and then tells `learn`
//! how it ran, so the next call with that key stays native. `abi` is the C ABI the shim calls.

mod abi;
mod cache;
mod cut;
mod defer;
mod key;
mod path;
mod slot;

use pyo3::prelude::*;
use pyo3::types::PyDict;
use torchtpu_eager::mode::{self, Mode};
use torchtpu_eager::{donation, schema};
use torchtpu_engine::DType;

pub use slot::{scalar_type_code, Slot};

use crate::device::DeviceBuffer;
use crate::{py_error, Program};
use cache::{OutType, Recipe, Recordable, Results, Source, Write};

/// What the native path did with a call.
pub enum Answer {
    /// Ran: the new tensors' slots (written targets are done).
    Hit(Vec<Made>),
    /// No recipe yet: a pending key waits for the Python path's `learn`.
    Miss,
    /// Not a call the native path takes: the Python path runs it.
    Skip,
}

/// A result tensor for the shim to make.
pub struct Made {
    pub slot: Py<Slot>,
    pub code: i32,
    pub shape: Vec<i64>,
    pub device: usize,
}

/// The ABI table for the shim (`torchtpu._device_shim.install_native`).
#[pyfunction]
fn eager_native_api(py: Python<'_>) -> PyResult<Bound<'_, pyo3::types::PyCapsule>> {
    abi::capsule(py)
}

/// Binds how the Python path just ran the call of `name` to that call's pending key (see
/// `torchtpu.device._dispatch._teach_native`): `program` (the `_programs.Program`: its executable, if
/// compiled yet, and where it was traced, what DeferAndFuse records), `sources` (per
/// input: ("leaf", i) or ("const", DeviceBuffer)), `leaf_dtypes` (per tensor leaf: None for a tpu
/// tensor, the IR dtype a CPU scalar is uploaded as), `n_floats` (float inputs after the
/// leaves), `baked` (floats are attributes, kept per value), `kind` ("new", "inplace", "out")
/// and `results` (for "new": (torch dtype, ScalarType code, shape) per result; for "inplace" and
/// "out": per target, how it is written, `writes`). Returns whether it was bound.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn eager_learn(
    py: Python<'_>,
    name: &str,
    program: Bound<'_, PyAny>,
    sources: Vec<(String, Bound<'_, PyAny>)>,
    leaf_dtypes: Vec<Option<String>>,
    n_floats: usize,
    baked: bool,
    kind: &str,
    results: Bound<'_, PyAny>,
) -> PyResult<bool> {
    let bad = |why: String| py_error(py, "internal", &format!("eager_learn({name}): {why}"), &[]);
    let sources = sources
        .into_iter()
        .map(|(kind, v)| match kind.as_str() {
            "leaf" => Ok(Source::Leaf(v.extract()?)),
            "const" => Ok(Source::Const(v.cast_into::<DeviceBuffer>()?.unbind())),
            other => Err(bad(format!("source kind {other}"))),
        })
        .collect::<PyResult<Vec<_>>>()?;
    let leaf_dtypes = leaf_dtypes
        .into_iter()
        .map(|d| d.map(|n| DType::from_name(&n).ok_or_else(|| bad(format!("dtype {n}")))).transpose())
        .collect::<PyResult<Vec<_>>>()?;
    let results = match kind {
        "new" => {
            let list: Vec<(Bound<'_, PyAny>, i32, Vec<i64>)> = results.extract()?;
            Results::New(
                list.into_iter().map(|(dtype, code, shape)| OutType { dtype: dtype.unbind(), code, shape }).collect(),
            )
        }
        "inplace" => Results::InPlace(writes(results)?),
        "out" => Results::Out(writes(results)?),
        other => return Err(bad(format!("kind {other}"))),
    };
    let compiled: Option<Py<Program>> = program.getattr("_compiled")?.extract()?;
    let record = if program.getattr("gm")?.is_none() {
        None // written by hand, not traced: it runs even while recording
    } else {
        Some(Recordable {
            serial: program.getattr("serial")?.extract()?,
            nbytes: program.getattr("ir_nbytes")?.extract()?,
        })
    };
    let checks = Some(program.getattr("checks")?).filter(|c| !c.is_none()).map(Bound::unbind);
    let compiled_once = pyo3::sync::PyOnceLock::new();
    if let Some(c) = compiled {
        let _ = compiled_once.set(py, c);
    }
    let recipe = Recipe {
        program: program.unbind(),
        compiled: compiled_once,
        donating: pyo3::sync::PyOnceLock::new(),
        record,
        checks,
        sources,
        leaf_dtypes,
        n_floats,
        results,
    };
    Ok(path::learn(name, recipe, baked))
}

/// Per target: "whole", "base", or ("strided", the scatter's `_programs.Program`).
fn writes(results: Bound<'_, PyAny>) -> PyResult<Vec<Write>> {
    let list: Vec<(String, Option<Bound<'_, PyAny>>)> = results.extract()?;
    list.into_iter()
        .map(|(kind, program)| match (kind.as_str(), program) {
            ("whole", _) => Ok(Write::Whole),
            ("base", _) => Ok(Write::Base),
            ("strided", Some(p)) => Ok(Write::Strided(cache::Scatter {
                program: p.getattr("program")?.cast_into::<Program>()?.unbind(),
                text: p.getattr("text")?.extract()?,
                donating: pyo3::sync::PyOnceLock::new(),
            })),
            (other, _) => Err(pyo3::exceptions::PyValueError::new_err(format!("eager_learn: write {other}"))),
        })
        .collect()
}

/// Forgets every recipe and uploaded scalar (`torchtpu.device._programs.clear`).
#[pyfunction]
fn eager_native_clear() {
    cache::with(|c| c.clear());
    path::clear_scalars();
}

/// Whether index checks are on for the programs built from now on (part of the key).
#[pyfunction]
fn eager_native_checks(on: bool) {
    mode::set_checks(on);
}

/// Sets the calling thread's mode to the one named `name` (`torchtpu_eager::mode`, its one copy),
/// or with `default`, the mode of threads that never set theirs.
#[pyfunction]
#[pyo3(signature = (name, default = false))]
fn eager_set_mode(name: &str, default: bool) -> PyResult<()> {
    let Some(m) = Mode::from_name(name) else {
        let names: Vec<&str> = Mode::ALL.iter().map(|m| m.name()).collect();
        return Err(pyo3::exceptions::PyValueError::new_err(format!(
            "unknown eager mode {name:?}: expected one of {names:?}"
        )));
    };
    if default {
        mode::set_default(m);
    } else {
        mode::set(m);
    }
    Ok(())
}

/// The calling thread's mode's name.
#[pyfunction]
fn eager_mode() -> &'static str {
    mode::current().name()
}

/// An op's schema classified (`torchtpu_eager::schema`): each argument and return as (aliased,
/// alias set, writes, keyword-only); gives (kind's name, written arguments, per return the
/// argument it is or None).
#[pyfunction]
#[allow(clippy::type_complexity)]
fn eager_classify(
    args: Vec<(bool, String, bool, bool)>,
    returns: Vec<(bool, String, bool, bool)>,
) -> (&'static str, Vec<usize>, Vec<Option<usize>>) {
    let param = |(aliased, alias, writes, kwarg_only)| schema::Param { aliased, alias, writes, kwarg_only };
    let args: Vec<schema::Param> = args.into_iter().map(param).collect();
    let returns: Vec<schema::Param> = returns.into_iter().map(param).collect();
    let c = schema::classify(&args, &returns);
    (c.kind.name(), c.written, c.return_alias)
}

/// The program inputs an in-place or out= op donates (`torchtpu_eager::donation`), from the
/// Python path's targets: (replaces its storage's buffer, the inputs reading it, its bytes, its
/// other holders) each.
#[pyfunction]
fn eager_donations(targets: Vec<(bool, Vec<usize>, usize, usize)>) -> Vec<usize> {
    let targets: Vec<donation::Target> = targets
        .into_iter()
        .map(|(replaces_buffer, read_by, nbytes, other_holders)| donation::Target {
            replaces_buffer,
            read_by,
            nbytes,
            other_holders,
        })
        .collect();
    donation::donations(&targets, donation::min_bytes())
}

/// Every mode's name, the default's first.
#[pyfunction]
fn eager_modes() -> Vec<&'static str> {
    Mode::ALL.iter().map(|m| m.name()).collect()
}

/// The 0-d buffer of `value` as IR dtype `dtype` on tpu:`device`, from the cache both paths
/// share (so a number one op uploads is the same external buffer, recorded once, for the next);
/// None for a dtype the cache does not hold.
#[pyfunction]
fn eager_scalar(
    py: Python<'_>,
    dtype: &str,
    value: Bound<'_, PyAny>,
    device: usize,
) -> PyResult<Option<Py<DeviceBuffer>>> {
    let Some(dtype) = DType::from_name(dtype) else { return Ok(None) };
    let value = if let Ok(f) = value.cast::<pyo3::types::PyFloat>() {
        key::Scalar::Float(f.value())
    } else if let Ok(i) = value.extract::<i64>() {
        key::Scalar::Int(i)
    } else {
        return Ok(None); // an int past i64, a complex number
    };
    Ok(path::scalar_buffer(py, dtype, &value, device)?.map(Bound::unbind))
}

/// Zeros of ScalarType `code` and `shape` on tpu:`device`, uploaded, as the native path gives a
/// small unwritten storage; None past its size limit.
#[pyfunction]
fn eager_zeros(py: Python<'_>, code: i32, shape: Vec<i64>, device: usize) -> PyResult<Option<Py<DeviceBuffer>>> {
    Ok(path::zeros(py, code, &shape, device)?.map(Bound::unbind))
}

/// Waits for the native path's last execution (`torch.tpu.synchronize`).
#[pyfunction]
fn eager_native_wait(py: Python<'_>) -> PyResult<()> {
    path::wait_last(py)
}

/// The native key the innermost call that missed on this thread waits for a recipe under (with
/// its floats' values where `baked`), or None: a diagnostic, for the test that one native key
/// never stands for two of the Python path's keys.
#[pyfunction]
#[pyo3(signature = (baked = false))]
fn eager_waiting_key(baked: bool) -> Option<Vec<i64>> {
    torchtpu_eager::calls::waiting_key(baked)
}

/// The native path's counters: hits, misses, recipes learnt, keys left to Python, keys kept,
/// cache resets, the limit.
#[pyfunction]
fn eager_native_stats(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let d = PyDict::new(py);
    let (counters, keys, limit) = cache::with(|c| (c.counters, c.len(), c.limit()));
    d.set_item("hits", counters.hits)?;
    d.set_item("misses", counters.misses)?;
    d.set_item("learnt", counters.learnt)?;
    d.set_item("python", counters.python)?;
    d.set_item("keys", keys)?;
    d.set_item("resets", counters.resets)?;
    d.set_item("donated", counters.donated)?;
    d.set_item("limit", limit)?;
    Ok(d)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Slot>()?;
    m.add_class::<defer::Pending>()?;
    m.add_class::<defer::Region>()?;
    m.add_function(wrap_pyfunction!(defer::defer_record, m)?)?;
    m.add_function(wrap_pyfunction!(cut::defer_cut, m)?)?;
    m.add_function(wrap_pyfunction!(path::eager_donate_min_bytes, m)?)?;
    m.add_function(wrap_pyfunction!(path::eager_set_donate_min_bytes, m)?)?;
    m.add_function(wrap_pyfunction!(cut::defer_run, m)?)?;
    m.add_function(wrap_pyfunction!(cut::defer_keep, m)?)?;
    m.add_function(wrap_pyfunction!(cut::defer_forget, m)?)?;
    m.add_function(wrap_pyfunction!(cut::defer_key_id, m)?)?;
    m.add_function(wrap_pyfunction!(eager_set_mode, m)?)?;
    m.add_function(wrap_pyfunction!(eager_mode, m)?)?;
    m.add_function(wrap_pyfunction!(eager_modes, m)?)?;
    m.add_function(wrap_pyfunction!(eager_classify, m)?)?;
    m.add_function(wrap_pyfunction!(eager_donations, m)?)?;
    m.add_function(wrap_pyfunction!(eager_scalar, m)?)?;
    m.add_function(wrap_pyfunction!(eager_zeros, m)?)?;
    m.add_function(wrap_pyfunction!(eager_native_api, m)?)?;
    m.add_function(wrap_pyfunction!(eager_learn, m)?)?;
    m.add_function(wrap_pyfunction!(eager_native_clear, m)?)?;
    m.add_function(wrap_pyfunction!(eager_native_checks, m)?)?;
    m.add_function(wrap_pyfunction!(eager_native_wait, m)?)?;
    m.add_function(wrap_pyfunction!(eager_native_stats, m)?)?;
    m.add_function(wrap_pyfunction!(eager_waiting_key, m)?)?;
    Ok(())
}
