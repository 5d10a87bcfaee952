//! An op's program key, and the buffers its program reads, from the shim's argument records.
//!
//! The key holds what the Python path's key holds (`torchtpu.device._dispatch._flatten`) and
//! more: the op, whether index checks are on, each tensor's dtype, sizes, strides, offset,
//! conjugate and negative bits and its storage's shape, every int, bool, enum and string, and a marker per
//! float (floats are inputs; their values stay out of the key unless the op bakes them). So two
//! calls with one native key make one Python key, and the program the Python path chose for the
//! first serves the second.

use pyo3::prelude::*;

use super::defer::Pending;
use super::slot::Slot;
use crate::device::DeviceBuffer;

pub enum Scalar {
    Int(i64),
    Float(f64),
}

pub struct TensorArg<'a, 'py> {
    pub dtype: i32,
    pub sizes: &'a [i64],
    pub strides: &'a [i64],
    pub offset: i64,
    pub conj: bool,
    pub neg: bool,
    /// An out= argument: written, not read.
    pub out: bool,
    pub device: usize,
    pub slot: Option<Bound<'py, Slot>>,
}

pub enum Arg<'a, 'py> {
    None,
    Tensor(TensorArg<'a, 'py>),
    /// A 0-d CPU tensor: a wrapped number (`x + 1`) or a scalar tensor, uploaded as an input.
    CpuScalar {
        dtype: i32,
        wrapped: bool,
        value: Scalar,
    },
    Int(i64),
    Bool(bool),
    Float(f64),
    Enum(i64),
    List(i64),
    /// A string's bytes (`approximate="tanh"`, `reduction` names, `rounding_mode`).
    Str(&'a [u8]),
    Other,
}

/// A tensor leaf of the program, in the Python path's leaf order.
pub enum Leaf<'py> {
    Device {
        buffer: Bound<'py, DeviceBuffer>,
    },
    /// A value of the open DeferAndFuse region (only while recording).
    Pending(Bound<'py, Pending>),
    /// A storage never written (`torch.empty`): it reads as zeros (`path::zeros`).
    Unwritten(Bound<'py, Slot>),
    Cpu(Scalar),
}

/// A tensor the op writes: its slot and sizes.
pub struct Written<'a, 'py> {
    pub slot: Bound<'py, Slot>,
    pub sizes: &'a [i64],
}

pub struct Flat<'a, 'py> {
    pub key: Vec<i64>,
    pub leaves: Vec<Leaf<'py>>,
    /// The slot and sizes of each tpu leaf tensor, in order (an in-place op's targets lead).
    pub tensors: Vec<Written<'a, 'py>>,
    /// out= tensors, in order.
    pub outs: Vec<Written<'a, 'py>>,
    pub floats: Vec<f64>,
    /// The device of the tpu tensors (None: there are none).
    pub device: Option<usize>,
}

const NONE: i64 = 0;
const TENSOR: i64 = 1;
const CPU: i64 = 2;
const INT: i64 = 3;
const BOOL: i64 = 4;
const FLOAT: i64 = 5;
const ENUM: i64 = 6;
const LIST: i64 = 7;
const OUT: i64 = 8;
const STR: i64 = 9;

/// The key and leaves of a call, or None where the native path does not take it: an argument it
/// does not model (a string, a CPU tensor that is not 0-d), a tpu tensor whose data is not a
/// computed device buffer (a dtype view, DeferAndFuse's pending value unless `recording`), tensors on two devices. The Python path then runs the op and says what is
/// wrong, if anything.
pub fn flatten<'a, 'py>(op: u64, checks: bool, recording: bool, args: &'a [Arg<'a, 'py>]) -> Option<Flat<'a, 'py>> {
    let mut key = Vec::with_capacity(8 + args.len() * 8);
    key.push(op as i64);
    key.push(checks as i64);
    let mut flat =
        Flat { key, leaves: Vec::new(), tensors: Vec::new(), outs: Vec::new(), floats: Vec::new(), device: None };
    for arg in args {
        match arg {
            Arg::None => flat.key.push(NONE),
            Arg::Tensor(t) => tensor(t, recording, &mut flat)?,
            Arg::CpuScalar { dtype, wrapped, value } => {
                flat.key.extend([CPU, *dtype as i64, *wrapped as i64]);
                flat.leaves.push(Leaf::Cpu(match value {
                    Scalar::Int(v) => Scalar::Int(*v),
                    Scalar::Float(v) => Scalar::Float(*v),
                }));
            }
            Arg::Int(v) => flat.key.extend([INT, *v]),
            Arg::Bool(v) => flat.key.extend([BOOL, *v as i64]),
            Arg::Float(v) => {
                flat.key.push(FLOAT);
                flat.floats.push(*v);
            }
            Arg::Enum(v) => flat.key.extend([ENUM, *v]),
            Arg::List(n) => flat.key.extend([LIST, *n]),
            Arg::Str(bytes) => {
                // The bytes themselves, eight to a key element: no two strings share a key.
                flat.key.extend([STR, bytes.len() as i64]);
                flat.key.extend(bytes.chunks(8).map(|c| {
                    let mut word = [0u8; 8];
                    word[..c.len()].copy_from_slice(c);
                    i64::from_le_bytes(word)
                }));
            }
            Arg::Other => return None,
        }
    }
    Some(flat)
}

fn tensor<'a, 'py>(t: &'a TensorArg<'a, 'py>, recording: bool, flat: &mut Flat<'a, 'py>) -> Option<()> {
    let slot = t.slot.as_ref()?;
    let s = slot.borrow();
    if s.code != t.dtype || s.device as usize != t.device {
        return None;
    }
    match flat.device {
        Some(d) if d != t.device => return None,
        _ => flat.device = Some(t.device),
    }
    let key = &mut flat.key;
    key.extend([if t.out { OUT } else { TENSOR }, t.dtype as i64, t.sizes.len() as i64]);
    key.extend_from_slice(t.sizes);
    key.extend_from_slice(t.strides);
    key.extend([t.offset, t.conj as i64 | (t.neg as i64) << 1, s.numel, s.shape.len() as i64]);
    key.extend_from_slice(&s.shape);
    let written = Written { slot: slot.clone(), sizes: t.sizes };
    if t.out {
        flat.outs.push(written);
        return Some(());
    }
    let py = slot.py();
    let data = s.buffer.bind(py);
    if data.is_none() {
        flat.leaves.push(Leaf::Unwritten(slot.clone()));
        flat.tensors.push(written);
        return Some(());
    }
    let buffer = match data.cast::<DeviceBuffer>() {
        Ok(b) => b.clone(),
        Err(_) => {
            let pending = data.cast::<Pending>().ok()?;
            match pending.borrow().computed(py) {
                Some(b) => b.into_bound(py).cast_into::<DeviceBuffer>().ok()?,
                None if recording => {
                    flat.leaves.push(Leaf::Pending(pending.clone()));
                    flat.tensors.push(written);
                    return Some(());
                }
                None => return None,
            }
        }
    };
    if buffer.get().donated_now() || buffer.get().device != t.device {
        return None;
    }
    flat.leaves.push(Leaf::Device { buffer });
    flat.tensors.push(written);
    Some(())
}
