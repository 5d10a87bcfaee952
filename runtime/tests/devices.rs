//! Buffers and one-device executions on every device of the client (the CPU plugin has 4 by
//! default): a portable executable runs where each execution says, and device-to-device copies.

mod common;

use common::*;
use torchtpu_runtime::{CompileOptions, ElementType};

const ADD: &str = r#"func.func @main(%a: tensor<2x3xf32>, %b: tensor<2x3xf32>) -> tensor<2x3xf32> {
  %0 = stablehlo.add %a, %b : tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}"#;

fn upload_on(v: &[f32], d: usize) -> torchtpu_runtime::Buffer {
    let device = &client().addressable_devices()[d];
    client().buffer_from_host(&f32_bytes(v), ElementType::F32, &[2, 3], device).unwrap()
}

#[test]
fn the_cpu_plugin_has_several_devices() {
    assert!(client().addressable_devices().len() >= 2, "{:?}", client().addressable_devices());
}

#[test]
fn a_portable_executable_runs_on_each_device_and_its_outputs_live_there() {
    let exe = client().compile(ADD, &CompileOptions::portable()).unwrap();
    let devices = client().addressable_devices();
    for (d, device) in devices.iter().enumerate() {
        let a = upload_on(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], d);
        let b = upload_on(&[d as f32; 6], d);
        assert!(a.is_on(device).unwrap());
        for wait in [true, false] {
            let out = exe.execute_on(&[&a, &b], &[0, 1], device, wait).unwrap();
            assert!(out[0].is_on(device).unwrap(), "output of device {d} elsewhere");
            for (other_index, other) in devices.iter().enumerate() {
                if other_index != d {
                    assert!(!out[0].is_on(other).unwrap());
                }
            }
            let expected: Vec<f32> = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0].iter().map(|x| x + d as f32).collect();
            assert_eq!(f32s(&out[0].to_host().unwrap()), expected);
        }
    }
}

#[test]
fn a_portable_executable_refuses_inputs_on_another_device() {
    let exe = client().compile(ADD, &CompileOptions::portable()).unwrap();
    let devices = client().addressable_devices();
    let a = upload_on(&[1.0; 6], 0);
    let b = upload_on(&[1.0; 6], 1);
    let err = exe.execute_on(&[&a, &b], &[0, 1], &devices[0], true).unwrap_err();
    assert!(err.to_string().to_lowercase().contains("device"), "{err}");
}

#[test]
fn copies_between_devices_keep_the_values_and_move_the_buffer() {
    let devices = client().addressable_devices();
    let values = [0.5, -1.0, 2.0, 3.5, 1e-3, -7.0];
    let a = upload_on(&values, 0);
    let b = a.copy_to_device(&devices[1]).unwrap();
    assert!(b.is_on(&devices[1]).unwrap() && !b.is_on(&devices[0]).unwrap());
    assert_eq!((b.element_type(), b.dims()), (ElementType::F32, &[2i64, 3][..]));
    assert_eq!(f32s(&b.to_host().unwrap()), values);
    drop(a); // the copy owns its memory
    let c = b.copy_to_device(&devices[devices.len() - 1]).unwrap();
    assert_eq!(f32s(&c.to_host().unwrap()), values);
}
