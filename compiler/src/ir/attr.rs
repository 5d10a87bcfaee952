//! Typed node attributes: the non-tensor arguments of an ATen call.

use super::types::{DType, TensorType};
use std::hash::{Hash, Hasher};

/// Attribute values. Floats compare and hash by bit pattern, with every NaN equal to every
/// other NaN, so graphs containing `nan` attributes still compare equal after a round trip.
#[derive(Clone, Debug)]
pub enum Attr {
    None,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    DType(DType),
    IntList(Vec<i64>),
    /// Never empty: an empty list is an `IntList` (the text `[]` has no element type).
    FloatList(Vec<f64>),
    Tensor(Literal),
}

/// A small dense tensor constant (row-major). Float elements are stored as f64 but are always
/// exactly representable in the literal's dtype, so printing them in that dtype round-trips.
#[derive(Clone, Debug)]
pub struct Literal {
    pub ty: TensorType,
    pub elems: Elements,
}

#[derive(Clone, Debug)]
pub enum Elements {
    Float(Vec<f64>),
    Int(Vec<i64>),
    Bool(Vec<bool>),
}

impl Elements {
    pub fn len(&self) -> usize {
        match self {
            Elements::Float(v) => v.len(),
            Elements::Int(v) => v.len(),
            Elements::Bool(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Bit-exact float identity with all NaNs identified.
pub fn float_key(x: f64) -> u64 {
    if x.is_nan() {
        f64::NAN.to_bits()
    } else {
        x.to_bits()
    }
}

/// Rounds a value to what `dtype` can hold, as PyTorch would store it. f16/bf16 keep f32
/// precision here (no half-precision arithmetic in the compiler); ints wrap.
pub fn round_to_dtype(dtype: DType, x: f64) -> f64 {
    match dtype {
        DType::F32 | DType::F16 | DType::BF16 | DType::C64 => x as f32 as f64,
        _ => x,
    }
}

impl Literal {
    /// Builds a literal, rounding float elements to the dtype and checking the element kind
    /// and count against the (static) type.
    pub fn new(ty: TensorType, elems: Elements) -> Result<Literal, String> {
        let numel = ty.numel().ok_or_else(|| format!("literal type {ty} must have a static shape"))?;
        let kind_ok = match &elems {
            Elements::Float(_) => ty.dtype.is_float(),
            Elements::Int(_) => ty.dtype.is_integer(),
            Elements::Bool(_) => ty.dtype == DType::Bool,
        };
        if !kind_ok {
            return Err(format!("literal elements do not match dtype {}", ty.dtype));
        }
        if elems.len() as i64 != numel {
            return Err(format!("literal of type {ty} needs {numel} elements, got {}", elems.len()));
        }
        let elems = match elems {
            Elements::Float(v) => Elements::Float(v.into_iter().map(|x| round_to_dtype(ty.dtype, x)).collect()),
            Elements::Int(v) => Elements::Int(v.into_iter().map(|x| wrap_int(ty.dtype, x)).collect()),
            other => other,
        };
        Ok(Literal { ty, elems })
    }
}

/// Wraps an integer into the range of `dtype`, as a C cast (and PyTorch) does.
pub fn wrap_int(dtype: DType, x: i64) -> i64 {
    match dtype {
        DType::I8 => x as i8 as i64,
        DType::I16 => x as i16 as i64,
        DType::I32 => x as i32 as i64,
        DType::U8 => x as u8 as i64,
        _ => x,
    }
}

impl PartialEq for Elements {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Elements::Float(a), Elements::Float(b)) => {
                a.len() == b.len() && a.iter().zip(b).all(|(x, y)| float_key(*x) == float_key(*y))
            }
            (Elements::Int(a), Elements::Int(b)) => a == b,
            (Elements::Bool(a), Elements::Bool(b)) => a == b,
            _ => false,
        }
    }
}
impl Eq for Elements {}

impl Hash for Elements {
    fn hash<H: Hasher>(&self, state: &mut H) {
        match self {
            Elements::Float(v) => {
                0u8.hash(state);
                v.iter().for_each(|x| float_key(*x).hash(state));
            }
            Elements::Int(v) => {
                1u8.hash(state);
                v.hash(state);
            }
            Elements::Bool(v) => {
                2u8.hash(state);
                v.hash(state);
            }
        }
    }
}

impl PartialEq for Literal {
    fn eq(&self, other: &Self) -> bool {
        self.ty == other.ty && self.elems == other.elems
    }
}
impl Eq for Literal {}
impl Hash for Literal {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.ty.hash(state);
        self.elems.hash(state);
    }
}

impl PartialEq for Attr {
    fn eq(&self, other: &Self) -> bool {
        use Attr::*;
        match (self, other) {
            (None, None) => true,
            (Bool(a), Bool(b)) => a == b,
            (Int(a), Int(b)) => a == b,
            (Float(a), Float(b)) => float_key(*a) == float_key(*b),
            (Str(a), Str(b)) => a == b,
            (DType(a), DType(b)) => a == b,
            (IntList(a), IntList(b)) => a == b,
            (FloatList(a), FloatList(b)) => {
                a.len() == b.len() && a.iter().zip(b).all(|(x, y)| float_key(*x) == float_key(*y))
            }
            (Tensor(a), Tensor(b)) => a == b,
            _ => false,
        }
    }
}
impl Eq for Attr {}

impl Hash for Attr {
    fn hash<H: Hasher>(&self, state: &mut H) {
        std::mem::discriminant(self).hash(state);
        match self {
            Attr::None => {}
            Attr::Bool(b) => b.hash(state),
            Attr::Int(i) => i.hash(state),
            Attr::Float(x) => float_key(*x).hash(state),
            Attr::Str(s) => s.hash(state),
            Attr::DType(d) => d.hash(state),
            Attr::IntList(v) => v.hash(state),
            Attr::FloatList(v) => v.iter().for_each(|x| float_key(*x).hash(state)),
            Attr::Tensor(l) => l.hash(state),
        }
    }
}

impl Attr {
    pub fn as_int(&self) -> Option<i64> {
        match self {
            Attr::Int(i) => Some(*i),
            _ => Option::None,
        }
    }

    /// A number as f64: ints and bools widen.
    pub fn as_number(&self) -> Option<f64> {
        match self {
            Attr::Int(i) => Some(*i as f64),
            Attr::Float(x) => Some(*x),
            Attr::Bool(b) => Some(*b as i64 as f64),
            _ => Option::None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Attr::Str(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_int_list(&self) -> Option<&[i64]> {
        match self {
            Attr::IntList(v) => Some(v),
            _ => Option::None,
        }
    }

    pub fn as_dtype(&self) -> Option<DType> {
        match self {
            Attr::DType(d) => Some(*d),
            _ => Option::None,
        }
    }

    pub fn is_none(&self) -> bool {
        matches!(self, Attr::None)
    }
}
