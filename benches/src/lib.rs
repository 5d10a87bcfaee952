//! Generated graphs for benchmarks: deterministic, realistic mixes of the ops AOTAutograd
//! hands over (matmuls, bias adds, activations, reshapes, reductions), with the redundancy
//! the default pipeline removes (identities, duplicates, dead nodes).

use std::fmt::Write;

/// IR text of an MLP-like graph with about `nodes` op nodes (blocks of 10 ops).
pub fn mlp_like_graph(nodes: usize) -> String {
    let blocks = nodes.div_ceil(10).max(1);
    let mut s = String::new();
    writeln!(s, "graph @bench(%x: f32[8, 32], %w: f32[32, 32], %b: f32[32]) -> (f32[8, 32]) {{").unwrap();
    writeln!(s, "  %wt = aten.permute.default(%w) {{dims = [1, 0]}} : f32[32, 32]").unwrap();
    let mut cur = "%x".to_string();
    for i in 0..blocks {
        // 10 ops per block: addmm, relu, a duplicate relu (cse), *1 (canonicalize), add,
        // view + view back (canonicalize), sum (dead: dce), tanh, alias.
        writeln!(s, "  %h{i} = aten.addmm.default(%b, {cur}, %wt) : f32[8, 32]").unwrap();
        writeln!(s, "  %r{i} = aten.relu.default(%h{i}) : f32[8, 32]").unwrap();
        writeln!(s, "  %d{i} = aten.relu.default(%h{i}) : f32[8, 32]").unwrap();
        writeln!(s, "  %m{i} = aten.mul.Tensor(%d{i}) {{other = 1}} : f32[8, 32]").unwrap();
        writeln!(s, "  %a{i} = aten.add.Tensor(%r{i}, %m{i}) : f32[8, 32]").unwrap();
        writeln!(s, "  %v{i} = aten.view.default(%a{i}) {{size = [256]}} : f32[256]").unwrap();
        writeln!(s, "  %u{i} = aten.view.default(%v{i}) {{size = [8, 32]}} : f32[8, 32]").unwrap();
        writeln!(s, "  %s{i} = aten.sum.dim_IntList(%u{i}) {{dim = [1]}} : f32[8]").unwrap();
        writeln!(s, "  %t{i} = aten.tanh.default(%u{i}) : f32[8, 32]").unwrap();
        writeln!(s, "  %y{i} = aten.alias.default(%t{i}) : f32[8, 32]").unwrap();
        cur = format!("%y{i}");
    }
    writeln!(s, "  return {cur}\n}}").unwrap();
    s
}

#[cfg(test)]
mod tests {
    use torchtpu_compiler::ir::{parse_graph, verify};
    use torchtpu_compiler::lower::lower_to_stablehlo;
    use torchtpu_compiler::passes::{PassManager, PipelineOptions, DEFAULT_PIPELINE};

    #[test]
    fn generated_graph_verifies_optimises_and_lowers() {
        let mut g = parse_graph(&super::mlp_like_graph(100)).unwrap();
        verify(&g).unwrap();
        assert_eq!(g.op_count(), 101);
        PassManager::from_pipeline(DEFAULT_PIPELINE, PipelineOptions::default())
            .unwrap()
            .run(&mut g, &mut std::io::sink())
            .unwrap();
        // Per block the pipeline keeps addmm, relu, add, tanh: 4 of 10 ops.
        assert_eq!(g.op_count(), 1 + 4 * 10);
        assert!(lower_to_stablehlo(&g).unwrap().text().unwrap().contains("stablehlo.tanh"));
    }
}
