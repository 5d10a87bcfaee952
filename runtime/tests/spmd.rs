//! SPMD programs on several devices of the CPU plugin: Shardy shardings in the module, the
//! compile options that make XLA honour them, per-partition argument lists, and the
//! collectives of the partitioned program.

mod common;

use common::*;
use torchtpu_runtime::{Buffer, CompileOptions, ElementType};

/// x: f32[8, 2] split on dim 0 over 4 devices; returns 2*x (still split) and sum(x) (an
/// all-reduce, replicated).
const SHARDED: &str = r#"
module @spmd attributes {mhlo.num_partitions = 4 : i32, mhlo.num_replicas = 1 : i32} {
  sdy.mesh @mesh = <["x"=4]>
  func.func @main(%arg0: tensor<8x2xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}, {}]>})
      -> (tensor<8x2xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}, {}]>},
          tensor<f32> {sdy.sharding = #sdy.sharding<@mesh, []>}) {
    %two = stablehlo.constant dense<2.0> : tensor<8x2xf32>
    %d = stablehlo.multiply %arg0, %two : tensor<8x2xf32>
    %zero = stablehlo.constant dense<0.0> : tensor<f32>
    %s = stablehlo.reduce(%arg0 init: %zero) applies stablehlo.add across dimensions = [0, 1]
        : (tensor<8x2xf32>, tensor<f32>) -> tensor<f32>
    return %d, %s : tensor<8x2xf32>, tensor<f32>
  }
}
"#;

#[test]
fn shardy_partitions_over_four_devices() {
    let devices = client().addressable_devices();
    assert!(devices.len() >= 4, "the CPU plugin exposes 4 devices by default, got {}", devices.len());
    let exe = client().compile(SHARDED, &CompileOptions::spmd(4)).unwrap();
    let x: Vec<f32> = (0..16).map(|i| i as f32).collect();
    // Partition d holds rows 2d and 2d+1.
    let shards: Vec<Buffer> = (0..4)
        .map(|d| {
            let rows = &x[d * 4..d * 4 + 4];
            client().buffer_from_host(&f32_bytes(rows), ElementType::F32, &[2, 2], &devices[d]).unwrap()
        })
        .collect();
    let args: Vec<Vec<&Buffer>> = shards.iter().map(|b| vec![b]).collect();
    let outs = exe.execute_partitioned(&args, &[]).unwrap();
    assert_eq!(outs.len(), 4);
    let total: f32 = x.iter().sum();
    for (d, row) in outs.iter().enumerate() {
        // Partitioning happened: each device holds its [2, 2] block, not the [8, 2] whole.
        assert_eq!(row[0].dims(), &[2, 2], "partition {d}");
        let want: Vec<f32> = x[d * 4..d * 4 + 4].iter().map(|v| v * 2.0).collect();
        assert_eq!(f32s(&row[0].to_host().unwrap()), want, "partition {d}");
        assert_eq!(row[1].dims(), &[] as &[i64]);
        assert_eq!(f32s(&row[1].to_host().unwrap()), vec![total], "partition {d}");
    }
    let collectives = exe.collectives().unwrap();
    assert!(
        collectives.iter().any(|c| c.kind == "all-reduce" && c.bytes_per_device == 4),
        "the sum is one all-reduce of one f32: {collectives:?}"
    );
}

#[test]
fn argument_lists_must_match_the_partitions() {
    let exe = client().compile(SHARDED, &CompileOptions::spmd(4)).unwrap();
    let b = upload_f32(&[0.0; 4], &[2, 2]);
    let err = exe.execute_partitioned(&[vec![&b], vec![]], &[]).unwrap_err();
    assert!(err.to_string().contains("one per partition"), "{err}");
}
