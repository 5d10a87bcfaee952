//! Compiling a graph: the graph cache, else the compiler driver; then the executable cache,
//! else PJRT. Also the driver itself for callers that only lower (`lower`, `with_driver`).

use std::cell::RefCell;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Instant;
use torchtpu_compiler::driver::{self, fault_injected, DriverError, Timings};
use torchtpu_compiler::ir::{parse_graph, print_graph, Graph, TensorType};
use torchtpu_compiler::lower::{Format, StableHlo};
use torchtpu_runtime::{CompileOptions, XlaOption};

use crate::annotate::annotate;
use crate::graph_cache::{GraphAnalyses, GraphEntry};
use crate::program::{dense_bytes, Spmd};
use crate::{default_engine, graph_key, CompiledGraph, Engine, EngineError, Options, CPU_DEVICES_ENV};

thread_local! {
    // An MLIR context is not thread-safe and costs milliseconds to make: one per thread.
    static DRIVER: RefCell<driver::Context> = RefCell::new(driver::Context::new());
}

/// Runs `f` with this thread's compiler driver (its MLIR context is made once per thread).
pub fn with_driver<R>(f: impl FnOnce(&mut driver::Context) -> R) -> R {
    DRIVER.with(|d| f(&mut d.borrow_mut()))
}

/// Runs the driver on `graph` (passes, analyses, lowering to `format`); no device involved.
pub fn lower(graph: &Graph, options: &Options, format: Format) -> Result<(Graph, StableHlo), EngineError> {
    let c = with_driver(|cx| cx.compile_graph(graph.clone(), &options.driver(Some(format)), &mut std::io::sink()))?;
    let hlo = c.hlo.expect("the driver lowers when asked to emit");
    Ok((c.graph, hlo))
}

/// XLA's switch to its mesh-and-axis sharding representation (HloShardingV3), on by default
/// in the CPU plugin's XLA. PJRT converts an SDY module to HLO in the V2 form (the shardings
/// as `xla.sdy.*` frontend attributes) unless the build options carry debug options saying
/// V3, and ours carry none (a partial `DebugOptions` would replace all of XLA's defaults);
/// Shardy's import then finds V2 attributes with V3 on, warns "HloShardingV3 ... stale model
/// export" on every sharded compile and turns V3 off for the module. SPMD compiles set it off
/// themselves (`env_option_overrides`), so both sides agree on V2 from the start: the same
/// program, without the warning. A plugin whose XLA predates the option refuses it ("No such
/// compile option"); the engine then compiles without it and remembers.
pub const HLO_SHARDING_V3: &str = "xla_enable_hlo_sharding_v3";

impl Engine {
    /// Compiles `graph`: the graph cache (canonical IR + options -> bytecode and the memory
    /// estimate), else the driver (verify, passes, analyses, lowering) once; then the
    /// executable cache (memory, disk), else PJRT. The result says which (`source`,
    /// `graph_cache_hit`) and carries the estimate and the time of each stage.
    pub fn compile(&self, graph: &Graph, options: &Options) -> Result<CompiledGraph, EngineError> {
        self.compile_timed(graph, options, Timings::default())
    }

    /// `compile` from IR text (its parse is timed with the rest).
    pub fn compile_text(&self, text: &str, options: &Options) -> Result<CompiledGraph, EngineError> {
        let mut timings = Timings::default();
        let t = Instant::now();
        let graph = parse_graph(text).map_err(DriverError::Parse)?;
        timings.record("parse", t.elapsed());
        self.compile_timed(&graph, options, timings)
    }

    fn compile_timed(
        &self,
        graph: &Graph,
        options: &Options,
        mut timings: Timings,
    ) -> Result<CompiledGraph, EngineError> {
        let mut options = options.clone();
        options.compiler.target = self.target_for(&options);
        let options = &options;
        let annotated;
        let graph = match &options.mesh {
            None => graph,
            Some(mesh) => {
                let mut g = graph.clone();
                annotate(&mut g, mesh).map_err(EngineError::Sharding)?;
                annotated = g;
                &annotated
            }
        };
        // Faults are injected before the caches that would skip their stage.
        if fault_injected("lower") {
            return Err(DriverError::Injected { stage: "lower" }.into());
        }
        let Lowered { code, analyses: GraphAnalyses { memory, sharding, .. }, graph_cache_hit } =
            self.lowered(graph, options, &mut timings)?;
        let spmd = match &graph.mesh {
            None => None,
            Some(mesh) => {
                let devices = self.client.addressable_devices();
                let n = mesh.devices();
                if n as usize > devices.len() {
                    return Err(EngineError::Sharding(format!(
                        "the {mesh} needs {n} devices but the {} plugin has {} (the CPU plugin's count is set with \
                         {CPU_DEVICES_ENV}=N)",
                        self.client.platform_name(),
                        devices.len()
                    )));
                }
                let plan = sharding.ok_or_else(|| EngineError::Bug {
                    stage: "analyses",
                    message: format!("graph {} has a mesh but no sharding plan", graph.name),
                })?;
                Some(Spmd {
                    plan,
                    devices: devices[..n as usize].to_vec(),
                    last_shapes: Mutex::default(),
                    resident: Mutex::default(),
                })
            }
        };
        if fault_injected("compile") {
            return Err(EngineError::Injected { stage: "compile" });
        }
        let t = Instant::now();
        // SPMD compiles pin XLA's sharding representation to the form PJRT's conversion
        // writes (`HLO_SHARDING_V3`), unless the user set it or the plugin lacks it.
        let pin_v2 = spmd.is_some()
            && !options.xla_options.contains_key(HLO_SHARDING_V3)
            && !self.no_sharding_v3_option.load(Ordering::Relaxed);
        let mut compile_options = match &spmd {
            Some(s) => CompileOptions::spmd(s.devices.len() as i64),
            // Portable: one executable runs on whichever device an execution names.
            None => CompileOptions::portable(),
        };
        if pin_v2 {
            compile_options.xla_options.insert(HLO_SHARDING_V3.into(), XlaOption::Bool(false));
        }
        let mut compile_options = compile_options.with_xla_options(options.xla_options.clone());
        let mut compiled = self.cache.lookup_or_compile(&self.client, &code, &compile_options, Some(&graph.name));
        if pin_v2
            && matches!(&compiled, Err(e) if e.to_string().contains(&format!("No such compile option: '{HLO_SHARDING_V3}'")))
        {
            self.no_sharding_v3_option.store(true, Ordering::Relaxed);
            compile_options.xla_options.remove(HLO_SHARDING_V3);
            compiled = self.cache.lookup_or_compile(&self.client, &code, &compile_options, Some(&graph.name));
        }
        let (exe, source) = compiled.map_err(EngineError::Compile)?;
        timings.record("compile", t.elapsed());
        // The passes keep the signature, so it is the input graph's.
        let inputs: Vec<TensorType> = graph.inputs().iter().map(|&i| graph.node(i).results[0].clone()).collect();
        let outputs: Vec<TensorType> = graph.outputs().iter().map(|&v| graph.value_type(v).clone()).collect();
        let input_bytes = inputs.iter().map(dense_bytes).collect();
        let resident = Mutex::new((0..inputs.len()).map(|_| None).collect());
        Ok(CompiledGraph {
            exe,
            code,
            inputs,
            outputs,
            input_bytes,
            client: self.client.clone(),
            device: self.device.clone(),
            resident,
            source,
            graph_cache_hit,
            memory,
            timings,
            spmd,
        })
    }
}

/// Whether the lowered graph calls one of ATen's kernels (`tpu.matmul {form = "aten"}`).
fn calls_host_matmul(g: &Graph) -> bool {
    use torchtpu_compiler::registry::attrs::{matmul_form, FORM};
    g.petgraph().node_weights().any(|n| {
        n.op().is_some_and(|o| o.is("tpu", "matmul"))
            && matches!(n.attr(FORM), Some(torchtpu_compiler::ir::Attr::Str(f)) if f == matmul_form::ATEN)
    })
}

/// A graph as StableHLO bytecode and its analyses, from the graph cache or the driver
/// (`Engine::lowered`).
pub(crate) struct Lowered {
    pub(crate) code: Arc<Vec<u8>>,
    pub(crate) analyses: GraphAnalyses,
    pub(crate) graph_cache_hit: bool,
}

impl Engine {
    /// The graph cache first: a graph seen before (same canonical IR and options) skips the
    /// passes and the lowering, and its entry keeps every analysis (memory estimate, sharding
    /// plan). Else the driver, once, its result stored. PJRT gets bytecode: about 10x cheaper to write than text.
    pub(crate) fn lowered(
        &self,
        graph: &Graph,
        options: &Options,
        timings: &mut Timings,
    ) -> Result<Lowered, EngineError> {
        let t = Instant::now();
        let key = graph_key(&print_graph(graph), &options.cache_component());
        let usable = |e: &GraphEntry| Some((e.code.clone(), GraphAnalyses::from_meta(&e.meta)?));
        let hit = |code, analyses: GraphAnalyses| {
            if let Some(m) = &analyses.kernel_race {
                self.kernels.note_cached(&graph.name, m);
            }
            Ok(Lowered { code, analyses, graph_cache_hit: true })
        };
        let cached = self.graphs.get_entry(&key).as_ref().and_then(usable);
        if let Some((code, analyses)) = cached {
            timings.record("graph_cache", t.elapsed());
            return hit(code, analyses);
        }
        // Another process (a rank of this host) may be lowering the same graph: wait for its
        // entry, or hold the key's lock until ours is stored (the claim is dropped on return).
        let claim = self.graphs.claim(&key);
        timings.record("graph_cache", t.elapsed());
        if let Some((code, analyses)) = claim.entry().and_then(usable) {
            return hit(code, analyses);
        }
        // A miss, or an entry whose analyses do not read back: lower again and store both.
        let lower = |options: &Options| {
            with_driver(|cx| {
                cx.compile_graph(graph.clone(), &options.driver(Some(Format::Bytecode)), &mut std::io::sink())
            })
        };
        let mut c = lower(options)?;
        let mut kernel_race = None;
        if calls_host_matmul(&c.graph) {
            // ATen's kernels won their products alone; the program is kept only if it beats
            // the all-XLA one on the real shapes too (fusions lost, threads: `kernel_choice.rs`).
            let mut xla = options.clone();
            xla.compiler.target.kernel_choice = None;
            let alternative = lower(&xla)?;
            let race = self.kernels.keep_host_kernels(&c, &alternative, options, &graph.name);
            if !race.aten {
                c = alternative;
            }
            kernel_race = Some(race).filter(|m| m.note.is_none()); // measured (JSON has no NaN)
        }
        let seconds = c.timings.total().as_secs_f64();
        timings.stages.extend(c.timings.stages);
        timings.passes = c.timings.passes;
        let analyses =
            GraphAnalyses { memory: c.analyses.memory.unwrap_or_default(), sharding: c.analyses.sharding, kernel_race };
        let code = c.hlo.expect("the driver lowers when asked to emit").code;
        let entry = self.graphs.put_entry_named(&key, code, &analyses.to_meta(), Some(&graph.name), seconds);
        drop(claim);
        Ok(Lowered { code: entry.code, analyses, graph_cache_hit: false })
    }
}

/// Compiles `graph` with the default pipeline on the default engine.
pub fn compile(graph: &Graph) -> Result<CompiledGraph, EngineError> {
    default_engine()?.compile(graph, &Options::default())
}
