//! The end-to-end API: `compile(graph) -> CompiledGraph`, `CompiledGraph::run(inputs)`.
//! It joins the compiler (which knows models, not devices) to the runtime (which knows
//! devices, not models): pass pipeline -> StableHLO lowering -> PJRT compile (through the
//! in-memory executable cache) -> execute on host tensors.

mod graph_cache;
mod host;
mod resident;

pub use graph_cache::{graph_key, GraphCache, GraphCacheStats, GraphEntry};
pub use host::HostTensor;

use std::cell::RefCell;
use std::sync::{Arc, Mutex, OnceLock};
use torchtpu_compiler::ir::{print_graph, DType, Graph, TensorType};
use torchtpu_compiler::lower::{Format, LowerError, Lowering, StableHlo};
use torchtpu_compiler::passes::{PassManager, PipelineError, PipelineOptions, DEFAULT_PIPELINE};
use torchtpu_runtime::{
    Buffer, Client, ClientOption, CompileOptions, Device, ElementType, Executable, ExecutableCache, Plugin,
    RuntimeError,
};

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error(transparent)]
    Pipeline(#[from] PipelineError),
    #[error(transparent)]
    Lower(#[from] LowerError),
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    #[error("input {index}: expected {expected}, got {got}")]
    Input { index: usize, expected: String, got: String },
    #[error("expected {expected} inputs, got {got}")]
    Arity { expected: usize, got: usize },
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
}

/// 256 GiB: more than any one device holds, and below what XLA's CPU compiler survives (an
/// elementwise op on 2^39 bytes kills it with SIGFPE; past i64::MAX bytes it throws a C++
/// exception through the C API, which aborts the process). Measured on the CPU plugin 0.11.2.
pub const DEFAULT_MAX_TENSOR_BYTES: u64 = 1 << 38;

impl Options {
    pub fn with_pipeline(pipeline: &str) -> Options {
        Options { pipeline: pipeline.to_string(), ..Options::default() }
    }

    /// What of the options the lowered module depends on (part of the graph cache key).
    pub fn cache_component(&self) -> String {
        format!("{};donate_inputs={};max_tensor_bytes={}", self.pipeline, self.donate_inputs, self.max_tensor_bytes)
    }
}

impl Default for Options {
    fn default() -> Self {
        Options {
            pipeline: DEFAULT_PIPELINE.to_string(),
            donate_inputs: true,
            max_tensor_bytes: DEFAULT_MAX_TENSOR_BYTES,
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
    static LOWERING: RefCell<Option<Lowering>> = const { RefCell::new(None) };
}

/// Runs the pipeline and lowers to `format`; no device involved.
pub fn lower(graph: &Graph, options: &Options, format: Format) -> Result<(Graph, StableHlo), EngineError> {
    let mut g = graph.clone();
    let pm = PassManager::from_pipeline(&options.pipeline, PipelineOptions::default())?;
    pm.run(&mut g, &mut std::io::sink())?;
    let aliases =
        if options.donate_inputs { torchtpu_compiler::analysis::memory::donation_pairs(&g) } else { Vec::new() };
    let hlo = LOWERING.with(|l| {
        let mut l = l.borrow_mut();
        let lowering = l.get_or_insert_with(Lowering::new);
        lowering.set_max_tensor_bytes(options.max_tensor_bytes);
        lowering.lower_aliased(&g, format, &aliases)
    })?;
    Ok((g, hlo))
}

/// A PJRT client on the first device, with its executable cache.
pub struct Engine {
    client: Client,
    device: Device,
    cache: ExecutableCache,
    graphs: GraphCache,
}

impl Engine {
    pub fn new(plugin: Arc<Plugin>) -> Result<Engine, EngineError> {
        // Synchronous dispatch: an execution runs on the calling thread (its parallel loops
        // still use XLA's pool) instead of being handed to a worker and waited for. Measured on
        // the test MLP: ~120 instead of ~170 us per call. Plugins without the option (it is the
        // CPU plugin's) get their defaults.
        let client = Client::with_options(Arc::clone(&plugin), &[("asynchronous", ClientOption::Bool(false))])
            .or_else(|_| Client::new(plugin))?;
        let device = client.first_device()?;
        // Memory cache, backed by the persistent disk cache unless TORCHTPU_CACHE=0
        // (location: TORCHTPU_CACHE_DIR, else the XDG cache dir; see docs/cache.md).
        let cache = ExecutableCache::from_env();
        let graphs = GraphCache::for_disk(cache.disk());
        Ok(Engine { client, device, cache, graphs })
    }

    /// The plugin from `TORCHTPU_PJRT_PLUGIN`, else where setup installed it.
    pub fn with_default_plugin() -> Result<Engine, EngineError> {
        Engine::new(Plugin::load_default()?)
    }

    pub fn client(&self) -> &Client {
        &self.client
    }

    pub fn cache(&self) -> &ExecutableCache {
        &self.cache
    }

    pub fn graph_cache(&self) -> &GraphCache {
        &self.graphs
    }

    pub fn compile(&self, graph: &Graph, options: &Options) -> Result<CompiledGraph, EngineError> {
        // Graph level first: a graph seen before (same canonical IR and pipeline) skips the
        // passes and the lowering. PJRT gets bytecode: about 10x cheaper to write than text.
        let key = graph_key(&print_graph(graph), &options.cache_component());
        let hlo = match self.graphs.get(&key) {
            Some(code) => StableHlo {
                format: Format::Bytecode,
                code: code.as_ref().clone(),
                // The passes keep the signature, so it is the input graph's.
                inputs: graph.inputs().iter().map(|&i| graph.node(i).results[0].clone()).collect(),
                outputs: graph.outputs().iter().map(|&v| graph.value_type(v).clone()).collect(),
            },
            None => {
                let (_, hlo) = lower(graph, options, Format::Bytecode)?;
                self.graphs.put(&key, hlo.code.clone());
                hlo
            }
        };
        let exe =
            self.cache.get_or_compile_named(&self.client, &hlo.code, &CompileOptions::default(), Some(&graph.name))?;
        let resident = Mutex::new((0..hlo.inputs.len()).map(|_| None).collect());
        Ok(CompiledGraph { exe, hlo, client: self.client.clone(), device: self.device.clone(), resident })
    }
}

/// A compiled graph bound to one device.
pub struct CompiledGraph {
    exe: Arc<Executable>,
    hlo: StableHlo,
    client: Client,
    device: Device,
    /// Per input: the last zero-copy buffer made for it, reused while the caller passes the
    /// same memory (see `execute_host`).
    resident: Mutex<Vec<Option<resident::Resident>>>,
}

impl CompiledGraph {
    /// The lowered module (MLIR bytecode) as given to PJRT.
    pub fn module(&self) -> &StableHlo {
        &self.hlo
    }

    pub fn input_types(&self) -> &[TensorType] {
        &self.hlo.inputs
    }

    pub fn output_types(&self) -> &[TensorType] {
        &self.hlo.outputs
    }

    /// The PJRT platform it runs on ("cpu", "cuda", ...).
    pub fn platform_name(&self) -> &str {
        self.client.platform_name()
    }

    /// How many inputs are currently held as in-place (zero-copy) buffers of caller memory.
    pub fn resident_inputs(&self) -> usize {
        self.resident.lock().unwrap_or_else(|p| p.into_inner()).iter().filter(|r| r.is_some()).count()
    }

    /// Runs on raw row-major host memory and returns the output buffers (on CPU plugins
    /// host memory: `Buffer::unsafe_pointer` hands them out without a copy).
    ///
    /// Each input is read in place (PJRT zero-copy) where the plugin allows, and the buffer
    /// made for input i is kept: the next call that passes the same (address, length) for
    /// input i reuses it. That keeps parameters resident between calls, and it is exact, not
    /// a guess: an aliasing buffer reads the memory at every execution, so an in-place update
    /// of a parameter is seen. An aliased input is never donated (XLA would write into the
    /// caller's tensor); where the plugin copies instead (GPU/TPU), the copy is private and the
    /// program's donations (`tf.aliasing_output`) apply.
    ///
    /// # Safety
    /// Each `(address, length)` is live host memory for the whole call, holding input i's
    /// dense row-major bytes (dtype and shape as declared), not written during the call.
    pub unsafe fn execute_host(&self, inputs: &[(usize, usize)]) -> Result<Vec<Buffer>, EngineError> {
        if inputs.len() != self.hlo.inputs.len() {
            return Err(EngineError::Arity { expected: self.hlo.inputs.len(), got: inputs.len() });
        }
        let mut slots = self.resident.lock().unwrap_or_else(|p| p.into_inner());
        let mut copies: Vec<Option<Buffer>> = Vec::with_capacity(inputs.len());
        let mut in_place: Vec<i64> = Vec::with_capacity(inputs.len());
        for (i, (&(addr, len), ty)) in inputs.iter().zip(&self.hlo.inputs).enumerate() {
            if !slots[i].as_ref().is_some_and(|r| r.holds(addr, len)) {
                // SAFETY: the caller guarantees the memory is live for the call.
                let data: &[u8] =
                    if len == 0 { &[] } else { unsafe { std::slice::from_raw_parts(addr as *const u8, len) } };
                let dims = ty.static_dims().unwrap_or_default();
                // SAFETY: an aliasing buffer is used only while the caller passes this very
                // memory (checked above on every call), and is never donated (below).
                let (buffer, aliased) =
                    unsafe { self.client.buffer_aliasing_host(data, element_type(ty.dtype), &dims, &self.device)? };
                if !aliased {
                    slots[i] = None;
                    copies.push(Some(buffer));
                    continue;
                }
                slots[i] = Some(resident::Resident::new(addr, len, buffer));
            }
            in_place.push(i as i64);
            copies.push(None);
        }
        let args: Vec<&Buffer> = copies
            .iter()
            .zip(slots.iter())
            .map(|(copy, slot)| copy.as_ref().or(slot.as_ref().map(|r| &r.buffer)).expect("every input has a buffer"))
            .collect();
        Ok(self.exe.execute_keeping(&args, &in_place)?)
    }

    /// Runs on raw row-major host memory: `inputs[i]` holds input i, the outputs are copied
    /// straight into `outputs[i]`. Sizes are checked against the declared types; dtypes are the
    /// caller's responsibility.
    pub fn run_into(&self, inputs: &[&[u8]], outputs: &mut [&mut [u8]]) -> Result<(), EngineError> {
        if outputs.len() != self.hlo.outputs.len() {
            return Err(EngineError::Arity { expected: self.hlo.outputs.len(), got: outputs.len() });
        }
        let ptrs: Vec<(usize, usize)> = inputs.iter().map(|d| (d.as_ptr() as usize, d.len())).collect();
        // SAFETY: the slices are live and borrowed immutably for the whole call.
        let outs = unsafe { self.execute_host(&ptrs)? };
        for (b, dst) in outs.iter().zip(outputs.iter_mut()) {
            b.copy_to_host(dst)?;
        }
        Ok(())
    }

    /// Copies the inputs to the device, executes, and copies the outputs back.
    pub fn run(&self, inputs: &[HostTensor]) -> Result<Vec<HostTensor>, EngineError> {
        if inputs.len() != self.hlo.inputs.len() {
            return Err(EngineError::Arity { expected: self.hlo.inputs.len(), got: inputs.len() });
        }
        let mut buffers: Vec<Buffer> = Vec::with_capacity(inputs.len());
        for (i, (t, want)) in inputs.iter().zip(&self.hlo.inputs).enumerate() {
            // PJRT checks byte sizes only; check dtype and shape here.
            if t.dtype != want.dtype || Some(&t.dims) != want.static_dims().as_ref() {
                return Err(EngineError::Input { index: i, expected: want.to_string(), got: t.type_string() });
            }
            buffers.push(self.client.buffer_from_host(&t.data, element_type(t.dtype), &t.dims, &self.device)?);
        }
        let refs: Vec<&Buffer> = buffers.iter().collect();
        let outs = self.exe.execute(&refs)?;
        outs.iter()
            .zip(&self.hlo.outputs)
            .map(|(b, ty)| Ok(HostTensor { dtype: ty.dtype, dims: b.dims().to_vec(), data: b.to_host()? }))
            .collect()
    }
}

static DEFAULT_ENGINE: OnceLock<Result<Engine, String>> = OnceLock::new();

/// The process-wide engine on the default plugin.
pub fn default_engine() -> Result<&'static Engine, EngineError> {
    DEFAULT_ENGINE.get_or_init(|| Engine::with_default_plugin().map_err(|e| e.to_string())).as_ref().map_err(|e| {
        EngineError::Runtime(RuntimeError::InvalidArgument(format!("cannot start the default engine: {e}")))
    })
}

/// Compiles `graph` with the default pipeline on the default engine.
pub fn compile(graph: &Graph) -> Result<CompiledGraph, EngineError> {
    default_engine()?.compile(graph, &Options::default())
}
