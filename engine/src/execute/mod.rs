//! Running a `CompiledGraph`: on host memory (`host`), on device buffers (`device`), and as
//! an SPMD program over the mesh's devices (`spmd`, with the block arithmetic in `blocks`).

pub mod blocks;
mod device;
pub(crate) use device::check_buffer_types;
mod host;
mod spmd;
