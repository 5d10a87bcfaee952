//! What the platform a graph is compiled for can do, where that changes what the compiler
//! emits. The engine says (it knows the plugin); the compiler knows no devices.

use std::sync::Arc;

use crate::ir::DType;

/// The facts the passes and the lowering read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// The partitioner turns a pending sum that a dim is then split by into a reduce-scatter.
    /// XLA's CPU compiler does not (it all-reduces and slices); the sharding plan's costs
    /// predict what it does.
    pub reduce_scatter: bool,
    /// torchtpu's host kernels the plugin has registered as custom-call targets.
    pub host_kernels: HostKernels,
    /// Which of a matmul's kernels is faster on this platform, where it has a second one
    /// (ATen's, `host-matmul`): the engine answers by measuring. None: XLA's everywhere.
    pub kernel_choice: Option<KernelChoice>,
}

/// Host kernels a program may call (custom-call targets named in `lower::names::custom_call`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HostKernels {
    /// `torchtpu_int8_matmul`: a weight-only int8 linear layer reading its weight as int8.
    pub int8_matmul: bool,
    /// `torchtpu_aten_matmul_*`: ATen's CPU GEMM (MKL / oneDNN) on XLA's buffers.
    pub aten_matmul: bool,
}

impl Default for Target {
    fn default() -> Self {
        Target { reduce_scatter: true, host_kernels: HostKernels::default(), kernel_choice: None }
    }
}

/// One matmul as a kernel sees it: `[batch,] m x k` times `k x n`, each operand possibly stored
/// transposed (its last two dims swapped).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MatmulShape {
    pub dtype: DType,
    pub batch: Option<i64>,
    pub m: i64,
    pub k: i64,
    pub n: i64,
    pub transpose_a: bool,
    pub transpose_b: bool,
}

impl MatmulShape {
    /// The operands' stored dims (`a`, `b`) and the result's.
    pub fn dims(&self) -> [Vec<i64>; 3] {
        let stored = |rows: i64, cols: i64, t: bool| {
            let d = if t { [cols, rows] } else { [rows, cols] };
            self.batch.into_iter().chain(d).collect::<Vec<i64>>()
        };
        [
            stored(self.m, self.k, self.transpose_a),
            stored(self.k, self.n, self.transpose_b),
            stored(self.m, self.n, false),
        ]
    }
}

impl std::fmt::Display for MatmulShape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(b) = self.batch {
            write!(f, "{b}x")?;
        }
        let t = |on: bool| if on { "T" } else { "" };
        write!(
            f,
            "[{}x{}]{} @ [{}x{}]{} {}",
            self.m,
            self.k,
            t(self.transpose_a),
            self.k,
            self.n,
            t(self.transpose_b),
            self.dtype
        )
    }
}

/// Chooses between XLA's kernel and a host kernel for one call, by measurement on the real
/// platform (the engine's). Its `Debug` names the chooser, part of the graph cache key.
pub trait ChooseKernel: Send + Sync + std::fmt::Debug {
    /// Whether ATen's matmul (`torchtpu_aten_matmul_*`) beats XLA's dot for `shape`.
    fn host_matmul(&self, shape: &MatmulShape) -> bool;
}

/// A shared chooser, compared by identity.
#[derive(Clone, Debug)]
pub struct KernelChoice(pub Arc<dyn ChooseKernel>);

impl PartialEq for KernelChoice {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for KernelChoice {}
