//! The weight-only int8 linear layer as one host kernel: `y[m, n] = scale[n] * Σ_k x[m, k] ·
//! w[n, k]`, with `x` f32 `[M, K]`, `w` int8 `[N, K]` (a `nn.Linear` weight, row-major, as
//! torchao stores it) and `scale` f32 `[N]`. It reads each weight once, as int8, which is what a
//! memory-bound one-token decode needs: XLA's CPU dot takes float operands only, so in XLA the
//! weight is first converted to an f32 copy as large as the f32 model's (docs/quantization.md).

/// One row of `x` against four rows of `w` (four outputs): the inner loop, chosen once per
/// process (a build for the running CPU's vector units where there is one, see `handler.rs`).
/// `ahead`: weight bytes the next calls will read, which a build may ask the cache for.
pub type RowDot4 = fn(&[f32], [&[i8]; 4], &[i8]) -> [f32; 4];

/// The portable inner loop. `LANES`: sums kept independently per weight row, two vectors'
/// worth for the build's vector width (16 for 256-bit, 32 for 512-bit), so that four rows give
/// eight independent sums (enough to hide an add's latency) and each chunk of `x` is loaded
/// once for four rows. `FMA`: fused multiply-adds, for a build whose CPU has them.
/// `#[inline(always)]` so that a caller built for wider vector units (`handler.rs`) gets its
/// own vectorised copy.
#[inline(always)]
pub fn row_dot4<const FMA: bool, const LANES: usize>(x: &[f32], w: [&[i8]; 4], _ahead: &[i8]) -> [f32; 4] {
    #[inline(always)]
    fn madd<const FMA: bool>(a: f32, b: i8, c: f32) -> f32 {
        if FMA {
            a.mul_add(f32::from(b), c)
        } else {
            a * f32::from(b) + c
        }
    }
    let k = x.len();
    let body = k - k % LANES;
    // Four separate accumulator arrays (not an array of them): what the vectoriser keeps in
    // registers.
    let (mut a0, mut a1, mut a2, mut a3) = ([0f32; LANES], [0f32; LANES], [0f32; LANES], [0f32; LANES]);
    let chunk = |v: &[i8], c: usize| -> [i8; LANES] { v[c..c + LANES].try_into().expect("a whole chunk") };
    for c in (0..body).step_by(LANES) {
        let xc: [f32; LANES] = x[c..c + LANES].try_into().expect("a whole chunk");
        let (w0, w1, w2, w3) = (chunk(w[0], c), chunk(w[1], c), chunk(w[2], c), chunk(w[3], c));
        for i in 0..LANES {
            a0[i] = madd::<FMA>(xc[i], w0[i], a0[i]);
            a1[i] = madd::<FMA>(xc[i], w1[i], a1[i]);
            a2[i] = madd::<FMA>(xc[i], w2[i], a2[i]);
            a3[i] = madd::<FMA>(xc[i], w3[i], a3[i]);
        }
    }
    let mut out = [a0.iter().sum::<f32>(), a1.iter().sum(), a2.iter().sum(), a3.iter().sum()];
    for (r, o) in out.iter_mut().enumerate() {
        for t in body..k {
            *o += x[t] * f32::from(w[r][t]);
        }
    }
    out
}

/// Weight rows ahead of the current group of four that `rows` hands the inner loop to ask the
/// cache for (`RowDot4`'s `ahead`): with cold caches one thread took 4.0 ms for a 32000 x 768
/// weight on the hardware prefetcher alone and 2.4 ms with this (`handler.rs`, `kernel_rate`).
const PREFETCH_ROWS: usize = 16;

/// Shapes of one call, checked against the buffers by [`Int8Matmul::new`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    pub m: usize,
    pub n: usize,
    pub k: usize,
}

/// One call's operands, their sizes checked.
pub struct Int8Matmul<'a> {
    pub shape: Shape,
    x: &'a [f32],
    w: &'a [i8],
    scale: &'a [f32],
}

/// Tasks per thread when the work is split: equal shares (a multiple of four weight rows
/// each), two per thread so that a thread slowed by another process does not hold up the rest.
const TASKS_PER_THREAD: usize = 2;
/// Below this many weight bytes, one thread does it all (a task costs a few microseconds).
const PARALLEL_MIN_BYTES: usize = 1 << 16;

impl<'a> Int8Matmul<'a> {
    pub fn new(shape: Shape, x: &'a [f32], w: &'a [i8], scale: &'a [f32]) -> Result<Self, String> {
        let Shape { m, n, k } = shape;
        if x.len() != m * k || w.len() != n * k || scale.len() != n {
            return Err(format!(
                "int8 matmul: operand sizes {}, {}, {} do not fit M={m}, N={n}, K={k}",
                x.len(),
                w.len(),
                scale.len()
            ));
        }
        Ok(Int8Matmul { shape, x, w, scale })
    }

    /// Writes `out` (`[M, N]`, row-major), splitting the weight rows between threads when
    /// there is enough of it.
    pub fn run(&self, out: &mut [f32], dot: RowDot4) {
        let Shape { m, n, k } = self.shape;
        assert_eq!(out.len(), m * n, "int8 matmul: output size");
        let threads = rayon::current_num_threads();
        if n * k < PARALLEL_MIN_BYTES || threads < 2 || n < 8 {
            self.rows(0..n, out, n, dot);
            return;
        }
        use rayon::prelude::*;
        let tasks = threads * TASKS_PER_THREAD;
        let share = n.div_ceil(tasks).div_ceil(4) * 4;
        if m == 1 {
            // One output row: each task writes its own columns in place.
            out.par_chunks_mut(share).enumerate().for_each(|(t, cols)| {
                let start = t * share;
                self.rows(start..start + cols.len(), cols, cols.len(), dot);
            });
            return;
        }
        // Each task fills its own [M, share] block; the blocks are then copied into place.
        let blocks: Vec<(usize, Vec<f32>)> = (0..n)
            .step_by(share)
            .collect::<Vec<_>>()
            .into_par_iter()
            .map(|start| {
                let end = (start + share).min(n);
                let mut block = vec![0f32; m * (end - start)];
                self.rows(start..end, &mut block, end - start, dot);
                (start, block)
            })
            .collect();
        for (start, block) in blocks {
            let width = block.len() / m;
            for row in 0..m {
                out[row * n + start..row * n + start + width].copy_from_slice(&block[row * width..(row + 1) * width]);
            }
        }
    }

    /// Output columns `cols` into `out`, whose rows are `stride` wide and start at column
    /// `cols.start`.
    fn rows(&self, cols: std::ops::Range<usize>, out: &mut [f32], stride: usize, dot: RowDot4) {
        let Shape { m, k, .. } = self.shape;
        let w_row = |col: usize| &self.w[col * k..(col + 1) * k];
        for first in cols.clone().step_by(4) {
            let ahead_start = ((first + PREFETCH_ROWS) * k).min(self.w.len());
            let ahead = &self.w[ahead_start..(ahead_start + 4 * k).min(self.w.len())];
            // The last group repeats its last row where fewer than four remain.
            let last = (first + 3).min(cols.end - 1);
            let group = [first, (first + 1).min(last), (first + 2).min(last), last];
            let ws = group.map(w_row);
            for row in 0..m {
                let sums = dot(&self.x[row * k..(row + 1) * k], ws, if row == 0 { ahead } else { &[] });
                for (i, col) in (first..=last).enumerate() {
                    out[row * stride + col - cols.start] = sums[i] * self.scale[col];
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each entry in float64, with its bound: 1e-6 of the sum of its terms' magnitudes (f32
    /// sums of K products in another order differ by up to ~K·eps of that sum).
    fn reference(x: &[f32], w: &[i8], scale: &[f32], s: Shape) -> Vec<(f32, f32)> {
        let mut out = vec![(0f32, 0f32); s.m * s.n];
        for i in 0..s.m {
            for j in 0..s.n {
                let term = |t: usize| f64::from(x[i * s.k + t]) * f64::from(w[j * s.k + t]);
                let acc: f64 = (0..s.k).map(term).sum();
                let magnitude: f64 = (0..s.k).map(|t| term(t).abs()).sum();
                out[i * s.n + j] =
                    ((acc * f64::from(scale[j])) as f32, (1e-6 * magnitude * f64::from(scale[j])) as f32);
            }
        }
        out
    }

    fn case(m: usize, n: usize, k: usize) {
        let s = Shape { m, n, k };
        let x: Vec<f32> = (0..m * k).map(|i| ((i * 37 % 101) as f32 - 50.0) / 25.0).collect();
        let w: Vec<i8> = (0..n * k).map(|i| ((i * 91 % 255) as i32 - 127) as i8).collect();
        let scale: Vec<f32> = (0..n).map(|j| 0.01 + j as f32 * 1e-4).collect();
        let mut out = vec![f32::NAN; m * n];
        Int8Matmul::new(s, &x, &w, &scale).unwrap().run(&mut out, row_dot4::<false, 16>);
        let want = reference(&x, &w, &scale, s);
        for (g, (e, bound)) in out.iter().zip(&want) {
            assert!((g - e).abs() <= *bound, "{g} vs {e} (bound {bound}) at M={m} N={n} K={k}");
        }
    }

    #[test]
    fn matches_a_float64_reference_for_odd_and_parallel_shapes() {
        case(1, 7, 5); // shorter than one vector: the tail loop alone
        case(3, 33, 70); // vector body and tail
        case(1, 2048, 768); // split between threads, written in place
        case(1, 1030, 70); // uneven shares, a short last one
        case(5, 600, 512); // several rows, split, a partial last block
    }

    #[test]
    fn refuses_buffers_that_do_not_fit_the_shape() {
        let err = Int8Matmul::new(Shape { m: 2, n: 3, k: 4 }, &[0.0; 8], &[0; 11], &[1.0; 3]).err().unwrap();
        assert!(err.contains("M=2, N=3, K=4"), "{err}");
    }
}
