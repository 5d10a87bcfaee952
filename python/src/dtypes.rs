//! The IR's dtypes as torch names: Python's table of them (`torchtpu/ir_text.py`'s
//! `IR_DTYPES`) is read from here, so it holds every dtype the IR has and no other, and so is
//! the native path's table of PyTorch's `c10::ScalarType` codes (`of_scalar_type`).

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use torchtpu_engine::DType;

use crate::eager::scalar_type_code;

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

/// The IR dtype of PyTorch's `c10::ScalarType` code (None: a dtype the IR lacks). The codes are
/// the shim's answer for each IR dtype's torch dtype, asked once: no table of PyTorch's numbers
/// is kept here.
pub(crate) fn of_scalar_type(py: Python<'_>, code: i32) -> PyResult<Option<DType>> {
    static CODES: PyOnceLock<Vec<(i32, DType)>> = PyOnceLock::new();
    let codes = CODES.get_or_try_init(py, || -> PyResult<Vec<(i32, DType)>> {
        let torch = py.import("torch")?;
        DType::ALL.iter().map(|&d| Ok((scalar_type_code(&torch.getattr(torch_name(d))?)?, d))).collect()
    })?;
    Ok(codes.iter().find(|(c, _)| *c == code).map(|&(_, d)| d))
}
