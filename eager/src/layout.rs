//! Tensor geometry as PyTorch reads it.

/// Whether `strides` are row-major for `sizes` (PyTorch's rule: size-1 dims may have any stride).
pub fn contiguous(sizes: &[i64], strides: &[i64]) -> bool {
    let mut expected = 1;
    for (&n, &s) in sizes.iter().zip(strides).rev() {
        if n != 1 && s != expected {
            return false;
        }
        expected *= n.max(1);
    }
    true
}

#[cfg(test)]
mod tests {
    use super::contiguous;

    #[test]
    fn row_major_is_contiguous_and_a_transpose_is_not() {
        assert!(contiguous(&[2, 3], &[3, 1]));
        assert!(!contiguous(&[2, 3], &[1, 2]));
        assert!(contiguous(&[], &[]));
    }

    #[test]
    fn a_size_one_dim_may_have_any_stride() {
        assert!(contiguous(&[1, 3], &[99, 1]));
        assert!(contiguous(&[2, 1, 3], &[3, 7, 1]));
        assert!(!contiguous(&[2, 2, 3], &[3, 7, 1]));
    }

    #[test]
    fn an_empty_tensor_counts_its_zero_dims_as_one() {
        assert!(contiguous(&[0, 3], &[3, 1]));
    }
}
