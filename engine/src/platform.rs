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

    /// What the platform's XLA partitioner does with layout changes, for the sharding plan's
    /// predictions: XLA's CPU compiler has no pass that turns an all-reduce and a slice into a
    /// reduce-scatter (measured: a sum pinned to a split layout moved the whole tensor).
    pub fn sharding_target(&self) -> torchtpu_compiler::sharding::Target {
        torchtpu_compiler::sharding::Target { reduce_scatter: !self.is_host() }
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
        assert!(!cpu.sharding_target().reduce_scatter && gpu.sharding_target().reduce_scatter);
        assert!(cpu.tunes_host_allocator() && !gpu.tunes_host_allocator());
    }
}
