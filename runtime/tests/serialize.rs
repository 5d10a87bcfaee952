//! Executables to bytes and back against the real plugin; the plugin binary's hash.

mod common;

use std::time::Instant;

use common::*;
use torchtpu_runtime::{CompileOptions, RuntimeError};

const DOT_AND_SQUARE: &str = r#"func.func @main(%x: tensor<2x3xf32>, %w: tensor<3x4xf32>) -> (tensor<2x4xf32>, tensor<2x3xf32>) {
  %0 = stablehlo.dot_general %x, %w, contracting_dims = [1] x [0] : (tensor<2x3xf32>, tensor<3x4xf32>) -> tensor<2x4xf32>
  %1 = stablehlo.multiply %x, %x : tensor<2x3xf32>
  return %0, %1 : tensor<2x4xf32>, tensor<2x3xf32>
}"#;

fn run(exe: &torchtpu_runtime::Executable) -> Vec<Vec<f32>> {
    let x: Vec<f32> = (0..6).map(|i| i as f32 - 2.5).collect();
    let w: Vec<f32> = (0..12).map(|i| (i as f32) * 0.25).collect();
    exe.execute(&[&upload_f32(&x, &[2, 3]), &upload_f32(&w, &[3, 4])])
        .unwrap()
        .iter()
        .map(|b| f32s(&b.to_host().unwrap()))
        .collect()
}

#[test]
fn serialize_deserialize_execute_gives_the_same_results() {
    let t = Instant::now();
    let exe = client().compile(DOT_AND_SQUARE, &CompileOptions::default()).unwrap();
    let compile = t.elapsed();
    let t = Instant::now();
    let bytes = exe.serialize().unwrap();
    let serialize = t.elapsed();
    assert!(!bytes.is_empty());
    let t = Instant::now();
    let loaded = client().deserialize_executable(&bytes).unwrap();
    let deserialize = t.elapsed();
    eprintln!("compile {compile:?}, serialize {serialize:?} ({} bytes), deserialize {deserialize:?}", bytes.len());
    assert_eq!(loaded.num_outputs(), 2);
    assert!(!exe.is_deserialized() && loaded.is_deserialized());
    assert_eq!(run(&loaded), run(&exe));
    // The same bytes load again (e.g. in another process) and run the same.
    let second = client().deserialize_executable(&bytes).unwrap();
    assert_eq!(run(&second), run(&exe));
}

/// Measured: the CPU plugin's serialization of a *deserialized* executable is smaller and
/// fails at run time ("Function wrapped_multiply not found"), so the runtime refuses it.
#[test]
fn a_deserialized_executable_does_not_serialize_again() {
    let exe = client().compile(DOT_AND_SQUARE, &CompileOptions::default()).unwrap();
    let loaded = client().deserialize_executable(&exe.serialize().unwrap()).unwrap();
    let err = loaded.serialize().unwrap_err();
    assert!(matches!(err, RuntimeError::InvalidArgument(_)), "{err}");
    assert!(err.to_string().contains("original bytes"), "{err}");
}

#[test]
fn garbage_and_empty_bytes_are_errors_not_crashes() {
    let err = client().deserialize_executable(&[]).unwrap_err();
    assert!(matches!(err, RuntimeError::InvalidArgument(_)), "{err}");
    let err = client().deserialize_executable(b"definitely not an executable").unwrap_err();
    assert!(matches!(err, RuntimeError::Pjrt { .. }), "{err}");
    eprintln!("garbage: {err}");
}

#[test]
fn plugin_binary_sha256_is_hex_and_stable() {
    let plugin = client().plugin();
    let t = Instant::now();
    let sha = plugin.binary_sha256().unwrap().to_owned();
    eprintln!("plugin sha256 {sha} in {:?}", t.elapsed());
    assert_eq!(sha.len(), 64);
    assert!(sha.bytes().all(|b| b.is_ascii_hexdigit()));
    assert!(plugin.binary_sha256_is_known());
    let t = Instant::now();
    assert_eq!(plugin.binary_sha256().unwrap(), sha);
    assert!(t.elapsed().as_millis() < 5, "second call is cached");
}
