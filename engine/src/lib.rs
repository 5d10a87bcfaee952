//! The end-to-end API: `compile(graph) -> CompiledGraph`, `CompiledGraph::run(inputs)`.
//! It joins the compiler (which knows models, not devices) to the runtime (which knows
//! devices, not models): the compiler driver (passes -> analyses -> StableHLO) behind the
//! graph cache -> PJRT compile (through the executable cache) -> execute.
//!
//! Module map: `engine` (`Engine`: the client, its devices and caches; the default engine),
//! `options` (`Options`, wrapping the driver's), `platform` (what differs by plugin),
//! `annotate` (a mesh and layouts put on a graph, `Options::mesh`), `compile` (graph cache,
//! driver, executable cache, PJRT), `program` (`CompiledGraph` and what it was compiled for),
//! `execute/` (`host`, `device`, `spmd` executions; `blocks`, the SPMD block arithmetic),
//! `text` (IR text a user hands in: check, run passes, lower), `catalog` (passes and ops),
//! `graph_cache`, `host_tensor`, `resident` (input buffers kept between calls), `replicated`
//! (one replica per device), `distributed`, `legality` (the per-node check for the backend),
//! `error`. The Python extension reaches the compiler only through this crate, and names
//! neither `driver` nor `ir` (compiler/tests/layering.rs).

mod annotate;
mod catalog;
mod compile;
pub mod distributed;
mod engine;
mod error;
pub mod execute;
mod graph_cache;
mod host_tensor;
mod kernel_choice;
pub mod legality;
mod options;
mod platform;
mod program;
mod replicated;
mod resident;
pub mod text;

pub use catalog::{convolution_runs_as_matmul, list_passes, supported_ops};
pub use compile::{compile, lower, with_driver, HLO_SHARDING_V3};
pub use distributed::{configure_distributed, distributed_configuration, engine_started, Distributed};
pub use engine::{default_engine, Engine, CPU_DEVICES_ENV, HOST_KERNELS_ENV, MALLOC_TUNING_ENV};
pub use error::{EngineError, ErrorKind, TextFault};
pub use graph_cache::{graph_key, GraphCache, GraphCacheStats, GraphClaim, GraphEntry};
pub use host_tensor::HostTensor;
pub use kernel_choice::{Measurement, ProgramMeasurement};
pub use options::{MeshAnnotation, Options, DEFAULT_MAX_TENSOR_BYTES};
pub use platform::Platform;
pub use program::{element_type, CompiledGraph, HostOutput, PartitionShapes};
pub use replicated::ReplicatedProgram;
pub use torchtpu_compiler::analysis::memory::MemorySummary;
pub use torchtpu_compiler::driver::{fault_injected, DriverError, ShardingPlan, Timings, FAULT_ENV};
pub use torchtpu_compiler::ir::{DType, Sharding, TensorType};
pub use torchtpu_compiler::passes::DEFAULT_PIPELINE;
pub use torchtpu_runtime::dlpack::TensorView;
pub use torchtpu_runtime::{CacheSource, XlaOption};

// Inside the crate, the compiler's IR by its short name.
use torchtpu_compiler::ir;
