//! One number of an attribute or a constant's element, in the widest form of its kind, with
//! PyTorch's conversions: what rewrites and lowering rules both read numbers as.

use super::attr::{round_to_dtype, wrap_int};
use super::{Attr, DType};

/// One element of a constant, in the widest form of its kind.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Scalar {
    F(f64),
    I(i64),
    B(bool),
}

impl Scalar {
    pub fn from_attr(a: &Attr) -> Option<Scalar> {
        match a {
            Attr::Int(i) => Some(Scalar::I(*i)),
            Attr::Float(x) => Some(Scalar::F(*x)),
            Attr::Bool(b) => Some(Scalar::B(*b)),
            _ => None,
        }
    }

    /// Converts as PyTorch's `.to(dtype)` does; `None` where C++ leaves the result undefined
    /// (non-finite or out-of-range float to int) or for dtypes the folder does not model.
    pub fn cast(self, to: DType) -> Option<Scalar> {
        if matches!(to, DType::F16 | DType::BF16 | DType::C64 | DType::C128) {
            return None;
        }
        Some(match (self, to) {
            (Scalar::F(x), DType::Bool) => Scalar::B(x != 0.0),
            (Scalar::I(i), DType::Bool) => Scalar::B(i != 0),
            (Scalar::B(b), DType::Bool) => Scalar::B(b),
            (Scalar::F(x), t) if t.is_float() => Scalar::F(round_to_dtype(t, x)),
            (Scalar::I(i), t) if t.is_float() => Scalar::F(round_to_dtype(t, i as f64)),
            (Scalar::B(b), t) if t.is_float() => Scalar::F(b as i64 as f64),
            (Scalar::F(x), t) => {
                let x = x.trunc();
                // i64 covers every narrower int; the wrap below is what a C cast does for those.
                if !x.is_finite() || !(-9.223372036854776e18..9.223372036854776e18).contains(&x) {
                    return None;
                }
                Scalar::I(wrap_int(t, x as i64))
            }
            (Scalar::I(i), t) => Scalar::I(wrap_int(t, i)),
            (Scalar::B(b), _) => Scalar::I(b as i64),
        })
    }

    pub fn as_f64(self) -> f64 {
        match self {
            Scalar::F(x) => x,
            Scalar::I(i) => i as f64,
            Scalar::B(b) => b as i64 as f64,
        }
    }

    pub fn is_zero(self) -> bool {
        self.as_f64() == 0.0
    }

    pub fn is_one(self) -> bool {
        self.as_f64() == 1.0
    }

    /// Zero with a negative sign bit (only floats have one).
    pub fn is_negative_zero(self) -> bool {
        matches!(self, Scalar::F(x) if x == 0.0 && x.is_sign_negative())
    }
}
