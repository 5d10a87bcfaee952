//! Compiling hand-written StableHLO and running it; compile and run-time errors.

mod common;

use std::sync::Arc;
use std::time::Instant;

use common::*;
use torchtpu_runtime::{Client, CompileOptions, ElementType, Plugin, RuntimeError};

const ADD: &str = r#"func.func @main(%a: tensor<2x3xf32>, %b: tensor<2x3xf32>) -> tensor<2x3xf32> {
  %0 = stablehlo.add %a, %b : tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}"#;

const DOT_AND_SQUARE: &str = r#"func.func @main(%x: tensor<2x3xf32>, %w: tensor<3x4xf32>) -> (tensor<2x4xf32>, tensor<2x3xf32>) {
  %0 = stablehlo.dot_general %x, %w, contracting_dims = [1] x [0] : (tensor<2x3xf32>, tensor<3x4xf32>) -> tensor<2x4xf32>
  %1 = stablehlo.multiply %x, %x : tensor<2x3xf32>
  return %0, %1 : tensor<2x4xf32>, tensor<2x3xf32>
}"#;

const I64_COMPARE: &str = r#"func.func @main(%a: tensor<4xi64>, %b: tensor<4xi64>) -> (tensor<4xi64>, tensor<4xi1>) {
  %0 = stablehlo.subtract %a, %b : tensor<4xi64>
  %1 = stablehlo.compare GT, %a, %b : (tensor<4xi64>, tensor<4xi64>) -> tensor<4xi1>
  return %0, %1 : tensor<4xi64>, tensor<4xi1>
}"#;

#[test]
fn add_two_matrices() {
    let exe = client().compile(ADD, &CompileOptions::default()).unwrap();
    assert_eq!(exe.num_outputs(), 1);
    let a = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
    let b = [0.5, -1.0, 10.0, 0.0, 2.5, -6.0];
    let out = exe.execute(&[&upload_f32(&a, &[2, 3]), &upload_f32(&b, &[2, 3])]).unwrap();
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].element_type(), ElementType::F32);
    assert_eq!(out[0].dims(), [2, 3]);
    let expected: Vec<f32> = a.iter().zip(&b).map(|(x, y)| x + y).collect();
    assert_eq!(f32s(&out[0].to_host().unwrap()), expected);
}

#[test]
fn dot_general_with_two_outputs() {
    let exe = client().compile(DOT_AND_SQUARE, &CompileOptions::default()).unwrap();
    assert_eq!(exe.num_outputs(), 2);
    let x: Vec<f32> = (0..6).map(|i| i as f32 - 2.0).collect();
    let w: Vec<f32> = (0..12).map(|i| (i as f32) * 0.25).collect();
    let out = exe.execute(&[&upload_f32(&x, &[2, 3]), &upload_f32(&w, &[3, 4])]).unwrap();
    assert_eq!(out.len(), 2);
    assert_eq!(out[0].dims(), [2, 4]);
    assert_eq!(out[1].dims(), [2, 3]);

    let mut expected = vec![0.0f32; 8];
    for i in 0..2 {
        for j in 0..4 {
            expected[i * 4 + j] = (0..3).map(|k| x[i * 3 + k] * w[k * 4 + j]).sum();
        }
    }
    let got = f32s(&out[0].to_host().unwrap());
    for (g, e) in got.iter().zip(&expected) {
        assert!((g - e).abs() <= 1e-5 * e.abs().max(1.0), "{got:?} vs {expected:?}");
    }
    let squares: Vec<f32> = x.iter().map(|v| v * v).collect();
    assert_eq!(f32s(&out[1].to_host().unwrap()), squares);
}

#[test]
fn integer_and_predicate_outputs() {
    let exe = client().compile(I64_COMPARE, &CompileOptions::default()).unwrap();
    let a = [5, -3, 7, i64::MAX];
    let b = [2, -3, 9, 0];
    let out = exe.execute(&[&upload_i64(&a, &[4]), &upload_i64(&b, &[4])]).unwrap();
    assert_eq!(out[0].element_type(), ElementType::S64);
    assert_eq!(i64s(&out[0].to_host().unwrap()), [3, 0, -2, i64::MAX]);
    assert_eq!(out[1].element_type(), ElementType::Pred);
    assert_eq!(out[1].to_host().unwrap(), [1, 0, 0, 1]);
}

#[test]
fn outputs_feed_the_next_execution() {
    let exe = client().compile(ADD, &CompileOptions::default()).unwrap();
    let one = upload_f32(&[1.0; 6], &[2, 3]);
    let mut acc = exe.execute(&[&one, &one]).unwrap().remove(0);
    for _ in 0..3 {
        acc = exe.execute(&[&acc, &one]).unwrap().remove(0);
    }
    assert_eq!(f32s(&acc.to_host().unwrap()), [5.0; 6]);
}

#[test]
fn malformed_mlir_is_the_plugins_error() {
    let err = client().compile("func.func @main( this is not mlir", &CompileOptions::default()).unwrap_err();
    match &err {
        RuntimeError::Pjrt { call, message, .. } => {
            assert_eq!(*call, "PJRT_Client_Compile");
            assert!(message.contains("error"), "{message}");
        }
        other => panic!("expected a PJRT error, got {other:?}"),
    }
    // Unknown op: the plugin's parser names it.
    let bogus = "func.func @main(%a: tensor<2xf32>) -> tensor<2xf32> {\n  %0 = stablehlo.bogus %a : tensor<2xf32>\n  return %0 : tensor<2xf32>\n}";
    let err = client().compile(bogus, &CompileOptions::default()).unwrap_err();
    assert!(err.to_string().contains("stablehlo.bogus"), "{err}");
}

#[test]
fn invalid_options_are_rejected_before_the_plugin() {
    let err = client().compile(ADD, &CompileOptions::new(0, 1)).unwrap_err();
    assert!(matches!(err, RuntimeError::InvalidArgument(_)), "{err:?}");
}

#[test]
fn wrong_arguments_are_errors_not_crashes() {
    let exe = client().compile(ADD, &CompileOptions::default()).unwrap();
    let a = upload_f32(&[0.0; 6], &[2, 3]);
    let err = exe.execute(&[&a]).unwrap_err();
    assert_eq!(err.pjrt_code(), Some(3), "{err}");
    assert!(err.to_string().contains("expected 2"), "{err}");

    let wrong_type = upload_i64(&[0; 6], &[2, 3]);
    let err = exe.execute(&[&a, &wrong_type]).unwrap_err();
    assert!(matches!(err, RuntimeError::Pjrt { call: "PJRT_LoadedExecutable_Execute", .. }), "{err:?}");
}

#[test]
fn buffers_of_another_client_are_rejected() {
    let exe = client().compile(ADD, &CompileOptions::default()).unwrap();
    let other = Client::new(Plugin::load_default().unwrap()).unwrap();
    let dev = other.first_device().unwrap();
    let foreign = other.buffer_from_host(&f32_bytes(&[0.0; 6]), ElementType::F32, &[2, 3], &dev).unwrap();
    let mine = upload_f32(&[0.0; 6], &[2, 3]);
    let err = exe.execute(&[&mine, &foreign]).unwrap_err();
    assert!(matches!(err, RuntimeError::InvalidArgument(_)), "{err:?}");
    let err = client().buffer_from_host(&f32_bytes(&[0.0]), ElementType::F32, &[], &dev).unwrap_err();
    assert!(matches!(err, RuntimeError::InvalidArgument(_)), "{err:?}");
}

#[test]
fn an_executable_outlives_its_client_handle_and_runs_from_threads() {
    let exe = {
        let own = Client::new(Plugin::load_default().unwrap()).unwrap();
        let exe = Arc::new(own.compile(ADD, &CompileOptions::default()).unwrap());
        // Buffers must come from the executable's client; upload before dropping the handle.
        let dev = own.first_device().unwrap();
        let bufs: Vec<_> = (0..2)
            .map(|i| own.buffer_from_host(&f32_bytes(&[i as f32; 6]), ElementType::F32, &[2, 3], &dev).unwrap())
            .collect();
        (exe, bufs)
    };
    let (exe, bufs) = exe;
    let bufs = Arc::new(bufs);
    let handles: Vec<_> = (0..4)
        .map(|_| {
            let (exe, bufs) = (Arc::clone(&exe), Arc::clone(&bufs));
            std::thread::spawn(move || {
                let out = exe.execute(&[&bufs[0], &bufs[1]]).unwrap();
                f32s(&out[0].to_host().unwrap())
            })
        })
        .collect();
    for h in handles {
        assert_eq!(h.join().unwrap(), [1.0; 6]);
    }
}

/// Prints compile and execute times of the small modules: `cargo test -p torchtpu-runtime
/// --test execute -- --ignored --nocapture timings`.
#[test]
#[ignore]
fn timings() {
    let t = Instant::now();
    let plugin = Plugin::load_default().unwrap();
    let client = Client::new(plugin).unwrap();
    println!("plugin load + client create: {:?}", t.elapsed());
    for (name, text) in [("add", ADD), ("dot+square", DOT_AND_SQUARE)] {
        let t = Instant::now();
        let exe = client.compile(text, &CompileOptions::default()).unwrap();
        println!("{name}: compile {:?}", t.elapsed());
        let dev = client.first_device().unwrap();
        let x = client.buffer_from_host(&f32_bytes(&[1.0; 6]), ElementType::F32, &[2, 3], &dev).unwrap();
        let second = if name == "add" { [2, 3] } else { [3, 4] };
        let n = (second[0] * second[1]) as usize;
        let y = client.buffer_from_host(&f32_bytes(&vec![1.0; n]), ElementType::F32, &second, &dev).unwrap();
        exe.execute(&[&x, &y]).unwrap();
        let iters = 2000;
        let t = Instant::now();
        for _ in 0..iters {
            exe.execute(&[&x, &y]).unwrap();
        }
        println!("{name}: execute (device-resident args) {:?}/call", t.elapsed() / iters);
        let t = Instant::now();
        for _ in 0..iters {
            let a = client.buffer_from_host(&f32_bytes(&[1.0; 6]), ElementType::F32, &[2, 3], &dev).unwrap();
            let out = exe.execute(&[&a, &y]).unwrap();
            out[0].to_host().unwrap();
        }
        println!("{name}: upload + execute + download {:?}/call", t.elapsed() / iters);
    }
}
