//! torchtpu's host kernels as XLA custom calls: registered through the CPU plugin's FFI
//! extension, called from a compiled program, checked against a float64 reference; and a
//! malformed call is an error from XLA, not a crash.

mod common;

use std::time::Instant;

use common::*;
use torchtpu_runtime::host_kernels::INT8_MATMUL;
use torchtpu_runtime::{CompileOptions, ElementType};

fn program(m: usize, n: usize, k: usize) -> String {
    format!(
        r#"func.func @main(%x: tensor<{m}x{k}xf32>, %w: tensor<{n}x{k}xi8>, %s: tensor<{n}xf32>) -> tensor<{m}x{n}xf32> {{
  %0 = stablehlo.custom_call @{INT8_MATMUL}(%x, %w, %s) {{api_version = 4 : i32, backend_config = {{}}}} : (tensor<{m}x{k}xf32>, tensor<{n}x{k}xi8>, tensor<{n}xf32>) -> tensor<{m}x{n}xf32>
  return %0 : tensor<{m}x{n}xf32>
}}"#
    )
}

fn inputs(m: usize, n: usize, k: usize) -> (Vec<f32>, Vec<i8>, Vec<f32>) {
    let x = (0..m * k).map(|i| ((i * 37 % 101) as f32 - 50.0) / 25.0).collect();
    let w = (0..n * k).map(|i| ((i * 91 % 255) as i32 - 127) as i8).collect();
    let s = (0..n).map(|j| 0.01 + j as f32 * 1e-4).collect();
    (x, w, s)
}

/// The result, and a float64 reference with each entry's bound: f32 sums of K products err by
/// up to ~K·eps of the sum of their magnitudes; 1e-6 of that sum is well above what a
/// reordered f32 sum gives for these sizes and far below a wrong element.
fn run(m: usize, n: usize, k: usize) -> (Vec<f32>, Vec<(f32, f32)>) {
    assert!(client().plugin().host_kernels().unwrap().contains(&INT8_MATMUL));
    let exe = client().compile(&program(m, n, k), &CompileOptions::default()).unwrap();
    let (x, w, s) = inputs(m, n, k);
    let dev = device();
    let xb = client().buffer_from_host(&f32_bytes(&x), ElementType::F32, &[m as i64, k as i64], &dev).unwrap();
    let wbytes: Vec<u8> = w.iter().map(|v| *v as u8).collect();
    let wb = client().buffer_from_host(&wbytes, ElementType::S8, &[n as i64, k as i64], &dev).unwrap();
    let sb = client().buffer_from_host(&f32_bytes(&s), ElementType::F32, &[n as i64], &dev).unwrap();
    let out = exe.execute(&[&xb, &wb, &sb]).unwrap();
    let got = f32s(&out[0].to_host().unwrap());
    let mut want = vec![(0f32, 0f32); m * n];
    for i in 0..m {
        for j in 0..n {
            let term = |t: usize| f64::from(x[i * k + t]) * f64::from(w[j * k + t]);
            let acc: f64 = (0..k).map(term).sum();
            let magnitude: f64 = (0..k).map(|t| term(t).abs()).sum();
            want[i * n + j] = ((acc * f64::from(s[j])) as f32, (1e-6 * magnitude * f64::from(s[j])) as f32);
        }
    }
    (got, want)
}

#[test]
fn int8_matmul_custom_call_matches_a_float64_reference() {
    for (m, n, k) in [(1, 9, 5), (1, 2048, 768), (4, 300, 96)] {
        let (got, want) = run(m, n, k);
        for (g, (e, bound)) in got.iter().zip(&want) {
            assert!((g - e).abs() <= *bound, "{g} vs {e} (bound {bound}) at M={m} N={n} K={k}");
        }
    }
}

#[test]
fn a_call_with_wrong_operand_types_is_an_execution_error() {
    // The scale as int8: the handler refuses it and XLA reports the handler's message.
    let text = program(1, 4, 8)
        .replace("%s: tensor<4xf32>", "%s: tensor<4xi8>")
        .replace("tensor<4x8xi8>, tensor<4xf32>)", "tensor<4x8xi8>, tensor<4xi8>)");
    assert!(client().plugin().host_kernels().unwrap().contains(&INT8_MATMUL));
    let exe = client().compile(&text, &CompileOptions::default()).unwrap();
    let dev = device();
    let xb = client().buffer_from_host(&f32_bytes(&[1.0; 8]), ElementType::F32, &[1, 8], &dev).unwrap();
    let wb = client().buffer_from_host(&[1u8; 32], ElementType::S8, &[4, 8], &dev).unwrap();
    let sb = client().buffer_from_host(&[1u8; 4], ElementType::S8, &[4], &dev).unwrap();
    let err = exe.execute(&[&xb, &wb, &sb]).map(|o| o[0].to_host()).err().map(|e| e.to_string());
    let err = err.unwrap_or_default();
    assert!(err.contains("scale must be f32[4]"), "{err}");
}

#[test]
fn aten_matmul_without_the_device_shim_is_an_execution_error() {
    // ATen's kernels are registered with the plugin, but only the device shim (loaded with
    // torch) can run them: a call here fails with the handler's message, not a crash.
    use torchtpu_runtime::host_kernels::aten::{installed, MATMUL_NT};
    assert!(client().plugin().host_kernels().unwrap().contains(&MATMUL_NT));
    assert!(!installed());
    let text = format!(
        r#"func.func @main(%a: tensor<2x4xf32>, %b: tensor<3x4xf32>) -> tensor<2x3xf32> {{
  %0 = stablehlo.custom_call @{MATMUL_NT}(%a, %b) {{api_version = 4 : i32, backend_config = {{}}}} : (tensor<2x4xf32>, tensor<3x4xf32>) -> tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}}"#
    );
    let exe = client().compile(&text, &CompileOptions::default()).unwrap();
    let dev = device();
    let a = client().buffer_from_host(&f32_bytes(&[1.0; 8]), ElementType::F32, &[2, 4], &dev).unwrap();
    let b = client().buffer_from_host(&f32_bytes(&[1.0; 12]), ElementType::F32, &[3, 4], &dev).unwrap();
    let err = exe.execute(&[&a, &b]).map(|o| o[0].to_host()).err().map(|e| e.to_string()).unwrap_or_default();
    assert!(err.contains("ATen's host kernels are not installed"), "{err}");
}

/// `cargo test --release -p torchtpu-runtime --test host_kernels -- --ignored --nocapture`:
/// one product `[M, K] x [N, K]^T` as the custom call, as XLA's f32 dot, and as XLA's
/// convert-then-dot of the int8 weight, interleaved (benchmarks, not asserted).
#[test]
#[ignore = "timing: run with --release -- --ignored --nocapture"]
fn int8_matmul_timing() {
    assert!(client().plugin().host_kernels().unwrap().contains(&INT8_MATMUL));
    for (m, n, k) in [(1, 2048, 768), (1, 768, 2048), (1, 32000, 768), (8, 2048, 768), (64, 2048, 768)] {
        let f32_dot = format!(
            r#"func.func @main(%x: tensor<{m}x{k}xf32>, %w: tensor<{n}x{k}xf32>) -> tensor<{m}x{n}xf32> {{
  %0 = stablehlo.dot_general %x, %w, contracting_dims = [1] x [1] : (tensor<{m}x{k}xf32>, tensor<{n}x{k}xf32>) -> tensor<{m}x{n}xf32>
  return %0 : tensor<{m}x{n}xf32>
}}"#
        );
        let convert_dot = format!(
            r#"func.func @main(%x: tensor<{m}x{k}xf32>, %w: tensor<{n}x{k}xi8>, %s: tensor<{n}xf32>) -> tensor<{m}x{n}xf32> {{
  %c = stablehlo.convert %w : (tensor<{n}x{k}xi8>) -> tensor<{n}x{k}xf32>
  %0 = stablehlo.dot_general %x, %c, contracting_dims = [1] x [1] : (tensor<{m}x{k}xf32>, tensor<{n}x{k}xf32>) -> tensor<{m}x{n}xf32>
  %b = stablehlo.broadcast_in_dim %s, dims = [1] : (tensor<{n}xf32>) -> tensor<{m}x{n}xf32>
  %1 = stablehlo.multiply %0, %b : tensor<{m}x{n}xf32>
  return %1 : tensor<{m}x{n}xf32>
}}"#
        );
        let (x, w, s) = inputs(m, n, k);
        let dev = device();
        let xb = client().buffer_from_host(&f32_bytes(&x), ElementType::F32, &[m as i64, k as i64], &dev).unwrap();
        let wbytes: Vec<u8> = w.iter().map(|v| *v as u8).collect();
        let wb = client().buffer_from_host(&wbytes, ElementType::S8, &[n as i64, k as i64], &dev).unwrap();
        let wf: Vec<f32> = w.iter().map(|v| f32::from(*v)).collect();
        let wfb = client().buffer_from_host(&f32_bytes(&wf), ElementType::F32, &[n as i64, k as i64], &dev).unwrap();
        let sb = client().buffer_from_host(&f32_bytes(&s), ElementType::F32, &[n as i64], &dev).unwrap();
        let kernel = client().compile(&program(m, n, k), &CompileOptions::default()).unwrap();
        let dot = client().compile(&f32_dot, &CompileOptions::default()).unwrap();
        let conv = client().compile(&convert_dot, &CompileOptions::default()).unwrap();
        let mut best = [f64::MAX; 3];
        for _ in 0..30 {
            let runs: [(&torchtpu_runtime::Executable, Vec<&torchtpu_runtime::Buffer>); 3] =
                [(&kernel, vec![&xb, &wb, &sb]), (&dot, vec![&xb, &wfb]), (&conv, vec![&xb, &wb, &sb])];
            for (i, (exe, args)) in runs.iter().enumerate() {
                let t = Instant::now();
                let _ = exe.execute(args).unwrap()[0].to_host().unwrap();
                best[i] = best[i].min(t.elapsed().as_secs_f64() * 1e3);
            }
        }
        println!(
            "M={m} N={n} K={k}: int8 kernel {:.3} ms, f32 dot {:.3} ms, convert+dot {:.3} ms",
            best[0], best[1], best[2]
        );
    }
}
