//! Host tensors: a dtype, dims and row-major bytes, with typed constructors and readers.

use torchtpu_compiler::ir::types::checked_numel;
use torchtpu_compiler::ir::{DType, TensorType};

#[derive(Clone, Debug, PartialEq)]
pub struct HostTensor {
    pub dtype: DType,
    pub dims: Vec<i64>,
    pub data: Vec<u8>,
}

macro_rules! typed {
    ($from:ident, $to:ident, $t:ty, $d:expr) => {
        pub fn $from(dims: &[i64], values: &[$t]) -> HostTensor {
            assert_eq!(checked_numel(dims), Some(values.len() as i64), "values do not fill the dims");
            HostTensor { dtype: $d, dims: dims.to_vec(), data: values.iter().flat_map(|v| v.to_le_bytes()).collect() }
        }
        /// The elements, if the tensor has this dtype.
        pub fn $to(&self) -> Option<Vec<$t>> {
            const N: usize = std::mem::size_of::<$t>();
            (self.dtype == $d)
                .then(|| self.data.chunks_exact(N).map(|c| <$t>::from_le_bytes(c.try_into().unwrap())).collect())
        }
    };
}

impl HostTensor {
    typed!(from_f32, to_f32, f32, DType::F32);
    typed!(from_f64, to_f64, f64, DType::F64);
    typed!(from_i32, to_i32, i32, DType::I32);
    typed!(from_i64, to_i64, i64, DType::I64);
    typed!(from_i8, to_i8, i8, DType::I8);
    typed!(from_u8, to_u8, u8, DType::U8);

    pub fn from_bool(dims: &[i64], values: &[bool]) -> HostTensor {
        assert_eq!(checked_numel(dims), Some(values.len() as i64), "values do not fill the dims");
        HostTensor { dtype: DType::Bool, dims: dims.to_vec(), data: values.iter().map(|&b| b as u8).collect() }
    }

    pub fn to_bool(&self) -> Option<Vec<bool>> {
        (self.dtype == DType::Bool).then(|| self.data.iter().map(|&b| b != 0).collect())
    }

    pub fn type_string(&self) -> String {
        TensorType::fixed(self.dtype, &self.dims).to_string()
    }
}
