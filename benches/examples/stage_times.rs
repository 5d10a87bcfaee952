//! Prints the time of each compiler stage on the generated 10k-node graph (a quick
//! breakdown; criterion's `cargo bench` is the measurement of record).
use std::time::Instant;
use torchtpu_benches::mlp_like_graph;
use torchtpu_compiler::ir::{parse_graph, print_graph, verify};
use torchtpu_compiler::lower::Lowering;
use torchtpu_compiler::passes::{PassManager, PipelineOptions, DEFAULT_PIPELINE};

fn main() {
    let text = mlp_like_graph(10_000);
    let lowering = Lowering::new();
    for round in 0..3 {
        let t = Instant::now();
        let mut g = parse_graph(&text).unwrap();
        let parse = t.elapsed();
        let t = Instant::now();
        verify(&g).unwrap();
        let ver = t.elapsed();
        let pm =
            PassManager::from_pipeline(DEFAULT_PIPELINE, PipelineOptions { verify_each: false, ..Default::default() })
                .unwrap();
        let t = Instant::now();
        let runs = pm.run(&mut g, &mut std::io::sink()).unwrap();
        let passes = t.elapsed();
        let t = Instant::now();
        let hlo = lowering.lower(&g).unwrap();
        let lower = t.elapsed();
        let t = Instant::now();
        let bc = lowering.lower_as(&g, torchtpu_compiler::lower::Format::Bytecode).unwrap();
        let lower_bc = t.elapsed();
        let t = Instant::now();
        let printed = print_graph(&g);
        let print = t.elapsed();
        let t = Instant::now();
        drop(g);
        let dropt = t.elapsed();
        println!(
            "round {round}: parse {parse:?} verify {ver:?} passes {passes:?} ({}) lower text {lower:?} ({} bytes) bytecode {lower_bc:?} ({} bytes) print {print:?} ({}) drop {dropt:?}",
            runs.iter().map(|r| format!("{} {:?}", r.pass, r.elapsed)).collect::<Vec<_>>().join(", "),
            hlo.code.len(),
            bc.code.len(),
            printed.len()
        );
    }
}
