//! The engine's answer to the compiler's `ChooseKernel`: for each matmul shape, XLA's dot and
//! ATen's GEMM (`torchtpu_aten_matmul_*`) are each compiled as a one-op program and timed on
//! this platform, interleaved, on the shape itself; the faster (by its fastest run) is kept for the process (and
//! with every program lowered from it, in the graph cache). The two results are compared too:
//! a kernel that disagrees with XLA's dot is never chosen. Choices are listed by `choices()`
//! (`torchtpu.stats()["kernel_choices"]`).

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use half::{bf16, f16};
use serde::{Deserialize, Serialize};
use torchtpu_compiler::driver::Compiled;
use torchtpu_compiler::driver::{self, Format};
use torchtpu_compiler::ir::{DType, Dim, Graph, OpName, TensorType, Value};
use torchtpu_compiler::registry::attrs::matmul_form::{ATEN, XLA};
use torchtpu_compiler::registry::attrs::{FORM, TRANSPOSE_A, TRANSPOSE_B};
use torchtpu_compiler::target::{ChooseKernel, MatmulShape};
use torchtpu_runtime::{Buffer, Client, CompileOptions, Executable};

use crate::program::element_type;
use crate::Options;

/// How long the timed runs of one variant take in all, at most (after one warm-up run).
const BUDGET: Duration = Duration::from_millis(30);
/// How long the timed runs of a whole program's two forms take in all, at most.
const PROGRAM_BUDGET: Duration = Duration::from_millis(200);
/// Timed runs per variant: at least, at most.
const RUNS: (usize, usize) = (3, 25);
/// Largest relative difference between the two kernels' results (max |d| / max |xla|) for
/// ATen's to be eligible: f32 sums in another order, bf16's 8-bit mantissa.
const AGREEMENT: f64 = 5e-2;

/// One shape's measurement.
#[derive(Clone, Debug)]
pub struct Measurement {
    pub shape: MatmulShape,
    /// Fastest seconds per run of each kernel's program (the lower envelope: on a shared
    /// machine a run that lost its core says nothing about the kernel).
    pub xla_seconds: f64,
    pub aten_seconds: f64,
    /// ATen's was chosen.
    pub aten: bool,
    /// Why XLA's was kept without a race (a failure), if so.
    pub note: Option<String>,
}

/// One program's measurement: lowered with ATen's kernels where they won alone, against all
/// XLA's, on the real shapes. Kept with the program in the graph cache (`GraphAnalyses`), so a
/// later process that finds the program there lists the choice too (`note_cached`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProgramMeasurement {
    pub graph: String,
    pub xla_seconds: f64,
    pub aten_seconds: f64,
    pub aten: bool,
    pub note: Option<String>,
}

pub struct MeasuredKernels {
    client: Client,
    measured: Mutex<BTreeMap<MatmulShape, Measurement>>,
    programs: Mutex<Vec<ProgramMeasurement>>,
    /// Race outcomes by `race_key`.
    raced: Mutex<HashMap<u64, ProgramMeasurement>>,
}

// The graph cache key holds the target's Debug: one stable name, not the measurements.
impl std::fmt::Debug for MeasuredKernels {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MeasuredKernels")
    }
}

thread_local! {
    // The probes' own driver: the chooser runs inside a pass, under the thread's main driver.
    static PROBE_DRIVER: RefCell<Option<driver::Context>> = const { RefCell::new(None) };
}

impl MeasuredKernels {
    pub fn new(client: Client) -> MeasuredKernels {
        MeasuredKernels { client, measured: Mutex::default(), programs: Mutex::default(), raced: Mutex::default() }
    }

    /// Every shape measured so far, in shape order.
    pub fn choices(&self) -> Vec<Measurement> {
        self.measured.lock().unwrap_or_else(|p| p.into_inner()).values().cloned().collect()
    }

    /// Every program measured so far, in order.
    pub fn programs(&self) -> Vec<ProgramMeasurement> {
        self.programs.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Whether `with_aten` (a graph lowered with ATen's kernels where each product won alone)
    /// runs faster than `all_xla` (the same graph with XLA's dot everywhere): both compiled as
    /// the engine compiles (portable, with the graph's XLA options; outside the executable cache) and
    /// run interleaved on zero-filled inputs of the graph's types, fastest runs compared.
    /// A product's own race misses what the whole program pays: fusions XLA can no longer make
    /// around a custom call, and ATen's time on one thread. On any failure, XLA's is kept.
    /// A race is decided once per pair of modules (and XLA options): the same graph lowered again
    /// (a graph-cache miss, e.g. under another name) gets the same program, not a re-run race.
    /// Returns the race's measurement; its `aten` says which program to keep.
    pub fn keep_host_kernels(
        &self,
        with_aten: &Compiled,
        all_xla: &Compiled,
        options: &Options,
        name: &str,
    ) -> ProgramMeasurement {
        let key = race_key(with_aten, all_xla, options);
        if let Some(m) = self.raced.lock().unwrap_or_else(|p| p.into_inner()).get(&key) {
            return m.clone();
        }
        let m = match self.race(with_aten, all_xla, options) {
            Ok((aten_seconds, xla_seconds)) => ProgramMeasurement {
                graph: name.to_string(),
                xla_seconds,
                aten_seconds,
                aten: aten_seconds < xla_seconds,
                note: None,
            },
            Err(why) => ProgramMeasurement {
                graph: name.to_string(),
                xla_seconds: f64::NAN,
                aten_seconds: f64::NAN,
                aten: false,
                note: Some(format!("not measured: {why}")),
            },
        };
        self.programs.lock().unwrap_or_else(|p| p.into_inner()).push(m.clone());
        self.raced.lock().unwrap_or_else(|p| p.into_inner()).insert(key, m.clone());
        m
    }

    /// Lists the race of a program found in the graph cache (`m`, measured when it was
    /// compiled, perhaps by another process) under `name`, the graph that found it; once per
    /// name and measurement.
    pub fn note_cached(&self, name: &str, m: &ProgramMeasurement) {
        let cached = ProgramMeasurement {
            graph: name.to_string(),
            note: Some(format!("found in the graph cache; raced when {} was compiled", m.graph)),
            ..m.clone()
        };
        let mut programs = self.programs.lock().unwrap_or_else(|p| p.into_inner());
        if !programs.contains(&cached) {
            programs.push(cached);
        }
    }

    fn race(&self, with_aten: &Compiled, all_xla: &Compiled, options: &Options) -> Result<(f64, f64), String> {
        // Compiled here, outside the executable cache: the loser must not be stored, and the
        // engine compiles the winner through the cache as it compiles every program.
        let compile_options = CompileOptions::portable().with_xla_options(options.xla_options.clone());
        let exe = |c: &Compiled, label: &str| -> Result<Executable, String> {
            let code = &c.hlo.as_ref().ok_or("no module")?.code;
            let exe = self.client.compile_bytes(code, &compile_options).map_err(|e| e.to_string())?;
            exe.set_label(label);
            Ok(exe)
        };
        let (aten, xla) = (exe(with_aten, "kernel race: with ATen")?, exe(all_xla, "kernel race: all XLA")?);
        let device = self.client.first_device().map_err(|e| e.to_string())?;
        let g = &with_aten.graph;
        let inputs = g
            .inputs()
            .iter()
            .map(|&i| {
                let ty = &g.node(i).results[0];
                let dims = ty.static_dims().ok_or("an input of symbolic shape")?;
                let bytes = vec![0u8; dims.iter().product::<i64>() as usize * ty.dtype.size_bytes()];
                self.client.buffer_from_host(&bytes, element_type(ty.dtype), &dims, &device).map_err(|e| e.to_string())
            })
            .collect::<Result<Vec<Buffer>, String>>()?;
        let args: Vec<&Buffer> = inputs.iter().collect();
        let keep: Vec<i64> = (0..args.len() as i64).collect();
        let run = |e: &Executable| -> Result<f64, String> {
            let t = Instant::now();
            e.execute_on(&args, &keep, &device, true).map_err(|e| e.to_string())?;
            Ok(t.elapsed().as_secs_f64())
        };
        let first = run(&aten)?.max(run(&xla)?);
        let rounds = ((PROGRAM_BUDGET.as_secs_f64() / 2.0 / first.max(1e-6)) as usize).clamp(RUNS.0, RUNS.1);
        let (mut a, mut x) = (f64::INFINITY, f64::INFINITY);
        for _ in 0..rounds {
            a = a.min(run(&aten)?);
            x = x.min(run(&xla)?);
        }
        Ok((a, x))
    }

    fn measure(&self, shape: &MatmulShape) -> Result<Measurement, String> {
        let xla = self.program(shape, XLA)?;
        let aten = self.program(shape, ATEN)?;
        let [da, db, _] = shape.dims();
        let device = self.client.first_device().map_err(|e| e.to_string())?;
        let ty = element_type(shape.dtype);
        let input = |dims: &[i64], seed: usize| -> Result<Buffer, String> {
            let bytes = sample_bytes(shape, dims.iter().product::<i64>() as usize, seed);
            self.client.buffer_from_host(&bytes, ty, dims, &device).map_err(|e| e.to_string())
        };
        let (a, b) = (input(&da, 1)?, input(&db, 2)?);
        let run = |exe: &Executable| -> Result<(Duration, Vec<Buffer>), String> {
            let t = Instant::now();
            let out = exe.execute(&[&a, &b]).map_err(|e| e.to_string())?;
            Ok((t.elapsed(), out))
        };
        // Warm-up (first-run costs), then the results compared.
        let (x1, xo) = run(&xla)?;
        let (a1, ao) = run(&aten)?;
        let difference = relative_difference(shape, &xo[0], &ao[0])?;
        let runs = (BUDGET.as_secs_f64() / x1.max(a1).as_secs_f64().max(1e-6)) as usize;
        let (mut xs, mut ats) = (Vec::new(), Vec::new());
        for _ in 0..runs.clamp(RUNS.0, RUNS.1) {
            xs.push(run(&xla)?.0.as_secs_f64());
            ats.push(run(&aten)?.0.as_secs_f64());
        }
        let (xla_seconds, aten_seconds) = (fastest(&xs), fastest(&ats));
        let agrees = difference <= AGREEMENT;
        Ok(Measurement {
            shape: *shape,
            xla_seconds,
            aten_seconds,
            aten: agrees && aten_seconds < xla_seconds,
            note: (!agrees).then(|| format!("ATen's result differs from XLA's by {difference:.2e} (relative)")),
        })
    }

    /// `shape` alone as a program in `form`.
    fn program(&self, shape: &MatmulShape, form: &str) -> Result<Executable, String> {
        let [da, db, dout] = shape.dims();
        let ty = |d: &[i64]| TensorType::new(shape.dtype, d.iter().map(|&x| Dim::Static(x)).collect());
        let mut g = Graph::new("kernel_probe");
        let (a, b) = (g.add_input(ty(&da)), g.add_input(ty(&db)));
        let attrs =
            [TRANSPOSE_A.entry(shape.transpose_a), TRANSPOSE_B.entry(shape.transpose_b), FORM.entry(form.to_string())];
        let op = g.add_op(OpName::new("tpu", "matmul", None), vec![a, b], attrs.into_iter().collect(), vec![ty(&dout)]);
        g.set_outputs(vec![Value::new(op, 0)]);
        let options = driver::Options {
            pipeline: String::new(),
            donate_inputs: false,
            analyze: false,
            emit: Some(Format::Bytecode),
            ..driver::Options::default()
        };
        let compiled = PROBE_DRIVER.with(|d| {
            let mut d = d.borrow_mut();
            d.get_or_insert_with(driver::Context::new).compile_graph(g, &options, &mut std::io::sink())
        });
        let code = compiled.map_err(|e| e.to_string())?.hlo.ok_or("no module")?.code;
        let exe = self.client.compile_bytes(&code, &CompileOptions::default()).map_err(|e| e.to_string())?;
        exe.set_label(&format!("kernel choice: matmul {form}"));
        Ok(exe)
    }
}

impl ChooseKernel for MeasuredKernels {
    fn host_matmul(&self, shape: &MatmulShape) -> bool {
        if let Some(m) = self.measured.lock().unwrap_or_else(|p| p.into_inner()).get(shape) {
            return m.aten;
        }
        let m = self.measure(shape).unwrap_or_else(|why| Measurement {
            shape: *shape,
            xla_seconds: f64::NAN,
            aten_seconds: f64::NAN,
            aten: false,
            note: Some(format!("not measured: {why}")),
        });
        let aten = m.aten;
        self.measured.lock().unwrap_or_else(|p| p.into_inner()).insert(*shape, m);
        aten
    }
}

/// The two modules and the XLA options they compile with.
fn race_key(with_aten: &Compiled, all_xla: &Compiled, options: &Options) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    for c in [with_aten, all_xla] {
        c.hlo.as_ref().map(|m| m.code.as_slice()).hash(&mut h);
    }
    format!("{:?}", options.xla_options).hash(&mut h);
    h.finish()
}

fn fastest(xs: &[f64]) -> f64 {
    xs.iter().copied().fold(f64::INFINITY, f64::min)
}

/// Deterministic values in [-1, 1) of the shape's dtype, as bytes.
fn sample_bytes(shape: &MatmulShape, count: usize, seed: usize) -> Vec<u8> {
    let value = |i: usize| ((i * 2654435761 + seed * 40503) % 2000) as f64 / 1000.0 - 1.0;
    let mut out = Vec::with_capacity(count * shape.dtype.size_bytes());
    for v in (0..count).map(value) {
        match shape.dtype {
            DType::F64 => out.extend(v.to_le_bytes()),
            DType::F32 => out.extend((v as f32).to_le_bytes()),
            DType::BF16 => out.extend(bf16::from_f64(v).to_le_bytes()),
            _ => out.extend(f16::from_f64(v).to_le_bytes()),
        }
    }
    out
}

/// max |x - y| / max |x| of two results of the shape's dtype.
fn relative_difference(shape: &MatmulShape, x: &Buffer, y: &Buffer) -> Result<f64, String> {
    let (x, y) = (x.to_host().map_err(|e| e.to_string())?, y.to_host().map_err(|e| e.to_string())?);
    let read = |b: &[u8]| -> Vec<f64> {
        let two = |c: &[u8]| [c[0], c[1]];
        match shape.dtype {
            DType::F64 => b.chunks_exact(8).map(|c| f64::from_le_bytes(c.try_into().unwrap())).collect(),
            DType::F32 => b.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap()) as f64).collect(),
            DType::BF16 => b.chunks_exact(2).map(|c| bf16::from_le_bytes(two(c)).to_f64()).collect(),
            _ => b.chunks_exact(2).map(|c| f16::from_le_bytes(two(c)).to_f64()).collect(),
        }
    };
    let (x, y) = (read(&x), read(&y));
    if x.len() != y.len() {
        return Err(format!("results of {} and {} elements", x.len(), y.len()));
    }
    let scale = x.iter().fold(0f64, |m, v| m.max(v.abs())).max(1e-30);
    let diff = x.iter().zip(&y).fold(0f64, |m, (a, b)| m.max((a - b).abs()));
    Ok(if diff.is_nan() { f64::INFINITY } else { diff / scale })
}
