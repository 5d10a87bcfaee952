//! What the engine decides from the PJRT platform it runs on, in one place: every choice that
//! differs between the XLA CPU plugin and an accelerator plugin is a method here, so no other
//! module compares platform names.

/// The PJRT platform behind an engine's client ("cpu", "cuda", "tpu", ...).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Platform {
    name: String,
}

impl Platform {
    pub fn new(name: &str) -> Platform {
        Platform { name: name.to_string() }
    }

    /// The platform's PJRT name.
    pub fn name(&self) -> &str {
        &self.name
    }

    fn is_host(&self) -> bool {
        self.name == "cpu"
    }

    /// Whether executions can take donated input buffers. The CPU plugin reads every input in
    /// place from the caller's memory and never donates it (docs/runtime.md, "The per-call
    /// path"), so there an alias only makes XLA copy the output into the aliased buffer (2048^2
    /// matmul: ~10% of its time, benches/xla_options.py).
    pub fn donation_pays(&self) -> bool {
        !self.is_host()
    }

    /// Whether the devices' buffers are host memory, so outputs can be handed to PyTorch (and
    /// read) without a copy.
    pub fn buffers_in_host_memory(&self) -> bool {
        self.is_host()
    }

    /// Whether torchtpu's host kernels (custom calls on the host platform) can run here.
    pub fn runs_host_kernels(&self) -> bool {
        self.is_host()
    }

    /// What the compiler may assume of the platform: what its XLA partitioner does with
    /// layout changes (the sharding plan's predictions: XLA's CPU compiler has no pass that
    /// turns an all-reduce and a slice into a reduce-scatter, measured: a sum pinned to a split
    /// layout moved the whole tensor), and which of torchtpu's host kernels the plugin has
    /// registered (`registered`: `Plugin::host_kernels`); they run on the host platform only.
    pub fn target(&self, registered: &[&str]) -> torchtpu_compiler::target::Target {
        use torchtpu_compiler::lower::names::custom_call;
        let host = |name: &str| self.is_host() && registered.contains(&name);
        torchtpu_compiler::target::Target {
            reduce_scatter: !self.is_host(),
            host_kernels: torchtpu_compiler::target::HostKernels {
                int8_matmul: host(custom_call::INT8_MATMUL),
                aten_matmul: host(custom_call::ATEN_MATMUL_NN),
            },
            kernel_choice: None,
        }
    }

    /// Whether the process's allocator is tuned to keep freed memory: the CPU plugin mallocs
    /// each execution's buffers (docs/runtime.md; `TORCHTPU_MALLOC_TUNING=0` turns it off).
    pub fn tunes_host_allocator(&self) -> bool {
        self.is_host()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cpu_plugin_and_an_accelerator_differ_in_every_choice() {
        let cpu = Platform::new("cpu");
        let gpu = Platform::new("cuda");
        assert!(!cpu.donation_pays() && gpu.donation_pays());
        assert!(cpu.buffers_in_host_memory() && !gpu.buffers_in_host_memory());
        assert!(!cpu.target(&[]).reduce_scatter && gpu.target(&[]).reduce_scatter);
        let kernels = [torchtpu_compiler::lower::names::custom_call::INT8_MATMUL];
        assert!(cpu.target(&kernels).host_kernels.int8_matmul);
        assert!(!cpu.target(&[]).host_kernels.int8_matmul && !gpu.target(&kernels).host_kernels.int8_matmul);
        // The compiler's custom-call target is the name the runtime registers its kernel under.
        assert_eq!(kernels[0], torchtpu_runtime::host_kernels::INT8_MATMUL);
        assert!(cpu.tunes_host_allocator() && !gpu.tunes_host_allocator());
    }
}
