//! What the platform a graph is compiled for can do, where that changes what the compiler
//! emits. The engine says (it knows the plugin); the compiler knows no devices.

/// The facts the passes and the lowering read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Target {
    /// The partitioner turns a pending sum that a dim is then split by into a reduce-scatter.
    /// XLA's CPU compiler does not (it all-reduces and slices); the sharding plan's costs
    /// predict what it does.
    pub reduce_scatter: bool,
    /// torchtpu's host kernels the plugin has registered as custom-call targets.
    pub host_kernels: HostKernels,
}

/// Host kernels a program may call (custom-call targets named in `lower::names::custom_call`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HostKernels {
    /// `torchtpu_int8_matmul`: a weight-only int8 linear layer reading its weight as int8.
    pub int8_matmul: bool,
}

impl Default for Target {
    fn default() -> Self {
        Target { reduce_scatter: true, host_kernels: HostKernels::default() }
    }
}
