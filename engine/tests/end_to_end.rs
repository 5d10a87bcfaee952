//! IR text -> passes -> StableHLO -> the real XLA CPU plugin, compared with values computed
//! independently here. Tolerances: f32 results within 1e-5 relative + 1e-6 absolute unless
//! stated; integer and bool results exact.

use torchtpu_compiler::ir::parse_graph;
use torchtpu_engine::{DriverError, EngineError, ErrorKind, HostTensor};

/// Points the persistent cache at a folder of this test run, never the user's cache.
fn isolated_cache() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let dir = std::env::temp_dir().join(format!("torchtpu-engine-tests-{}", std::process::id()));
        std::env::set_var("TORCHTPU_CACHE_DIR", dir);
    });
}

fn compile(g: &torchtpu_compiler::ir::Graph) -> Result<torchtpu_engine::CompiledGraph, EngineError> {
    isolated_cache();
    torchtpu_engine::compile(g)
}

fn run(ir: &str, inputs: &[HostTensor]) -> Vec<HostTensor> {
    let g = parse_graph(ir).expect("test IR parses");
    let compiled = compile(&g).unwrap_or_else(|e| panic!("compile failed: {e}"));
    compiled.run(inputs).unwrap_or_else(|e| panic!("run failed: {e}"))
}

fn assert_close(got: &[f32], want: &[f32], rtol: f32, atol: f32) {
    assert_eq!(got.len(), want.len(), "length differs: {got:?} vs {want:?}");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let ok = (g - w).abs() <= atol + rtol * w.abs() || (g.is_nan() && w.is_nan());
        assert!(ok, "element {i}: got {g}, want {w}\n got: {got:?}\nwant: {want:?}");
    }
}

fn seq(n: usize, scale: f32, offset: f32) -> Vec<f32> {
    (0..n).map(|i| ((i * 7 % 11) as f32 - 5.0) * scale + offset).collect()
}

fn matmul(a: &[f32], b: &[f32], m: usize, k: usize, n: usize) -> Vec<f32> {
    let mut c = vec![0f32; m * n];
    for i in 0..m {
        for j in 0..n {
            c[i * n + j] = (0..k).map(|p| a[i * k + p] * b[p * n + j]).sum();
        }
    }
    c
}

#[test]
fn linear_layer_matches_a_hand_matmul() {
    let ir = "graph @linear(%x: f32[3, 4], %w: f32[5, 4], %b: f32[5]) -> (f32[3, 5]) {
      %t = aten.permute.default(%w) {dims = [1, 0]} : f32[4, 5]
      %y = aten.addmm.default(%b, %x, %t) : f32[3, 5]
      return %y
    }";
    let (x, w, b) = (seq(12, 0.25, 0.1), seq(20, 0.5, -0.2), seq(5, 1.0, 0.0));
    let wt: Vec<f32> = (0..4).flat_map(|k| (0..5).map(move |j| (k, j))).map(|(k, j)| w[j * 4 + k]).collect();
    let mut want = matmul(&x, &wt, 3, 4, 5);
    for (i, v) in want.iter_mut().enumerate() {
        *v += b[i % 5];
    }
    let out = run(
        ir,
        &[HostTensor::from_f32(&[3, 4], &x), HostTensor::from_f32(&[5, 4], &w), HostTensor::from_f32(&[5], &b)],
    );
    assert_eq!(out[0].dims, vec![3, 5]);
    assert_close(&out[0].to_f32().unwrap(), &want, 1e-5, 1e-5);
}

#[test]
fn softmax_and_log_softmax_rows() {
    let ir = "graph @sm(%x: f32[2, 3]) -> (f32[2, 3], f32[2, 3]) {
      %s = aten._softmax.default(%x) {dim = -1, half_to_float = false} : f32[2, 3]
      %l = aten._log_softmax.default(%x) {dim = 1, half_to_float = false} : f32[2, 3]
      return %s, %l
    }";
    let x = [1.0f32, 2.0, 3.0, -1.0, 0.0, 1000.0];
    let mut sm = Vec::new();
    let mut lsm = Vec::new();
    for row in x.chunks(3) {
        let m = row.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
        let s: f64 = row.iter().map(|v| ((v - m) as f64).exp()).sum();
        sm.extend(row.iter().map(|v| (((v - m) as f64).exp() / s) as f32));
        lsm.extend(row.iter().map(|v| ((v - m) as f64 - s.ln()) as f32));
    }
    let out = run(ir, &[HostTensor::from_f32(&[2, 3], &x)]);
    assert_close(&out[0].to_f32().unwrap(), &sm, 1e-5, 1e-7);
    assert_close(&out[1].to_f32().unwrap(), &lsm, 1e-5, 1e-5);
}

#[test]
fn layer_norm_with_affine_and_statistics() {
    let ir = "graph @ln(%x: f32[2, 4], %w: f32[4], %b: f32[4]) -> (f32[2, 4], f32[2, 1], f32[2, 1]) {
      %r:3 = aten.native_layer_norm.default(%x, %w, %b) {eps = 1e-5, normalized_shape = [4]} : (f32[2, 4], f32[2, 1], f32[2, 1])
      return %r#0, %r#1, %r#2
    }";
    let x = [1.0f32, 2.0, 3.0, 4.0, -2.0, 0.0, 2.0, 8.0];
    let (w, b) = ([1.0f32, 0.5, 2.0, -1.0], [0.0f32, 1.0, -1.0, 0.5]);
    let (mut want, mut means, mut rstds) = (Vec::new(), Vec::new(), Vec::new());
    for row in x.chunks(4) {
        let mean = row.iter().map(|v| *v as f64).sum::<f64>() / 4.0;
        let var = row.iter().map(|v| (*v as f64 - mean).powi(2)).sum::<f64>() / 4.0;
        let rstd = 1.0 / (var + 1e-5).sqrt();
        want.extend(row.iter().enumerate().map(|(i, v)| (((*v as f64 - mean) * rstd) as f32) * w[i] + b[i]));
        means.push(mean as f32);
        rstds.push(rstd as f32);
    }
    let out =
        run(ir, &[HostTensor::from_f32(&[2, 4], &x), HostTensor::from_f32(&[4], &w), HostTensor::from_f32(&[4], &b)]);
    assert_close(&out[0].to_f32().unwrap(), &want, 1e-5, 1e-5);
    assert_close(&out[1].to_f32().unwrap(), &means, 1e-6, 1e-6);
    assert_close(&out[2].to_f32().unwrap(), &rstds, 1e-5, 1e-6);
    assert_eq!(out[1].dims, vec![2, 1]);
}

#[test]
fn integer_and_bool_program() {
    // Floor division rounds toward -inf, remainder takes the divisor's sign, int sums are i64,
    // comparisons give bools and logical ops combine them.
    let ir = "graph @ints(%a: i32[6], %b: i32[6]) -> (i32[6], i32[6], i64[], bool[6], bool[6]) {
      %q = aten.div.Tensor_mode(%a, %b) {rounding_mode = \"floor\"} : i32[6]
      %r = aten.remainder.Tensor(%a, %b) : i32[6]
      %s = aten.sum.default(%a) : i64[]
      %gt = aten.gt.Tensor(%a, %b) : bool[6]
      %ne = aten.ne.Scalar(%a) {other = 0} : bool[6]
      %both = aten.logical_and.default(%gt, %ne) : bool[6]
      return %q, %r, %s, %gt, %both
    }";
    let a = [7i32, -7, 7, -7, 0, 9];
    let b = [2i32, 2, -2, -2, 3, 4];
    let out = run(ir, &[HostTensor::from_i32(&[6], &a), HostTensor::from_i32(&[6], &b)]);
    assert_eq!(out[0].to_i32().unwrap(), vec![3, -4, -4, 3, 0, 2]);
    assert_eq!(out[1].to_i32().unwrap(), vec![1, 1, -1, -1, 0, 1]);
    assert_eq!(out[2].to_i64().unwrap(), vec![9]);
    assert_eq!(out[3].to_bool().unwrap(), vec![true, false, true, false, false, true]);
    assert_eq!(out[4].to_bool().unwrap(), vec![true, false, true, false, false, true]);
}

#[test]
fn two_outputs_and_a_constant() {
    let ir = "graph @two(%x: f32[3]) -> (f32[3], f32[3]) {
      %c = tpu.constant() {value = dense<[1.5, -2.0, 0.25] : f32[3]>} : f32[3]
      %y = aten.mul.Tensor(%x, %c) : f32[3]
      %z = aten.add.Tensor(%y) {other = 1} : f32[3]
      return %z, %c
    }";
    let out = run(ir, &[HostTensor::from_f32(&[3], &[2.0, 3.0, 4.0])]);
    assert_eq!(out[0].to_f32().unwrap(), vec![4.0, -5.0, 2.0]);
    assert_eq!(out[1].to_f32().unwrap(), vec![1.5, -2.0, 0.25]);
}

#[test]
fn dtype_promotion_and_broadcasting() {
    // i64 tensor + f32 0-d tensor -> f32 (the float category wins); [2, 1] + [3] -> [2, 3].
    let ir = "graph @promote(%i: i64[2, 1], %f: f32[], %r: f32[3]) -> (f32[2, 3], f64[2, 1]) {
      %a = aten.add.Tensor(%i, %f) : f32[2, 1]
      %b = aten.add.Tensor(%a, %r) : f32[2, 3]
      %c = aten.mul.Tensor(%i) {other = 0.5} : f32[2, 1]
      %d = aten._to_copy.default(%c) {dtype = f64} : f64[2, 1]
      return %b, %d
    }";
    let out = run(
        ir,
        &[
            HostTensor::from_i64(&[2, 1], &[1, 2]),
            HostTensor::from_f32(&[], &[0.5]),
            HostTensor::from_f32(&[3], &[10.0, 20.0, 30.0]),
        ],
    );
    assert_eq!(out[0].to_f32().unwrap(), vec![11.5, 21.5, 31.5, 12.5, 22.5, 32.5]);
    assert_eq!(out[1].to_f64().unwrap(), vec![0.5, 1.0]);
}

#[test]
fn unsupported_op_names_the_op_and_node() {
    let g = parse_graph("graph @g(%x: f32[2]) -> (f32[2]) {\n  %0 = aten.xyz.default(%x) : f32[2]\n  return %0\n}")
        .unwrap();
    match compile(&g) {
        Err(e @ EngineError::Compiler(DriverError::Lower(_))) => {
            assert_eq!(e.to_string(), "unsupported op aten.xyz at node %0");
            let kind = ErrorKind::Unsupported {
                op: "aten.xyz".into(),
                node: "%0".into(),
                reason: None,
                line: Some(2),
                col: Some(3),
            };
            assert_eq!(e.kind(), kind);
        }
        Err(e) => panic!("wrong error: {e}"),
        Ok(_) => panic!("compiled an unknown op"),
    }
}

#[test]
fn wrong_inputs_are_rejected_before_pjrt() {
    let g = parse_graph("graph @g(%x: f32[2, 3]) -> (f32[2, 3]) {\n  return %x\n}").unwrap();
    let c = compile(&g).unwrap();
    let e = c.run(&[HostTensor::from_f32(&[3, 2], &[0.0; 6])]).unwrap_err();
    assert_eq!(e.to_string(), "input 0: expected f32[2, 3], got f32[3, 2]");
    let e = c.run(&[]).unwrap_err();
    assert_eq!(e.to_string(), "expected 1 inputs, got 0");
}

#[test]
fn every_example_lowers_to_text_that_the_plugin_compiles() {
    // The text `torchtpu-opt --emit=stablehlo` prints is a valid PJRT program.
    use torchtpu_compiler::lower::Format;
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples");
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "ir") {
            continue;
        }
        let g = parse_graph(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let (_, hlo) = torchtpu_engine::lower(&g, &torchtpu_engine::Options::default(), Format::Text).unwrap();
        isolated_cache();
        let engine = torchtpu_engine::default_engine().unwrap();
        let exe = engine.client().compile(hlo.text().unwrap(), &Default::default());
        assert!(exe.is_ok(), "{}: {}", path.display(), exe.err().unwrap());
        seen += 1;
    }
    assert!(seen >= 2, "expected the examples folder to hold IR files");
}

/// A BatchNorm-like step whose outputs pair with both inputs (donated by default); `%x` is
/// still read after the output that aliases it is computed.
const DONATING_BN: &str = "graph @bn(%x: f32[2, 4], %mean: f32[4]) -> (f32[2, 4], f32[4]) {
  %y = aten.neg.default(%x) : f32[2, 4]
  %s = aten.sum.dim_IntList(%x) {dim = [0], dtype = none, keepdim = false} : f32[4]
  %m = aten.mul.Tensor(%mean) {other = 0.9} : f32[4]
  %u = aten.add.Tensor(%m, %s) : f32[4]
  return %y, %u
}";

#[test]
fn donated_inputs_alias_outputs_and_results_stay_right() {
    // Both inputs are donated (f32[4] -> the updated statistic, f32[2, 4] -> the activation);
    // %x is still read after the output that aliases it is computed, so XLA must keep it
    // intact until then. Three runs: each gets fresh device copies, so donation never leaks
    // into the next call or into the caller's memory.
    let g = parse_graph(DONATING_BN).unwrap();
    let options = torchtpu_engine::Options::default();
    assert!(options.compiler.donate_inputs, "the engine donates by default");
    let (_, hlo) = torchtpu_engine::lower(&g, &options, torchtpu_compiler::lower::Format::Text).unwrap();
    let text = hlo.text().unwrap();
    assert!(text.contains("%arg0: tensor<2x4xf32> {tf.aliasing_output = 0 : i32}"), "{text}");
    assert!(text.contains("%arg1: tensor<4xf32> {tf.aliasing_output = 1 : i32}"), "{text}");
    let x = seq(8, 0.5, 0.25);
    let mean = vec![1.0f32, -2.0, 3.0, 0.5];
    let inputs = [HostTensor::from_f32(&[2, 4], &x), HostTensor::from_f32(&[4], &mean)];
    let compiled = compile(&g).unwrap();
    for _ in 0..3 {
        let out = compiled.run(&inputs).unwrap();
        let neg: Vec<f32> = x.iter().map(|v| -v).collect();
        assert_close(&out[0].to_f32().unwrap(), &neg, 1e-6, 0.0);
        let want: Vec<f32> = (0..4).map(|j| mean[j] * 0.9 + x[j] + x[4 + j]).collect();
        assert_close(&out[1].to_f32().unwrap(), &want, 1e-6, 1e-6);
        // The caller's tensors are untouched.
        assert_eq!(inputs[0].to_f32().unwrap(), x);
        assert_eq!(inputs[1].to_f32().unwrap(), mean);
    }
}

/// Host memory with the alignment PJRT's CPU client needs to read it in place.
#[repr(C, align(64))]
struct Aligned<const N: usize>([f32; N]);

fn bytes<const N: usize>(a: &Aligned<N>) -> &[u8] {
    // SAFETY: plain f32s, viewed as their bytes for the lifetime of the borrow.
    unsafe { std::slice::from_raw_parts(a.0.as_ptr().cast(), N * 4) }
}

#[test]
fn inputs_are_read_in_place_kept_resident_and_never_donated_into() {
    // The same donating program as above, run on caller memory: PJRT reads it in place (no
    // copy), keeps the buffers for the next call, never writes the caller's memory although
    // the program donates both inputs, and sees in-place updates between calls.
    let compiled = compile(&parse_graph(DONATING_BN).unwrap()).unwrap();
    let mut x = Aligned([0.0f32; 8]);
    x.0.copy_from_slice(&seq(8, 0.5, 0.25));
    let mean = Aligned([1.0f32, -2.0, 3.0, 0.5]);
    let mut y = [0u8; 32];
    let mut u = [0u8; 16];
    for round in 0..3 {
        let before = x.0;
        compiled.run_into(&[bytes(&x), bytes(&mean)], &mut [&mut y, &mut u]).unwrap();
        assert_eq!(compiled.resident_inputs(), 2, "both inputs read in place on the CPU plugin");
        let got_y: Vec<f32> = y.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect();
        let got_u: Vec<f32> = u.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect();
        assert_close(&got_y, &before.map(|v| -v), 1e-6, 0.0);
        let want: Vec<f32> = (0..4).map(|j| mean.0[j] * 0.9 + before[j] + before[4 + j]).collect();
        assert_close(&got_u, &want, 1e-6, 1e-6);
        assert_eq!(x.0, before, "round {round}: the caller's memory was written");
        assert_eq!(mean.0, [1.0, -2.0, 3.0, 0.5]);
        // An in-place update, as an optimizer step makes: the next call must see it.
        x.0.iter_mut().for_each(|v| *v += 1.0);
    }
}

#[test]
fn a_compile_says_where_its_program_came_from_and_carries_its_estimate() {
    // A graph no other test compiles: the first compile lowers and compiles, the second finds
    // both levels of cache in memory, and both carry the same memory estimate.
    let ir = "graph @fresh(%x: f32[3, 7]) -> (f32[3, 7]) {\n  %0 = aten.exp.default(%x) : f32[3, 7]\n  %1 = aten.neg.default(%0) : f32[3, 7]\n  return %1\n}\n";
    isolated_cache();
    let engine = torchtpu_engine::default_engine().unwrap();
    let options = torchtpu_engine::Options::with_pipeline("cse");
    let first = engine.compile_text(ir, &options).unwrap();
    let second = engine.compile_text(ir, &options).unwrap();
    assert!(matches!(first.source().name(), "compiled" | "disk"), "{:?}", first.source());
    assert!(!first.graph_cache_hit() || first.source().name() == "disk");
    assert_eq!(second.source(), torchtpu_engine::CacheSource::Memory);
    assert!(second.graph_cache_hit());
    assert_eq!(first.memory(), second.memory());
    let m = second.memory();
    assert_eq!((m.input_bytes, m.output_bytes, m.donated_inputs), (84, 84, 1));
    assert_eq!(m.peak_at.as_deref(), Some("%1 (aten.neg.default)"));
    // The hit ran no passes or lowering.
    assert!(second.timings().get("passes").is_none() && second.timings().get("compile").is_some());
}

#[test]
fn wrong_host_memory_is_refused_before_pjrt_reads_it() {
    let g = parse_graph("graph @g(%x: f32[2, 3]) -> (f32[2, 3]) {\n  return %x\n}").unwrap();
    let c = compile(&g).unwrap();
    let short = [0u8; 20];
    let e = c.execute_host(&[&short]).unwrap_err();
    assert_eq!(e.to_string(), "input 0: expected 24 bytes (f32[2, 3]), got 20 bytes");
    assert_eq!(e.kind(), ErrorKind::Input);
    assert!(matches!(c.execute_host(&[]), Err(EngineError::Arity { expected: 1, got: 0 })));
}

/// torchao's int8 weight-only linear layer (`mul(mm(x, convert(transpose(w))), scale)`) on the
/// CPU engine: `quantized-linear` runs it as torchtpu's int8 host kernel for 2 rows and as
/// convert-then-dot for 20 (above `KERNEL_MAX_ROWS`); both against a hand reference (f32 sums
/// of K = 40 products in another order: 1e-5 relative).
#[test]
fn int8_weight_only_linear_in_both_forms_matches_a_hand_reference() {
    use torchtpu_compiler::lower::Format;
    isolated_cache();
    let engine = torchtpu_engine::default_engine().unwrap();
    assert!(engine.target().host_kernels.int8_matmul, "the CPU plugin registers the int8 kernel");
    let (n, k) = (24usize, 40usize);
    let w: Vec<i8> = (0..n * k).map(|i| ((i * 37 % 255) as i32 - 127) as i8).collect();
    let scale: Vec<f32> = (0..n).map(|j| 0.01 + j as f32 * 1e-3).collect();
    for (m, form) in [(2usize, "host-kernel"), (20, "dequantize")] {
        let ir = format!(
            "graph @q(%w: i8[{n}, {k}], %s: f32[{n}, 1], %x: f32[{m}, {k}]) -> (f32[{m}, {n}]) {{
              %wt = aten.permute.default(%w) {{dims = [1, 0]}} : i8[{k}, {n}]
              %wf = aten._to_copy.default(%wt) {{dtype = f32}} : f32[{k}, {n}]
              %y = aten.mm.default(%x, %wf) : f32[{m}, {n}]
              %s1 = aten.view.default(%s) {{size = [{n}]}} : f32[{n}]
              %o = aten.mul.Tensor(%y, %s1) : f32[{m}, {n}]
              return %o
            }}"
        );
        let mut options = torchtpu_engine::Options::default();
        options.compiler.target = engine.target();
        let (after, _) = torchtpu_engine::lower(&parse_graph(&ir).unwrap(), &options, Format::Text).unwrap();
        let printed = torchtpu_compiler::ir::print_graph(&after);
        assert!(printed.contains(&format!("form = \"{form}\"")), "{printed}");
        let x = seq(m * k, 0.25, 0.1);
        let wf: Vec<f32> = w.iter().map(|v| f32::from(*v)).collect();
        let wt: Vec<f32> = (0..k).flat_map(|p| (0..n).map(move |j| (p, j))).map(|(p, j)| wf[j * k + p]).collect();
        let mut want = matmul(&x, &wt, m, k, n);
        for (i, v) in want.iter_mut().enumerate() {
            *v *= scale[i % n];
        }
        let w_host = HostTensor {
            dtype: torchtpu_engine::DType::I8,
            dims: vec![n as i64, k as i64],
            data: w.iter().map(|v| *v as u8).collect(),
        };
        let out = run(
            &ir,
            &[w_host, HostTensor::from_f32(&[n as i64, 1], &scale), HostTensor::from_f32(&[m as i64, k as i64], &x)],
        );
        assert_close(&out[0].to_f32().unwrap(), &want, 1e-5, 1e-5);
    }
}
