//! Tensor types: element dtype plus a shape whose dims are static or symbolic.

use std::fmt;

/// Element types. The text names are the ones the IR prints (`f32`, `bf16`, `bool`, ...).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DType {
    F16,
    BF16,
    F32,
    F64,
    I8,
    I16,
    I32,
    I64,
    U8,
    Bool,
    C64,
    C128,
}

impl DType {
    pub const ALL: [DType; 12] = [
        DType::F16,
        DType::BF16,
        DType::F32,
        DType::F64,
        DType::I8,
        DType::I16,
        DType::I32,
        DType::I64,
        DType::U8,
        DType::Bool,
        DType::C64,
        DType::C128,
    ];

    pub fn name(self) -> &'static str {
        match self {
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::F32 => "f32",
            DType::F64 => "f64",
            DType::I8 => "i8",
            DType::I16 => "i16",
            DType::I32 => "i32",
            DType::I64 => "i64",
            DType::U8 => "u8",
            DType::Bool => "bool",
            DType::C64 => "c64",
            DType::C128 => "c128",
        }
    }

    pub fn from_name(s: &str) -> Option<DType> {
        DType::ALL.iter().copied().find(|d| d.name() == s)
    }

    pub fn is_float(self) -> bool {
        matches!(self, DType::F16 | DType::BF16 | DType::F32 | DType::F64)
    }

    pub fn is_complex(self) -> bool {
        matches!(self, DType::C64 | DType::C128)
    }

    /// The dtype of a complex dtype's parts (f32 for c64, f64 for c128); other dtypes are
    /// their own.
    pub fn real_part(self) -> DType {
        match self {
            DType::C64 => DType::F32,
            DType::C128 => DType::F64,
            d => d,
        }
    }

    /// Signed or unsigned integer, not bool.
    pub fn is_integer(self) -> bool {
        matches!(self, DType::I8 | DType::I16 | DType::I32 | DType::I64 | DType::U8)
    }

    pub fn size_bytes(self) -> usize {
        match self {
            DType::Bool | DType::I8 | DType::U8 => 1,
            DType::F16 | DType::BF16 | DType::I16 => 2,
            DType::F32 | DType::I32 => 4,
            DType::F64 | DType::I64 | DType::C64 => 8,
            DType::C128 => 16,
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One dimension: a known size, or a symbol `sN` whose range (if any) the graph declares.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Dim {
    Static(i64),
    Sym(u32),
}

impl fmt::Display for Dim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Dim::Static(n) => write!(f, "{n}"),
            Dim::Sym(s) => write!(f, "s{s}"),
        }
    }
}

/// The inclusive range a symbolic dim may take; `max == None` means unbounded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SymRange {
    pub min: i64,
    pub max: Option<i64>,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TensorType {
    pub dtype: DType,
    pub shape: Vec<Dim>,
}

impl TensorType {
    pub fn new(dtype: DType, shape: Vec<Dim>) -> Self {
        TensorType { dtype, shape }
    }

    pub fn fixed(dtype: DType, dims: &[i64]) -> Self {
        TensorType { dtype, shape: dims.iter().map(|&d| Dim::Static(d)).collect() }
    }

    pub fn scalar(dtype: DType) -> Self {
        TensorType { dtype, shape: Vec::new() }
    }

    pub fn rank(&self) -> usize {
        self.shape.len()
    }

    /// The dims as integers when every dim is static.
    pub fn static_dims(&self) -> Option<Vec<i64>> {
        self.shape
            .iter()
            .map(|d| match d {
                Dim::Static(n) => Some(*n),
                Dim::Sym(_) => None,
            })
            .collect()
    }

    /// Element count when static (and not overflowing i64).
    pub fn numel(&self) -> Option<i64> {
        checked_numel(&self.static_dims()?)
    }

    pub fn with_dtype(&self, dtype: DType) -> TensorType {
        TensorType { dtype, shape: self.shape.clone() }
    }

    /// Bytes of a static type (`None` when symbolic or when it overflows i64).
    pub fn byte_size(&self) -> Option<i64> {
        self.numel()?.checked_mul(self.dtype.size_bytes() as i64)
    }

    /// The verifier's size rule: the product of the non-zero static dims, times the element
    /// size, fits in i64. Zero dims are left out so that an empty tensor cannot hide a product
    /// that overflows: every partial product a pass or a lowering rule computes (strides,
    /// reduced extents, element counts) then fits in i64 too.
    pub fn size_fits(&self) -> bool {
        self.shape
            .iter()
            .filter_map(|d| match d {
                Dim::Static(n) if *n != 0 => Some(*n),
                _ => None,
            })
            .try_fold(self.dtype.size_bytes() as i64, |acc, d| acc.checked_mul(d))
            .is_some()
    }
}

impl fmt::Display for TensorType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}[", self.dtype)?;
        for (i, d) in self.shape.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{d}")?;
        }
        f.write_str("]")
    }
}

/// The product of `dims`, or `None` if it overflows i64 (a zero dim makes it 0, whatever
/// the other dims are).
pub fn checked_numel(dims: &[i64]) -> Option<i64> {
    if dims.contains(&0) {
        return Some(0);
    }
    dims.iter().try_fold(1i64, |acc, &d| acc.checked_mul(d))
}

/// Broadcasts two shapes with PyTorch's rules (align trailing dims; 1 stretches).
/// Symbolic dims broadcast only against 1 or the same symbol.
pub fn broadcast_shapes(a: &[Dim], b: &[Dim]) -> Option<Vec<Dim>> {
    let rank = a.len().max(b.len());
    let mut out = Vec::with_capacity(rank);
    for i in 0..rank {
        let da = if i + a.len() >= rank { Some(a[i + a.len() - rank]) } else { None };
        let db = if i + b.len() >= rank { Some(b[i + b.len() - rank]) } else { None };
        out.push(match (da, db) {
            (Some(x), None) | (None, Some(x)) => x,
            (Some(x), Some(y)) if x == y => x,
            (Some(Dim::Static(1)), Some(y)) => y,
            (Some(x), Some(Dim::Static(1))) => x,
            _ => return None,
        });
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dtype_names_round_trip() {
        for d in DType::ALL {
            assert_eq!(DType::from_name(d.name()), Some(d));
        }
        assert_eq!(DType::from_name("f128"), None);
    }

    #[test]
    fn broadcasting_follows_pytorch() {
        let s = |v: &[i64]| v.iter().map(|&x| Dim::Static(x)).collect::<Vec<_>>();
        assert_eq!(broadcast_shapes(&s(&[4, 1, 3]), &s(&[2, 1])), Some(s(&[4, 2, 3])));
        assert_eq!(broadcast_shapes(&s(&[]), &s(&[5])), Some(s(&[5])));
        assert_eq!(broadcast_shapes(&s(&[3]), &s(&[4])), None);
        let sym = vec![Dim::Sym(0), Dim::Static(8)];
        assert_eq!(broadcast_shapes(&sym, &s(&[1, 8])), Some(sym.clone()));
        assert_eq!(broadcast_shapes(&sym, &[Dim::Sym(1), Dim::Static(8)]), None);
    }
}
