//! Small StableHLO programs for the cache tests: each `n` gives a distinct module.

/// `-x * x` over `tensor<Nxf32>`.
pub fn neg_square(n: usize) -> String {
    format!(
        r#"func.func @main(%a: tensor<{n}xf32>) -> tensor<{n}xf32> {{
  %0 = stablehlo.negate %a : tensor<{n}xf32>
  %1 = stablehlo.multiply %0, %a : tensor<{n}xf32>
  return %1 : tensor<{n}xf32>
}}"#
    )
}

/// A dense layer: `tanh(x @ w + b)` with x: MxK, w: KxN, b: N.
pub fn dense(m: usize, k: usize, n: usize) -> String {
    format!(
        r#"func.func @main(%x: tensor<{m}x{k}xf32>, %w: tensor<{k}x{n}xf32>, %b: tensor<{n}xf32>) -> tensor<{m}x{n}xf32> {{
  %0 = stablehlo.dot_general %x, %w, contracting_dims = [1] x [0] : (tensor<{m}x{k}xf32>, tensor<{k}x{n}xf32>) -> tensor<{m}x{n}xf32>
  %1 = stablehlo.broadcast_in_dim %b, dims = [1] : (tensor<{n}xf32>) -> tensor<{m}x{n}xf32>
  %2 = stablehlo.add %0, %1 : tensor<{m}x{n}xf32>
  %3 = stablehlo.tanh %2 : tensor<{m}x{n}xf32>
  return %3 : tensor<{m}x{n}xf32>
}}"#
    )
}
