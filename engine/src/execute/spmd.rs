//! SPMD execution on host memory: each device's blocks in, the outputs assembled on the host.

use torchtpu_compiler::driver::fault_injected;
use torchtpu_runtime::Buffer;

use super::blocks;
use crate::program::HostOutput;
use crate::{element_type, resident, CompiledGraph, EngineError};

impl CompiledGraph {
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
                let (offsets, local) = blocks::block(mesh, &spmd.plan.inputs[i], &global, d as i64);
                let et = element_type(ty.dtype);
                let copy = match blocks::contiguous_range(&global, &offsets, &local, elem) {
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
                        let piece = blocks::gather_block(data, &global, &offsets, &local, elem);
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
                    if !blocks::is_block_owner(mesh, layout, d as i64) {
                        continue;
                    }
                    let (offsets, local) = blocks::block(mesh, layout, &global, d as i64);
                    if row[o].dims() != local.as_slice() {
                        return Err(EngineError::Sharding(format!(
                            "output {o}: partition {d} returned shape {:?}, the plan says {local:?}",
                            row[o].dims()
                        )));
                    }
                    // A contiguous block is copied straight into place; others row by row.
                    match blocks::contiguous_range(&global, &offsets, &local, elem) {
                        Some((start, len)) => row[o].copy_to_host(&mut data[start..start + len]),
                        None => row[o]
                            .to_host()
                            .map(|piece| blocks::scatter_block(&mut data, &global, &offsets, &local, elem, &piece)),
                    }
                    .map_err(EngineError::Execute)?;
                }
                Ok(HostOutput { ty: element_type(ty.dtype), dims: global, data })
            })
            .collect()
    }
}
