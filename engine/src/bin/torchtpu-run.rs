//! torchtpu-run: compiles an IR file end to end (passes -> StableHLO -> PJRT) and runs it on
//! deterministic inputs, printing the outputs and the time of each stage. A demo and a quick
//! way to check that a dumped graph runs.

use anyhow::{Context, Result};
use clap::Parser;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;
use torchtpu_compiler::ir::{parse_graph, DType};
use torchtpu_compiler::passes::DEFAULT_PIPELINE;
use torchtpu_engine::{default_engine, HostTensor, Options};

#[derive(Parser, Debug)]
#[command(name = "torchtpu-run", version, about = "Compile an IR file with torchtpu and run it on PJRT")]
struct Args {
    /// The IR file.
    input: PathBuf,
    /// Pass pipeline run before lowering.
    #[arg(long = "pass-pipeline", default_value = DEFAULT_PIPELINE)]
    pass_pipeline: String,
    /// Executions to time after the first (the median is reported).
    #[arg(long, default_value_t = 20)]
    repeat: usize,
}

fn main() -> ExitCode {
    match run(&Args::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("torchtpu-run: error: {}", e.chain().map(|c| c.to_string()).collect::<Vec<_>>().join(": "));
            ExitCode::FAILURE
        }
    }
}

/// Deterministic inputs: smooth floats in [-1, 1], small ints, alternating bools.
fn input_for(dtype: DType, dims: &[i64]) -> Result<HostTensor> {
    let n = dims.iter().product::<i64>() as usize;
    Ok(match dtype {
        DType::F32 => HostTensor::from_f32(dims, &(0..n).map(|i| (i as f32 * 0.37).sin()).collect::<Vec<_>>()),
        DType::F64 => HostTensor::from_f64(dims, &(0..n).map(|i| (i as f64 * 0.37).sin()).collect::<Vec<_>>()),
        DType::I64 => HostTensor::from_i64(dims, &(0..n).map(|i| (i % 7) as i64 - 3).collect::<Vec<_>>()),
        DType::I32 => HostTensor::from_i32(dims, &(0..n).map(|i| (i % 7) as i32 - 3).collect::<Vec<_>>()),
        DType::Bool => HostTensor::from_bool(dims, &(0..n).map(|i| i % 2 == 0).collect::<Vec<_>>()),
        d => anyhow::bail!("torchtpu-run cannot make inputs of dtype {d} yet"),
    })
}

fn preview(t: &HostTensor) -> String {
    let show = |v: Vec<String>| {
        let more = if v.len() > 6 { ", ..." } else { "" };
        format!("[{}{more}]", v.into_iter().take(6).collect::<Vec<_>>().join(", "))
    };
    match t.dtype {
        DType::F32 => show(t.to_f32().unwrap_or_default().iter().map(|x| format!("{x:.5}")).collect()),
        DType::F64 => show(t.to_f64().unwrap_or_default().iter().map(|x| format!("{x:.5}")).collect()),
        DType::I64 => show(t.to_i64().unwrap_or_default().iter().map(|x| x.to_string()).collect()),
        DType::I32 => show(t.to_i32().unwrap_or_default().iter().map(|x| x.to_string()).collect()),
        DType::Bool => show(t.to_bool().unwrap_or_default().iter().map(|x| x.to_string()).collect()),
        _ => format!("<{} bytes>", t.data.len()),
    }
}

fn run(args: &Args) -> Result<()> {
    let text = std::fs::read_to_string(&args.input).with_context(|| format!("cannot read '{}'", args.input.display()))?;
    let graph = parse_graph(&text).map_err(|e| anyhow::anyhow!("{}:{e}", args.input.display()))?;
    let t = Instant::now();
    let engine = default_engine()?;
    let start_ms = t.elapsed().as_secs_f64() * 1e3;
    let t = Instant::now();
    let compiled = engine.compile(&graph, &Options::with_pipeline(&args.pass_pipeline))?;
    let compile_ms = t.elapsed().as_secs_f64() * 1e3;
    let inputs: Vec<HostTensor> = compiled
        .input_types()
        .iter()
        .map(|t| input_for(t.dtype, &t.static_dims().unwrap_or_default()))
        .collect::<Result<_>>()?;
    let outputs = compiled.run(&inputs)?;
    let mut times: Vec<f64> = (0..args.repeat)
        .map(|_| {
            let t = Instant::now();
            compiled.run(&inputs).map(|_| t.elapsed().as_secs_f64() * 1e6)
        })
        .collect::<Result<_, _>>()?;
    times.sort_by(f64::total_cmp);
    println!(
        "plugin {} ({}), engine start {start_ms:.1} ms",
        engine.client().platform_name(),
        engine.client().plugin().path().display()
    );
    println!("compile (passes + lowering + XLA) {compile_ms:.1} ms");
    if let Some(m) = times.get(times.len() / 2) {
        println!("run (host -> device -> host), median of {}: {m:.1} us", times.len());
    }
    for (i, o) in outputs.iter().enumerate() {
        println!("output {i}: {} {}", o.type_string(), preview(o));
    }
    Ok(())
}
