//! The program XLA actually runs (`PJRT_Executable_OptimizedProgram`): for an SPMD program
//! the partitioned HLO, whose collectives are what the partitioner inserted. Decoded just
//! enough (a few fields of `xla.HloModuleProtoWithConfig`, tags from XLA's `hlo.proto`) to
//! list those collectives and the bytes each moves.

use prost::Message;

use crate::error::{Result, RuntimeError};
use crate::executable::Executable;
use crate::ffi::{self, Args};
use crate::plugin::pjrt_call;

#[derive(Clone, PartialEq, prost::Message)]
struct HloModuleProtoWithConfig {
    #[prost(message, optional, tag = "1")]
    hlo_module: Option<HloModuleProto>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct HloModuleProto {
    #[prost(message, repeated, tag = "3")]
    computations: Vec<HloComputationProto>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct HloComputationProto {
    #[prost(string, tag = "1")]
    name: String,
    #[prost(message, repeated, tag = "2")]
    instructions: Vec<HloInstructionProto>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct HloInstructionProto {
    #[prost(string, tag = "1")]
    name: String,
    #[prost(string, tag = "2")]
    opcode: String,
    #[prost(message, optional, tag = "3")]
    shape: Option<ShapeProto>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct ShapeProto {
    #[prost(int32, tag = "2")]
    element_type: i32,
    #[prost(int64, repeated, tag = "3")]
    dimensions: Vec<i64>,
    #[prost(message, repeated, tag = "4")]
    tuple_shapes: Vec<ShapeProto>,
}

/// One collective of a partitioned program, as XLA compiled it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Collective {
    /// The HLO opcode: `all-reduce`, `all-gather`, `reduce-scatter`, `all-to-all`,
    /// `collective-permute` (async pairs count once, by their `-start`).
    pub kind: String,
    /// The instruction's name in the optimised module.
    pub name: String,
    /// Bytes of its result on each device (the sum over a tuple's elements).
    pub bytes_per_device: u64,
}

const COLLECTIVES: [&str; 5] = ["all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute"];

/// Bytes of one element of an `xla.PrimitiveType` (0 for tokens and unknown types).
fn element_bytes(primitive: i32) -> u64 {
    match primitive {
        1 | 2 | 6 => 1,       // PRED, S8, U8
        3 | 7 | 10 | 16 => 2, // S16, U16, F16, BF16
        4 | 8 | 11 => 4,      // S32, U32, F32
        5 | 9 | 12 | 15 => 8, // S64, U64, F64, C64
        18 => 16,             // C128
        _ => 0,
    }
}

fn shape_bytes(s: &ShapeProto) -> u64 {
    if !s.tuple_shapes.is_empty() {
        return s.tuple_shapes.iter().map(shape_bytes).sum();
    }
    s.dimensions.iter().fold(element_bytes(s.element_type), |acc, &d| acc.saturating_mul(d.max(0) as u64))
}

/// The collectives in a serialized `HloModuleProtoWithConfig`, in the module's order.
pub fn collectives_in(code: &[u8]) -> Result<Vec<Collective>> {
    let module = HloModuleProtoWithConfig::decode(code)
        .map_err(|e| RuntimeError::InvalidArgument(format!("cannot decode the optimised program: {e}")))?
        .hlo_module
        .ok_or_else(|| RuntimeError::InvalidArgument("the optimised program holds no HLO module".into()))?;
    let mut found = Vec::new();
    for computation in &module.computations {
        for i in &computation.instructions {
            let kind = i.opcode.strip_suffix("-start").unwrap_or(&i.opcode);
            if !COLLECTIVES.contains(&kind) {
                continue;
            }
            // An async start's shape is a tuple (operands, results, ...): count the result.
            let bytes = match &i.shape {
                Some(s) if i.opcode.ends_with("-start") && s.tuple_shapes.len() >= 2 => shape_bytes(&s.tuple_shapes[1]),
                Some(s) => shape_bytes(s),
                None => 0,
            };
            found.push(Collective { kind: kind.to_string(), name: i.name.clone(), bytes_per_device: bytes });
        }
    }
    Ok(found)
}

impl Executable {
    /// The optimised program's bytes and format (`hlo_with_config` on XLA's plugins).
    pub fn optimized_program(&self) -> Result<(String, Vec<u8>)> {
        let plugin = self.plugin();
        self.with_unloaded(|executable| {
            let mut program = ffi::PJRT_Program::new();
            let mut args = ffi::PJRT_Executable_OptimizedProgram_Args::new();
            args.executable = executable;
            args.program = &mut program;
            pjrt_call!(plugin, PJRT_Executable_OptimizedProgram, &mut args)?;
            let mut code = vec![0u8; program.code_size];
            program.code = code.as_mut_ptr().cast();
            args.program = &mut program;
            pjrt_call!(plugin, PJRT_Executable_OptimizedProgram, &mut args)?;
            code.truncate(program.code_size);
            // SAFETY: the plugin set `format` to a static string of `format_size` bytes.
            let format = unsafe { crate::plugin::plugin_string(program.format, program.format_size) };
            Ok((format, code))
        })
    }

    /// The collectives XLA put in the optimised program (see [`collectives_in`]).
    pub fn collectives(&self) -> Result<Vec<Collective>> {
        let (format, code) = self.optimized_program()?;
        if format != "hlo_with_config" {
            return Err(RuntimeError::InvalidArgument(format!(
                "the plugin returned its optimised program as '{format}', not hlo_with_config"
            )));
        }
        collectives_in(&code)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_collectives_and_their_result_bytes() {
        let shape = |t, dims: &[i64]| ShapeProto { element_type: t, dimensions: dims.to_vec(), tuple_shapes: vec![] };
        let inst = |op: &str, s: ShapeProto| HloInstructionProto { name: op.into(), opcode: op.into(), shape: Some(s) };
        let start = ShapeProto {
            element_type: 13,
            dimensions: vec![],
            tuple_shapes: vec![shape(11, &[2]), shape(11, &[8, 2])],
        };
        let module = HloModuleProtoWithConfig {
            hlo_module: Some(HloModuleProto {
                computations: vec![HloComputationProto {
                    name: "main".into(),
                    instructions: vec![
                        inst("add", shape(11, &[4])),
                        inst("all-reduce", shape(11, &[4, 4])),
                        inst("all-gather-start", start),
                        inst("all-gather-done", shape(11, &[8, 2])),
                    ],
                }],
            }),
        };
        let found = collectives_in(&module.encode_to_vec()).unwrap();
        let kinds: Vec<(&str, u64)> = found.iter().map(|c| (c.kind.as_str(), c.bytes_per_device)).collect();
        assert_eq!(kinds, vec![("all-reduce", 64), ("all-gather", 64)]);
        assert!(collectives_in(b"\xff\xff").is_err());
    }
}
