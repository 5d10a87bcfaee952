//! torchtpu-opt: reads the IR text form, runs a pass pipeline, prints the result.
//! An mlir-opt for torchtpu's graph IR; lit tests and bug reports are driven through it.

use anyhow::{Context, Result};
use clap::Parser;
use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use torchtpu_compiler::driver::{self, DriverError, Format, PipelineOptions, Timings};
use torchtpu_compiler::ir::printer::ValueNames;
use torchtpu_compiler::ir::{print_graph, Graph};
use torchtpu_compiler::passes::REGISTRY;
use torchtpu_compiler::sharding::ShardingPlan;

#[derive(Parser, Debug)]
#[command(name = "torchtpu-opt", version, about = "Run torchtpu compiler passes over the graph IR")]
struct Args {
    /// Input IR file; `-` or nothing reads standard input.
    input: Option<PathBuf>,
    /// Comma-separated passes, e.g. `canonicalize,cse,dce` or `fold-constants{max-elements=64}`.
    #[arg(long = "pass-pipeline", value_name = "PIPELINE")]
    pass_pipeline: Option<String>,
    /// List the registered passes with one-line descriptions and exit.
    #[arg(long = "list-passes")]
    list_passes: bool,
    /// List every op of the op registry with its traits, lowering and decomposition policy
    /// and exit; `--list-ops=markdown` prints docs/ops.md.
    #[arg(long = "list-ops", value_name = "FORMAT", num_args = 0..=1, default_missing_value = "text")]
    list_ops: Option<ListOps>,
    /// Print the IR (to stderr) after every pass.
    #[arg(long = "print-ir-after-all")]
    print_ir_after_all: bool,
    /// Print the IR (to stderr) before every pass.
    #[arg(long = "print-ir-before-all")]
    print_ir_before_all: bool,
    /// Print the IR (to stderr) after the named pass; repeatable.
    #[arg(long = "print-ir-after", value_name = "PASS")]
    print_ir_after: Vec<String>,
    /// Print the IR (to stderr) before the named pass; repeatable.
    #[arg(long = "print-ir-before", value_name = "PASS")]
    print_ir_before: Vec<String>,
    /// Parse and verify only; print nothing on success.
    #[arg(long = "verify-only")]
    verify_only: bool,
    /// Skip verification after each pass (the input is still verified).
    #[arg(long = "no-verify-each")]
    no_verify_each: bool,
    /// Report each pass's wall time (to stderr).
    #[arg(long = "timing")]
    timing: bool,
    /// Report the peak-memory estimate (live bytes, the node at the peak) before and after
    /// the pipeline (to stderr).
    #[arg(long = "print-memory")]
    print_memory: bool,
    /// Alias outputs to inputs of their type (buffer donation, as the engine lowers by
    /// default): `tf.aliasing_output` on @main's arguments; --print-memory then counts
    /// donated inputs as freed after their last reader.
    #[arg(long = "donate-inputs")]
    donate_inputs: bool,
    /// After the output, print the sharding plan of a graph with a mesh as `// sharding:`
    /// comment lines: the mesh, each input's and output's layout and origin, each planned
    /// collective (node, consumer, collective, bytes per device, line) and the total bytes
    /// per device; a graph without a mesh gets a one-line note.
    #[arg(long = "print-sharding")]
    print_sharding: bool,
    /// What to print after the passes: the IR, or the StableHLO module it lowers to.
    #[arg(long = "emit", value_enum, default_value_t = Emit::Ir)]
    emit: Emit,
    /// Write the output here instead of standard output.
    #[arg(short = 'o', value_name = "FILE")]
    output: Option<PathBuf>,
    /// Treat each chunk between `// -----` lines as its own input; outputs are joined by
    /// `// -----`, and an error in one chunk (at its line in the file) does not stop the others.
    #[arg(long = "split-input-file")]
    split_input_file: bool,
    /// Check the input's `// expected-error {{...}}` comments (`@+N`, `@-N`, `@N`, `@unknown`)
    /// against the errors produced: exit 0 only when they match exactly.
    #[arg(long = "verify-diagnostics")]
    verify_diagnostics: bool,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum Emit {
    Ir,
    Stablehlo,
}

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum ListOps {
    Text,
    Markdown,
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        // A closed pipe on stderr (IR dumps, `2>&1 | head`) ends the tool quietly, like one
        // on stdout (see `emit`).
        Err(e)
            if e.chain().any(|c| {
                c.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
            }) =>
        {
            ExitCode::SUCCESS
        }
        Err(e) => {
            // One line: the error and its causes, so scripts and FileCheck can match it.
            let msg = e.chain().map(|c| c.to_string()).collect::<Vec<_>>().join(": ");
            // Not `eprintln!`: it panics when stderr is a closed pipe.
            let _ = writeln!(std::io::stderr(), "torchtpu-opt: error: {msg}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: &Args) -> Result<()> {
    match args.list_ops {
        Some(ListOps::Text) => return emit(args, &torchtpu_compiler::catalog::listing()),
        Some(ListOps::Markdown) => return emit(args, &torchtpu_compiler::catalog::markdown()),
        None => {}
    }
    if args.list_passes {
        let width = REGISTRY.iter().map(|p| p.name.len()).max().unwrap_or(0);
        let mut out = String::new();
        for p in REGISTRY {
            out.push_str(&format!("  {:width$}  {}\n", p.name, p.description));
            for (opt, doc) in p.options {
                out.push_str(&format!("  {:width$}    {{{opt}=...}} {doc}\n", ""));
            }
        }
        return emit(args, &out);
    }
    let (source_name, text) = read_input(args.input.as_ref())?;
    if args.split_input_file || args.verify_diagnostics {
        let (split, verify) = (args.split_input_file, args.verify_diagnostics);
        let outcome = torchtpu_compiler::testing::run_chunks(&source_name, &text, split, verify, |chunk| {
            process(args, &source_name, chunk)
                .map_err(|e| e.chain().map(|c| c.to_string()).collect::<Vec<_>>().join(": "))
        });
        for e in &outcome.errors {
            writeln!(std::io::stderr(), "torchtpu-opt: error: {e}")?;
        }
        emit(args, &outcome.output)?;
        return match (outcome.ok, verify) {
            (true, _) => Ok(()),
            (false, true) => Err(anyhow::anyhow!("diagnostics did not verify ({} problems)", outcome.errors.len())),
            (false, false) => Err(anyhow::anyhow!("{} of the input's cases failed", outcome.errors.len())),
        };
    }
    let out = process(args, &source_name, &text)?;
    emit(args, &out)
}

/// Verifies, runs the pipeline and lowers `text`; the output to print.
fn process(args: &Args, source_name: &str, text: &str) -> Result<String> {
    let mut cx = driver::Context::new();
    if args.verify_only {
        cx.check_text(text, &mut Timings::default()).map_err(|e| located(source_name, e))?;
        return Ok(String::new());
    }
    let options = driver::Options {
        pipeline: args.pass_pipeline.clone().unwrap_or_default(),
        pipeline_options: PipelineOptions {
            verify_each: !args.no_verify_each,
            print_before_all: args.print_ir_before_all,
            print_after_all: args.print_ir_after_all,
            print_before: args.print_ir_before.clone(),
            print_after: args.print_ir_after.clone(),
        },
        donate_inputs: args.donate_inputs,
        analyze: args.print_memory,
        memory_before: args.print_memory,
        emit: (args.emit == Emit::Stablehlo).then_some(Format::Text),
        ..driver::Options::default()
    };
    let stderr = std::io::stderr();
    let compiled = cx.compile_text(text, &options, &mut stderr.lock()).map_err(|e| located(source_name, e))?;
    if let (Some(before), Some(after)) = (&compiled.analyses.memory_before, &compiled.analyses.memory) {
        let mut err = stderr.lock();
        writeln!(err, "{} (before passes)", before.report())?;
        writeln!(err, "{} (after passes)", after.report())?;
    }
    if args.timing {
        let mut err = stderr.lock();
        writeln!(err, "// pass timing")?;
        for r in &compiled.timings.passes {
            writeln!(
                err,
                "//   {:<16} {:>10.3} ms  {}",
                r.pass,
                r.elapsed.as_secs_f64() * 1e3,
                if r.changed { "changed" } else { "unchanged" }
            )?;
        }
    }
    let mut out = match &compiled.hlo {
        Some(module) => module.text().unwrap_or_default().to_owned(),
        None => print_graph(&compiled.graph),
    };
    if args.print_sharding {
        if !out.is_empty() && !out.ends_with('\n') {
            out.push('\n');
        }
        out.push_str(&sharding_summary(&compiled.graph));
    }
    Ok(out)
}

/// The sharding plan of the graph after the passes, as `// sharding:` comment lines (so the
/// IR or StableHLO before them still parses).
fn sharding_summary(g: &Graph) -> String {
    let Some(plan) = ShardingPlan::of(g) else {
        return "// sharding: none (the graph declares no mesh)\n".to_string();
    };
    let names = ValueNames::for_graph(g);
    // Not `num_partitions()`: the verifier does not bound the product of the axis sizes.
    let devices = plan.mesh.axes.iter().try_fold(1i64, |n, (_, size)| n.checked_mul(*size));
    let devices = devices.map_or_else(|| "more than i64::MAX".to_string(), |n| n.to_string());
    let mut lines = vec![format!("{} ({devices} devices)", plan.mesh)];
    let layout = |s: &torchtpu_compiler::ir::Sharding| {
        let mut text = s.sdy_dims();
        if !s.partial.is_empty() {
            let axes: Vec<String> = s.partial.iter().map(|a| format!("\"{a}\"")).collect();
            text.push_str(&format!(" partial {{{}}}", axes.join(", ")));
        }
        format!("{text} ({})", s.origin.text())
    };
    for (i, (v, s)) in g.input_values().into_iter().zip(&plan.inputs).enumerate() {
        lines.push(format!("input {i} {}: {} {}", names.value(g, v), g.value_type(v), layout(s)));
    }
    for (i, (&v, s)) in g.outputs().iter().zip(&plan.outputs).enumerate() {
        lines.push(format!("output {i} {}: {} {}", names.value(g, v), g.value_type(v), layout(s)));
    }
    for c in &plan.collectives {
        let line = c.line.map(|l| format!(", line {l}")).unwrap_or_default();
        lines.push(format!(
            "collective {} for {}: {} -> {}, {} bytes per device{line}",
            c.node,
            c.consumer,
            c.collective,
            c.to.sdy_dims(),
            c.bytes_per_device
        ));
    }
    lines.push(format!(
        "total {} bytes per device in {} collective{}",
        plan.total_bytes_per_device,
        plan.collectives.len(),
        if plan.collectives.len() == 1 { "" } else { "s" }
    ));
    lines.into_iter().map(|l| format!("// sharding: {l}\n")).collect()
}

/// A driver error as one line; parse and verifier errors name `file:line:col`.
fn located(source_name: &str, e: DriverError) -> anyhow::Error {
    match e {
        DriverError::Parse(p) => anyhow::anyhow!("{source_name}:{p}"),
        DriverError::Verify(v) if v.loc.is_some() => anyhow::anyhow!("{source_name}:{}", v.located()),
        DriverError::Verify(v) => anyhow::anyhow!("{source_name}: invalid IR: {v}"),
        DriverError::Pipeline(p) => p.into(),
        DriverError::Lower(l) => l.into(),
        e => e.into(),
    }
}

fn read_input(path: Option<&PathBuf>) -> Result<(String, String)> {
    match path {
        Some(p) if p.as_os_str() != "-" => {
            let bytes = std::fs::read(p).with_context(|| format!("cannot read '{}'", p.display()))?;
            let text = String::from_utf8(bytes).map_err(|e| {
                anyhow::anyhow!(
                    "'{}' is not UTF-8 text (invalid byte at offset {})",
                    p.display(),
                    e.utf8_error().valid_up_to()
                )
            })?;
            Ok((p.display().to_string(), text))
        }
        _ => {
            let mut text = String::new();
            std::io::stdin().read_to_string(&mut text).context("cannot read standard input as UTF-8 text")?;
            Ok(("<stdin>".into(), text))
        }
    }
}

fn emit(args: &Args, text: &str) -> Result<()> {
    match &args.output {
        Some(path) => std::fs::write(path, text).with_context(|| format!("cannot write '{}'", path.display())),
        None => {
            let mut out = std::io::stdout().lock();
            match out.write_all(text.as_bytes()).and_then(|_| out.flush()) {
                // A closed pipe (`| head`) is not an error worth reporting.
                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
                other => other.context("cannot write to standard output"),
            }
        }
    }
}
