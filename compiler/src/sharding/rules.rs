//! Sharding rules by op family. A rule sees the layouts its operands have and decides the
//! layouts it needs them in and the layouts of its results; the propagation pass inserts a
//! reshard wherever an operand's layout differs from what its consumer needs.
//!
//! Where a rule has a choice (two operands disagree, a dim could follow either side), it
//! builds candidates and `choose` picks one by user priority (keep user-annotated layouts),
//! then by the fewest bytes resharded (pending partial sums count as the all-reduce they need).

use super::{local_bytes, reshard, Target};
use crate::ir::{Attr, Mesh, Node, Origin, Sharding, TensorType};
use crate::registry::attrs::{
    ACCUMULATE, BROADCAST_DIMENSIONS, DIM, DIM0, DIM1, DIMS, INDICES, NORMALIZED_SHAPE, TRANSPOSED,
};

/// What a rule sees: the node, its operands' types and their current layouts.
pub struct OpView<'a> {
    pub node: &'a Node,
    pub types: Vec<&'a TensorType>,
    pub layouts: Vec<Sharding>,
    pub mesh: &'a Mesh,
    pub target: Target,
}

/// A rule's answer: the layout each operand must have, and each result's layout.
#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    pub operands: Vec<Sharding>,
    pub results: Vec<Sharding>,
}

pub type ShardingFn = fn(&OpView<'_>, &'static str) -> Decision;

type Dims = Vec<Vec<String>>;

fn layout(dims: Dims, origin: &Origin) -> Sharding {
    Sharding { dims, partial: Vec::new(), origin: origin.clone() }
}

fn static_shape(t: &TensorType) -> Vec<i64> {
    t.static_dims().unwrap_or_else(|| vec![0; t.shape.len()])
}

/// `dims` with every axis that does not divide its dim of `shape` (or repeats) removed.
fn fit(mesh: &Mesh, mut dims: Dims, shape: &[i64]) -> Dims {
    let mut used: Vec<String> = Vec::new();
    for (d, axes) in dims.iter_mut().enumerate() {
        let size = shape.get(d).copied().unwrap_or(0);
        let mut splits = 1;
        axes.retain(|a| {
            let n = mesh.axis_size(a).unwrap_or(1);
            let ok = !used.contains(a) && size > 0 && size % (splits * n) == 0;
            if ok {
                splits *= n;
                used.push(a.clone());
            }
            ok
        });
    }
    dims.resize(shape.len(), Vec::new());
    dims
}

/// The current layout of operand `i` without pending sums (what every rule reads).
fn summed(v: &OpView<'_>, i: usize) -> Dims {
    v.layouts[i].dims.clone()
}

/// Picks the cheapest candidate: first the fewest bytes of user-annotated operands moved,
/// then the fewest bytes moved in all (a partial result adds the all-reduce it will need),
/// then the most sharded results. `results` of each candidate may carry `partial`.
fn choose(v: &OpView<'_>, candidates: Vec<Decision>) -> Decision {
    let cost = |c: &Decision| {
        let (mut user, mut total) = (0u64, 0u64);
        for (i, want) in c.operands.iter().enumerate() {
            let bytes = reshard(v.mesh, v.types[i], &v.layouts[i], want, &v.target).bytes_per_device;
            total += bytes;
            if v.layouts[i].origin == Origin::User && !v.layouts[i].same_layout(want) {
                user += bytes.max(1);
            }
        }
        let mut unsharded = 0u64;
        for (r, s) in c.results.iter().enumerate() {
            let ty = &v.node.results[r];
            if !s.partial.is_empty() {
                total += local_bytes(v.mesh, ty, &Sharding { partial: Vec::new(), ..s.clone() });
            }
            unsharded += local_bytes(v.mesh, ty, s);
        }
        (user, total, unsharded)
    };
    candidates.into_iter().min_by_key(cost).expect("a rule offers at least one candidate")
}

/// Every operand replicated, every result replicated: the rule of ops without one.
pub fn replicated(v: &OpView<'_>, origin: Origin) -> Decision {
    Decision {
        operands: v.types.iter().map(|t| Sharding::replicated(t.shape.len(), origin.clone())).collect(),
        results: v.node.results.iter().map(|t| Sharding::replicated(t.shape.len(), origin.clone())).collect(),
    }
}

fn rule_origin(name: &'static str) -> Origin {
    Origin::Rule(name.to_string())
}

/// The operand layout that result layout `r` implies for an operand of `shape` broadcast
/// (right-aligned, size-1 dims expanded) to `out`.
fn project(r: &Dims, shape: &[i64], out: &[i64]) -> Dims {
    let offset = out.len().saturating_sub(shape.len());
    shape
        .iter()
        .enumerate()
        .map(|(j, &n)| match (out.get(j + offset), r.get(j + offset)) {
            (Some(&m), Some(axes)) if m == n => axes.clone(),
            _ => Vec::new(),
        })
        .collect()
}

/// The result layout an operand of `shape` broadcast to `out` suggests.
fn lift(dims: &Dims, shape: &[i64], out: &[i64]) -> Dims {
    let offset = out.len().saturating_sub(shape.len());
    let mut r = vec![Vec::new(); out.len()];
    for (j, axes) in dims.iter().enumerate() {
        if j + offset < out.len() && shape.get(j) == out.get(j + offset) {
            r[j + offset] = axes.clone();
        }
    }
    r
}

/// Elementwise ops (with broadcasting): every operand follows one result layout. Candidates:
/// each operand's layout lifted to the result, and their union where they do not conflict.
pub fn elementwise(v: &OpView<'_>, name: &'static str) -> Decision {
    let origin = rule_origin(name);
    let out = static_shape(&v.node.results[0]);
    let shapes: Vec<Vec<i64>> = v.types.iter().map(|t| static_shape(t)).collect();
    let mut options: Vec<Dims> = (0..v.types.len()).map(|i| lift(&summed(v, i), &shapes[i], &out)).collect();
    // Union in priority order (user layouts first).
    let mut order: Vec<usize> = (0..v.types.len()).collect();
    order.sort_by_key(|&i| v.layouts[i].origin != Origin::User);
    let mut union: Dims = vec![Vec::new(); out.len()];
    for &i in &order {
        for (d, axes) in options[i].iter().enumerate() {
            if union[d].is_empty() {
                union[d] = axes.clone();
            }
        }
    }
    options.push(union);
    options.push(vec![Vec::new(); out.len()]);
    let candidates = options
        .into_iter()
        .map(|dims| {
            let r = fit(v.mesh, dims, &out);
            Decision {
                operands: shapes.iter().map(|s| layout(project(&r, s, &out), &origin)).collect(),
                results: v
                    .node
                    .results
                    .iter()
                    .map(|t| {
                        let shape = static_shape(t);
                        if shape == out {
                            layout(r.clone(), &origin)
                        } else {
                            Sharding::replicated(shape.len(), origin.clone())
                        }
                    })
                    .collect(),
            }
        })
        .collect();
    choose(v, candidates)
}

/// Normalises a dim index (negative counts from the end).
fn norm_dim(d: i64, rank: usize) -> Option<usize> {
    let r = rank as i64;
    let d = if d < 0 { d + r } else { d };
    (0..r).contains(&d).then_some(d as usize)
}

/// The dims a reduction reduces: `dim`/`dims` as an int or a list; none or `[]` is all.
fn reduced_dims(node: &Node, rank: usize) -> Vec<usize> {
    let attr = node.attr(DIM).or_else(|| node.attr(DIMS));
    let listed: Vec<i64> = match attr {
        Some(Attr::Int(d)) => vec![*d],
        Some(Attr::IntList(l)) => l.clone(),
        _ => Vec::new(),
    };
    if listed.is_empty() {
        return (0..rank).collect();
    }
    let mut dims: Vec<usize> = listed.into_iter().filter_map(|d| norm_dim(d, rank)).collect();
    dims.sort_unstable();
    dims.dedup();
    dims
}

/// Maps the input layout to a reduction's result (reduced dims dropped, or kept as size 1).
fn reduce_result(dims: &Dims, reduced: &[usize], out_rank: usize) -> Dims {
    if out_rank == dims.len() {
        dims.iter().enumerate().map(|(d, a)| if reduced.contains(&d) { Vec::new() } else { a.clone() }).collect()
    } else {
        dims.iter().enumerate().filter(|(d, _)| !reduced.contains(d)).map(|(_, a)| a.clone()).collect()
    }
}

/// Operand 0 in layout `first`, any other operand (weights, bias) replicated.
fn first_then_replicated(v: &OpView<'_>, first: Dims, origin: &Origin) -> Vec<Sharding> {
    let mut operands = vec![layout(first, origin)];
    operands.extend(v.types[1..].iter().map(|t| Sharding::replicated(t.shape.len(), origin.clone())));
    operands
}

/// `dims` with the dims at `which` whole.
fn cleared(dims: Dims, which: &[usize]) -> Dims {
    dims.into_iter().enumerate().map(|(d, a)| if which.contains(&d) { Vec::new() } else { a }).collect()
}

/// A reduction's layouts: with `partial`, the reduced dims' axes become pending partial
/// results; without, the reduced dims are gathered first.
fn reduction(v: &OpView<'_>, name: &'static str, partial: bool) -> Decision {
    let origin = rule_origin(name);
    let rank = v.types[0].shape.len();
    let reduced = reduced_dims(v.node, rank);
    let input = summed(v, 0);
    let (input, pending): (Dims, Vec<String>) = match partial {
        true => (input.clone(), reduced.iter().flat_map(|&d| input[d].clone()).collect()),
        false => (cleared(input, &reduced), Vec::new()),
    };
    let results = v
        .node
        .results
        .iter()
        .map(|t| {
            let dims = fit(v.mesh, reduce_result(&input, &reduced, t.shape.len()), &static_shape(t));
            Sharding { dims, partial: pending.clone(), origin: origin.clone() }
        })
        .collect();
    Decision { operands: first_then_replicated(v, input, &origin), results }
}

/// Sums, means, max/min, products, any/all: a reduced dim's axes become a pending partial
/// result (each device reduces its piece; an all-reduce finishes it where it is needed).
pub fn reduce(v: &OpView<'_>, name: &'static str) -> Decision {
    reduction(v, name, true)
}

/// Reductions that cannot finish with an all-reduce (variance, arg-max, median, k-th value):
/// the reduced dims are gathered first.
pub fn reduce_gathered(v: &OpView<'_>, name: &'static str) -> Decision {
    reduction(v, name, false)
}

/// mm / bmm / addmm: batch dims follow both sides, `m` the left, `n` the right; a contracting
/// dim sharded the same on both sides gives a partial sum. Candidates cover keeping or
/// dropping each side's axes per dim.
pub fn dot(v: &OpView<'_>, name: &'static str) -> Decision {
    let origin = rule_origin(name);
    // addmm(bias, a, b): the matrices are the last two operands.
    let (bias, a, b) = match v.types.len() {
        3 => (Some(0), 1, 2),
        _ => (None, 0, 1),
    };
    if v.types.len() <= b || v.layouts[a].dims.len() < 2 || v.layouts[a].dims.len() != v.layouts[b].dims.len() {
        return replicated(v, Origin::NoRule);
    }
    let (la, lb) = (summed(v, a), summed(v, b));
    let ra = la.len();
    let batch = ra.saturating_sub(2);
    let out = static_shape(&v.node.results[0]);
    let pick = |axes: &[Vec<String>]| -> Vec<Vec<String>> {
        let mut o: Vec<Vec<String>> = vec![Vec::new()];
        for x in axes {
            if !x.is_empty() && !o.contains(x) {
                o.push(x.clone());
            }
        }
        o
    };
    let batch_options: Vec<Dims> = if batch == 0 {
        vec![Vec::new()]
    } else {
        let mut o = vec![vec![Vec::new(); batch], la[..batch].to_vec(), lb[..batch].to_vec()];
        o.dedup();
        o
    };
    let m_options = pick(&[la[ra - 2].clone()]);
    let n_options = pick(&[lb[ra - 1].clone()]);
    let k_options = pick(&[la[ra - 1].clone(), lb[ra - 2].clone()]);
    let mut candidates = Vec::new();
    for bo in &batch_options {
        for m in &m_options {
            for n in &n_options {
                for k in &k_options {
                    let all: Vec<&String> = bo.iter().flatten().chain(m).chain(n).chain(k).collect();
                    let distinct = all.iter().enumerate().all(|(i, x)| !all[..i].contains(x));
                    if !distinct {
                        continue;
                    }
                    let mut ad = bo.clone();
                    ad.extend([m.clone(), k.clone()]);
                    let mut bd = bo.clone();
                    bd.extend([k.clone(), n.clone()]);
                    let mut rd = bo.clone();
                    rd.extend([m.clone(), n.clone()]);
                    let ad = fit(v.mesh, ad, &static_shape(v.types[a]));
                    let bd = fit(v.mesh, bd, &static_shape(v.types[b]));
                    // Keep only axes both sides still carry after fitting.
                    let k_kept: Vec<String> = ad[ra - 1].iter().filter(|x| bd[ra - 2].contains(x)).cloned().collect();
                    let (mut ad, mut bd) = (ad, bd);
                    ad[ra - 1] = k_kept.clone();
                    bd[ra - 2] = k_kept.clone();
                    let rd = fit(v.mesh, rd, &out);
                    let mut operands = Vec::new();
                    if let Some(i) = bias {
                        operands.push(layout(project(&rd, &static_shape(v.types[i]), &out), &origin));
                    }
                    operands.push(layout(ad, &origin));
                    operands.push(layout(bd, &origin));
                    let results = vec![Sharding { dims: rd, partial: k_kept, origin: origin.clone() }];
                    candidates.push(Decision { operands, results });
                }
            }
        }
    }
    if candidates.is_empty() {
        return replicated(v, origin);
    }
    choose(v, candidates)
}

/// permute / transpose / t: the layout moves with the dims.
pub fn permute(v: &OpView<'_>, name: &'static str) -> Decision {
    let origin = rule_origin(name);
    let input = summed(v, 0);
    let rank = input.len();
    let perm: Vec<usize> = match (v.node.attr(DIMS), v.node.attr(DIM0), v.node.attr(DIM1)) {
        (Some(Attr::IntList(p)), _, _) => p.iter().filter_map(|&d| norm_dim(d, rank)).collect(),
        (_, Some(a), Some(b)) => {
            let (a, b) = (norm_dim(a.as_int().unwrap_or(0), rank), norm_dim(b.as_int().unwrap_or(0), rank));
            let mut p: Vec<usize> = (0..rank).collect();
            if let (Some(a), Some(b)) = (a, b) {
                p.swap(a, b);
            }
            p
        }
        _ => (0..rank).rev().collect(),
    };
    if perm.len() != rank {
        return replicated(v, Origin::NoRule);
    }
    let result: Dims = perm.iter().map(|&p| input[p].clone()).collect();
    Decision { operands: vec![layout(input, &origin)], results: vec![layout(result, &origin)] }
}

/// expand / broadcast_to / broadcast_in_dim: new and expanded dims are replicated.
pub fn broadcast(v: &OpView<'_>, name: &'static str) -> Decision {
    let origin = rule_origin(name);
    let input = summed(v, 0);
    let shape = static_shape(v.types[0]);
    let out = static_shape(&v.node.results[0]);
    let result = match v.node.attr(BROADCAST_DIMENSIONS).and_then(Attr::as_int_list) {
        Some(map) => {
            let mut r = vec![Vec::new(); out.len()];
            for (i, &d) in map.iter().enumerate() {
                if let (Some(d), Some(axes)) = (norm_dim(d, out.len()), input.get(i)) {
                    if shape.get(i) == out.get(d) {
                        r[d] = axes.clone();
                    }
                }
            }
            r
        }
        None => lift(&input, &shape, &out),
    };
    let kept = project(&result, &shape, &out);
    let operands = if v.node.attr(BROADCAST_DIMENSIONS).is_some() { input } else { kept };
    Decision { operands: vec![layout(operands, &origin)], results: vec![layout(fit(v.mesh, result, &out), &origin)] }
}

/// view / reshape / squeeze / unsqueeze / flatten: dims are grouped where the products of
/// input and output sizes meet. In a group, the input dims' axes concatenate (major to minor)
/// while every dim before is split into pieces of size 1, then split over the output dims,
/// major first, while they divide them; axes that cannot follow are gathered.
pub fn reshape(v: &OpView<'_>, name: &'static str) -> Decision {
    let origin = rule_origin(name);
    let input = summed(v, 0);
    let (a, b) = (static_shape(v.types[0]), static_shape(&v.node.results[0]));
    let mut need: Dims = vec![Vec::new(); a.len()];
    let mut result: Dims = vec![Vec::new(); b.len()];
    let (mut i, mut j) = (0usize, 0usize);
    while i < a.len() || j < b.len() {
        // Skip size-1 dims on either side: they carry nothing.
        if i < a.len() && a[i] == 1 {
            i += 1;
            continue;
        }
        if j < b.len() && b[j] == 1 {
            j += 1;
            continue;
        }
        let (gi, gj) = (i, j);
        let (mut pa, mut pb) = (a.get(i).copied().unwrap_or(1), b.get(j).copied().unwrap_or(1));
        i += 1;
        j += 1;
        while pa != pb && (i < a.len() || j < b.len()) {
            if pa < pb && i < a.len() {
                pa *= a[i];
                i += 1;
            } else if j < b.len() {
                pb *= b[j];
                j += 1;
            } else {
                break;
            }
        }
        if gi >= a.len() || gj >= b.len() {
            break;
        }
        // Flatten the group's input dims: an input dim's axes join (minor to the ones before)
        // while every dim before it in the group is split down to pieces of size 1; the
        // first dim with larger pieces ends it, and the dims after it are gathered.
        let mut axes: Vec<String> = Vec::new();
        for k in gi..i.min(a.len()) {
            need[k] = input[k].clone();
            axes.extend(input[k].iter().cloned());
            let pieces: i64 = input[k].iter().map(|x| v.mesh.axis_size(x).unwrap_or(1)).product();
            // Pieces larger than 1 end the flattening; the group's later dims stay gathered.
            if a[k] / pieces.max(1) != 1 {
                break;
            }
        }
        // Split the flattened axes over the group's output dims, major first.
        let mut d = gj;
        let mut left = b.get(d).copied().unwrap_or(1);
        let mut placed = 0;
        for x in &axes {
            while d < j.min(b.len()) && left == 1 {
                d += 1;
                left = b.get(d).copied().unwrap_or(1);
            }
            let n = v.mesh.axis_size(x).unwrap_or(1);
            if d >= j.min(b.len()) || left % n != 0 {
                break;
            }
            result[d].push(x.clone());
            left /= n;
            placed += 1;
        }
        if placed < axes.len() {
            // The axes that found no output dim are gathered from the input dims.
            let dropped: Vec<String> = axes[placed..].to_vec();
            for axes in need.iter_mut().take(i.min(a.len())).skip(gi) {
                axes.retain(|x| !dropped.contains(x));
            }
        }
    }
    Decision { operands: vec![layout(need, &origin)], results: vec![layout(fit(v.mesh, result, &b), &origin)] }
}

/// The dim an op indexes along (`dim`, default 0).
fn touched_dim(node: &Node, rank: usize) -> Option<usize> {
    let d = node.attr(DIM).and_then(Attr::as_int).unwrap_or(0);
    norm_dim(d, rank)
}

/// cat / slice / select / split / gather / scatter / index_select / sort / cumsum: the dim the
/// op indexes along is replicated, other dims follow the first operand; operands of the same
/// shape follow it too, others are replicated.
pub fn along_dim(v: &OpView<'_>, name: &'static str) -> Decision {
    let origin = rule_origin(name);
    if v.types.is_empty() {
        return factory(v, name);
    }
    let rank = v.types[0].shape.len();
    let touched = touched_dim(v.node, rank);
    let mut base = summed(v, 0);
    if let Some(d) = touched {
        base[d].clear();
    }
    // Dims that differ in size between the operands and results of the same rank (cat's dim,
    // a smaller index of gather) stay whole: their pieces would not line up.
    let first = static_shape(v.types[0]);
    let shapes = v.types.iter().map(|t| static_shape(t)).chain(v.node.results.iter().map(static_shape));
    for s in shapes.filter(|s| s.len() == rank) {
        for (d, axes) in base.iter_mut().enumerate() {
            if s[d] != first[d] {
                axes.clear();
            }
        }
    }
    let operands: Vec<Sharding> = v
        .types
        .iter()
        .map(|t| {
            let s = static_shape(t);
            if s.len() == rank {
                let dims = base
                    .iter()
                    .enumerate()
                    .map(|(d, x)| if s[d] == first[d] { x.clone() } else { Vec::new() })
                    .collect();
                layout(dims, &origin)
            } else {
                Sharding::replicated(s.len(), origin.clone())
            }
        })
        .collect();
    // select's result has lost the indexed dim.
    let results = results_like(v, &operands[0].dims, touched, &origin);
    Decision { operands, results }
}

/// Results in layout `base` where they have its rank; with `dropped`, results one rank lower
/// have `base` without that dim; other results are replicated.
fn results_like(v: &OpView<'_>, base: &Dims, dropped: Option<usize>, origin: &Origin) -> Vec<Sharding> {
    v.node
        .results
        .iter()
        .map(|t| {
            let out = static_shape(t);
            let dims: Dims = match dropped {
                _ if out.len() == base.len() => base.clone(),
                Some(gone) if out.len() + 1 == base.len() => {
                    base.iter().enumerate().filter(|(d, _)| *d != gone).map(|(_, x)| x.clone()).collect()
                }
                _ => vec![Vec::new(); out.len()],
            };
            layout(fit(v.mesh, dims, &out), origin)
        })
        .collect()
}

/// embedding(weight [V, D], indices): the vocabulary dim is gathered, the result follows the
/// indices and the weight's feature dim.
pub fn embedding(v: &OpView<'_>, name: &'static str) -> Decision {
    let origin = rule_origin(name);
    if v.types.len() < 2 || v.types[0].shape.len() != 2 {
        return replicated(v, Origin::NoRule);
    }
    let (w, idx) = (summed(v, 0), summed(v, 1));
    let mut feature = w.get(1).cloned().unwrap_or_default();
    feature.retain(|x| !idx.iter().flatten().any(|y| y == x));
    let mut result = idx.clone();
    result.push(feature.clone());
    let out = static_shape(&v.node.results[0]);
    Decision {
        operands: vec![layout(vec![Vec::new(), feature], &origin), layout(idx, &origin)],
        results: vec![layout(fit(v.mesh, result, &out), &origin)],
    }
}

/// softmax / log_softmax (`dim`) and native_layer_norm (the last `normalized_shape` dims):
/// the normalised dims are whole on every device, the others follow the input; weight and
/// bias are replicated, the statistics follow the input's leading dims.
pub fn normalize(v: &OpView<'_>, name: &'static str) -> Decision {
    let origin = rule_origin(name);
    let rank = v.types[0].shape.len();
    let normalized: Vec<usize> = match v.node.attr(NORMALIZED_SHAPE).and_then(Attr::as_int_list) {
        Some(s) => (rank.saturating_sub(s.len())..rank).collect(),
        None => touched_dim(v.node, rank).into_iter().collect(),
    };
    let input = cleared(summed(v, 0), &normalized);
    let results = results_like(v, &input, None, &origin);
    Decision { operands: first_then_replicated(v, input, &origin), results }
}

/// convolution(input [N, C, ...], weight [O, C/g, ...], bias [O]): the batch dim follows the
/// input, the output-feature dim the weight (its dim 1 when `transposed`: [C, O/g, ...]);
/// channels and spatial dims are gathered.
pub fn convolution(v: &OpView<'_>, name: &'static str) -> Decision {
    let origin = rule_origin(name);
    if v.types.len() < 2 || v.types[0].shape.len() < 2 || v.types[1].shape.len() < 2 {
        return replicated(v, Origin::NoRule);
    }
    let transposed = matches!(v.node.attr(TRANSPOSED), Some(Attr::Bool(true)));
    let fdim = usize::from(transposed);
    let (x, w) = (summed(v, 0), summed(v, 1));
    let batch = x.first().cloned().unwrap_or_default();
    let mut feature = w.get(fdim).cloned().unwrap_or_default();
    feature.retain(|a| !batch.contains(a));
    let with = |rank: usize, d: usize, axes: &Vec<String>| {
        let mut dims = vec![Vec::new(); rank];
        if rank > d {
            dims[d] = axes.clone();
        }
        dims
    };
    let mut operands = vec![layout(with(x.len(), 0, &batch), &origin), layout(with(w.len(), fdim, &feature), &origin)];
    if v.types.len() > 2 {
        operands.push(layout(with(v.types[2].shape.len(), 0, &feature), &origin));
    }
    let out = static_shape(&v.node.results[0]);
    let mut result = with(out.len(), 0, &batch);
    if out.len() > 1 {
        result[1] = feature;
    }
    Decision { operands, results: vec![layout(fit(v.mesh, result, &out), &origin)] }
}

/// Factories and constants: replicated results; operands (shape sources) stay as they are.
pub fn factory(v: &OpView<'_>, name: &'static str) -> Decision {
    let origin = rule_origin(name);
    Decision {
        operands: v.layouts.iter().map(|l| Sharding { origin: origin.clone(), ..l.clone() }).collect(),
        results: v.node.results.iter().map(|t| Sharding::replicated(t.shape.len(), origin.clone())).collect(),
    }
}

/// index_put(self, [index], values, accumulate) indexing dim 0 with one index tensor (the
/// embedding gradient: self [V, D...], index [I...], values [I..., D...]): the indexed dim is
/// whole, the trailing dims follow `values`; with `accumulate`, values split along their index
/// dims scatter into partial results (each device adds its rows; an all-reduce sums them),
/// else those dims are gathered. Other forms gather.
pub fn index_put(v: &OpView<'_>, name: &'static str) -> Decision {
    let origin = rule_origin(name);
    let one_index_on_dim0 = matches!(v.node.attr(INDICES), Some(Attr::IntList(l)) if l.as_slice() == [0]);
    if !one_index_on_dim0 || v.types.len() != 3 || v.types[0].shape.is_empty() {
        return replicated(v, Origin::NoRule);
    }
    let (this, index, values) = (static_shape(v.types[0]), static_shape(v.types[1]), static_shape(v.types[2]));
    let k = index.len();
    if values.len() != k + this.len() - 1 || values[..k] != index[..] || values[k..] != this[1..] {
        return replicated(v, Origin::NoRule);
    }
    let accumulate = matches!(v.node.attr(ACCUMULATE), Some(Attr::Bool(true)));
    let current = summed(v, 2);
    let rows: Dims = if accumulate { current[..k].to_vec() } else { vec![Vec::new(); k] };
    let mut trailing: Dims = vec![Vec::new()];
    trailing.extend(current[k..].iter().cloned());
    let mut wanted_values = rows.clone();
    wanted_values.extend(current[k..].iter().cloned());
    let partial: Vec<String> = rows.iter().flatten().cloned().collect();
    Decision {
        operands: vec![layout(trailing.clone(), &origin), layout(rows, &origin), layout(wanted_values, &origin)],
        results: vec![Sharding { dims: trailing, partial, origin }],
    }
}
