//! Device-resident execution (what the eager `tpu` device and compiled graphs on tpu tensors
//! use): `Engine::upload`, `CompiledGraph::execute_buffers` with and without waiting, chained
//! executions that never leave the device, and the checks on what goes in.

use torchtpu_compiler::ir::{parse_graph, DType};
use torchtpu_engine::{default_engine, EngineError, Options};

fn isolated_cache() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let dir = std::env::temp_dir().join(format!("torchtpu-engine-device-tests-{}", std::process::id()));
        std::env::set_var("TORCHTPU_CACHE_DIR", dir);
    });
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn f32s(bytes: &[u8]) -> Vec<f32> {
    bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}

const AXPY: &str = "graph @axpy(%x: f32[4], %y: f32[4]) -> (f32[4]) {
  %m = aten.mul.Tensor(%x) {other = 2.0} : f32[4]
  %r = aten.add.Tensor(%m, %y) {alpha = 1} : f32[4]
  return %r
}";

#[test]
fn outputs_feed_the_next_execution_on_the_device() {
    isolated_cache();
    let engine = default_engine().expect("the CPU plugin loads");
    let program = engine.compile(&parse_graph(AXPY).unwrap(), &Options::default()).unwrap();
    let x = engine.upload(&f32_bytes(&[1.0, 2.0, 3.0, 4.0]), DType::F32, &[4]).unwrap();
    let y = engine.upload(&f32_bytes(&[10.0, 20.0, 30.0, 40.0]), DType::F32, &[4]).unwrap();
    let once = program.execute_buffers(&[&x, &y], true).unwrap().remove(0);
    // Asynchronous launch: the output is read (and so waited for) afterwards.
    let twice = program.execute_buffers(&[&x, &once], false).unwrap().remove(0);
    twice.wait_ready().unwrap();
    assert_eq!(f32s(&once.to_host().unwrap()), vec![12.0, 24.0, 36.0, 48.0]);
    assert_eq!(f32s(&twice.to_host().unwrap()), vec![14.0, 28.0, 42.0, 56.0]);
    // Inputs are never donated: they still hold their values.
    assert_eq!(f32s(&x.to_host().unwrap()), vec![1.0, 2.0, 3.0, 4.0]);
}

#[test]
fn wrong_buffers_are_input_errors() {
    isolated_cache();
    let engine = default_engine().unwrap();
    let program = engine.compile(&parse_graph(AXPY).unwrap(), &Options::default()).unwrap();
    let x = engine.upload(&f32_bytes(&[1.0; 4]), DType::F32, &[4]).unwrap();
    let wide = engine.upload(&f32_bytes(&[1.0; 8]), DType::F32, &[8]).unwrap();
    let ints = engine.upload(&[0u8; 16], DType::I32, &[4]).unwrap();
    assert!(matches!(program.execute_buffers(&[&x], true), Err(EngineError::Arity { expected: 2, got: 1 })));
    match program.execute_buffers(&[&x, &wide], true) {
        Err(EngineError::Input { index: 1, .. }) => {}
        other => panic!("expected an input error for the shape, got {other:?}"),
    }
    match program.execute_buffers(&[&ints, &x], true) {
        Err(EngineError::Input { index: 0, .. }) => {}
        other => panic!("expected an input error for the dtype, got {other:?}"),
    }
    // An upload whose bytes do not match its type is refused before PJRT sees it.
    assert!(matches!(engine.upload(&[0u8; 15], DType::F32, &[4]), Err(EngineError::Input { .. })));
}

#[test]
fn donated_inputs_are_taken_and_kept_ones_are_not() {
    isolated_cache();
    let engine = default_engine().unwrap();
    // Aliased: the output pairs with the first f32[4] input, %x.
    let options = Options::default().donating(true);
    let program = engine.compile(&parse_graph(AXPY).unwrap(), &options).unwrap();
    let x = engine.upload(&f32_bytes(&[1.0, 2.0, 3.0, 4.0]), DType::F32, &[4]).unwrap();
    let y = engine.upload(&f32_bytes(&[10.0, 20.0, 30.0, 40.0]), DType::F32, &[4]).unwrap();
    // Not asked to donate: both inputs keep their values although the program aliases %x.
    let kept = program.execute_buffers(&[&x, &y], true).unwrap().remove(0);
    assert_eq!(f32s(&kept.to_host().unwrap()), vec![12.0, 24.0, 36.0, 48.0]);
    assert_eq!(f32s(&x.to_host().unwrap()), vec![1.0, 2.0, 3.0, 4.0]);
    // Donating %x: the result is right, %x is PJRT's to reuse (reading it fails), %y is kept.
    let out = program.execute_buffers_donating(&[&x, &y], &[0], true).unwrap().remove(0);
    assert_eq!(f32s(&out.to_host().unwrap()), vec![12.0, 24.0, 36.0, 48.0]);
    assert!(x.to_host().is_err(), "a donated buffer must not be readable");
    assert_eq!(f32s(&y.to_host().unwrap()), vec![10.0, 20.0, 30.0, 40.0]);
    // Bad donation lists are input errors, before PJRT sees them.
    for bad in [&[2usize][..], &[1, 1][..]] {
        match program.execute_buffers_donating(&[&out, &y], bad, true) {
            Err(EngineError::Input { .. }) => {}
            other => panic!("expected an input error for donate={bad:?}, got {other:?}"),
        }
    }
}

#[test]
fn one_device_programs_run_on_the_device_of_their_inputs() {
    isolated_cache();
    let engine = default_engine().unwrap();
    assert!(engine.devices().len() >= 2, "the CPU plugin has 4 devices by default");
    let program = engine.compile(&parse_graph(AXPY).unwrap(), &Options::default()).unwrap();
    for d in 0..engine.devices().len() {
        let x = engine.upload_to(&f32_bytes(&[1.0, 2.0, 3.0, 4.0]), DType::F32, &[4], d).unwrap();
        let y = engine.upload_to(&f32_bytes(&[d as f32; 4]), DType::F32, &[4], d).unwrap();
        let device = engine.device(d).unwrap();
        let out = program.execute_buffers_on(&[&x, &y], &[], true, device).unwrap().remove(0);
        assert!(out.is_on(device).unwrap());
        let expected: Vec<f32> = [2.0, 4.0, 6.0, 8.0].iter().map(|v| v + d as f32).collect();
        assert_eq!(f32s(&out.to_host().unwrap()), expected);
        // Moved to device 0 by the plugin, then run there by the same executable.
        if d > 0 {
            let x0 = engine.copy_to_device(&x, 0).unwrap();
            let y0 = engine.copy_to_device(&y, 0).unwrap();
            assert!(x0.is_on(engine.device(0).unwrap()).unwrap());
            let out0 = program.execute_buffers(&[&x0, &y0], true).unwrap().remove(0);
            assert_eq!(f32s(&out0.to_host().unwrap()), expected);
        }
    }
    // Inputs on two devices: refused by PJRT, not run on either.
    let a = engine.upload_to(&f32_bytes(&[1.0; 4]), DType::F32, &[4], 0).unwrap();
    let b = engine.upload_to(&f32_bytes(&[1.0; 4]), DType::F32, &[4], 1).unwrap();
    assert!(program.execute_buffers_on(&[&a, &b], &[], true, engine.device(0).unwrap()).is_err());
    assert!(engine.device(engine.devices().len()).is_err());
    assert!(engine.upload_to(&f32_bytes(&[1.0; 4]), DType::F32, &[4], 99).is_err());
}
