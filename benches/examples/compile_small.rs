//! The compiler's time on small programs, where fixed costs dominate: each IR file given is
//! compiled by the driver as the engine compiles it (default options, bytecode) `ROUNDS`
//! times in one process, and the median and 90th percentile of the whole compile and of each
//! stage are printed as one JSON line per file. `benches/compile_small.py` runs this binary
//! (and an earlier build of it, to compare) interleaved and records the ratios.
//!
//! `cargo run --release -p torchtpu-benches --example compile_small -- FILE.ir...`

use std::time::{Duration, Instant};
use torchtpu_compiler::driver::{Context, Options};

const ROUNDS: usize = 300;

fn quantile(sorted: &[Duration], q: f64) -> f64 {
    let i = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted[i].as_secs_f64() * 1e6
}

fn main() {
    let files: Vec<String> = std::env::args().skip(1).collect();
    if files.is_empty() {
        eprintln!("usage: compile_small FILE.ir...");
        std::process::exit(2);
    }
    let mut cx = Context::new();
    let options = Options::default();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{file}: {e}"));
        // The first compile makes the MLIR context: not part of a steady-state compile.
        cx.compile_text(&text, &options, &mut std::io::sink()).unwrap_or_else(|e| panic!("{file}: {e}"));
        let mut total = Vec::with_capacity(ROUNDS);
        let mut stages: Vec<(&'static str, Vec<Duration>)> = Vec::new();
        for _ in 0..ROUNDS {
            let t = Instant::now();
            let c = cx.compile_text(&text, &options, &mut std::io::sink()).unwrap();
            total.push(t.elapsed());
            for (stage, d) in c.timings.stages {
                match stages.iter_mut().find(|(s, _)| *s == stage) {
                    Some((_, v)) => v.push(d),
                    None => stages.push((stage, vec![d])),
                }
            }
        }
        total.sort();
        let per_stage: Vec<String> = stages
            .iter_mut()
            .map(|(s, v)| {
                v.sort();
                format!("\"{s}\": {:.1}", quantile(v, 0.5))
            })
            .collect();
        println!(
            "{{\"file\": \"{file}\", \"median_us\": {:.1}, \"p90_us\": {:.1}, \"stages_median_us\": {{{}}}}}",
            quantile(&total, 0.5),
            quantile(&total, 0.9),
            per_stage.join(", ")
        );
    }
}
