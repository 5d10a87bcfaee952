//! torchtpu-run: compiles an IR file end to end (passes -> StableHLO -> PJRT) and runs it on
//! deterministic inputs, printing the outputs and the time of each stage. A demo and a quick
//! way to check that a dumped graph runs.

use anyhow::{Context, Result};
use clap::Parser;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;
use torchtpu_compiler::driver::{DriverError, Timings};
use torchtpu_compiler::ir::{DType, Graph, TensorType};
use torchtpu_engine::{default_engine, with_driver, HostTensor, Options, DEFAULT_MAX_TENSOR_BYTES, DEFAULT_PIPELINE};
use torchtpu_runtime::cli::{eprint_line, Stdout};

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
    /// Refuse graphs whose inputs and outputs together exceed this many bytes: inputs are
    /// made in host memory, outputs copied back to it.
    #[arg(long = "max-io-bytes", value_name = "BYTES", default_value_t = 1 << 30)]
    max_io_bytes: u64,
    /// The largest tensor (value or intermediate) the plugin is asked to compile.
    #[arg(long = "max-tensor-bytes", value_name = "BYTES", default_value_t = DEFAULT_MAX_TENSOR_BYTES)]
    max_tensor_bytes: u64,
}

fn main() -> ExitCode {
    // A closed stdout (`| head`) drops the report instead of panicking (`cli::Stdout`).
    let mut out = Stdout::lock();
    let code = match run(&Args::parse(), &mut out) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprint_line(&format!(
                "torchtpu-run: error: {}",
                e.chain().map(|c| c.to_string()).collect::<Vec<_>>().join(": ")
            ));
            ExitCode::FAILURE
        }
    };
    let _ = out.flush();
    code
}

/// The bytes every input and output of `g` needs on the host, checked against `limit`
/// before anything is compiled or allocated.
fn io_bytes(g: &Graph, limit: u64) -> Result<u64> {
    let types = g.inputs().iter().map(|&i| &g.node(i).results[0]).chain(g.outputs().iter().map(|&v| g.value_type(v)));
    let mut total: u64 = 0;
    for t in types {
        anyhow::ensure!(t.static_dims().is_some(), "torchtpu-run needs static shapes, got {t}");
        let bytes = t.byte_size().and_then(|b| u64::try_from(b).ok());
        total = bytes.and_then(|b| total.checked_add(b)).unwrap_or(u64::MAX);
    }
    anyhow::ensure!(
        total <= limit,
        "the graph's inputs and outputs need {} bytes, over the limit of {limit} (--max-io-bytes)",
        if total == u64::MAX { "more than 2^64".to_string() } else { total.to_string() }
    );
    Ok(total)
}

/// Deterministic inputs: smooth floats in [-1, 1], small ints, alternating bools. The bytes
/// are allocated fallibly: a failed allocation is an error, not an abort.
fn input_for(t: &TensorType) -> Result<HostTensor> {
    let dims = t.static_dims().context("inputs need static shapes")?;
    let n = t.numel().and_then(|n| usize::try_from(n).ok()).context("input size overflows")?;
    let bytes = t.byte_size().and_then(|b| usize::try_from(b).ok()).context("input size overflows")?;
    let mut data: Vec<u8> = Vec::new();
    data.try_reserve_exact(bytes)
        .map_err(|_| anyhow::anyhow!("cannot allocate {bytes} bytes for an input of type {t}"))?;
    for i in 0..n {
        match t.dtype {
            DType::F32 => data.extend_from_slice(&(i as f32 * 0.37).sin().to_le_bytes()),
            DType::F64 => data.extend_from_slice(&(i as f64 * 0.37).sin().to_le_bytes()),
            DType::I64 => data.extend_from_slice(&((i % 7) as i64 - 3).to_le_bytes()),
            DType::I32 => data.extend_from_slice(&((i % 7) as i32 - 3).to_le_bytes()),
            DType::Bool => data.push((i % 2 == 0) as u8),
            d => anyhow::bail!("torchtpu-run cannot make inputs of dtype {d} yet"),
        }
    }
    Ok(HostTensor { dtype: t.dtype, dims, data })
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

fn run(args: &Args, out: &mut dyn Write) -> Result<()> {
    let text =
        std::fs::read_to_string(&args.input).with_context(|| format!("cannot read '{}'", args.input.display()))?;
    let source = args.input.display();
    // The driver's first stages; the engine runs the rest (passes, analyses, lowering).
    let graph = with_driver(|cx| cx.check_text(&text, &mut Timings::default())).map_err(|e| match e {
        DriverError::Parse(p) => anyhow::anyhow!("{source}:{p}"),
        DriverError::Verify(v) if v.loc.is_some() => anyhow::anyhow!("{source}:{}", v.located()),
        DriverError::Verify(v) => anyhow::anyhow!("{source}: invalid IR: {v}"),
        e => e.into(),
    })?;
    io_bytes(&graph, args.max_io_bytes)?;
    let t = Instant::now();
    let engine = default_engine()?;
    let start_ms = t.elapsed().as_secs_f64() * 1e3;
    let t = Instant::now();
    let options = Options::with_pipeline(&args.pass_pipeline).with_max_tensor_bytes(args.max_tensor_bytes);
    let compiled = engine.compile(&graph, &options)?;
    let compile_ms = t.elapsed().as_secs_f64() * 1e3;
    let inputs: Vec<HostTensor> = compiled.input_types().iter().map(input_for).collect::<Result<_>>()?;
    let outputs = compiled.run(&inputs)?;
    let mut times: Vec<f64> = (0..args.repeat)
        .map(|_| {
            let t = Instant::now();
            compiled.run(&inputs).map(|_| t.elapsed().as_secs_f64() * 1e6)
        })
        .collect::<Result<_, _>>()?;
    times.sort_by(f64::total_cmp);
    writeln!(
        out,
        "plugin {} ({}), engine start {start_ms:.1} ms",
        engine.client().platform_name(),
        engine.client().plugin().path().display()
    )?;
    writeln!(out, "compile (passes + lowering + XLA) {compile_ms:.1} ms")?;
    if let Some(m) = times.get(times.len() / 2) {
        writeln!(out, "run (host -> device -> host), median of {}: {m:.1} us", times.len())?;
    }
    for (i, o) in outputs.iter().enumerate() {
        writeln!(out, "output {i}: {} {}", o.type_string(), preview(o))?;
    }
    Ok(())
}
