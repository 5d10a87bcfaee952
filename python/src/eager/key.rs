//! An op's program key (written by `torchtpu_eager::key`, which says what it holds), and the
//! buffers its program reads, from the shim's argument records.

use pyo3::prelude::*;
use torchtpu_eager::key::{Key, KeyWriter, TensorKey, View};

use super::defer::Pending;
use super::slot::Slot;
use crate::device::DeviceBuffer;

pub enum Scalar {
    Int(i64),
    Float(f64),
}

pub struct TensorArg<'a, 'py> {
    pub view: View<'a>,
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
    pub key: Key,
    pub leaves: Vec<Leaf<'py>>,
    /// The slot and sizes of each tpu leaf tensor, in order (an in-place op's targets lead).
    pub tensors: Vec<Written<'a, 'py>>,
    /// out= tensors, in order.
    pub outs: Vec<Written<'a, 'py>>,
    pub floats: Vec<f64>,
    /// The device of the tpu tensors (None: there are none).
    pub device: Option<usize>,
}

/// The key and leaves of a call, or None where the native path does not take it: an argument it
/// does not model (a string, a CPU tensor that is not 0-d), a tpu tensor whose data is not a
/// computed device buffer (a dtype view, DeferAndFuse's pending value unless `recording`), tensors on two devices. The Python path then runs the op and says what is
/// wrong, if anything.
pub fn flatten<'a, 'py>(op: u64, checks: bool, recording: bool, args: &'a [Arg<'a, 'py>]) -> Option<Flat<'a, 'py>> {
    let mut key = KeyWriter::new(op, checks, args.len());
    let mut flat = Flat {
        key: Vec::new(),
        leaves: Vec::new(),
        tensors: Vec::new(),
        outs: Vec::new(),
        floats: Vec::new(),
        device: None,
    };
    for arg in args {
        match arg {
            Arg::None => key.none(),
            Arg::Tensor(t) => tensor(t, recording, &mut key, &mut flat)?,
            Arg::CpuScalar { dtype, wrapped, value } => {
                key.cpu_scalar(*dtype, *wrapped);
                flat.leaves.push(Leaf::Cpu(match value {
                    Scalar::Int(v) => Scalar::Int(*v),
                    Scalar::Float(v) => Scalar::Float(*v),
                }));
            }
            Arg::Int(v) => key.int(*v),
            Arg::Bool(v) => key.bool(*v),
            Arg::Float(v) => {
                key.float();
                flat.floats.push(*v);
            }
            Arg::Enum(v) => key.enumeration(*v),
            Arg::List(n) => key.list(*n),
            Arg::Str(bytes) => key.string(bytes),
            Arg::Other => return None,
        }
    }
    flat.key = key.finish();
    Some(flat)
}

fn tensor<'a, 'py>(
    t: &'a TensorArg<'a, 'py>,
    recording: bool,
    key: &mut KeyWriter,
    flat: &mut Flat<'a, 'py>,
) -> Option<()> {
    let slot = t.slot.as_ref()?;
    let s = slot.borrow();
    if s.code != t.view.dtype || s.device as usize != t.device {
        return None;
    }
    match flat.device {
        Some(d) if d != t.device => return None,
        _ => flat.device = Some(t.device),
    }
    key.tensor(&TensorKey { view: t.view, storage_numel: s.numel, storage_shape: &s.shape });
    let written = Written { slot: slot.clone(), sizes: t.view.sizes };
    if t.view.out {
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
