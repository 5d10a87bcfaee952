//! Compiler speed on a generated 10,000-node graph: parse, the default pass pipeline, and
//! lowering to StableHLO text and bytecode (XLA's compile is excluded). `cargo bench -p torchtpu-benches`.

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use torchtpu_benches::mlp_like_graph;
use torchtpu_compiler::ir::parse_graph;
use torchtpu_compiler::lower::{Format, Lowering};
use torchtpu_compiler::passes::{PassManager, PipelineOptions, DEFAULT_PIPELINE};

const NODES: usize = 10_000;

fn bench(c: &mut Criterion) {
    let text = mlp_like_graph(NODES);
    let parsed = parse_graph(&text).unwrap();
    let pm = PassManager::from_pipeline(DEFAULT_PIPELINE, PipelineOptions::default()).unwrap();
    let mut optimised = parsed.clone();
    pm.run(&mut optimised, &mut std::io::sink()).unwrap();
    let lowering = Lowering::new();

    let mut group = c.benchmark_group("compiler-10k-nodes");
    group.throughput(Throughput::Elements(NODES as u64));
    group.sample_size(10);
    group.bench_function("parse", |b| b.iter(|| parse_graph(&text).unwrap()));
    group.bench_function("passes", |b| {
        b.iter_batched(|| parsed.clone(), |mut g| pm.run(&mut g, &mut std::io::sink()).unwrap(), BatchSize::LargeInput)
    });
    group.bench_function("lower-text", |b| b.iter(|| lowering.lower_as(&optimised, Format::Text).unwrap()));
    group.bench_function("lower-bytecode", |b| b.iter(|| lowering.lower_as(&optimised, Format::Bytecode).unwrap()));
    group.bench_function("parse+passes+lower", |b| {
        b.iter(|| {
            let mut g = parse_graph(&text).unwrap();
            pm.run(&mut g, &mut std::io::sink()).unwrap();
            // What the engine does: PJRT is given bytecode.
            lowering.lower_as(&g, Format::Bytecode).unwrap()
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
