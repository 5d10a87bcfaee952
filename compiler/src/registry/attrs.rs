//! The attribute schema, at the IR floor: every attribute name the verifier and the lowering
//! read, declared once with the kind of value it holds ([`AttrKey`]). A read through a key is
//! typed (`n.get(DIM)?` is an `i64`, `n.get(DIM_LIST)?` a `Vec<i64>`), so a misspelt name does
//! not compile and a name read as two kinds is two keys. Signatures list their required
//! attributes as keys, and the verifier checks the kind as well as the presence.
//!
//! The kinds accept what PyTorch's schemas let an exporter write for them: an int where a
//! bool is meant, one int where a list is (`dim=1` for `dim=[1]`), any number where a float is.

use std::collections::BTreeMap;
use std::marker::PhantomData;

use crate::ir::Attr;

/// What an attribute must hold, for the verifier and the listing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttrKind {
    Int,
    IntList,
    Number,
    Bool,
    Str,
    /// A tensor literal, a scalar or `none`: read raw by its rule.
    Any,
}

impl AttrKind {
    /// Whether `a` is a value of this kind.
    pub fn accepts(self, a: &Attr) -> bool {
        match self {
            AttrKind::Int => Int::read(a).is_some(),
            AttrKind::IntList => IntList::read(a).is_some(),
            AttrKind::Number => Number::read(a).is_some(),
            AttrKind::Bool => Bool::read(a).is_some(),
            AttrKind::Str => Str::read(a).is_some(),
            AttrKind::Any => true,
        }
    }

    /// "an int", "an int list", ...: for errors.
    pub fn describe(self) -> &'static str {
        match self {
            AttrKind::Int => "an int",
            AttrKind::IntList => "an int list",
            AttrKind::Number => "a number",
            AttrKind::Bool => "a bool",
            AttrKind::Str => "a string",
            AttrKind::Any => "any value",
        }
    }
}

/// A kind as a type: what a typed read returns, and what a typed write takes.
pub trait Kind {
    const KIND: AttrKind;
    type Value<'a>;
    /// What a pass writes: the value `write` makes an attribute of this kind.
    type Owned;
    fn read(a: &Attr) -> Option<Self::Value<'_>>;
    fn write(v: Self::Owned) -> Attr;
}

pub struct Int;
pub struct IntList;
pub struct Number;
pub struct Bool;
pub struct Str;
pub struct Any;

impl Kind for Int {
    const KIND: AttrKind = AttrKind::Int;
    type Value<'a> = i64;
    type Owned = i64;
    fn read(a: &Attr) -> Option<i64> {
        match a {
            Attr::Int(i) => Some(*i),
            Attr::Bool(b) => Some(*b as i64),
            _ => None,
        }
    }
    fn write(v: i64) -> Attr {
        Attr::Int(v)
    }
}

impl Kind for IntList {
    const KIND: AttrKind = AttrKind::IntList;
    type Value<'a> = Vec<i64>;
    type Owned = Vec<i64>;
    fn read(a: &Attr) -> Option<Vec<i64>> {
        match a {
            Attr::IntList(v) => Some(v.clone()),
            Attr::Int(i) => Some(vec![*i]),
            _ => None,
        }
    }
    fn write(v: Vec<i64>) -> Attr {
        Attr::IntList(v)
    }
}

impl Kind for Number {
    const KIND: AttrKind = AttrKind::Number;
    type Value<'a> = f64;
    type Owned = f64;
    fn read(a: &Attr) -> Option<f64> {
        a.as_number()
    }
    fn write(v: f64) -> Attr {
        Attr::Float(v)
    }
}

impl Kind for Bool {
    const KIND: AttrKind = AttrKind::Bool;
    type Value<'a> = bool;
    type Owned = bool;
    fn read(a: &Attr) -> Option<bool> {
        match a {
            Attr::Bool(b) => Some(*b),
            Attr::Int(i) => Some(*i != 0),
            _ => None,
        }
    }
    fn write(v: bool) -> Attr {
        Attr::Bool(v)
    }
}

impl Kind for Str {
    const KIND: AttrKind = AttrKind::Str;
    type Value<'a> = &'a str;
    type Owned = String;
    fn read(a: &Attr) -> Option<&str> {
        match a {
            Attr::Str(s) => Some(s),
            _ => None,
        }
    }
    fn write(v: String) -> Attr {
        Attr::Str(v)
    }
}

impl Kind for Any {
    const KIND: AttrKind = AttrKind::Any;
    type Value<'a> = &'a Attr;
    type Owned = Attr;
    fn read(a: &Attr) -> Option<&Attr> {
        Some(a)
    }
    fn write(v: Attr) -> Attr {
        v
    }
}

/// An attribute name and the kind of its value.
pub struct AttrKey<K> {
    pub name: &'static str,
    kind: PhantomData<K>,
}

impl<K> Clone for AttrKey<K> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<K> Copy for AttrKey<K> {}

impl<K: Kind> AttrKey<K> {
    pub const fn new(name: &'static str) -> Self {
        AttrKey { name, kind: PhantomData }
    }

    /// The attribute `name = value`, typed: for a node's attribute map.
    pub fn entry(self, value: K::Owned) -> (String, Attr) {
        (self.name.to_string(), K::write(value))
    }

    /// Writes `name = value` into a node's attributes, typed; returns what it replaced.
    pub fn set(self, attrs: &mut BTreeMap<String, Attr>, value: K::Owned) -> Option<Attr> {
        attrs.insert(self.name.to_string(), K::write(value))
    }

    /// The key without its type: what a signature lists.
    pub const fn spec(self) -> AttrSpec {
        AttrSpec { name: self.name, kind: K::KIND }
    }
}

/// A declared attribute, its kind as a value (signatures, the verifier).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttrSpec {
    pub name: &'static str,
    pub kind: AttrKind,
}

/// Declares the keys and [`ALL`], one line each.
macro_rules! keys {
    ($($key:ident: $name:literal => $kind:ident,)+) => {
        $(pub const $key: AttrKey<$kind> = AttrKey::new($name);)+
        /// Every declared key.
        pub const ALL: &[AttrSpec] = &[$($key.spec()),+];
    };
}

keys! {
    ACCUMULATE: "accumulate" => Bool,
    ALPHA: "alpha" => Any,
    APPROXIMATE: "approximate" => Str,
    BETA: "beta" => Any,
    BINS: "bins" => Int,
    BYTES: "bytes" => Int,
    BROADCAST_DIMENSIONS: "broadcast_dimensions" => IntList,
    CHANNEL_DIM: "channel_dim" => Int,
    CHANNELS_LAST: "channels_last" => Bool,
    CONCAT_DIM: "concat_dim" => Int,
    CONSUMER: "consumer" => Str,
    CORRECTION: "correction" => Number,
    COLLECTIVE: "collective" => Str,
    COUNT_INCLUDE_PAD: "count_include_pad" => Bool,
    DECIMALS: "decimals" => Int,
    DESCENDING: "descending" => Bool,
    DILATION: "dilation" => IntList,
    DIM: "dim" => Int,
    DIM_LIST: "dim" => IntList,
    DIM0: "dim0" => Int,
    DIM1: "dim1" => Int,
    DIMS: "dims" => IntList,
    DIVISOR_OVERRIDE: "divisor_override" => Int,
    DTYPE: "dtype" => Any,
    END: "end" => Number,
    END_INT: "end" => Int,
    EPS: "eps" => Number,
    FILL_VALUE: "fill_value" => Number,
    FILL_VALUE_INT: "fill_value" => Int,
    FORM: "form" => Str,
    FORWARD: "forward" => Bool,
    GROUP_SIZE: "group_size" => Int,
    GROUPS: "groups" => Int,
    GROUPS_LIST: "groups" => IntList,
    HALF_TO_FLOAT: "half_to_float" => Bool,
    HIGH: "high" => Number,
    HIGH_INT: "high" => Int,
    INCLUDE_SELF: "include_self" => Bool,
    INDEX: "index" => Int,
    INDICES: "indices" => Any,
    K: "k" => Int,
    KEEPDIM: "keepdim" => Bool,
    KERNEL_SIZE: "kernel_size" => IntList,
    LARGEST: "largest" => Bool,
    LAST_DIM_SIZE: "last_dim_size" => Int,
    LEFT: "left" => Bool,
    LOW: "low" => Number,
    LOW_INT: "low" => Int,
    MAX: "max" => Number,
    MAX_VAL: "max_val" => Number,
    MEAN: "mean" => Number,
    MEMORY_FORMAT: "memory_format" => Str,
    MIN: "min" => Number,
    MIN_VAL: "min_val" => Number,
    MOMENTUM: "momentum" => Number,
    N: "n" => Int,
    NORMALIZATION: "normalization" => Int,
    NORMALIZED_SHAPE: "normalized_shape" => IntList,
    ONESIDED: "onesided" => Bool,
    OTHER: "other" => Any,
    OUTPUT_PADDING: "output_padding" => IntList,
    P: "p" => Number,
    PAD: "pad" => IntList,
    PADDING: "padding" => IntList,
    REDUCE: "reduce" => Str,
    REDUCE_OP: "reduce_op" => Str,
    REGION: "region" => Int,
    RIGHT: "right" => Bool,
    ROUNDING_MODE: "rounding_mode" => Str,
    S: "s" => Number,
    SHARDING: "sharding" => Str,
    SIDE: "side" => Str,
    SIZE: "size" => IntList,
    SIZE_INT: "size" => Int,
    SPLIT_DIM: "split_dim" => Int,
    SRC: "src" => Int,
    START: "start" => Int,
    START_NUMBER: "start" => Number,
    STD: "std" => Number,
    STEP: "step" => Int,
    STEP_NUMBER: "step" => Number,
    STORAGE_OFFSET: "storage_offset" => Int,
    STRIDE: "stride" => IntList,
    TRAIN: "train" => Bool,
    TRAINING: "training" => Bool,
    TRANSPOSE: "transpose" => Bool,
    TRANSPOSE_A: "transpose_a" => Bool,
    TRANSPOSE_B: "transpose_b" => Bool,
    TRANSPOSED: "transposed" => Bool,
    UNBIASED: "unbiased" => Bool,
    UNITRIANGULAR: "unitriangular" => Bool,
    UPPER: "upper" => Bool,
    VALUE: "value" => Any,
    VALUE_NUMBER: "value" => Number,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_accept_what_an_exporter_writes_for_them() {
        assert!(AttrKind::Int.accepts(&Attr::Bool(true)));
        assert!(AttrKind::IntList.accepts(&Attr::Int(1)));
        assert!(AttrKind::Number.accepts(&Attr::Int(2)));
        assert!(!AttrKind::Int.accepts(&Attr::Float(1.5)));
        assert!(!AttrKind::IntList.accepts(&Attr::Str("x".into())));
        assert!(!AttrKind::Str.accepts(&Attr::None));
        assert_eq!(IntList::read(&Attr::Int(3)), Some(vec![3]));
    }

    #[test]
    fn a_name_has_one_key_per_kind() {
        for (i, a) in ALL.iter().enumerate() {
            for b in &ALL[i + 1..] {
                assert!(a != b, "{} declared twice with the kind {:?}", a.name, a.kind);
            }
        }
    }
}

/// The values of `tpu.matmul`'s `form` (`FORM`), which the `host-matmul` pass writes from the
/// target's measured choice and the lowering reads (`lower/ops/host_matmul.rs`).
pub mod matmul_form {
    /// ATen's CPU GEMM, a typed-FFI custom call (`torchtpu_aten_matmul_*`).
    pub const ATEN: &str = "aten";
    /// XLA's `dot_general`.
    pub const XLA: &str = "xla";
}

/// The values of `tpu.quantized_linear`'s `form` (`FORM`), which the `quantized-linear` pass
/// writes and the lowering reads (`lower/ops/quant.rs`).
pub mod quantized_linear_form {
    /// torchtpu's int8 host kernel, a typed-FFI custom call.
    pub const HOST_KERNEL: &str = "host-kernel";
    /// Convert the weight, XLA's dot, the scale.
    pub const DEQUANTIZE: &str = "dequantize";
}
