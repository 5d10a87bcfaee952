//! How the native path runs an op it has seen: a `Recipe`, learnt from the Python path's first
//! run of it and kept per key in `torchtpu_eager`'s recipe cache.

use std::sync::Mutex;

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use torchtpu_eager::cache::RecipeCache;
use torchtpu_engine::DType;

use crate::device::DeviceBuffer;
use crate::Program;

/// Where a program input comes from.
pub enum Source {
    /// The i-th leaf: tensor leaves in order, then the floats.
    Leaf(usize),
    /// A constant of the program (a module attribute), on one device.
    Const(Py<DeviceBuffer>),
}

/// A new result tensor: its dtype (torch's and its code) and shape.
pub struct OutType {
    pub dtype: Py<PyAny>,
    pub code: i32,
    pub shape: Vec<i64>,
}

/// How a result is written into a target tensor's storage.
pub enum Write {
    /// The target is its whole storage: the result is the storage's new buffer.
    Whole,
    /// The program scattered the target view's result into its base: the new buffer.
    Base,
    /// The target is a view: this `as_strided_scatter` program puts the result into the
    /// storage's buffer (inputs: the buffer, the result).
    Strided(Scatter),
}

/// A view's `as_strided_scatter` program, and its variant that writes into the storage's
/// buffer donated to it (its output aliased to the buffer), compiled at the first donation.
pub struct Scatter {
    pub program: Py<Program>,
    pub text: String,
    pub donating: PyOnceLock<Py<Program>>,
}

impl Scatter {
    pub fn donating<'a, 'py>(&'a self, py: Python<'py>) -> PyResult<&'a Bound<'py, Program>> {
        let compiled = self.donating.get_or_try_init(py, || compile_donating(py, &self.text))?;
        Ok(compiled.bind(py))
    }
}

/// `text` compiled with its outputs aliased to the inputs of their types (`donate=True`),
/// counted as the Python path counts one-op compiles.
fn compile_donating(py: Python<'_>, text: &str) -> PyResult<Py<Program>> {
    let start = std::time::Instant::now();
    let compiled = Py::new(py, crate::compile_text(py, text, true)?)?;
    let count = py.import("torchtpu.device._programs")?.getattr("_count")?;
    count.call1((compiled.clone_ref(py), start.elapsed().as_secs_f64()))?;
    Ok(compiled)
}

/// What the op's results become.
pub enum Results {
    /// New tensors.
    New(Vec<OutType>),
    /// The first tpu tensors (an in-place op's targets) take the results, in order.
    InPlace(Vec<Write>),
    /// The out= tensors (of the results' shapes) take them, in order.
    Out(Vec<Write>),
}

pub struct Recipe {
    /// The Python path's `_programs.Program`.
    pub program: Py<PyAny>,
    /// Its executable, compiled at the first run (a recipe learnt while recording has none yet).
    pub compiled: PyOnceLock<Py<Program>>,
    /// The same program with its outputs aliased to the inputs of their types (`donate=True`),
    /// compiled at the first run that donates a target's buffer (`path::donations`).
    pub donating: PyOnceLock<Py<Program>>,
    /// Its serial and IR outputs' byte sizes, where DeferAndFuse can record it (a traced program).
    pub record: Option<Recordable>,
    /// Its index checks' sites (`index_checks.Site`s), if it checks indices: then its last IR
    /// output is their flag, which goes to the pending checks (`_checks.add_native`).
    pub checks: Option<Py<PyAny>>,
    pub sources: Vec<Source>,
    /// Per tensor leaf: the dtype its CPU scalar is uploaded as (None: a tpu tensor).
    pub leaf_dtypes: Vec<Option<DType>>,
    pub n_floats: usize,
    pub results: Results,
}

pub struct Recordable {
    pub serial: i64,
    pub nbytes: Vec<usize>,
}

impl Recipe {
    pub fn compiled<'a, 'py>(&'a self, py: Python<'py>) -> PyResult<&'a Bound<'py, Program>> {
        let compiled = self.compiled.get_or_try_init(py, || -> PyResult<Py<Program>> {
            Ok(self.program.bind(py).getattr("program")?.cast_into::<Program>()?.unbind())
        })?;
        Ok(compiled.bind(py))
    }

    /// The donating variant of the program, compiled (and counted as the Python path counts
    /// one-op compiles) at its first use.
    pub fn donating<'a, 'py>(&'a self, py: Python<'py>) -> PyResult<&'a Bound<'py, Program>> {
        let compiled = self.donating.get_or_try_init(py, || -> PyResult<Py<Program>> {
            compile_donating(py, &self.program.bind(py).getattr("text")?.extract::<String>()?)
        })?;
        Ok(compiled.bind(py))
    }
}

/// The recipes, per key (`torchtpu_eager::cache`: what is kept, the limit, the counters).
static CACHE: Mutex<Option<RecipeCache<Recipe>>> = Mutex::new(None);

pub fn with<T>(f: impl FnOnce(&mut RecipeCache<Recipe>) -> T) -> T {
    let mut guard = CACHE.lock().unwrap_or_else(|e| e.into_inner());
    f(guard.get_or_insert_with(RecipeCache::default))
}
