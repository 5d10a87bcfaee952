//! Property test: generated and mutated IR, with extreme dims (0, 1, 2^31, 2^32, 2^62,
//! i64::MAX, symbolic) and extreme values (i64::MIN/MAX, NaN, inf, -0.0, huge floats), goes
//! through parse, the memory estimate, verify, every registered pass (alone and as the default
//! pipeline) and lowering to StableHLO without a panic. Errors are fine.
//!
//! Two sources of cases, from a fixed seed: graphs built from the ops the compiler knows (the
//! lowering table and `ir::ops`) with arbitrary attributes, and the lit-test and example graphs
//! (valid IR that exercises every lowering family) with numbers and dtypes replaced.
//! `TORCHTPU_NO_PANICS_CASES` and `TORCHTPU_NO_PANICS_SEED` run more cases or another seed.

use std::collections::BTreeMap;
use std::panic::{self, AssertUnwindSafe};
use std::path::Path;
use std::sync::Mutex;
use torchtpu_compiler::analysis::memory;
use torchtpu_compiler::ir::{
    parse_graph, print_graph, verify, Attr, DType, Dim, Elements, Graph, Literal, OpName, TensorType, Value,
};
use torchtpu_compiler::lower::{Format, Lowering};
use torchtpu_compiler::passes::{PassManager, PassOptions, PipelineOptions, DEFAULT_PIPELINE, REGISTRY};
use torchtpu_compiler::registry;

/// splitmix64: small, deterministic, and good enough to pick cases.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }

    fn pick<T: Clone>(&mut self, items: &[T]) -> T {
        items[self.below(items.len())].clone()
    }
}

const EXTREME_DIMS: [i64; 9] = [0, 1, 2, 3, 1 << 31, 1 << 32, 1 << 62, i64::MAX, (1 << 62) + 1];
const EXTREME_INTS: [i64; 14] =
    [0, 1, -1, 2, -2, 3, 1 << 31, -(1 << 31), 1 << 32, 1 << 62, i64::MAX, i64::MIN, i64::MIN + 1, -(1 << 62)];
const EXTREME_FLOATS: [f64; 12] =
    [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, -0.0, 0.0, 1e308, -1e308, 5e-324, 0.5, -1.5, 3.0e38, 1e19];
const ATTR_NAMES: [&str; 64] = [
    "dim",
    "dims",
    "keepdim",
    "size",
    "stride",
    "storage_offset",
    "start",
    "end",
    "step",
    "index",
    "other",
    "alpha",
    "value",
    "fill_value",
    "dtype",
    "p",
    "eps",
    "normalized_shape",
    "approximate",
    "rounding_mode",
    "correction",
    "unbiased",
    "pad",
    "bins",
    "min",
    "max",
    "groups",
    "padding",
    "dilation",
    "output_padding",
    "transposed",
    "kernel_size",
    "ceil_mode",
    "count_include_pad",
    "divisor_override",
    "reduce",
    "include_self",
    "accumulate",
    "descending",
    "stable",
    "largest",
    "sorted",
    "k",
    "n",
    "normalization",
    "forward",
    "onesided",
    "last_dim_size",
    "dim0",
    "dim1",
    "exponent",
    "half_to_float",
    "memory_format",
    "s",
    "decimals",
    "side",
    "right",
    "training",
    "momentum",
    "beta",
    "min_val",
    "max_val",
    "broadcast_dimensions",
    "split_size",
];
const STRINGS: [&str; 14] = [
    "floor",
    "trunc",
    "tanh",
    "none",
    "sum",
    "mean",
    "prod",
    "amax",
    "amin",
    "left",
    "right",
    "torch.contiguous_format",
    "torch.channels_last",
    "",
];
const OVERLOADS: [&str; 10] =
    ["default", "Tensor", "Scalar", "int", "dim", "dim_IntList", "self", "correction", "Tensor_mode", "values"];

fn dtype(rng: &mut Rng) -> DType {
    rng.pick(&DType::ALL)
}

fn dim(rng: &mut Rng) -> Dim {
    match rng.below(100) {
        0..=69 => Dim::Static(rng.below(5) as i64),
        70..=89 => Dim::Static(rng.pick(&EXTREME_DIMS)),
        _ => Dim::Sym(rng.below(2) as u32),
    }
}

fn tensor_type(rng: &mut Rng) -> TensorType {
    let rank = rng.below(5);
    TensorType::new(dtype(rng), (0..rank).map(|_| dim(rng)).collect())
}

fn int(rng: &mut Rng) -> i64 {
    if rng.chance(60) {
        rng.below(7) as i64 - 2
    } else {
        rng.pick(&EXTREME_INTS)
    }
}

fn float(rng: &mut Rng) -> f64 {
    if rng.chance(40) {
        rng.below(9) as f64 * 0.5 - 2.0
    } else {
        rng.pick(&EXTREME_FLOATS)
    }
}

fn literal(rng: &mut Rng, ty: Option<&TensorType>) -> Literal {
    let small = TensorType::fixed(dtype(rng), &(0..rng.below(3)).map(|_| rng.below(3) as i64).collect::<Vec<_>>());
    let ty = match ty {
        Some(t) if t.numel().is_some_and(|n| n <= 16) => t.clone(),
        _ => small,
    };
    let n = ty.numel().unwrap_or(0) as usize;
    let elems = if ty.dtype == DType::Bool {
        Elements::Bool((0..n).map(|_| rng.chance(50)).collect())
    } else if ty.dtype.is_integer() {
        Elements::Int((0..n).map(|_| int(rng)).collect())
    } else if ty.dtype.is_float() {
        Elements::Float((0..n).map(|_| float(rng)).collect())
    } else {
        return Literal::new(TensorType::fixed(DType::F32, &[1]), Elements::Float(vec![float(rng)])).unwrap();
    };
    Literal::new(ty, elems).unwrap()
}

fn attr(rng: &mut Rng) -> Attr {
    match rng.below(12) {
        0 => Attr::None,
        1 => Attr::Bool(rng.chance(50)),
        2 | 3 => Attr::Int(int(rng)),
        4 => Attr::Float(float(rng)),
        5 => Attr::Str(rng.pick(&STRINGS).to_string()),
        6 => Attr::DType(dtype(rng)),
        7..=9 => Attr::IntList((0..rng.below(5)).map(|_| int(rng)).collect()),
        10 => Attr::FloatList((0..1 + rng.below(3)).map(|_| float(rng)).collect()),
        _ => Attr::Tensor(literal(rng, None)),
    }
}

/// The ops cases are built from: every op of the registry (lowered or not).
fn op_names() -> Vec<String> {
    registry::all().iter().map(|d| d.name.to_string()).collect()
}

/// A graph of known ops with arbitrary operands, attributes and result types, printed.
fn generate(rng: &mut Rng, ops: &[String]) -> String {
    let mut g = Graph::new("gen");
    let mut values: Vec<Value> = (0..1 + rng.below(3)).map(|_| g.add_input(tensor_type(rng))).collect();
    for _ in 0..1 + rng.below(5) {
        let full = rng.pick(ops);
        let (ns, name) = full.split_once('.').unwrap();
        let overload = if rng.chance(80) { Some(rng.pick(&OVERLOADS)) } else { None };
        let op = OpName::new(ns, name, overload);
        let info = registry::lookup(&op).and_then(|d| d.signature);
        let n_operands = match info.map(|i| i.operands) {
            Some(torchtpu_compiler::ir::ops::Arity::Exactly(k)) => k,
            Some(torchtpu_compiler::ir::ops::Arity::Between(lo, hi)) => lo + rng.below(hi - lo + 1),
            Some(torchtpu_compiler::ir::ops::Arity::AtLeast(k)) => k + rng.below(2),
            None => rng.below(4),
        };
        let operands: Vec<Value> =
            (0..n_operands).map(|_| values[values.len() - 1 - rng.below(values.len().min(3))]).collect();
        let mut attrs = BTreeMap::new();
        for a in info.map(|i| i.required_attrs).unwrap_or(&[]) {
            attrs.insert(a.name.to_string(), attr(rng));
        }
        for _ in 0..rng.below(4) {
            attrs.insert(rng.pick(&ATTR_NAMES).to_string(), attr(rng));
        }
        let n_results = if rng.chance(85) { 1 } else { rng.below(4) };
        let results: Vec<TensorType> = (0..n_results)
            .map(|_| match (operands.first(), rng.below(10)) {
                (Some(v), 0..=5) => g.value_type(*v).clone(),
                (Some(v), 6) => g.value_type(*v).with_dtype(dtype(rng)),
                _ => tensor_type(rng),
            })
            .collect();
        if op.is("tpu", "constant") && results.len() == 1 {
            attrs.insert("value".into(), Attr::Tensor(literal(rng, Some(&results[0]))));
        }
        let id = g.add_op(op, operands, attrs, results.clone());
        values.extend((0..results.len()).map(|r| Value::new(id, r as u32)));
    }
    let outputs = (0..1 + rng.below(2)).map(|_| values[values.len() - 1 - rng.below(values.len().min(4))]).collect();
    g.set_outputs(outputs);
    print_graph(&g)
}

/// Every graph of the lit tests and examples (a file may hold several).
fn corpus() -> Vec<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files = Vec::new();
    let mut stack = vec![root.join("lit-tests"), root.join("examples")];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() && !p.ends_with("Output") {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "ir") {
                files.push(p);
            }
        }
    }
    files.sort();
    let mut graphs = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        let mut current: Option<String> = None;
        for line in text.lines() {
            if line.starts_with("graph @") {
                current = Some(String::new());
            }
            if let Some(c) = current.as_mut() {
                c.push_str(line);
                c.push('\n');
                if line == "}" {
                    graphs.push(current.take().unwrap());
                }
            }
        }
    }
    graphs.retain(|g| parse_graph(g).is_ok());
    graphs
}

/// A number in the text: its byte range and whether it is a dim (inside `dtype[...]`).
struct Number {
    start: usize,
    end: usize,
    is_dim: bool,
}

fn numbers(text: &str) -> Vec<Number> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let (mut i, mut in_type) = (0, false);
    while i < b.len() {
        let c = b[i];
        if c == b'[' && i > 0 && b[i - 1].is_ascii_alphanumeric() {
            // `f32[` opens a shape; `dense<[` and `= [` open lists.
            in_type = DType::ALL.iter().any(|d| text[..i].ends_with(d.name()));
        } else if c == b']' {
            in_type = false;
        }
        let word_start = i == 0 || !(b[i - 1].is_ascii_alphanumeric() || matches!(b[i - 1], b'_' | b'%' | b'#' | b'.'));
        if c.is_ascii_digit() && word_start {
            let start = if i > 0 && b[i - 1] == b'-' { i - 1 } else { i };
            let mut j = i;
            while j < b.len()
                && (b[j].is_ascii_alphanumeric() || b[j] == b'.' || (matches!(b[j], b'-' | b'+') && b[j - 1] == b'e'))
            {
                j += 1;
            }
            out.push(Number { start, end: j, is_dim: in_type });
            i = j;
        } else {
            i += 1;
        }
    }
    out
}

fn extreme_float(rng: &mut Rng) -> String {
    let x = rng.pick(&EXTREME_FLOATS);
    match x {
        _ if x.is_nan() => "nan".into(),
        f64::INFINITY => "inf".into(),
        f64::NEG_INFINITY => "-inf".into(),
        _ => format!("{x:e}"),
    }
}

/// Edits a graph's text: attribute and literal numbers become extreme values, one dim size
/// becomes another everywhere it occurs (so shapes stay consistent), a dim becomes a
/// symbol, or a dtype changes.
/// An attribute value in the text form.
fn attr_text(rng: &mut Rng) -> String {
    match rng.below(8) {
        0 => "none".into(),
        1 => rng.pick(&["true", "false"]).into(),
        2 | 3 => int(rng).to_string(),
        4 => extreme_float(rng),
        5 => format!("{:?}", rng.pick(&STRINGS)),
        6 => dtype(rng).name().into(),
        _ => format!("[{}]", (0..rng.below(4)).map(|_| int(rng).to_string()).collect::<Vec<_>>().join(", ")),
    }
}

/// The byte ranges of the op names of `text`'s nodes.
fn op_names_in(text: &str) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut at = 0;
    for line in text.split_inclusive('\n') {
        let body = line.trim_start();
        let start = at + (line.len() - body.len());
        let op_start = match body.find(" = ") {
            Some(i) if body.starts_with('%') => start + i + 3,
            _ if body.starts_with(|c: char| c.is_ascii_lowercase())
                && !body.starts_with("graph")
                && !body.starts_with("return")
                && !body.starts_with("sym") =>
            {
                start
            }
            _ => {
                at += line.len();
                continue;
            }
        };
        if let Some(len) = text[op_start..].find('(') {
            out.push((op_start, op_start + len));
        }
        at += line.len();
    }
    out
}

fn mutate(rng: &mut Rng, text: &str, ops: &[String]) -> String {
    let nums = numbers(text);
    let mut edits: Vec<(usize, usize, String)> = Vec::new();
    match rng.below(12) {
        // One dim size, everywhere: every shape that had it gets the new size.
        0..=2 => {
            let dims: Vec<&Number> = nums.iter().filter(|n| n.is_dim).collect();
            if let Some(pick) = (!dims.is_empty()).then(|| dims[rng.below(dims.len())]) {
                let old = &text[pick.start..pick.end];
                let new = if rng.chance(80) { rng.pick(&EXTREME_DIMS).to_string() } else { "s0".to_string() };
                for n in dims.iter().filter(|n| &text[n.start..n.end] == old) {
                    edits.push((n.start, n.end, new.clone()));
                }
            }
        }
        // Another op in a node's place: a rule sees shapes and attributes made for another.
        10 => {
            let names = op_names_in(text);
            if !names.is_empty() {
                let (s, e) = rng.pick(&names);
                let overload = if rng.chance(80) { format!(".{}", rng.pick(&OVERLOADS)) } else { String::new() };
                edits.push((s, e, format!("{}{overload}", rng.pick(ops))));
            }
        }
        // An attribute added to a node (its `{...}` opened if it had none).
        11 => {
            let names = op_names_in(text);
            if !names.is_empty() {
                let (_, e) = rng.pick(&names);
                let close = e + text[e..].find(')').unwrap_or(0) + 1;
                let entry = format!("{} = {}", rng.pick(&ATTR_NAMES), attr_text(rng));
                if text[close..].starts_with(" {") {
                    edits.push((close + 2, close + 2, format!("{entry}, ")));
                } else {
                    edits.push((close, close, format!(" {{{entry}}}")));
                }
            }
        }
        3 => {
            let names: Vec<(usize, &str)> = DType::ALL
                .iter()
                .flat_map(|d| text.match_indices(&format!("{}[", d.name())).collect::<Vec<_>>())
                .collect();
            if !names.is_empty() {
                let (at, found) = rng.pick(&names);
                edits.push((at, at + found.len() - 1, dtype(rng).name().to_string()));
            }
        }
        // Attribute and literal numbers (any number, now and then).
        _ => {
            let attrs: Vec<&Number> = nums.iter().filter(|n| !n.is_dim || rng.chance(5)).collect();
            for _ in 0..1 + rng.below(3) {
                if attrs.is_empty() {
                    break;
                }
                let n = attrs[rng.below(attrs.len())];
                let is_float = text[n.start..n.end].contains(['.', 'e', 'n', 'i']);
                let new = if is_float || rng.chance(10) { extreme_float(rng) } else { int(rng).to_string() };
                edits.push((n.start, n.end, new));
            }
        }
    }
    edits.sort_by_key(|(s, _, _)| std::cmp::Reverse(*s));
    let mut out = text.to_string();
    let mut last = usize::MAX;
    for (s, e, new) in edits {
        if e <= last {
            out.replace_range(s..e, &new);
            last = s;
        }
    }
    out
}

static PANIC: Mutex<Option<String>> = Mutex::new(None);

/// Runs `f`, turning a panic into `Err("stage: message at file:line")`.
fn stage<T>(name: &str, f: impl FnOnce() -> T) -> Result<T, String> {
    panic::catch_unwind(AssertUnwindSafe(f)).map_err(|_| {
        let what = PANIC.lock().unwrap().take().unwrap_or_default();
        format!("{name}: {what}")
    })
}

/// How far cases got, to see that the generator reaches the lowering rules.
#[derive(Debug, Default)]
struct Reached {
    parsed: usize,
    verified: usize,
    lowered: usize,
    /// Ops of the lowering table seen in a graph that reached the lowering.
    ops_reaching_lowering: std::collections::BTreeSet<String>,
}

fn check(lowering: &Lowering, text: &str, reached: &mut Reached) -> Result<(), String> {
    let Ok(g) = stage("parse", || parse_graph(text))? else {
        return Ok(());
    };
    reached.parsed += 1;
    // The estimate reads every parsed graph (torchtpu-opt --print-memory runs it after
    // verification, Python callers after a pipeline).
    stage("memory estimate", || {
        if let Ok(e) = memory::estimate(&g) {
            memory::report(&g, &e);
        }
    })?;
    if stage("verify", || verify(&g))?.is_err() {
        return Ok(());
    }
    reached.verified += 1;
    for id in g.petgraph().node_indices() {
        if let Some(op) = g.node(id).op() {
            reached.ops_reaching_lowering.insert(op.base());
        }
    }
    for info in REGISTRY {
        let mut h = g.clone();
        stage(&format!("pass {}", info.name), || {
            let pass = (info.create)(&PassOptions::new()).unwrap();
            if pass.run(&mut h).is_ok() {
                let _ = verify(&h);
            }
        })?;
    }
    let mut h = g.clone();
    let piped = stage("default pipeline", || {
        PassManager::from_pipeline(DEFAULT_PIPELINE, PipelineOptions::default())
            .unwrap()
            .run(&mut h, &mut std::io::sink())
            .is_ok()
    })?;
    if stage("lowering", || lowering.lower(&g).map(|_| ()))?.is_ok() {
        reached.lowered += 1;
    }
    if piped {
        stage("lowering after the pipeline", || {
            let aliases = memory::donation_pairs(&h);
            if let Ok(e) = memory::estimate_with_donation(&h, &aliases.iter().map(|(i, _)| *i).collect::<Vec<_>>()) {
                memory::report(&h, &e);
            }
            lowering.lower_aliased(&h, Format::Bytecode, &aliases).map(|_| ())
        })?
        .ok();
    }
    Ok(())
}

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

#[test]
fn nothing_panics_on_generated_and_mutated_ir() {
    panic::set_hook(Box::new(|info| {
        let msg = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned());
        let at = info.location().map(|l| format!("{}:{}", l.file(), l.line())).unwrap_or_default();
        *PANIC.lock().unwrap() = Some(format!("{} at {at}", msg.unwrap_or_default()));
    }));
    let cases = env_or("TORCHTPU_NO_PANICS_CASES", 20000);
    let mut rng = Rng(env_or("TORCHTPU_NO_PANICS_SEED", 0x7470_7531));
    let ops = op_names();
    let corpus = corpus();
    assert!(corpus.len() > 30, "the lit tests hold the corpus; found {} graphs", corpus.len());
    let lowering = Lowering::new();
    let mut failures: BTreeMap<String, String> = BTreeMap::new();
    let mut reached = Reached::default();
    for case in 0..cases {
        let text = match case % 3 {
            0 => generate(&mut rng, &ops),
            1 => {
                let base = rng.pick(&corpus);
                mutate(&mut rng, &base, &ops)
            }
            // The corpus as it is, then twice mutated: a valid graph with several odd numbers.
            _ => {
                let base = rng.pick(&corpus);
                let once = mutate(&mut rng, &base, &ops);
                mutate(&mut rng, &once, &ops)
            }
        };
        if let Err(e) = check(&lowering, &text, &mut reached) {
            // One reproducer per panic site.
            let site = e.rsplit(" at ").next().unwrap_or_default().to_string();
            failures.entry(site).or_insert_with(|| format!("{e}\n{text}"));
        }
    }
    let _ = panic::take_hook();
    eprintln!(
        "{cases} cases: parsed {}, verified {}, lowered {}; {} of {} table ops reached the lowering",
        reached.parsed,
        reached.verified,
        reached.lowered,
        reached.ops_reaching_lowering.iter().filter(|o| ops.contains(o)).count(),
        ops.len()
    );
    assert!(
        failures.is_empty(),
        "{} panic sites:\n\n{}",
        failures.len(),
        failures.values().cloned().collect::<Vec<_>>().join("\n\n")
    );
}
