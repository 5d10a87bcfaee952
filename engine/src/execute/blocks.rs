//! Host tensors to and from the per-device pieces of an SPMD program.
//!
//! Device `d` of the mesh (row-major coordinates, `Mesh::coords`) holds, of a value with
//! sharding `s`, the block whose index along dim `k` is the mixed-radix number its
//! coordinates on `s.dims[k]`'s axes form (major to minor, as Shardy numbers them). A block
//! that is one contiguous run of the host tensor (`contiguous_range`: e.g. a dim-0 shard, or
//! a split of the first dim after unit dims) is read in place; other blocks are copied out
//! row by row.

use torchtpu_compiler::ir::{Mesh, Sharding};

/// Where device `device`'s block of a `global`-shaped value starts, and its shape.
pub fn block(mesh: &Mesh, s: &Sharding, global: &[i64], device: i64) -> (Vec<i64>, Vec<i64>) {
    let coords = mesh.coords(device);
    let local = s.local_dims(mesh, global);
    let offsets = (0..global.len())
        .map(|k| {
            let mut index = 0;
            for axis in s.dims.get(k).into_iter().flatten() {
                let a = mesh.axes.iter().position(|(n, _)| n == axis).expect("the verifier checked the axes");
                index = index * mesh.axes[a].1 + coords[a];
            }
            index * local[k]
        })
        .collect();
    (offsets, local)
}

/// Whether `device` is the first of the devices holding the same block (its coordinates on
/// the axes `s` does not split by are all 0): the one whose piece is read back.
pub fn is_block_owner(mesh: &Mesh, s: &Sharding, device: i64) -> bool {
    let coords = mesh.coords(device);
    mesh.axes.iter().enumerate().all(|(a, (name, _))| coords[a] == 0 || s.dims.iter().flatten().any(|x| x == name))
}

/// The byte range of the block when it is one contiguous run of the row-major host tensor.
///
/// The block starts at `sum(offsets[k] * stride[k])` (row-major strides of `global`). It is
/// one run when, after the leading dims whose local extent is 1, every dim but the first of
/// the rest is whole: `[1, 8]` split on dim 1 is the run of 4 at `offsets[1]`, `[2, 2, 4]`
/// split on dims 0 and 1 one row of 4, `[4, 6]` split on dim 1 not a run.
pub fn contiguous_range(global: &[i64], offsets: &[i64], local: &[i64], elem: usize) -> Option<(usize, usize)> {
    let rank = global.len();
    let first = (0..rank).find(|&k| local[k] != 1).unwrap_or(rank);
    if (first + 1..rank).any(|k| local[k] != global[k]) {
        return None;
    }
    let mut start = 0i64;
    let mut stride = 1i64;
    for k in (0..rank).rev() {
        start += offsets[k] * stride;
        stride *= global[k];
    }
    let len = local.iter().product::<i64>() as usize * elem;
    Some((start as usize * elem, len))
}

/// Visits the block's rows (runs along the last dim): `(host byte offset, block byte offset,
/// run bytes)`.
fn rows(global: &[i64], offsets: &[i64], local: &[i64], elem: usize, mut f: impl FnMut(usize, usize, usize)) {
    let rank = global.len();
    if rank == 0 {
        f(0, 0, elem);
        return;
    }
    if local.contains(&0) {
        return;
    }
    let run = local[rank - 1] as usize * elem;
    let outer: Vec<i64> = local[..rank - 1].to_vec();
    let mut index = vec![0i64; rank - 1];
    let mut block_at = 0usize;
    loop {
        // Host offset of (offsets + index, offsets[last]).
        let mut flat = 0i64;
        for k in 0..rank - 1 {
            flat = flat * global[k] + offsets[k] + index[k];
        }
        let host_at = (flat * global[rank - 1] + offsets[rank - 1]) as usize * elem;
        f(host_at, block_at, run);
        block_at += run;
        // Next index, row-major.
        let mut k = rank - 1;
        loop {
            if k == 0 {
                return;
            }
            k -= 1;
            index[k] += 1;
            if index[k] < outer[k] {
                break;
            }
            index[k] = 0;
        }
    }
}

/// Copies the block out of the host tensor.
pub fn gather_block(host: &[u8], global: &[i64], offsets: &[i64], local: &[i64], elem: usize) -> Vec<u8> {
    let mut out = vec![0u8; local.iter().product::<i64>() as usize * elem];
    rows(global, offsets, local, elem, |h, b, n| out[b..b + n].copy_from_slice(&host[h..h + n]));
    out
}

/// Writes a device's block into the host tensor.
pub fn scatter_block(host: &mut [u8], global: &[i64], offsets: &[i64], local: &[i64], elem: usize, piece: &[u8]) {
    rows(global, offsets, local, elem, |h, b, n| host[h..h + n].copy_from_slice(&piece[b..b + n]));
}

#[cfg(test)]
mod tests {
    use super::*;
    use torchtpu_compiler::ir::Origin;

    fn mesh() -> Mesh {
        Mesh { axes: vec![("dp".into(), 2), ("tp".into(), 2)] }
    }

    fn s(dims: &[&[&str]]) -> Sharding {
        Sharding {
            dims: dims.iter().map(|d| d.iter().map(|a| a.to_string()).collect()).collect(),
            partial: vec![],
            origin: Origin::User,
        }
    }

    #[test]
    fn blocks_follow_the_mesh_coordinates() {
        let m = mesh();
        let sh = s(&[&["dp"], &["tp"]]);
        let blocks: Vec<Vec<i64>> = (0..4).map(|d| block(&m, &sh, &[4, 6], d).0).collect();
        assert_eq!(blocks, vec![vec![0, 0], vec![0, 3], vec![2, 0], vec![2, 3]]);
        // Two axes on one dim: dp major, tp minor.
        let both = s(&[&["dp", "tp"], &[]]);
        let rows: Vec<i64> = (0..4).map(|d| block(&m, &both, &[8, 2], d).0[0]).collect();
        assert_eq!(rows, vec![0, 2, 4, 6]);
        // Replicated on tp: devices 0 and 2 own the blocks.
        let owners: Vec<bool> = (0..4).map(|d| is_block_owner(&m, &s(&[&["dp"], &[]]), d)).collect();
        assert_eq!(owners, vec![true, false, true, false]);
    }

    #[test]
    fn gather_and_scatter_invert_each_other() {
        let m = mesh();
        let global = [4i64, 6];
        let host: Vec<u8> = (0..24u8).collect();
        let sh = s(&[&["dp"], &["tp"]]);
        let mut back = vec![0u8; 24];
        for d in 0..4 {
            let (off, local) = block(&m, &sh, &global, d);
            assert_eq!(contiguous_range(&global, &off, &local, 1), None);
            let piece = gather_block(&host, &global, &off, &local, 1);
            assert_eq!(piece.len(), 6);
            scatter_block(&mut back, &global, &off, &local, 1, &piece);
        }
        assert_eq!(back, host);
        let (off, local) = block(&m, &s(&[&["dp"], &[]]), &global, 2);
        assert_eq!(contiguous_range(&global, &off, &local, 4), Some((48, 48)));
        assert_eq!(gather_block(&host, &global, &[1, 2], &[2, 2], 1), vec![8, 9, 14, 15]);
    }

    /// Every block of a split after leading unit dims, or after dims split to extent 1, starts
    /// at its offset on every dim (issue 26: a `[1, 8]` split on dim 1 read both halves from 0).
    #[test]
    fn a_run_starts_at_the_offset_of_every_dim() {
        let tp = Mesh { axes: vec![("tp".into(), 2)] };
        for (global, sh) in [
            (vec![1i64, 8], s(&[&[], &["tp"]])),
            (vec![1, 1, 8], s(&[&[], &[], &["tp"]])),
            (vec![1, 4, 6], s(&[&[], &["tp"], &[]])),
            (vec![2, 4], s(&[&["tp"], &[]])),
        ] {
            let n: i64 = global.iter().product();
            let host: Vec<u8> = (0..n as u8).collect();
            for d in 0..2 {
                let (off, local) = block(&tp, &sh, &global, d);
                let (start, len) = contiguous_range(&global, &off, &local, 1).expect("one run");
                assert_eq!(
                    &host[start..start + len],
                    gather_block(&host, &global, &off, &local, 1).as_slice(),
                    "{global:?} device {d}"
                );
                assert_eq!((start, len), (d as usize * n as usize / 2, n as usize / 2));
            }
        }
        // [1, 2, 4] split on its last dim: rows of 2, not one run.
        let (off, local) = block(&tp, &s(&[&[], &[], &["tp"]]), &[1, 2, 4], 1);
        assert_eq!(contiguous_range(&[1, 2, 4], &off, &local, 1), None);
        // [2, 2, 4] split on dims 0 and 1 by a 2x2 mesh: each block is one row of 4.
        let m = mesh();
        let both = s(&[&["dp"], &["tp"], &[]]);
        let starts: Vec<_> = (0..4)
            .map(|d| {
                let (off, local) = block(&m, &both, &[2, 2, 4], d);
                contiguous_range(&[2, 2, 4], &off, &local, 4)
            })
            .collect();
        assert_eq!(starts, vec![Some((0, 16)), Some((16, 16)), Some((32, 16)), Some((48, 16))]);
        // A scalar and an empty block.
        assert_eq!(contiguous_range(&[], &[], &[], 4), Some((0, 4)));
        let (off, local) = block(&tp, &s(&[&["tp"], &[]]), &[2, 0], 1);
        assert_eq!(contiguous_range(&[2, 0], &off, &local, 4), Some((0, 0)));
    }
}
