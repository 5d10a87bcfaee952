//! `CompiledGraph`: a compiled program, what it was compiled for, and how it came to be
//! (cache source, memory estimate, stage times). Its executions are in `execute/`.

use std::sync::{Arc, Mutex};
use torchtpu_compiler::driver::Timings;
use torchtpu_compiler::ir::{DType, TensorType};
use torchtpu_runtime::{CacheSource, Client, Device, ElementType, Executable};

use crate::{resident, EngineError, MemorySummary};

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

/// What an SPMD program needs at run time: its layouts and the devices of its partitions.
pub(crate) struct Spmd {
    pub(crate) plan: torchtpu_compiler::driver::ShardingPlan,
    pub(crate) devices: Vec<Device>,
    /// The buffer shapes of the last execution, per device: (inputs, outputs).
    pub(crate) last_shapes: Mutex<PartitionShapes>,
    /// Per device, per input: the zero-copy buffer over the caller's block kept between calls.
    pub(crate) resident: Mutex<Vec<Vec<Option<resident::Resident>>>>,
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
pub(crate) fn dense_bytes(t: &TensorType) -> usize {
    t.byte_size().and_then(|b| usize::try_from(b).ok()).unwrap_or(0)
}

/// A compiled graph bound to one device.
pub struct CompiledGraph {
    pub(crate) exe: Arc<Executable>,
    /// The StableHLO bytecode given to PJRT.
    pub(crate) code: Arc<Vec<u8>>,
    pub(crate) inputs: Vec<TensorType>,
    pub(crate) outputs: Vec<TensorType>,
    /// Dense byte length of each input.
    pub(crate) input_bytes: Vec<usize>,
    pub(crate) client: Client,
    pub(crate) device: Device,
    /// Per input: the last zero-copy buffer made for it, reused while the caller passes the
    /// same memory (see `execute_host`).
    pub(crate) resident: Mutex<Vec<Option<resident::Resident>>>,
    pub(crate) source: CacheSource,
    pub(crate) graph_cache_hit: bool,
    pub(crate) memory: MemorySummary,
    pub(crate) timings: Timings,
    pub(crate) spmd: Option<Spmd>,
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

    /// One input per program input, each of its dense byte length.
    pub(crate) fn check_sizes(&self, inputs: &[&[u8]]) -> Result<(), EngineError> {
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

    pub(crate) fn output_bytes(&self, o: usize) -> usize {
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
}
