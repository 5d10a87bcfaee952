"""The compiled path: `torch.compile(model, backend="torchtpu")` (docs/backend.md).

`backend` (the Dynamo backend: AOTAutograd, the FX rewrites, the compile and its cache),
`exporter` (an ATen FX graph to torchtpu's IR text), `executor` (runs a compiled program),
`fallback` (the nodes the compiler does not take, run eagerly inside a graph),
`decompositions` and `foreach` (what AOTAutograd decomposes), `flex_attention` (the
higher-order op's subgraphs); the FX rewrites `batch_norm_folding`, `weight_layout`,
`saved_layout`; dynamic shapes: `padding_analysis`, `buckets`, `specialize`; `warm_start`
(compiled graphs as artifacts PyTorch's caches keep). The compiler itself is reached through
`torchtpu._C` (the one driver). Why a graph compiles again is `torchtpu.recompiles`, at the
package's top: its module name is its logger's, which `TORCH_LOGS` takes.
"""
