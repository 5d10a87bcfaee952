//! Replicated programs: one graph run once per replica, each replica on its own device, with
//! cross-replica collectives (`c10d.*`) among them. This is how several ranks of one process
//! (threads, each on its own `tpu:N`) run a collective, or a compiled graph containing one,
//! as a single program (docs/distributed.md, "In-process transport").

use std::sync::Arc;
use std::time::Instant;

use torchtpu_compiler::ir::{Attr, Graph, TensorType};
use torchtpu_compiler::registry::attrs::GROUPS_LIST;
use torchtpu_runtime::{Buffer, CompileOptions, Device, Executable};

use crate::{fault_injected, DriverError, Engine, EngineError, Options, Timings};

/// A compiled replicated program and the devices of its replicas, in replica order.
pub struct ReplicatedProgram {
    exe: Arc<Executable>,
    devices: Vec<Device>,
    inputs: Vec<TensorType>,
    outputs: Vec<TensorType>,
    timings: Timings,
}

impl Engine {
    /// `compile_replicated` from IR text.
    pub fn compile_replicated_text(
        &self,
        text: &str,
        options: &Options,
        devices: &[usize],
    ) -> Result<ReplicatedProgram, EngineError> {
        let graph = torchtpu_compiler::ir::parse_graph(text).map_err(DriverError::Parse)?;
        self.compile_replicated(&graph, options, devices)
    }

    /// Compiles `graph` to run once per device of `devices` (indices into the client's
    /// addressable devices; replica r on `devices[r]`). Every replica id the graph's
    /// collectives name must be below the replica count. Through the graph cache and the
    /// executable cache like every compile; the device assignment is part of the latter's key.
    pub fn compile_replicated(
        &self,
        graph: &Graph,
        options: &Options,
        devices: &[usize],
    ) -> Result<ReplicatedProgram, EngineError> {
        let all = self.client.addressable_devices();
        let chosen: Vec<Device> = devices
            .iter()
            .map(|&d| {
                all.get(d).cloned().ok_or_else(|| {
                    EngineError::Sharding(format!(
                        "a replicated program on device {d}, but the {} plugin has {} devices",
                        self.client.platform_name(),
                        all.len()
                    ))
                })
            })
            .collect::<Result<_, _>>()?;
        let mut seen = devices.to_vec();
        seen.sort_unstable();
        seen.dedup();
        if chosen.is_empty() || seen.len() != devices.len() {
            return Err(EngineError::Sharding(format!(
                "a replicated program needs distinct devices, one per replica; got {devices:?}"
            )));
        }
        check_replica_ids(graph, devices.len())?;
        if fault_injected("lower") {
            return Err(torchtpu_compiler::driver::DriverError::Injected { stage: "lower" }.into());
        }
        let mut timings = Timings::default();
        let code = self.lowered(graph, options, &mut timings)?.code;
        if fault_injected("compile") {
            return Err(EngineError::Injected { stage: "compile" });
        }
        let t = Instant::now();
        let ids: Vec<i64> = chosen.iter().map(|d| d.id() as i64).collect();
        let compile_options = CompileOptions::replicated(&ids).with_xla_options(options.xla_options.clone());
        let (exe, _) = self
            .cache
            .lookup_or_compile(&self.client, &code, &compile_options, Some(&graph.name))
            .map_err(EngineError::Compile)?;
        timings.record("compile", t.elapsed());
        let inputs = graph.inputs().iter().map(|&i| graph.node(i).results[0].clone()).collect();
        let outputs = graph.outputs().iter().map(|&v| graph.value_type(v).clone()).collect();
        Ok(ReplicatedProgram { exe, devices: chosen, inputs, outputs, timings })
    }
}

/// Refuses collectives naming a replica the program does not have (XLA would abort on it).
fn check_replica_ids(graph: &Graph, replicas: usize) -> Result<(), EngineError> {
    for node in graph.petgraph().node_weights() {
        if let Some(Attr::IntList(ids)) = node.attr(GROUPS_LIST) {
            if let Some(bad) = ids.iter().find(|&&r| r < 0 || r as usize >= replicas) {
                return Err(EngineError::Sharding(format!(
                    "{} names replica {bad}, but the program has {replicas} replicas",
                    node.op().map(|o| o.to_string()).unwrap_or_default()
                )));
            }
        }
    }
    Ok(())
}

impl ReplicatedProgram {
    pub fn replicas(&self) -> usize {
        self.devices.len()
    }

    /// The devices of the replicas, in replica order.
    pub fn devices(&self) -> &[Device] {
        &self.devices
    }

    pub fn output_types(&self) -> &[TensorType] {
        &self.outputs
    }

    pub fn timings(&self) -> &Timings {
        &self.timings
    }

    /// Runs every replica: `args[r]` are replica r's inputs, each on replica r's device and of
    /// the compiled input type. Returns each replica's outputs, on its device. Waits for all.
    /// Nothing is donated: the inputs may back other tensors.
    pub fn execute(&self, args: &[Vec<&Buffer>]) -> Result<Vec<Vec<Buffer>>, EngineError> {
        if fault_injected("execute") {
            return Err(EngineError::Injected { stage: "execute" });
        }
        if args.len() != self.devices.len() {
            return Err(EngineError::Arity { expected: self.devices.len(), got: args.len() });
        }
        for (r, (row, device)) in args.iter().zip(&self.devices).enumerate() {
            if row.len() != self.inputs.len() {
                return Err(EngineError::Arity { expected: self.inputs.len(), got: row.len() });
            }
            crate::execute::check_buffer_types(row, &self.inputs, &format!(" (replica {r})"))?;
            for (index, b) in row.iter().enumerate() {
                if !b.is_on(device).map_err(EngineError::Execute)? {
                    return Err(EngineError::Input {
                        index,
                        expected: format!("a buffer on replica {r}'s device (id {})", device.id()),
                        got: "a buffer on another device".into(),
                    });
                }
            }
        }
        let keep: Vec<i64> = (0..self.inputs.len() as i64).collect();
        self.exe.execute_partitioned(args, &keep).map_err(EngineError::Execute)
    }
}
