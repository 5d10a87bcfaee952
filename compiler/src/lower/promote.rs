//! PyTorch's type promotion (`torch.result_type`): dimensioned tensors outrank zero-dim
//! tensors, which outrank Python scalars, unless a lower-priority operand is of a higher
//! category (bool < integer < floating < complex). Used where the compute dtype differs from
//! the declared result dtype (comparisons); elsewhere the IR's result type already says it.

use crate::ir::DType;

/// An operand's role in promotion.
#[derive(Clone, Copy, Debug)]
pub enum Operand {
    /// A tensor of rank > 0.
    Dim(DType),
    /// A zero-dim tensor.
    ZeroDim(DType),
    /// A Python scalar (int -> i64, float -> default float, bool -> bool).
    Scalar(DType),
}

fn category(d: DType) -> u8 {
    match d {
        DType::Bool => 0,
        DType::I8 | DType::I16 | DType::I32 | DType::I64 | DType::U8 => 1,
        DType::F16 | DType::BF16 | DType::F32 | DType::F64 => 2,
        DType::C64 | DType::C128 => 3,
    }
}

/// `torch.promote_types` for two dtypes.
pub fn promote_types(a: DType, b: DType) -> DType {
    use DType::*;
    if a == b {
        return a;
    }
    match (category(a), category(b)) {
        (0, _) => b,
        (_, 0) => a,
        (1, 1) => {
            // u8 mixes with signed ints by widening to the next signed type that holds both.
            let rank = |d: DType| match d {
                I8 => 1,
                I16 => 2,
                I32 => 3,
                I64 => 4,
                _ => 0,
            };
            match (a, b) {
                (U8, I8) | (I8, U8) => I16,
                (U8, x) | (x, U8) => x,
                _ => {
                    if rank(a) > rank(b) {
                        a
                    } else {
                        b
                    }
                }
            }
        }
        (1, _) => b,
        (_, 1) => a,
        (2, 2) => match (a, b) {
            (F16, BF16) | (BF16, F16) => F32,
            _ => {
                let rank = |d: DType| match d {
                    F16 | BF16 => 1,
                    F32 => 2,
                    _ => 3,
                };
                if rank(a) >= rank(b) {
                    a
                } else {
                    b
                }
            }
        },
        (3, 3) => {
            if a == C128 || b == C128 {
                C128
            } else {
                C64
            }
        }
        (3, 2) => complex_of(a, b),
        (2, 3) => complex_of(b, a),
        _ => a,
    }
}

fn complex_of(c: DType, f: DType) -> DType {
    if c == DType::C128 || f == DType::F64 {
        DType::C128
    } else {
        DType::C64
    }
}

fn combine(higher: Option<DType>, lower: Option<DType>) -> Option<DType> {
    let (Some(h), Some(l)) = (higher, lower) else { return higher.or(lower) };
    Some(if category(h) == 3 {
        h
    } else if category(l) == 3 {
        if category(h) == 2 {
            complex_of(l, h)
        } else {
            l
        }
    } else if category(h) == 2 {
        h
    } else if h == DType::Bool || category(l) == 2 {
        promote_types(h, l)
    } else {
        h
    })
}

/// `torch.result_type` over the operands of one op. `default_float` is the dtype Python float
/// scalars take (torch.get_default_dtype(), normally f32).
pub fn result_type(operands: &[Operand], default_float: DType) -> Option<DType> {
    let fold = |it: &mut dyn Iterator<Item = DType>| it.reduce(promote_types);
    let dim = fold(&mut operands.iter().filter_map(|o| if let Operand::Dim(d) = o { Some(*d) } else { None }));
    let zero = fold(&mut operands.iter().filter_map(|o| if let Operand::ZeroDim(d) = o { Some(*d) } else { None }));
    let wrapped = fold(&mut operands.iter().filter_map(|o| match o {
        Operand::Scalar(d) if category(*d) == 2 => Some(default_float),
        Operand::Scalar(d) if category(*d) == 3 => {
            Some(if default_float == DType::F64 { DType::C128 } else { DType::C64 })
        }
        Operand::Scalar(d) => Some(*d),
        _ => None,
    }));
    combine(dim, combine(zero, wrapped))
}

#[cfg(test)]
mod tests {
    use super::*;
    use DType::*;
    use Operand::*;

    #[test]
    fn matches_torch_result_type() {
        // Each case checked against torch.result_type in PyTorch 2.15.
        assert_eq!(result_type(&[Dim(I64), Scalar(F64)], F32), Some(F32));
        assert_eq!(result_type(&[Dim(I32), Dim(I64)], F32), Some(I64));
        assert_eq!(result_type(&[Dim(U8), Dim(I8)], F32), Some(I16));
        assert_eq!(result_type(&[Dim(F16), Dim(BF16)], F32), Some(F32));
        assert_eq!(result_type(&[Dim(F16), ZeroDim(F64)], F32), Some(F16));
        assert_eq!(result_type(&[Dim(I32), ZeroDim(F64)], F32), Some(F64));
        assert_eq!(result_type(&[Dim(Bool), Scalar(I64)], F32), Some(I64));
        assert_eq!(result_type(&[Dim(I8), Scalar(I64)], F32), Some(I8));
        assert_eq!(result_type(&[Dim(Bool), Dim(Bool)], F32), Some(Bool));
        assert_eq!(result_type(&[Dim(F32), Dim(C64)], F32), Some(C64));
        assert_eq!(result_type(&[Dim(F64), Scalar(C64)], F32), Some(C128));
        assert_eq!(result_type(&[ZeroDim(I64), Scalar(F64)], F32), Some(F32));
    }
}
