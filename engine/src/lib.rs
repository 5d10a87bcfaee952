//! The end-to-end API: `compile(graph) -> CompiledGraph`, `CompiledGraph::run(inputs)`.
//! It joins the compiler (which knows models, not devices) to the runtime (which knows
//! devices, not models): the compiler driver (passes -> analyses -> StableHLO) behind the
//! graph cache -> PJRT compile (through the executable cache) -> execute on host memory.
//!
//! Module map: `graph_cache` (canonical IR + options -> StableHLO bytecode and its memory
//! estimate, memory and disk), `host` (`HostTensor`), `resident` (input buffers kept between
//! calls), `legality` (the op registry and the per-node legality check, for the backend).
//! The Python extension reaches the compiler only through this crate: `driver`, `ir`,
//! `list_passes` and `supported_ops` are re-exported for it.

mod device;
pub mod distributed;
mod graph_cache;
mod host;
pub mod legality;
mod platform;
mod replicated;
mod resident;
pub mod spmd;

pub use distributed::{configure_distributed, distributed_configuration, engine_started, Distributed};
pub use graph_cache::{graph_key, GraphCache, GraphCacheStats, GraphEntry};
pub use host::HostTensor;
pub use platform::Platform;
pub use replicated::ReplicatedProgram;
pub use torchtpu_compiler::analysis::memory::MemorySummary;
pub use torchtpu_compiler::driver::{self, fault_injected, DriverError, Timings, FAULT_ENV};
pub use torchtpu_compiler::ir;
pub use torchtpu_compiler::passes::DEFAULT_PIPELINE;
pub use torchtpu_runtime::dlpack::TensorView;
pub use torchtpu_runtime::{CacheSource, XlaOption};

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;
use torchtpu_compiler::ir::{parse_graph, print_graph, DType, Graph, TensorType};
use torchtpu_compiler::lower::{Format, LowerError, StableHlo};
use torchtpu_runtime::{
    Buffer, Client, ClientOption, CompileOptions, Device, ElementType, Executable, ExecutableCache, Plugin,
    RuntimeError,
};

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// Parse, verify, passes, analyses or lowering (`DriverError` says which).
    #[error(transparent)]
    Compiler(#[from] DriverError),
    /// The PJRT plugin could not be loaded or its client started.
    #[error("cannot start the PJRT engine: {0}")]
    Plugin(String),
    /// The PJRT plugin refused to compile the lowered module.
    #[error(transparent)]
    Compile(RuntimeError),
    /// The PJRT plugin failed making input buffers, executing, or reading outputs.
    #[error(transparent)]
    Execute(RuntimeError),
    #[error("input {index}: expected {expected}, got {got}")]
    Input { index: usize, expected: String, got: String },
    #[error("expected {expected} inputs, got {got}")]
    Arity { expected: usize, got: usize },
    /// An SPMD program the devices cannot run as asked (a mesh larger than the devices).
    #[error("{0}")]
    Sharding(String),
    /// `TORCHTPU_INJECT_FAULT` named this stage (`compile` or `execute`; `lower` comes as
    /// `DriverError::Injected`).
    #[error("fault injected at stage '{stage}' ({FAULT_ENV})")]
    Injected { stage: &'static str },
}

/// What an error means to a caller deciding between falling back, raising and reporting a
/// bug (the Python extension maps these onto `torchtpu.errors`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// An op, or a form of it, without a lowering (also a tensor over the size limit);
    /// `line`/`col` where the node was written, when the graph came from text.
    Unsupported { op: String, node: String, reason: Option<String>, line: Option<u32>, col: Option<u32> },
    /// PJRT refused to compile.
    Compile,
    /// The plugin is missing, unloadable, of another API version, or its client failed.
    Plugin,
    /// PJRT failed running the program.
    Execution,
    /// The caller's inputs do not match the program (count, dtype, shape, layout, size).
    Input,
    /// A mesh or sharding the devices cannot run (too few devices, a bad layout).
    Sharding,
    /// A bug in torchtpu, or a fault injected at `stage` (parse, verify, passes, analyses,
    /// lower, compile, execute).
    Internal { stage: &'static str },
}

impl EngineError {
    pub fn kind(&self) -> ErrorKind {
        match self {
            EngineError::Compiler(DriverError::Lower(LowerError::Unsupported { op, node, reason, loc })) => {
                ErrorKind::Unsupported {
                    op: op.clone(),
                    node: node.clone(),
                    reason: reason.clone(),
                    line: loc.map(|l| l.line),
                    col: loc.map(|l| l.col),
                }
            }
            EngineError::Compiler(DriverError::Lower(e @ LowerError::TooLarge { op, node, .. })) => {
                let reason = Some(e.to_string());
                ErrorKind::Unsupported { op: op.clone(), node: node.clone(), reason, line: None, col: None }
            }
            EngineError::Compiler(e) => ErrorKind::Internal { stage: e.stage() },
            EngineError::Plugin(_) => ErrorKind::Plugin,
            EngineError::Compile(_) => ErrorKind::Compile,
            EngineError::Execute(_) => ErrorKind::Execution,
            EngineError::Input { .. } | EngineError::Arity { .. } => ErrorKind::Input,
            EngineError::Sharding(_) => ErrorKind::Sharding,
            EngineError::Injected { stage } => ErrorKind::Internal { stage },
        }
    }
}

/// How a graph is compiled.
#[derive(Clone, Debug)]
pub struct Options {
    /// The pass pipeline run before lowering (`torchtpu-opt --pass-pipeline` syntax).
    pub pipeline: String,
    /// Alias outputs to inputs of their type so PJRT donates the input buffers (safe: every
    /// execution copies the caller's memory into fresh device buffers; see
    /// `analysis::memory::donation_pairs`).
    pub donate_inputs: bool,
    /// The largest tensor (value or lowering intermediate) the plugin is asked to compile;
    /// bigger ones are `LowerError::TooLarge` (see `DEFAULT_MAX_TENSOR_BYTES`).
    pub max_tensor_bytes: u64,
    /// What the plugin's partitioner does with layout changes; `Engine::compile` sets it from
    /// the platform (`Platform::sharding_target`).
    pub sharding_target: torchtpu_compiler::sharding::Target,
    /// XLA option overrides for this graph's compile (`CompileOptions::xla_options`).
    pub xla_options: BTreeMap<String, XlaOption>,
}

/// 256 GiB: more than any one device holds, and below what XLA's CPU compiler survives (an
/// elementwise op on 2^39 bytes kills it with SIGFPE; past i64::MAX bytes it throws a C++
/// exception through the C API, which aborts the process). Measured on the CPU plugin 0.11.2.
pub const DEFAULT_MAX_TENSOR_BYTES: u64 = 1 << 38;

impl Options {
    pub fn with_pipeline(pipeline: &str) -> Options {
        Options { pipeline: pipeline.to_string(), ..Options::default() }
    }

    /// The driver's options for these (lowering to `format`; None stops after the analyses).
    pub fn driver(&self, format: Option<Format>) -> driver::Options {
        driver::Options {
            pipeline: self.pipeline.clone(),
            donate_inputs: self.donate_inputs,
            max_tensor_bytes: self.max_tensor_bytes,
            emit: format,
            sharding_target: self.sharding_target,
            ..driver::Options::default()
        }
    }

    /// What of the options the lowered module depends on (part of the graph cache key).
    pub fn cache_component(&self) -> String {
        format!(
            "{};donate_inputs={};max_tensor_bytes={};reduce_scatter={}",
            self.pipeline, self.donate_inputs, self.max_tensor_bytes, self.sharding_target.reduce_scatter
        )
    }
}

impl Default for Options {
    fn default() -> Self {
        Options {
            pipeline: DEFAULT_PIPELINE.to_string(),
            donate_inputs: true,
            max_tensor_bytes: DEFAULT_MAX_TENSOR_BYTES,
            sharding_target: torchtpu_compiler::sharding::Target::default(),
            xla_options: BTreeMap::new(),
        }
    }
}

/// The PJRT element type that carries an IR dtype.
pub fn element_type(d: DType) -> ElementType {
    match d {
        DType::F16 => ElementType::F16,
        DType::BF16 => ElementType::BF16,
        DType::F32 => ElementType::F32,
        DType::F64 => ElementType::F64,
        DType::I8 => ElementType::S8,
        DType::I16 => ElementType::S16,
        DType::I32 => ElementType::S32,
        DType::I64 => ElementType::S64,
        DType::U8 => ElementType::U8,
        DType::Bool => ElementType::Pred,
        DType::C64 => ElementType::C64,
        DType::C128 => ElementType::C128,
    }
}

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

/// `(name, description)` of every registered pass.
pub fn list_passes() -> Vec<(&'static str, &'static str)> {
    torchtpu_compiler::passes::REGISTRY.iter().map(|p| (p.name, p.description)).collect()
}

/// Whether the lowering runs a convolution with these input and kernel spatial dims as
/// patches times a matmul, which reads its weight as given (no weight relayout pays).
pub fn convolution_runs_as_matmul(input_spatial: &[i64], kernel_spatial: &[i64], groups: i64) -> bool {
    torchtpu_compiler::lower::convolution_runs_as_matmul(input_spatial, kernel_spatial, groups)
}

/// The ATen ops the lowering covers (`aten.add`, ...), without overloads.
pub fn supported_ops() -> Vec<&'static str> {
    torchtpu_compiler::registry::lowered_ops()
}

/// `TORCHTPU_MALLOC_TUNING=0` leaves the process's allocator as it was (see `Engine::new`).
pub const MALLOC_TUNING_ENV: &str = "TORCHTPU_MALLOC_TUNING";

/// The variable that sets the CPU plugin's device count (`cpu_device_count`).
pub const CPU_DEVICES_ENV: &str = "TORCHTPU_CPU_DEVICES";

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

/// A PJRT client and its devices, with its executable cache. One-device programs compile
/// portable and run on any of the devices (`engine/src/device.rs`); the first is the default.
pub struct Engine {
    client: Client,
    /// What differs by platform (donation, host memory, the partitioner, allocator tuning).
    platform: Platform,
    device: Device,
    /// The client's addressable devices, in the plugin's order (the eager `tpu:N`).
    devices: Vec<Device>,
    cache: ExecutableCache,
    graphs: GraphCache,
    /// The plugin refused `HLO_SHARDING_V3` (an XLA without it).
    no_sharding_v3_option: AtomicBool,
    /// `(node_id, num_nodes)` of a client across processes (`distributed.rs`).
    distributed: Option<(i64, i64)>,
}

impl Engine {
    /// An engine on `plugin`; its client spans processes when the process is configured so
    /// (`distributed::configure_distributed`, `TORCHTPU_DIST_NODE_ID`/`_NUM_NODES`).
    pub fn new(plugin: Arc<Plugin>) -> Result<Engine, EngineError> {
        let distributed = distributed::for_new_engine().map_err(EngineError::Plugin)?;
        Engine::with_distributed(plugin, distributed)
    }

    /// An engine whose client spans `distributed.num_nodes` processes (XLA's collectives cross
    /// them), or a one-process engine for `None`.
    pub fn with_distributed(plugin: Arc<Plugin>, distributed: Option<Distributed>) -> Result<Engine, EngineError> {
        // Synchronous dispatch: an execution runs on the calling thread (its parallel loops
        // still use XLA's pool) instead of being handed to a worker and waited for. Measured on
        // the test MLP: ~120 instead of ~170 us per call. Plugins without the option (it is the
        // CPU plugin's) get their defaults.
        // TORCHTPU_CPU_DEVICES=N asks the CPU plugin for N devices (its default is 4); SPMD
        // programs run on the first `mesh.devices()` of them.
        let mut options = vec![("asynchronous", ClientOption::Bool(false))];
        if let Some(n) =
            std::env::var(CPU_DEVICES_ENV).ok().and_then(|v| v.trim().parse::<i64>().ok()).filter(|&n| n > 0)
        {
            options.push(("cpu_device_count", ClientOption::Int(n)));
        }
        let client = match &distributed {
            None => Client::with_options(Arc::clone(&plugin), &options)
                .or_else(|_| Client::new(plugin))
                .map_err(|e| EngineError::Plugin(e.to_string()))?,
            // The options are the CPU plugin's; a GPU plugin refuses their names, so again
            // without them. The second error is the one that names the plugin's objection.
            Some(d) => {
                let make = |options: &[(&str, ClientOption)]| {
                    Client::with_distributed(Arc::clone(&plugin), options, d.node_id, d.num_nodes, Arc::clone(&d.store))
                };
                make(&options).or_else(|_| make(&[])).map_err(|e| {
                    EngineError::Plugin(format!(
                        "the PJRT plugin {} cannot create a client across processes (node {} of {}): {e}. \
                         The XLA CPU plugin runs in one process only: leave {} and {} unset there \
                         (tpu_dist's host transport crosses processes)",
                        plugin.path().display(),
                        d.node_id,
                        d.num_nodes,
                        distributed::NODE_ID_ENV,
                        distributed::NUM_NODES_ENV,
                    ))
                })?
            }
        };
        let device = client.first_device().map_err(|e| EngineError::Plugin(e.to_string()))?;
        let platform = Platform::new(client.platform_name());
        if platform.tunes_host_allocator() && std::env::var(MALLOC_TUNING_ENV).map_or(true, |v| v.trim() != "0") {
            // The CPU plugin mallocs each execution's buffers: kept for reuse instead of
            // being mapped, faulted in and zeroed afresh every call (docs/runtime.md).
            torchtpu_runtime::keep_freed_host_memory();
        }
        // Memory cache, backed by the persistent disk cache unless TORCHTPU_CACHE=0
        // (location: TORCHTPU_CACHE_DIR, else the XDG cache dir; see docs/cache.md).
        let cache = ExecutableCache::from_env();
        let graphs = GraphCache::for_disk(cache.disk());
        let devices = client.addressable_devices();
        Ok(Engine {
            client,
            platform,
            device,
            devices,
            cache,
            graphs,
            no_sharding_v3_option: AtomicBool::new(false),
            distributed: distributed.map(|d| (d.node_id, d.num_nodes)),
        })
    }

    /// `(node_id, num_nodes)` when the client spans processes.
    pub fn distributed(&self) -> Option<(i64, i64)> {
        self.distributed
    }

    /// The plugin from `TORCHTPU_PJRT_PLUGIN`, else where setup installed it.
    pub fn with_default_plugin() -> Result<Engine, EngineError> {
        Engine::new(Plugin::load_default().map_err(|e| EngineError::Plugin(e.to_string()))?)
    }

    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The platform the client runs on, and what the engine decides from it.
    pub fn platform(&self) -> &Platform {
        &self.platform
    }

    /// Whether graphs compiled here should alias outputs to inputs by default
    /// (`Platform::donation_pays`).
    pub fn donates_by_default(&self) -> bool {
        self.platform.donation_pays()
    }

    pub fn cache(&self) -> &ExecutableCache {
        &self.cache
    }

    pub fn graph_cache(&self) -> &GraphCache {
        &self.graphs
    }

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
        let options = &Options { sharding_target: self.platform.sharding_target(), ..options.clone() };
        // Faults are injected before the caches that would skip their stage.
        if fault_injected("lower") {
            return Err(DriverError::Injected { stage: "lower" }.into());
        }
        let Lowered { code, memory, mut plan, graph_cache_hit } = self.lowered(graph, options, &mut timings)?;
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
                // A graph-cache hit skipped the analyses: the plan is cheap to recompute.
                let plan = match plan.take() {
                    Some(p) => p,
                    None => {
                        with_driver(|cx| cx.compile_graph(graph.clone(), &options.driver(None), &mut std::io::sink()))?
                            .analyses
                            .sharding
                            .expect("a graph with a mesh has a sharding plan")
                    }
                };
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

/// A graph as StableHLO bytecode, from the graph cache or the driver (`Engine::lowered`).
struct Lowered {
    code: Arc<Vec<u8>>,
    memory: MemorySummary,
    /// The sharding plan, when the driver ran (a cache hit skipped the analyses).
    plan: Option<torchtpu_compiler::driver::ShardingPlan>,
    graph_cache_hit: bool,
}

impl Engine {
    /// The graph cache first: a graph seen before (same canonical IR and options) skips the
    /// passes and the lowering, and its entry keeps the memory estimate. Else the driver, once,
    /// its result stored. PJRT gets bytecode: about 10x cheaper to write than text.
    fn lowered(&self, graph: &Graph, options: &Options, timings: &mut Timings) -> Result<Lowered, EngineError> {
        let t = Instant::now();
        let key = graph_key(&print_graph(graph), &options.cache_component());
        let cached = self.graphs.get_entry(&key).and_then(|e| Some((e.code, MemorySummary::from_meta(&e.meta)?)));
        timings.record("graph_cache", t.elapsed());
        if let Some((code, memory)) = cached {
            return Ok(Lowered { code, memory, plan: None, graph_cache_hit: true });
        }
        // A miss, or an entry without a readable estimate (written before entries had one):
        // lower again and store both.
        let c = with_driver(|cx| {
            cx.compile_graph(graph.clone(), &options.driver(Some(Format::Bytecode)), &mut std::io::sink())
        })?;
        let seconds = c.timings.total().as_secs_f64();
        timings.stages.extend(c.timings.stages);
        timings.passes = c.timings.passes;
        let memory = c.analyses.memory.unwrap_or_default();
        let code = c.hlo.expect("the driver lowers when asked to emit").code;
        let entry = self.graphs.put_entry_named(&key, code, &memory.to_meta(), Some(&graph.name), seconds);
        Ok(Lowered { code: entry.code, memory, plan: c.analyses.sharding, graph_cache_hit: false })
    }
}

/// What an SPMD program needs at run time: its layouts and the devices of its partitions.
struct Spmd {
    plan: torchtpu_compiler::driver::ShardingPlan,
    devices: Vec<Device>,
    /// The buffer shapes of the last execution, per device: (inputs, outputs).
    last_shapes: Mutex<PartitionShapes>,
    /// Per device, per input: the zero-copy buffer over the caller's block kept between calls.
    resident: Mutex<Vec<Vec<Option<resident::Resident>>>>,
}

/// Per device, the shapes of its input buffers and of the output buffers it returned.
pub type PartitionShapes = (Vec<Vec<Vec<i64>>>, Vec<Vec<Vec<i64>>>);

/// One output of an SPMD program, assembled on the host from the devices' pieces.
pub struct HostOutput {
    pub ty: ElementType,
    pub dims: Vec<i64>,
    pub data: Vec<u8>,
}

/// Bytes of a dense value of `t` (0 for symbolic types, which do not lower).
fn dense_bytes(t: &TensorType) -> usize {
    t.byte_size().and_then(|b| usize::try_from(b).ok()).unwrap_or(0)
}

/// A compiled graph bound to one device.
pub struct CompiledGraph {
    exe: Arc<Executable>,
    /// The StableHLO bytecode given to PJRT.
    code: Arc<Vec<u8>>,
    inputs: Vec<TensorType>,
    outputs: Vec<TensorType>,
    /// Dense byte length of each input.
    input_bytes: Vec<usize>,
    client: Client,
    device: Device,
    /// Per input: the last zero-copy buffer made for it, reused while the caller passes the
    /// same memory (see `execute_host`).
    resident: Mutex<Vec<Option<resident::Resident>>>,
    source: CacheSource,
    graph_cache_hit: bool,
    memory: MemorySummary,
    timings: Timings,
    spmd: Option<Spmd>,
}

impl CompiledGraph {
    /// The layouts and planned collectives of an SPMD program (None on one device).
    pub fn sharding(&self) -> Option<&torchtpu_compiler::driver::ShardingPlan> {
        self.spmd.as_ref().map(|s| &s.plan)
    }

    /// The per-device buffer shapes of the last SPMD execution (what each device really held).
    pub fn partition_shapes(&self) -> Option<PartitionShapes> {
        self.spmd.as_ref().map(|s| s.last_shapes.lock().unwrap_or_else(|p| p.into_inner()).clone())
    }

    /// The collectives XLA put in the partitioned program.
    pub fn compiled_collectives(&self) -> Result<Vec<torchtpu_runtime::Collective>, EngineError> {
        self.exe.collectives().map_err(EngineError::Execute)
    }

    /// Runs an SPMD program on row-major host memory (`inputs[i]` is input i whole): each
    /// device gets its block of every input (read in place when contiguous, else copied),
    /// and each output is assembled from the devices' blocks.
    pub fn execute_sharded(&self, inputs: &[&[u8]]) -> Result<Vec<HostOutput>, EngineError> {
        if fault_injected("execute") {
            return Err(EngineError::Injected { stage: "execute" });
        }
        let Some(spmd) = &self.spmd else {
            return Err(EngineError::Sharding("execute_sharded on a program without a mesh".into()));
        };
        self.check_sizes(inputs)?;
        let mesh = &spmd.plan.mesh;
        // Blocks that are contiguous runs are read in place and their buffers kept per
        // (device, input) while the caller passes the same memory, as one-device inputs are
        // (`execute_host`): parameter shards stay resident between calls. Other blocks are
        // copied out each call.
        let mut slots = spmd.resident.lock().unwrap_or_else(|p| p.into_inner());
        slots.resize_with(spmd.devices.len(), || (0..inputs.len()).map(|_| None).collect());
        let mut fresh: Vec<Vec<Option<Buffer>>> = Vec::with_capacity(spmd.devices.len());
        for (d, device) in spmd.devices.iter().enumerate() {
            let mut row = Vec::with_capacity(inputs.len());
            for (i, (&data, ty)) in inputs.iter().zip(&self.inputs).enumerate() {
                let global = ty.static_dims().unwrap_or_default();
                let elem = ty.dtype.size_bytes();
                let (offsets, local) = spmd::block(mesh, &spmd.plan.inputs[i], &global, d as i64);
                let et = element_type(ty.dtype);
                let copy = match spmd::contiguous_range(&global, &offsets, &local, elem) {
                    // SAFETY: a kept buffer is used only in calls passing this memory again
                    // (`in_place` checks it on every call); SPMD programs donate nothing.
                    Some((start, len)) => unsafe {
                        resident::in_place(
                            &mut slots[d][i],
                            &self.client,
                            &data[start..start + len],
                            et,
                            &local,
                            device,
                        )
                    },
                    None => {
                        slots[d][i] = None;
                        let piece = spmd::gather_block(data, &global, &offsets, &local, elem);
                        self.client.buffer_from_host(&piece, et, &local, device).map(Some)
                    }
                };
                row.push(copy.map_err(EngineError::Execute)?);
            }
            fresh.push(row);
        }
        let args: Vec<Vec<&Buffer>> =
            fresh.iter().zip(slots.iter()).map(|(row, kept)| resident::arguments(row, kept)).collect();
        let keep: Vec<i64> = (0..inputs.len() as i64).collect();
        let outs = self.exe.execute_partitioned(&args, &keep).map_err(EngineError::Execute)?;
        let in_shapes = args.iter().map(|r| r.iter().map(|b| b.dims().to_vec()).collect()).collect();
        let out_shapes = outs.iter().map(|r| r.iter().map(|b| b.dims().to_vec()).collect()).collect();
        *spmd.last_shapes.lock().unwrap_or_else(|p| p.into_inner()) = (in_shapes, out_shapes);
        drop(args);
        drop(fresh);
        drop(slots);
        self.outputs
            .iter()
            .enumerate()
            .map(|(o, ty)| {
                let global = ty.static_dims().unwrap_or_default();
                let elem = ty.dtype.size_bytes();
                let layout = &spmd.plan.outputs[o];
                let mut data = vec![0u8; self.output_bytes(o)];
                for (d, row) in outs.iter().enumerate() {
                    if !spmd::is_block_owner(mesh, layout, d as i64) {
                        continue;
                    }
                    let (offsets, local) = spmd::block(mesh, layout, &global, d as i64);
                    if row[o].dims() != local.as_slice() {
                        return Err(EngineError::Sharding(format!(
                            "output {o}: partition {d} returned shape {:?}, the plan says {local:?}",
                            row[o].dims()
                        )));
                    }
                    // A contiguous block is copied straight into place; others row by row.
                    match spmd::contiguous_range(&global, &offsets, &local, elem) {
                        Some((start, len)) => row[o].copy_to_host(&mut data[start..start + len]),
                        None => row[o]
                            .to_host()
                            .map(|piece| spmd::scatter_block(&mut data, &global, &offsets, &local, elem, &piece)),
                    }
                    .map_err(EngineError::Execute)?;
                }
                Ok(HostOutput { ty: element_type(ty.dtype), dims: global, data })
            })
            .collect()
    }

    /// One input per program input, each of its dense byte length.
    fn check_sizes(&self, inputs: &[&[u8]]) -> Result<(), EngineError> {
        if inputs.len() != self.inputs.len() {
            return Err(EngineError::Arity { expected: self.inputs.len(), got: inputs.len() });
        }
        for (index, (data, &want)) in inputs.iter().zip(&self.input_bytes).enumerate() {
            if data.len() != want {
                return Err(EngineError::Input {
                    index,
                    expected: format!("{want} bytes ({})", self.inputs[index]),
                    got: format!("{} bytes", data.len()),
                });
            }
        }
        Ok(())
    }

    fn output_bytes(&self, o: usize) -> usize {
        dense_bytes(&self.outputs[o])
    }

    /// The lowered module as given to PJRT (MLIR bytecode).
    pub fn bytecode(&self) -> &[u8] {
        &self.code
    }

    pub fn input_types(&self) -> &[TensorType] {
        &self.inputs
    }

    pub fn output_types(&self) -> &[TensorType] {
        &self.outputs
    }

    /// Dense byte length of each input: what `execute_host` reads.
    pub fn input_bytes(&self) -> &[usize] {
        &self.input_bytes
    }

    /// Where the executable came from: this process's cache, the disk cache, or PJRT now.
    pub fn source(&self) -> CacheSource {
        self.source
    }

    /// Whether the graph cache had the lowered module (no passes or lowering ran).
    pub fn graph_cache_hit(&self) -> bool {
        self.graph_cache_hit
    }

    /// The peak-memory estimate of the graph as lowered (from the graph cache on a hit).
    pub fn memory(&self) -> &MemorySummary {
        &self.memory
    }

    /// The time of each stage this compile ran (`parse`, `graph_cache`, `verify`, `passes`,
    /// `analyses`, `lower`, `compile`).
    pub fn timings(&self) -> &Timings {
        &self.timings
    }

    /// The PJRT platform it runs on ("cpu", "cuda", ...).
    pub fn platform_name(&self) -> &str {
        self.client.platform_name()
    }

    /// How many inputs (for an SPMD program: input blocks, over all devices) are currently held
    /// as in-place (zero-copy) buffers of caller memory.
    pub fn resident_inputs(&self) -> usize {
        if let Some(s) = &self.spmd {
            return s
                .resident
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .iter()
                .flatten()
                .filter(|r| r.is_some())
                .count();
        }
        self.resident.lock().unwrap_or_else(|p| p.into_inner()).iter().filter(|r| r.is_some()).count()
    }

    /// The memory of each DLPack input, after checking that it is what the program was
    /// compiled for: host memory, the dtype, the shape, dense row-major strides (and so the
    /// byte size). Nothing is read before every input passed.
    pub fn check_dlpack<'a>(&self, inputs: &[TensorView<'a>]) -> Result<Vec<&'a [u8]>, EngineError> {
        if inputs.len() != self.inputs.len() {
            return Err(EngineError::Arity { expected: self.inputs.len(), got: inputs.len() });
        }
        inputs
            .iter()
            .zip(&self.inputs)
            .enumerate()
            .map(|(index, (view, ty))| {
                let dims = ty.static_dims().unwrap_or_default();
                view.dense_bytes(element_type(ty.dtype), &dims).map_err(|why| EngineError::Input {
                    index,
                    expected: format!("a dense row-major host tensor {ty}"),
                    got: format!("{} ({why})", view.describe()),
                })
            })
            .collect()
    }

    /// Runs on row-major host memory (`inputs[i]` holds input i, of its dense byte length)
    /// and returns the output buffers (on CPU plugins host memory: `dlpack::Exported` hands
    /// them out without a copy).
    ///
    /// Each input is read in place (PJRT zero-copy) where the plugin allows, and the buffer
    /// made for input i is kept: the next call that passes the same memory (address, length)
    /// for input i reuses it. That keeps parameters resident between calls, and it is exact,
    /// not a guess: an aliasing buffer reads the memory at every execution, so an in-place
    /// update of a parameter is seen. An aliased input is never donated (XLA would write into
    /// the caller's memory); where the plugin copies instead (GPU/TPU), the copy is private and
    /// the program's donations (`tf.aliasing_output`) apply.
    pub fn execute_host(&self, inputs: &[&[u8]]) -> Result<Vec<Buffer>, EngineError> {
        if fault_injected("execute") {
            return Err(EngineError::Injected { stage: "execute" });
        }
        self.check_sizes(inputs)?;
        let mut slots = self.resident.lock().unwrap_or_else(|p| p.into_inner());
        let mut copies: Vec<Option<Buffer>> = Vec::with_capacity(inputs.len());
        for (i, (&data, ty)) in inputs.iter().zip(&self.inputs).enumerate() {
            let dims = ty.static_dims().unwrap_or_default();
            // SAFETY: a kept buffer is used only in calls passing this memory again (`in_place`
            // checks it on every call) and is never donated (`in_place` below).
            let copy = unsafe {
                resident::in_place(&mut slots[i], &self.client, data, element_type(ty.dtype), &dims, &self.device)
            };
            copies.push(copy.map_err(EngineError::Execute)?);
        }
        let in_place: Vec<i64> = (0..inputs.len()).filter(|&i| copies[i].is_none()).map(|i| i as i64).collect();
        let args = resident::arguments(&copies, &slots);
        self.exe.execute_on(&args, &in_place, &self.device, true).map_err(EngineError::Execute)
    }

    /// Runs on row-major host memory: `inputs[i]` holds input i, the outputs are copied
    /// straight into `outputs[i]`. Sizes are checked against the declared types; dtypes are the
    /// caller's responsibility.
    pub fn run_into(&self, inputs: &[&[u8]], outputs: &mut [&mut [u8]]) -> Result<(), EngineError> {
        if outputs.len() != self.outputs.len() {
            return Err(EngineError::Arity { expected: self.outputs.len(), got: outputs.len() });
        }
        let outs = self.execute_host(inputs)?;
        for (b, dst) in outs.iter().zip(outputs.iter_mut()) {
            b.copy_to_host(dst).map_err(EngineError::Execute)?;
        }
        Ok(())
    }

    /// Copies the inputs to the device, executes, and copies the outputs back.
    pub fn run(&self, inputs: &[HostTensor]) -> Result<Vec<HostTensor>, EngineError> {
        if fault_injected("execute") {
            return Err(EngineError::Injected { stage: "execute" });
        }
        if inputs.len() != self.inputs.len() {
            return Err(EngineError::Arity { expected: self.inputs.len(), got: inputs.len() });
        }
        let mut buffers: Vec<Buffer> = Vec::with_capacity(inputs.len());
        for (i, (t, want)) in inputs.iter().zip(&self.inputs).enumerate() {
            // PJRT checks byte sizes only; check dtype and shape here.
            if t.dtype != want.dtype || Some(&t.dims) != want.static_dims().as_ref() {
                return Err(EngineError::Input { index: i, expected: want.to_string(), got: t.type_string() });
            }
            let buffer = self.client.buffer_from_host(&t.data, element_type(t.dtype), &t.dims, &self.device);
            buffers.push(buffer.map_err(EngineError::Execute)?);
        }
        let refs: Vec<&Buffer> = buffers.iter().collect();
        let outs = self.exe.execute_on(&refs, &[], &self.device, true).map_err(EngineError::Execute)?;
        outs.iter()
            .zip(&self.outputs)
            .map(|(b, ty)| {
                let data = b.to_host().map_err(EngineError::Execute)?;
                Ok(HostTensor { dtype: ty.dtype, dims: b.dims().to_vec(), data })
            })
            .collect()
    }
}

static DEFAULT_ENGINE: OnceLock<Result<Engine, String>> = OnceLock::new();

/// The process-wide engine on the default plugin.
pub fn default_engine() -> Result<&'static Engine, EngineError> {
    DEFAULT_ENGINE
        .get_or_init(|| {
            // From here on the client's configuration is fixed.
            distributed::mark_started();
            Engine::with_default_plugin().map_err(|e| match e {
                EngineError::Plugin(message) => message,
                e => e.to_string(),
            })
        })
        .as_ref()
        .map_err(|e| EngineError::Plugin(e.clone()))
}

/// Compiles `graph` with the default pipeline on the default engine.
pub fn compile(graph: &Graph) -> Result<CompiledGraph, EngineError> {
    default_engine()?.compile(graph, &Options::default())
}
