//! SPMD programs end to end on 4 CPU devices: IR with a mesh and input shardings ->
//! propagate-sharding -> Shardy-annotated StableHLO -> XLA's partitioner -> per-device
//! execution, compared with the same graph on one device (f32 within 1e-5 relative and
//! 1e-5 absolute: the partitioned sums add in another order).

use torchtpu_compiler::ir::parse_graph;
use torchtpu_engine::{EngineError, ErrorKind};

fn isolated_cache() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let dir = std::env::temp_dir().join(format!("torchtpu-engine-spmd-{}", std::process::id()));
        std::env::set_var("TORCHTPU_CACHE_DIR", dir);
    });
}

/// A Megatron MLP: the first weight split by rows (column-parallel), the second by columns
/// (row-parallel), the batch on dp: one all-reduce of the [4, 16] f32 piece (256 bytes).
const MLP: &str = r#"
graph @mlp(%arg0: f32[8, 16] sharding<[{"dp"}, {}]>, %arg1: f32[32, 16] sharding<[{"tp"}, {}]>, %arg2: f32[16, 32] sharding<[{}, {"tp"}]>) -> (f32[8, 16]) {
  mesh<["dp"=2, "tp"=2]>
  %0 = aten.t.default(%arg1) : f32[16, 32]
  %1 = aten.mm.default(%arg0, %0) : f32[8, 32]
  %2 = aten.relu.default(%1) : f32[8, 32]
  %3 = aten.t.default(%arg2) : f32[32, 16]
  %4 = aten.mm.default(%2, %3) : f32[8, 16]
  return %4
}
"#;

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn f32s(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect()
}

/// Host memory holding `bytes` at a 64-byte aligned offset (what XLA's CPU client needs to
/// read it in place; PyTorch's allocator gives that), and that offset.
fn aligned(bytes: &[u8]) -> (Vec<u8>, usize) {
    let mut v = vec![0u8; bytes.len() + 64];
    let off = (64 - v.as_ptr() as usize % 64) % 64;
    v[off..off + bytes.len()].copy_from_slice(bytes);
    (v, off)
}

fn data(n: usize, seed: f32) -> Vec<f32> {
    (0..n).map(|i| (i as f32 * 0.37 + seed).sin() * 0.5).collect()
}

/// The same graph without a mesh or shardings.
fn single_device(text: &str) -> String {
    let mut g = parse_graph(text).unwrap();
    g.mesh = None;
    let values: Vec<_> = g.input_values();
    for v in values {
        g.clear_sharding(v);
    }
    torchtpu_compiler::ir::print_graph(&g)
}

#[test]
fn megatron_mlp_matches_one_device_and_the_plan_matches_xla() {
    isolated_cache();
    let inputs = [data(8 * 16, 0.1), data(32 * 16, 0.2), data(16 * 32, 0.3)];
    let held: Vec<(Vec<u8>, usize)> = inputs.iter().map(|v| aligned(&f32_bytes(v))).collect();
    let sizes: Vec<usize> = inputs.iter().map(|v| v.len() * 4).collect();
    let refs: Vec<&[u8]> = held.iter().zip(&sizes).map(|((v, off), &n)| &v[*off..off + n]).collect();

    let engine = torchtpu_engine::default_engine().unwrap();
    let sharded = engine.compile(&parse_graph(MLP).unwrap(), &Default::default()).unwrap();
    let plan = sharded.sharding().expect("a plan");
    assert_eq!(plan.num_partitions(), 4);
    assert_eq!(plan.collectives.len(), 1, "{plan:?}");
    assert_eq!((plan.collectives[0].collective.as_str(), plan.collectives[0].bytes_per_device), ("all-reduce", 256));
    // XLA's partitioned program has the same collective, of the same size.
    let compiled = sharded.compiled_collectives().unwrap();
    let all_reduces: Vec<u64> =
        compiled.iter().filter(|c| c.kind == "all-reduce").map(|c| c.bytes_per_device).collect();
    assert_eq!(all_reduces, vec![256], "{compiled:?}");
    assert!(compiled.iter().all(|c| c.kind == "all-reduce"), "{compiled:?}");

    let got = sharded.execute_sharded(&refs).unwrap();
    assert_eq!(got[0].dims, vec![8, 16]);
    let one = engine.compile_text(&single_device(MLP), &Default::default()).unwrap();
    let mut want = vec![0u8; 8 * 16 * 4];
    one.run_into(&refs, &mut [&mut want]).unwrap();
    for (g, w) in f32s(&got[0].data).iter().zip(f32s(&want)) {
        assert!((g - w).abs() <= 1e-5 + 1e-5 * w.abs(), "{g} vs {w}");
    }
    // x (dim 0 on dp) and the first weight (dim 0 on tp) are contiguous blocks, read in place
    // and kept per device; the second weight (dim 1 on tp) is copied each call.
    assert_eq!(sharded.resident_inputs(), 2 * 4);
    let shapes = sharded.partition_shapes().unwrap();
    assert_eq!(shapes.0[3], vec![vec![4, 16], vec![16, 16], vec![16, 16]], "device 3's input pieces");
    assert_eq!(shapes.1[0], vec![vec![4, 16]]);

    // An in-place update of the caller's memory is seen by the kept buffers.
    let mut held = held;
    let off = held[0].1;
    held[0].0[off..off + sizes[0]].copy_from_slice(&f32_bytes(&data(8 * 16, 0.9)));
    let refs: Vec<&[u8]> = held.iter().zip(&sizes).map(|((v, off), &n)| &v[*off..off + n]).collect();
    let again = sharded.execute_sharded(&refs).unwrap();
    one.run_into(&refs, &mut [&mut want]).unwrap();
    for (g, w) in f32s(&again[0].data).iter().zip(f32s(&want)) {
        assert!((g - w).abs() <= 1e-5 + 1e-5 * w.abs(), "{g} vs {w}");
    }
}

#[test]
fn non_contiguous_shards_and_replicated_outputs() {
    isolated_cache();
    // x split on both dims; the sum over everything is replicated on every device.
    let text = r#"
graph @sums(%arg0: f32[4, 6] sharding<[{"dp"}, {"tp"}]>) -> (f32[4, 6], f32[]) {
  mesh<["dp"=2, "tp"=2]>
  %0 = aten.mul.Tensor(%arg0) {other = 2.0} : f32[4, 6]
  %1 = aten.sum.default(%arg0) : f32[]
  return %0, %1
}
"#;
    let x = data(24, 0.5);
    let engine = torchtpu_engine::default_engine().unwrap();
    let c = engine.compile(&parse_graph(text).unwrap(), &Default::default()).unwrap();
    let out = c.execute_sharded(&[&f32_bytes(&x)]).unwrap();
    let doubled: Vec<f32> = x.iter().map(|v| v * 2.0).collect();
    assert_eq!(f32s(&out[0].data), doubled);
    let total: f32 = x.iter().sum();
    assert!((f32s(&out[1].data)[0] - total).abs() < 1e-5);
    assert_eq!(c.sharding().unwrap().outputs[0].dims, vec![vec!["dp".to_string()], vec!["tp".to_string()]]);
}

#[test]
fn a_mesh_larger_than_the_devices_is_a_sharding_error() {
    isolated_cache();
    let text = r#"
graph @big(%arg0: f32[64] sharding<[{"x"}]>) -> (f32[64]) {
  mesh<["x"=64]>
  %0 = aten.neg.default(%arg0) : f32[64]
  return %0
}
"#;
    let engine = torchtpu_engine::default_engine().unwrap();
    let err = engine.compile(&parse_graph(text).unwrap(), &Default::default()).err().expect("too few devices");
    assert!(matches!(err, EngineError::Sharding(_)), "{err}");
    assert_eq!(err.kind(), ErrorKind::Sharding);
    assert!(err.to_string().contains("needs 64 devices"), "{err}");
}

/// A graph-cache hit of an SPMD graph carries its sharding plan in the entry: no pass runs,
/// and the program is the one the driver planned.
#[test]
fn an_spmd_graph_cache_hit_runs_no_pipeline() {
    isolated_cache();
    let engine = torchtpu_engine::default_engine().unwrap();
    // Its own graph name, so no other test of this file fills the entry first.
    let text = MLP.replace("@mlp", "@mlp_hit");
    let first = engine.compile(&parse_graph(&text).unwrap(), &Default::default()).unwrap();
    let second = engine.compile(&parse_graph(&text).unwrap(), &Default::default()).unwrap();
    assert!(second.graph_cache_hit());
    let stages: Vec<&str> = second.timings().stages.iter().map(|(s, _)| *s).collect();
    assert!(second.timings().passes.is_empty() && !stages.contains(&"passes"), "{stages:?}");
    assert_eq!(second.sharding(), first.sharding());
    assert_eq!(second.sharding().unwrap().collectives.len(), 1);
}
