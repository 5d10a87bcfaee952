//! What the lowering table parameterises a family rule by, typed per family: the StableHLO op
//! it emits, a comparison direction, which reduction, which polynomial, ... A rule asks for
//! its own kind (`n.param::<Cmp>()?`), so a table line that gives a rule the wrong kind is a
//! registry error naming the op, and a misspelt variant does not compile. Each variant keeps
//! the text listings print (`--list-ops`, `docs/ops.md`).

use std::fmt;

pub use super::emitter::Cmp;

/// Declares a parameter kind: its variants, their listing text and its `RuleParam` variant.
macro_rules! kinds {
    ($($(#[$doc:meta])* $kind:ident { $($variant:ident = $text:literal),+ $(,)? })+) => {
        $(
            $(#[$doc])*
            #[derive(Clone, Copy, Debug, PartialEq, Eq)]
            pub enum $kind { $($variant),+ }

            impl $kind {
                pub const fn text(self) -> &'static str {
                    match self { $($kind::$variant => $text),+ }
                }
            }

            impl FromParam for $kind {
                fn from_param(p: RuleParam) -> Option<Self> {
                    match p { RuleParam::$kind(k) => Some(k), _ => None }
                }
            }
        )+

        /// A family rule's parameter (one kind per family).
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub enum RuleParam {
            /// The StableHLO or CHLO op the rule emits (a `lower::names` constant).
            Emit(&'static str),
            /// A comparison's direction.
            Cmp(Cmp),
            $($kind($kind)),+
        }

        impl fmt::Display for RuleParam {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                match self {
                    RuleParam::Emit(op) => f.write_str(op),
                    RuleParam::Cmp(c) => f.write_str(c.name()),
                    $(RuleParam::$kind(k) => f.write_str(k.text())),+
                }
            }
        }
    };
}

/// A parameter kind a rule can ask its node for.
pub trait FromParam: Sized {
    fn from_param(p: RuleParam) -> Option<Self>;
}

/// The op a rule emits.
impl FromParam for &'static str {
    fn from_param(p: RuleParam) -> Option<Self> {
        match p {
            RuleParam::Emit(op) => Some(op),
            _ => None,
        }
    }
}

impl FromParam for Cmp {
    fn from_param(p: RuleParam) -> Option<Self> {
        match p {
            RuleParam::Cmp(c) => Some(c),
            _ => None,
        }
    }
}

kinds! {
    /// The larger or the smaller (maximum, fmax, cummax, ...).
    Extreme { Max = "max", Min = "min" }
    /// Which bounds a clamp has.
    Clamp { Min = "min", Max = "max", MinMax = "min_max" }
    /// Which class of float a predicate tests.
    Classify { IsNan = "isnan", IsInf = "isinf", IsFinite = "isfinite" }
    /// The base of a logarithm.
    LogBase { Two = "2", Ten = "10" }
    /// How a reduction combines (sum, amax, any, the variance of `prims.var`, ...).
    Reduction { Sum = "sum", Mean = "mean", Prod = "prod", Max = "max", Min = "min", Or = "or", And = "and", Var = "var" }
    /// A reduction that also (or only) returns indices.
    ArgReduction { ArgMax = "argmax", ArgMin = "argmin", Max = "max", Min = "min" }
    /// Where a fill takes its value: a constant, or the attribute of that name.
    Fill { Zero = "0", One = "1", FillValue = "fill_value", S = "s" }
    /// The orthogonal polynomial family.
    Polynomial {
        ChebyshevT = "chebyshev_polynomial_t",
        ChebyshevU = "chebyshev_polynomial_u",
        ChebyshevV = "chebyshev_polynomial_v",
        ChebyshevW = "chebyshev_polynomial_w",
        ShiftedChebyshevT = "shifted_chebyshev_polynomial_t",
        ShiftedChebyshevU = "shifted_chebyshev_polynomial_u",
        ShiftedChebyshevV = "shifted_chebyshev_polynomial_v",
        ShiftedChebyshevW = "shifted_chebyshev_polynomial_w",
        HermiteH = "hermite_polynomial_h",
        HermiteHe = "hermite_polynomial_he",
        LaguerreL = "laguerre_polynomial_l",
        LegendreP = "legendre_polynomial_p",
    }
    /// The special function.
    Special {
        BesselI0 = "bessel_i0",
        BesselI0e = "bessel_i0e",
        BesselI1 = "bessel_i1",
        Erfcx = "erfcx",
        Ndtri = "ndtri",
        SphericalBesselJ0 = "spherical_bessel_j0",
    }
    /// softmax or log_softmax.
    Softmax { Plain = "softmax", Log = "log" }
    /// split (several pieces along a dim) or unbind (every index, the dim removed).
    Split { Split = "split", Unbind = "unbind" }
    /// The part of a complex tensor.
    Part { Real = "real", Imag = "imag" }
    /// What a scattered update does to the destination.
    Scatter { Add = "add", Replace = "replace" }
    /// select_scatter (one index) or slice_scatter (a range).
    SliceScatter { Select = "select", Slice = "slice" }
    /// Which running reduction.
    Cumulative { Sum = "sum", Prod = "prod" }
    /// median, or nanmedian (NaNs skipped).
    Median { Median = "median", NanMedian = "nanmedian" }
    /// searchsorted, or bucketize (its arguments the other way round).
    Search { SearchSorted = "searchsorted", Bucketize = "bucketize" }
    /// gcd or lcm.
    Gcd { Gcd = "gcd", Lcm = "lcm" }
    /// The legacy `triangular_solve` (returns the solution and a copy of A).
    Triangular { Legacy = "legacy" }
    /// Which batch norm: functional (training), legit (training, in place), no_training.
    BatchNorm { Functional = "functional", Legit = "legit", NoTraining = "no_training" }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rule_gets_only_its_own_kind() {
        let p = RuleParam::Reduction(Reduction::Max);
        assert_eq!(Reduction::from_param(p), Some(Reduction::Max));
        assert_eq!(Extreme::from_param(p), None);
        assert_eq!(<&str>::from_param(p), None);
        assert_eq!(p.to_string(), "max");
        assert_eq!(RuleParam::Cmp(Cmp::Lt).to_string(), "LT");
        assert_eq!(RuleParam::Emit(crate::lower::names::hlo::TANH).to_string(), crate::lower::names::hlo::TANH);
    }
}
