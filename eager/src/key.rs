//! An op call's program key: what decides which one-op program runs it.
//!
//! It holds what the Python path's key holds (`torchtpu.device._dispatch._flatten`) and more:
//! the op, whether index checks are on, each tensor's dtype, sizes, strides, offset, conjugate
//! and negative bits and its storage's shape, every int, bool, enum and string, and a marker per
//! float (floats are inputs; their values stay out of the key unless the op bakes them,
//! `with_values`). So two calls with one native key make one Python key, and the program the
//! Python path chose for the first serves the second. Each argument starts with its kind, so no
//! two argument lists share a key.

/// A key: plain integers, hashed and compared whole.
pub type Key = Vec<i64>;

const NONE: i64 = 0;
const TENSOR: i64 = 1;
const CPU: i64 = 2;
const INT: i64 = 3;
const BOOL: i64 = 4;
const FLOAT: i64 = 5;
const ENUM: i64 = 6;
const LIST: i64 = 7;
const OUT: i64 = 8;
const STR: i64 = 9;

/// A tpu tensor argument as the shim describes it: how it views its storage.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct View<'a> {
    /// PyTorch's `c10::ScalarType` code.
    pub dtype: i32,
    pub sizes: &'a [i64],
    pub strides: &'a [i64],
    pub offset: i64,
    pub conj: bool,
    pub neg: bool,
    /// An out= argument: written, not read.
    pub out: bool,
}

/// What of a tpu tensor argument goes into the key: its view and its storage's element count
/// and shape (a view of one storage reads another program than the same view of a larger one).
pub struct TensorKey<'a> {
    pub view: View<'a>,
    pub storage_numel: i64,
    pub storage_shape: &'a [i64],
}

/// Writes a call's key, one argument after another in the schema's order.
pub struct KeyWriter {
    key: Key,
}

impl KeyWriter {
    /// The key of `op` (the shim's id of the operator) with index checks `checks`, for a call
    /// of about `n_args` arguments.
    pub fn new(op: u64, checks: bool, n_args: usize) -> KeyWriter {
        let mut key = Vec::with_capacity(8 + n_args * 8);
        key.push(op as i64);
        key.push(checks as i64);
        KeyWriter { key }
    }

    pub fn none(&mut self) {
        self.key.push(NONE);
    }

    pub fn tensor(&mut self, t: &TensorKey<'_>) {
        let (key, v) = (&mut self.key, &t.view);
        key.extend([if v.out { OUT } else { TENSOR }, v.dtype as i64, v.sizes.len() as i64]);
        key.extend_from_slice(v.sizes);
        key.extend_from_slice(v.strides);
        key.extend([v.offset, v.conj as i64 | (v.neg as i64) << 1, t.storage_numel, t.storage_shape.len() as i64]);
        key.extend_from_slice(t.storage_shape);
    }

    /// A 0-d CPU tensor of ScalarType `dtype`: a wrapped number (`x + 1`) or a scalar tensor.
    /// Its value is an input, not part of the key.
    pub fn cpu_scalar(&mut self, dtype: i32, wrapped: bool) {
        self.key.extend([CPU, dtype as i64, wrapped as i64]);
    }

    pub fn int(&mut self, v: i64) {
        self.key.extend([INT, v]);
    }

    pub fn bool(&mut self, v: bool) {
        self.key.extend([BOOL, v as i64]);
    }

    /// A float: only its place is keyed (its value is an input, or `with_values` for an op that
    /// bakes it).
    pub fn float(&mut self) {
        self.key.push(FLOAT);
    }

    pub fn enumeration(&mut self, v: i64) {
        self.key.extend([ENUM, v]);
    }

    /// A list of `len` values the op reads as a whole (the shim passes its length).
    pub fn list(&mut self, len: i64) {
        self.key.extend([LIST, len]);
    }

    /// A string's bytes (`approximate="tanh"`, `reduction` names, `rounding_mode`), eight to a
    /// key element after its length: no two strings share a key.
    pub fn string(&mut self, bytes: &[u8]) {
        self.key.extend([STR, bytes.len() as i64]);
        self.key.extend(bytes.chunks(8).map(|c| {
            let mut word = [0u8; 8];
            word[..c.len()].copy_from_slice(c);
            i64::from_le_bytes(word)
        }));
    }

    pub fn finish(self) -> Key {
        self.key
    }
}

/// `key` with the floats' bits appended: the key of a baked op's values.
pub fn with_values(key: &[i64], float_bits: &[u64]) -> Key {
    let mut out = key.to_vec();
    out.extend(float_bits.iter().map(|&b| b as i64));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view<'a>(sizes: &'a [i64], strides: &'a [i64]) -> View<'a> {
        View { dtype: 6, sizes, strides, offset: 0, conj: false, neg: false, out: false }
    }

    fn tensor<'a>(sizes: &'a [i64], strides: &'a [i64]) -> TensorKey<'a> {
        TensorKey { view: view(sizes, strides), storage_numel: sizes.iter().product(), storage_shape: sizes }
    }

    fn viewed(v: View<'_>) -> Key {
        key_of(|w| w.tensor(&TensorKey { view: v, storage_numel: 6, storage_shape: &[2, 3] }))
    }

    fn key_of(write: impl FnOnce(&mut KeyWriter)) -> Key {
        let mut w = KeyWriter::new(7, true, 2);
        write(&mut w);
        w.finish()
    }

    #[test]
    fn a_key_starts_with_the_op_and_the_checks_setting() {
        assert_eq!(KeyWriter::new(42, false, 0).finish(), vec![42, 0]);
        assert_ne!(KeyWriter::new(42, true, 0).finish(), KeyWriter::new(42, false, 0).finish());
    }

    #[test]
    fn strides_offset_and_view_bits_each_change_the_key() {
        let base = key_of(|w| w.tensor(&tensor(&[2, 3], &[3, 1])));
        assert_eq!(base, key_of(|w| w.tensor(&tensor(&[2, 3], &[3, 1]))));
        assert_ne!(base, key_of(|w| w.tensor(&tensor(&[2, 3], &[1, 2]))));
        let v = view(&[2, 3], &[3, 1]);
        assert_eq!(base, viewed(v));
        assert_ne!(base, viewed(View { offset: 1, ..v }));
        assert_ne!(base, viewed(View { conj: true, ..v }));
        assert_ne!(base, viewed(View { neg: true, ..v }));
        assert_ne!(base, viewed(View { out: true, ..v }));
        assert_ne!(base, viewed(View { dtype: 7, ..v }));
    }

    #[test]
    fn a_view_of_a_larger_storage_is_another_key() {
        let whole = key_of(|w| w.tensor(&tensor(&[4], &[1])));
        let part = key_of(|w| w.tensor(&TensorKey { storage_numel: 8, storage_shape: &[8], ..tensor(&[4], &[1]) }));
        assert_ne!(whole, part);
    }

    #[test]
    fn strings_are_keyed_by_every_byte_and_their_length() {
        let s = |text: &[u8]| key_of(|w| w.string(text));
        assert_eq!(s(b"tanh"), s(b"tanh"));
        assert_ne!(s(b"tanh"), s(b"none"));
        assert_ne!(s(b"a"), s(b"a\0"));
        assert_ne!(s(b"exactly8"), s(b"exactly8x"));
        assert_ne!(s(b"mean_reduction_a"), s(b"mean_reduction_b"));
    }

    #[test]
    fn kinds_keep_equal_payloads_apart() {
        let one = [key_of(|w| w.int(1)), key_of(|w| w.bool(true)), key_of(|w| w.enumeration(1)), key_of(|w| w.list(1))];
        for (i, a) in one.iter().enumerate() {
            for b in &one[i + 1..] {
                assert_ne!(a, b);
            }
        }
        assert_ne!(key_of(|w| w.none()), key_of(|w| w.float()));
        assert_ne!(key_of(|w| w.cpu_scalar(6, true)), key_of(|w| w.cpu_scalar(6, false)));
    }

    #[test]
    fn a_float_is_keyed_by_place_and_its_value_only_when_baked() {
        let k = key_of(|w| w.float());
        let (a, b) = (1.5f64.to_bits(), 2.5f64.to_bits());
        assert_ne!(with_values(&k, &[a]), with_values(&k, &[b]));
        assert_eq!(with_values(&k, &[a])[..k.len()], k[..]);
        assert_eq!(with_values(&k, &[]), k);
    }
}
