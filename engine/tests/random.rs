//! Device random numbers (`tpu.rng_uniform`, `tpu.rng_normal`, `tpu.rng_integers`) on the
//! real XLA CPU plugin: the state is an i64[2] input, the next state a result.
//! Draws are deterministic in the state; the statistics are checked on 100k samples (the
//! bounds are ~10 standard errors wide, so they do not flake).

use torchtpu_compiler::ir::{parse_graph, DType};
use torchtpu_engine::HostTensor;

/// Points the persistent cache at a folder of this test run, never the user's cache.
fn isolated_cache() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let dir = std::env::temp_dir().join(format!("torchtpu-engine-random-tests-{}", std::process::id()));
        std::env::set_var("TORCHTPU_CACHE_DIR", dir);
    });
}

fn run(ir: &str, inputs: &[HostTensor]) -> Vec<HostTensor> {
    isolated_cache();
    let g = parse_graph(ir).expect("test IR parses");
    let compiled = torchtpu_engine::compile(&g).unwrap_or_else(|e| panic!("compile failed: {e}"));
    compiled.run(inputs).unwrap_or_else(|e| panic!("run failed: {e}"))
}

fn state(key: i64, counter: i64) -> HostTensor {
    HostTensor::from_i64(&[2], &[key, counter])
}

/// One draw of `op` with `attrs` into `ty` from the given state: (next state, values).
fn draw(op: &str, attrs: &str, ty: &str, s: &HostTensor) -> (HostTensor, HostTensor) {
    let ir = format!(
        "graph @draw(%s: i64[2]) -> (i64[2], {ty}) {{
          %r:2 = tpu.{op}(%s) {{{attrs}}} : (i64[2], {ty})
          return %r#0, %r#1
        }}"
    );
    let mut out = run(&ir, std::slice::from_ref(s)).into_iter();
    (out.next().unwrap(), out.next().unwrap())
}

/// The values of a float tensor of any float dtype, as f64.
fn floats(t: &HostTensor) -> Vec<f64> {
    match t.dtype {
        DType::F32 => t.to_f32().unwrap().into_iter().map(f64::from).collect(),
        DType::F64 => t.to_f64().unwrap(),
        DType::BF16 => t
            .data
            .chunks_exact(2)
            .map(|c| f64::from(f32::from_bits(u32::from(u16::from_le_bytes([c[0], c[1]])) << 16)))
            .collect(),
        d => panic!("not a float tensor: {d}"),
    }
}

fn mean_std(v: &[f64]) -> (f64, f64) {
    let n = v.len() as f64;
    let mean = v.iter().sum::<f64>() / n;
    let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n;
    (mean, var.sqrt())
}

#[test]
fn the_same_state_gives_the_same_draw_and_a_new_state() {
    let s = state(42, 0);
    let (s1, a) = draw("rng_uniform", "high = 1.0, low = 0.0", "f32[1000]", &s);
    let (s2, b) = draw("rng_uniform", "high = 1.0, low = 0.0", "f32[1000]", &s);
    assert_eq!(a, b, "same state in, same values out");
    assert_eq!(s1, s2, "same state in, same state out");
    assert_eq!(s1.dims, vec![2]);
    assert_eq!(s1.dtype, DType::I64);
    assert_ne!(s1, s, "the returned state differs from the input");
    // Chaining the state gives a different draw; another seed gives another draw too.
    let (_, c) = draw("rng_uniform", "high = 1.0, low = 0.0", "f32[1000]", &s1);
    assert_ne!(a, c, "the next state draws different numbers");
    let (_, d) = draw("rng_uniform", "high = 1.0, low = 0.0", "f32[1000]", &state(43, 0));
    assert_ne!(a, d, "another key draws different numbers");
    // The values themselves are not all equal.
    let v = floats(&a);
    assert!(v.iter().any(|x| *x != v[0]));
}

#[test]
fn chained_draws_in_one_graph_differ() {
    let ir = "graph @two(%s: i64[2]) -> (i64[2], f32[256], f32[256], i64[256], i64[256]) {
      %a:2 = tpu.rng_uniform(%s) {high = 1.0, low = 0.0} : (i64[2], f32[256])
      %b:2 = tpu.rng_uniform(%a#0) {high = 1.0, low = 0.0} : (i64[2], f32[256])
      %c:2 = tpu.rng_integers(%b#0) {high = 1000000, low = 0} : (i64[2], i64[256])
      %d:2 = tpu.rng_integers(%c#0) {high = 1000000, low = 0} : (i64[2], i64[256])
      return %d#0, %a#1, %b#1, %c#1, %d#1
    }";
    let s = state(7, 11);
    let out = run(ir, std::slice::from_ref(&s));
    assert_ne!(out[1], out[2]);
    assert_ne!(out[3], out[4]);
    // The graph's first draw is the single draw from that state: the rule is a function of it.
    let (s1, a) = draw("rng_uniform", "high = 1.0, low = 0.0", "f32[256]", &s);
    assert_eq!(out[1], a);
    let (_, b) = draw("rng_uniform", "high = 1.0, low = 0.0", "f32[256]", &s1);
    assert_eq!(out[2], b);
}

#[test]
fn uniform_f32_is_uniform_in_low_high() {
    let (_, v) = draw("rng_uniform", "high = 1.0, low = 0.0", "f32[100000]", &state(1, 2));
    let v = floats(&v);
    assert!(v.iter().all(|x| (0.0..1.0).contains(x)), "all in [0, 1)");
    let (mean, std) = mean_std(&v);
    assert!((mean - 0.5).abs() < 0.01, "mean {mean}");
    assert!((std - (1.0f64 / 12.0).sqrt()).abs() < 0.01, "std {std}");
    // Quarters hold a quarter each.
    for q in 0..4 {
        let n = v.iter().filter(|x| ((q as f64) * 0.25..(q as f64 + 1.0) * 0.25).contains(*x)).count();
        assert!((n as f64 / 1e5 - 0.25).abs() < 0.01, "quarter {q}: {n}");
    }

    let (_, w) = draw("rng_uniform", "high = 3.0, low = -2.0", "f32[100000]", &state(3, 4));
    let w = floats(&w);
    assert!(w.iter().all(|x| (-2.0..3.0).contains(x)), "all in [-2, 3)");
    let (mean, _) = mean_std(&w);
    assert!((mean - 0.5).abs() < 0.05, "mean {mean}");
}

#[test]
fn uniform_bf16_and_f64() {
    // bf16: 0.99.. rounds to 1.0 in bf16; the clamp keeps every value below high.
    let (_, v) = draw("rng_uniform", "high = 1.0, low = 0.0", "bf16[100000]", &state(5, 0));
    assert_eq!(v.dtype, DType::BF16);
    let v = floats(&v);
    assert!(v.iter().all(|x| (0.0..1.0).contains(x)), "all in [0, 1)");
    let (mean, _) = mean_std(&v);
    assert!((mean - 0.5).abs() < 0.01, "mean {mean}");

    let (_, w) = draw("rng_uniform", "high = 10.0, low = 5.0", "f64[100000]", &state(6, 0));
    assert_eq!(w.dtype, DType::F64);
    let w = floats(&w);
    assert!(w.iter().all(|x| (5.0..10.0).contains(x)), "all in [5, 10)");
    let (mean, _) = mean_std(&w);
    assert!((mean - 7.5).abs() < 0.05, "mean {mean}");
    // 52 random mantissa bits: values that f32 could not hold.
    assert!(w.iter().any(|x| f64::from(*x as f32) != *x));
}

#[test]
fn normal_has_mean_and_std() {
    let (_, v) = draw("rng_normal", "mean = 0.0, std = 1.0", "f32[100000]", &state(8, 0));
    let v = floats(&v);
    assert!(v.iter().all(|x| x.is_finite()));
    let (mean, std) = mean_std(&v);
    assert!(mean.abs() < 0.02, "mean {mean}");
    assert!((std - 1.0).abs() < 0.02, "std {std}");
    // About 68% within one std.
    let within = v.iter().filter(|x| x.abs() < 1.0).count() as f64 / 1e5;
    assert!((within - 0.6827).abs() < 0.01, "within one std: {within}");

    let (_, w) = draw("rng_normal", "mean = 3.0, std = 2.0", "f64[100000]", &state(9, 0));
    let (mean, std) = mean_std(&floats(&w));
    assert!((mean - 3.0).abs() < 0.04, "mean {mean}");
    assert!((std - 2.0).abs() < 0.04, "std {std}");

    let (_, b) = draw("rng_normal", "mean = -1.0, std = 0.5", "bf16[100000]", &state(10, 0));
    assert_eq!(b.dtype, DType::BF16);
    let (mean, std) = mean_std(&floats(&b));
    assert!((mean + 1.0).abs() < 0.02, "mean {mean}");
    assert!((std - 0.5).abs() < 0.02, "std {std}");
}

#[test]
fn integers_hit_every_value_of_low_high() {
    let (_, v) = draw("rng_integers", "high = 7, low = -3", "i32[100000]", &state(11, 0));
    let v = v.to_i32().unwrap();
    assert!(v.iter().all(|x| (-3..7).contains(x)), "all in [-3, 7)");
    for k in -3..7 {
        let n = v.iter().filter(|x| **x == k).count();
        assert!((n as f64 / 1e5 - 0.1).abs() < 0.01, "value {k}: {n} times");
    }

    let (_, b) = draw("rng_integers", "high = 2, low = 0", "bool[10000]", &state(12, 0));
    let b = b.to_bool().unwrap();
    let trues = b.iter().filter(|x| **x).count();
    assert!((4500..5500).contains(&trues), "{trues} of 10000 true");

    let (_, f) = draw("rng_integers", "high = 5, low = 0", "f32[10000]", &state(13, 0));
    let f = floats(&f);
    assert!(f.iter().all(|x| x.fract() == 0.0 && (0.0..5.0).contains(x)));
    for k in 0..5 {
        assert!(f.contains(&(k as f64)), "value {k} never drawn");
    }

    let (_, u) = draw("rng_integers", "high = 256, low = 0", "u8[100000]", &state(14, 0));
    let u = u.to_u8().unwrap();
    for k in 0..=255u8 {
        assert!(u.contains(&k), "value {k} never drawn");
    }

    // The whole i64 range: both signs show up.
    let (_, w) =
        draw("rng_integers", "high = 9223372036854775807, low = -9223372036854775808", "i64[1000]", &state(15, 0));
    let w = w.to_i64().unwrap();
    assert!(w.iter().any(|x| *x < 0) && w.iter().any(|x| *x > 0));
}

#[test]
fn scalar_and_empty_draws_run() {
    let (s1, v) = draw("rng_uniform", "high = 1.0, low = 0.0", "f32[]", &state(16, 0));
    assert_eq!(v.dims, Vec::<i64>::new());
    assert!((0.0..1.0).contains(&floats(&v)[0]));
    assert_ne!(s1, state(16, 0));
    let (_, e) = draw("rng_normal", "mean = 0.0, std = 1.0", "f32[0, 3]", &state(17, 0));
    assert_eq!(e.dims, vec![0, 3]);
    assert!(e.data.is_empty());
    let (_, i) = draw("rng_integers", "high = 5, low = 0", "i64[]", &state(18, 0));
    assert!((0..5).contains(&i.to_i64().unwrap()[0]));
}
