//! Host tensors to and from the per-device pieces of an SPMD program.
//!
//! Device `d` of the mesh (row-major coordinates, `Mesh::coords`) holds, of a value with
//! sharding `s`, the block whose index along dim `k` is the mixed-radix number its
//! coordinates on `s.dims[k]`'s axes form (major to minor, as Shardy numbers them). A block
//! that is one contiguous run of the host tensor (a split of the outermost non-unit dim,
//! e.g. a dim-0 shard) is read in place; other blocks are copied out row by row.

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
pub fn contiguous_range(global: &[i64], offsets: &[i64], local: &[i64], elem: usize) -> Option<(usize, usize)> {
    let split = (0..global.len()).find(|&k| local[k] != global[k]);
    let contiguous = match split {
        None => true,
        Some(j) => global[..j].iter().all(|&n| n == 1) && (j + 1..global.len()).all(|k| local[k] == global[k]),
    };
    if !contiguous {
        return None;
    }
    let row: i64 = global.iter().skip(1).product();
    let start = offsets.first().map_or(0, |&o| o * row) as usize * elem;
    let len = local.iter().product::<i64>() as usize * elem;
    Some((start, len))
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
}
