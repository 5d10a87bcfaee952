//! Replicated programs through the engine: IR with `c10d.*` collectives, compiled through the
//! driver and the caches for a list of devices, run once per replica on device buffers.

use torchtpu_compiler::ir::parse_graph;
use torchtpu_engine::{default_engine, EngineError, Options};
use torchtpu_runtime::{Buffer, ElementType};

fn isolated_cache() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let dir = std::env::temp_dir().join(format!("torchtpu-engine-replicated-tests-{}", std::process::id()));
        std::env::set_var("TORCHTPU_CACHE_DIR", dir);
    });
}

fn f32s(bytes: &[u8]) -> Vec<f32> {
    bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}

fn upload(v: &[f32], dims: &[i64], device: usize) -> Buffer {
    let engine = default_engine().unwrap();
    let data: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
    let devices = engine.client().addressable_devices();
    engine.client().buffer_from_host(&data, ElementType::F32, dims, &devices[device]).unwrap()
}

const COLLECTIVES: &str = r#"graph @ranks(%x: f32[2, 2]) -> (f32[2, 2], f32[4, 2], f32[1, 2], f32[2, 2]) {
  %s = c10d.all_reduce(%x) {groups = [0, 1], group_size = 2, reduce_op = "avg"} : f32[2, 2]
  %g = c10d.all_gather(%x) {dim = 0, groups = [0, 1], group_size = 2} : f32[4, 2]
  %r = c10d.reduce_scatter(%x) {dim = 0, groups = [0, 1], group_size = 2, reduce_op = "max"} : f32[1, 2]
  %b = c10d.broadcast(%x) {groups = [0, 1], group_size = 2, src = 1} : f32[2, 2]
  return %s, %g, %r, %b
}"#;

#[test]
fn two_replicas_on_devices_2_and_0_run_every_collective() {
    isolated_cache();
    let engine = default_engine().expect("the CPU plugin loads");
    let program = engine.compile_replicated(&parse_graph(COLLECTIVES).unwrap(), &Options::default(), &[2, 0]).unwrap();
    assert_eq!(program.replicas(), 2);
    let a = upload(&[1.0, 2.0, 3.0, 4.0], &[2, 2], 2);
    let b = upload(&[10.0, 0.0, 30.0, 0.0], &[2, 2], 0);
    let outs = program.execute(&[vec![&a], vec![&b]]).unwrap();
    let devices = engine.client().addressable_devices();
    for (r, (row, d)) in outs.iter().zip([2, 0]).enumerate() {
        assert!(row.iter().all(|o| o.is_on(&devices[d]).unwrap()), "replica {r}'s outputs stay on device {d}");
        let host: Vec<Vec<f32>> = row.iter().map(|o| f32s(&o.to_host().unwrap())).collect();
        assert_eq!(host[0], [5.5, 1.0, 16.5, 2.0]);
        assert_eq!(host[1], [1.0, 2.0, 3.0, 4.0, 10.0, 0.0, 30.0, 0.0]);
        // max of the two, split by rows: replica 0 row 0, replica 1 row 1.
        assert_eq!(host[2], if r == 0 { vec![10.0, 2.0] } else { vec![30.0, 4.0] });
        assert_eq!(host[3], [10.0, 0.0, 30.0, 0.0]);
    }
}

#[test]
fn bad_replica_sets_and_inputs_are_refused_with_reasons() {
    isolated_cache();
    let engine = default_engine().unwrap();
    let graph = parse_graph(COLLECTIVES).unwrap();
    let one = engine.compile_replicated(&graph, &Options::default(), &[0]);
    assert!(matches!(&one, Err(EngineError::Sharding(m)) if m.contains("replica 1")), "{:?}", one.err());
    let twice = engine.compile_replicated(&graph, &Options::default(), &[1, 1]);
    assert!(matches!(&twice, Err(EngineError::Sharding(m)) if m.contains("distinct")), "{:?}", twice.err());
    let missing = engine.compile_replicated(&graph, &Options::default(), &[0, 99]);
    assert!(matches!(&missing, Err(EngineError::Sharding(m)) if m.contains("device 99")), "{:?}", missing.err());
    let program = engine.compile_replicated(&graph, &Options::default(), &[0, 1]).unwrap();
    let a = upload(&[1.0; 4], &[2, 2], 0);
    let elsewhere = upload(&[1.0; 4], &[2, 2], 3);
    let err = program.execute(&[vec![&a], vec![&elsewhere]]).err().unwrap();
    assert!(err.to_string().contains("replica 1's device"), "{err}");
    assert!(matches!(program.execute(&[vec![&a]]), Err(EngineError::Arity { expected: 2, got: 1 })));
}
