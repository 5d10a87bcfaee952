//! The IR's dtypes as torch names: Python's table of them (`compiled/exporter.py`'s
//! `IR_DTYPES`) is read from here, so it holds every dtype the IR has and no other.

use pyo3::prelude::*;
use torchtpu_engine::DType;

/// The `torch` attribute naming `d` (an exhaustive match: a new dtype must say its name).
fn torch_name(d: DType) -> &'static str {
    match d {
        DType::F16 => "float16",
        DType::BF16 => "bfloat16",
        DType::F32 => "float32",
        DType::F64 => "float64",
        DType::I8 => "int8",
        DType::I16 => "int16",
        DType::I32 => "int32",
        DType::I64 => "int64",
        DType::U8 => "uint8",
        DType::Bool => "bool",
        DType::C64 => "complex64",
        DType::C128 => "complex128",
    }
}

/// Every IR dtype, in the IR's order, as (its name in the IR's text, its `torch` attribute).
#[pyfunction]
pub(crate) fn ir_dtypes() -> Vec<(&'static str, &'static str)> {
    DType::ALL.iter().map(|&d| (d.name(), torch_name(d))).collect()
}
