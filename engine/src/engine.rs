//! `Engine`: a PJRT client and its devices, with the executable and graph caches, and the
//! process-wide default engine.

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, OnceLock};
use torchtpu_runtime::{Buffer, Client, ClientOption, Device, ExecutableCache, Plugin};

use crate::ir::DType;
use crate::{distributed, element_type, Distributed, EngineError, GraphCache, Options, Platform};
use torchtpu_compiler::target::{KernelChoice, Target};
use torchtpu_runtime::host_kernels::aten;

use crate::kernel_choice::{MeasuredKernels, Measurement, ProgramMeasurement};

/// `TORCHTPU_MALLOC_TUNING=0` leaves the process's allocator as it was (see `Engine::new`).
pub const MALLOC_TUNING_ENV: &str = "TORCHTPU_MALLOC_TUNING";

/// `TORCHTPU_HOST_KERNELS=0` compiles without torchtpu's host kernels (see `Engine::target`).
pub const HOST_KERNELS_ENV: &str = "TORCHTPU_HOST_KERNELS";

/// The variable that sets the CPU plugin's device count (`cpu_device_count`).
pub const CPU_DEVICES_ENV: &str = "TORCHTPU_CPU_DEVICES";

/// A PJRT client and its devices, with its executable cache. One-device programs compile
/// portable and run on any of the devices (`engine/src/device.rs`); the first is the default.
pub struct Engine {
    pub(crate) client: Client,
    /// What differs by platform (donation, host memory, the partitioner, allocator tuning).
    pub(crate) platform: Platform,
    pub(crate) device: Device,
    /// The client's addressable devices, in the plugin's order (the eager `tpu:N`).
    pub(crate) devices: Vec<Device>,
    pub(crate) cache: ExecutableCache,
    pub(crate) graphs: GraphCache,
    /// The plugin refused `HLO_SHARDING_V3` (an XLA without it).
    pub(crate) no_sharding_v3_option: AtomicBool,
    /// `(node_id, num_nodes)` of a client across processes (`distributed.rs`).
    pub(crate) distributed: Option<(i64, i64)>,
    /// What the compiler may assume of the platform (`Engine::target`), found on first use.
    pub(crate) target: OnceLock<Target>,
    /// The measured choice between kernels (`Options::choose_kernels`).
    pub(crate) kernels: Arc<MeasuredKernels>,
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
        let client_for_kernels = client.clone();
        Ok(Engine {
            client,
            platform,
            device,
            devices,
            cache,
            graphs,
            no_sharding_v3_option: AtomicBool::new(false),
            distributed: distributed.map(|d| (d.node_id, d.num_nodes)),
            target: OnceLock::new(),
            kernels: Arc::new(MeasuredKernels::new(client_for_kernels)),
        })
    }

    /// What the compiler may assume of this engine's platform (`Platform::target`): found once,
    /// registering torchtpu's host kernels with the plugin and compiling their probes.
    /// `TORCHTPU_HOST_KERNELS=0` leaves them out (the XLA-only forms, for comparison); a
    /// plugin without them is logged once and compiled for without them.
    pub fn target(&self) -> Target {
        self.target
            .get_or_init(|| {
                let off = std::env::var(HOST_KERNELS_ENV).is_ok_and(|v| v.trim() == "0");
                let kernels = if off || !self.platform.runs_host_kernels() {
                    Vec::new()
                } else {
                    self.client.host_kernels().unwrap_or_else(|why| {
                        eprintln!("torchtpu: host kernels unavailable, compiling without them: {why}");
                        Vec::new()
                    })
                };
                self.platform.target(&kernels)
            })
            .clone()
    }

    /// The target one compile gets: the platform's, with the measured choice between kernels
    /// where the options ask for it and ATen's kernels are installed in this process.
    pub fn target_for(&self, options: &Options) -> Target {
        let mut target = self.target();
        let aten = target.host_kernels.aten_matmul && options.choose_kernels && aten::installed();
        target.host_kernels.aten_matmul = aten;
        target.kernel_choice = aten.then(|| KernelChoice(self.kernels.clone()));
        target
    }

    /// Every matmul shape measured for the choice between kernels, with its timings.
    pub fn kernel_choices(&self) -> Vec<Measurement> {
        self.kernels.choices()
    }

    /// Every program raced with ATen's kernels against all XLA's (`kernel_choice.rs`).
    pub fn kernel_programs(&self) -> Vec<ProgramMeasurement> {
        self.kernels.programs()
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

    /// The client's addressable devices, in the plugin's order: device `i` is the eager `tpu:i`.
    pub fn devices(&self) -> &[Device] {
        &self.devices
    }

    /// Device `index`, or an input error naming how many there are.
    pub fn device(&self, index: usize) -> Result<&Device, EngineError> {
        self.devices.get(index).ok_or_else(|| EngineError::Input {
            index: 0,
            expected: format!("a device index below {}", self.devices.len()),
            got: format!("device {index}"),
        })
    }

    /// Copies a dense row-major host array of `dtype` and shape `dims` to the first device.
    pub fn upload(&self, data: &[u8], dtype: DType, dims: &[i64]) -> Result<Buffer, EngineError> {
        self.upload_to(data, dtype, dims, 0)
    }

    /// Copies a dense row-major host array of `dtype` and shape `dims` to device `device`.
    pub fn upload_to(&self, data: &[u8], dtype: DType, dims: &[i64], device: usize) -> Result<Buffer, EngineError> {
        let target = self.device(device)?;
        let ty = element_type(dtype);
        let expected = torchtpu_runtime::dense_byte_size(ty, dims).map_err(EngineError::Execute)?;
        if data.len() != expected {
            return Err(EngineError::Input {
                index: 0,
                expected: format!("{expected} bytes for {dtype:?}{dims:?}"),
                got: format!("{} bytes", data.len()),
            });
        }
        self.client.buffer_from_host(data, ty, dims, target).map_err(EngineError::Execute)
    }

    /// A copy of `buffer` on device `device` (another device than its own: PJRT refuses a copy
    /// onto the same one), made by the plugin device to device (`PJRT_Buffer_CopyToDevice`).
    pub fn copy_to_device(&self, buffer: &Buffer, device: usize) -> Result<Buffer, EngineError> {
        buffer.copy_to_device(self.device(device)?).map_err(EngineError::Execute)
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
