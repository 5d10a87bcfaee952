//! Replicated programs: one replica per named device, cross-replica collectives among them
//! (what an in-process `tpu_dist` collective runs), on the CPU plugin's devices.

mod common;

use common::*;
use torchtpu_runtime::{CompileOptions, ElementType};

const ALL_REDUCE: &str = r#"func.func @main(%x: tensor<3xf32>) -> tensor<3xf32> {
  %0 = "stablehlo.all_reduce"(%x) ({
  ^bb0(%a: tensor<f32>, %b: tensor<f32>):
    %s = stablehlo.add %a, %b : tensor<f32>
    stablehlo.return %s : tensor<f32>
  }) {replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>} : (tensor<3xf32>) -> tensor<3xf32>
  return %0 : tensor<3xf32>
}"#;

#[test]
fn an_all_reduce_over_two_named_devices_sums_their_values_on_each() {
    let devices = client().addressable_devices();
    assert!(devices.len() >= 4, "the CPU plugin has 4 devices by default");
    // Replica 0 on the device of id 3, replica 1 on id 1: not the default assignment.
    let ids = [devices[3].id() as i64, devices[1].id() as i64];
    let exe = client().compile(ALL_REDUCE, &CompileOptions::replicated(&ids)).unwrap();
    let a = client().buffer_from_host(&f32_bytes(&[1.0, 2.0, 3.0]), ElementType::F32, &[3], &devices[3]).unwrap();
    let b = client().buffer_from_host(&f32_bytes(&[10.0, 20.0, 30.0]), ElementType::F32, &[3], &devices[1]).unwrap();
    let outs = exe.execute_partitioned(&[vec![&a], vec![&b]], &[0]).unwrap();
    assert_eq!(outs.len(), 2);
    for (row, device) in outs.iter().zip([&devices[3], &devices[1]]) {
        assert!(row[0].is_on(device).unwrap(), "each replica's output stays on its device");
        assert_eq!(f32s(&row[0].to_host().unwrap()), [11.0, 22.0, 33.0]);
    }
}

#[test]
fn a_replicated_program_refuses_a_missing_replica() {
    let devices = client().addressable_devices();
    let ids = [devices[0].id() as i64, devices[1].id() as i64];
    let exe = client().compile(ALL_REDUCE, &CompileOptions::replicated(&ids)).unwrap();
    let a = client().buffer_from_host(&f32_bytes(&[1.0, 2.0, 3.0]), ElementType::F32, &[3], &devices[0]).unwrap();
    assert!(exe.execute_partitioned(&[vec![&a]], &[0]).is_err());
}
