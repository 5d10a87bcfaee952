"""torchtpu.explain: which ops of a model would fall back, and where Dynamo breaks graphs."""

from __future__ import annotations

import collections
import re

import torch
from functorch.compile import make_boxed_func
from torch._dynamo.backends.common import aot_autograd

from torchtpu import _C
from torchtpu.compiled.decompositions import decomposition_table
from torchtpu.compiled.exporter import base_name, export, unsupported_nodes


def _not_taken(g: torch.fx.GraphModule, supported: set):
    """The nodes the backend would run eagerly: ops without a lowering, else the nodes whose
    form the registry's legality checks refuse or whose arguments the exporter cannot write
    (what the backend asks before compiling; a graph with symbolic sizes is checked per op
    only, since it is exported per size). Also the exported graph, when there is one."""
    from torchtpu.compiled.fallback import refused_nodes
    from torchtpu.errors import UnsupportedError

    bad = unsupported_nodes(g, supported)
    if bad:
        return bad, None
    try:
        exported = export(g, "explain")
    except UnsupportedError as e:
        node = getattr(e, "fx_node", None)
        return ({node: str(e)} if node is not None else {}), None
    return refused_nodes(exported), exported


_QUANTIZED = re.compile(r'tpu\.quantized_linear\(.*\{form = "([a-z-]+)"\} : f32\[(\d+), (\d+)\]')
_INT_MM = re.compile(r"aten\._int_mm\.default\(.*\) : i32\[(\d+), (\d+)\]")


def _quantized_linears(exported) -> list[str]:
    """The int8 linear layers of an exported graph as the compiler will run them: the form the
    `quantized-linear` pass chose for each weight-only one (`host-kernel`: torchtpu's int8
    kernel; `dequantize`: convert, then XLA's dot), and `integer-dot` for each W8A8 `_int_mm`
    (`s8 x s8 -> s32`), with the result's [rows, columns]. A graph without int8 values is
    not lowered for this."""
    from torchtpu.errors import FallbackError

    if ": i8[" not in exported.text:
        return []
    try:
        ir, _ = _C.lower_ir(exported.text, _C.DEFAULT_PIPELINE, None, with_ir=True)
    except FallbackError:  # e.g. symbolic sizes, lowered per size when compiled: no form yet
        return []
    found = [f"{form} [{m}, {n}]" for form, m, n in _QUANTIZED.findall(ir)]
    return found + [f"integer-dot [{m}, {n}]" for m, n in _INT_MM.findall(ir)]


_PRODUCT = re.compile(r"= aten\.(mm|bmm|addmm)\.default\(")


def _matmul_kernels(exported) -> list[str]:
    """The kernel each matmul of an exported graph gets where the platform has ATen's too
    (`host_kernels.py`): lowered as a compile would be, which measures any new shape, then
    `aten` for each `tpu.matmul {form = "aten"}` the pass wrote and `xla` for each product left."""
    from torchtpu import host_kernels
    from torchtpu.errors import FallbackError

    if not _PRODUCT.search(exported.text) or not host_kernels.install():
        return []
    try:
        ir, _ = _C.lower_ir(exported.text, _C.DEFAULT_PIPELINE, None, with_ir=True, choose_kernels=True)
    except FallbackError:  # symbolic sizes: measured per size when compiled
        return []
    return ["aten"] * ir.count('form = "aten"') + ["xla"] * len(_PRODUCT.findall(ir))


def explain(model, *args, **kwargs) -> dict:
    supported = set(_C.supported_ops())
    report = {
        "graphs": 0,
        "aten_graphs": 0,
        "ops": collections.Counter(),
        "fallback_ops": collections.Counter(),
        "reasons": [],
        "quantized_linears": [],
        "matmul_kernels": collections.Counter(),
    }

    def inspect(g, _inputs):
        report["aten_graphs"] += 1
        for node in g.graph.nodes:
            if node.op == "call_function" and base_name(node.target):
                report["ops"][base_name(node.target)] += 1
        not_taken, exported = _not_taken(g, supported)
        for node, reason in not_taken.items():
            report["fallback_ops"][base_name(node.target) or str(node.target)] += 1
            report["reasons"].append(f"{node.name}: {reason}")
        if exported is not None and not not_taken:  # a graph that falls back is reported so
            report["quantized_linears"] += _quantized_linears(exported)
            report["matmul_kernels"].update(_matmul_kernels(exported))
        return make_boxed_func(g.forward)

    def backend(gm, example_inputs):
        report["graphs"] += 1
        return aot_autograd(
            fw_compiler=inspect, bw_compiler=inspect, inference_compiler=inspect, decompositions=decomposition_table()
        )(gm, example_inputs)

    torch._dynamo.reset()
    try:
        torch.compile(model, backend=backend)(*args, **kwargs)
        dynamo = torch._dynamo.explain(model)(*args, **kwargs)
    finally:
        torch._dynamo.reset()
    report["graph_breaks"] = dynamo.graph_break_count
    report["break_reasons"] = [str(b.reason) for b in dynamo.break_reasons]
    report["ops"] = dict(report["ops"])
    report["fallback_ops"] = dict(report["fallback_ops"])
    lines = [
        f"torchtpu.explain: {report['graphs']} graph(s), {report['graph_breaks']} graph break(s), "
        f"{report['aten_graphs']} ATen graph(s), {sum(report['ops'].values())} op node(s)",
    ]
    lines += [f"  graph break: {r}" for r in report["break_reasons"]]
    if report["fallback_ops"]:
        lines.append(
            "  ops that would run eagerly: " + ", ".join(f"{k} x{v}" for k, v in sorted(report["fallback_ops"].items()))
        )
    else:
        lines.append("  every op has a lowering: nothing would fall back")
    if report["quantized_linears"]:
        forms = collections.Counter(q.split(" ")[0] for q in report["quantized_linears"])
        lines.append(
            "  int8 linear layers: "
            + ", ".join(f"{form} x{count}" for form, count in sorted(forms.items()))
            + " ("
            + "; ".join(report["quantized_linears"])
            + ")"
        )
    report["matmul_kernels"] = dict(report["matmul_kernels"])
    if report["matmul_kernels"]:
        from torchtpu import host_kernels

        counts = ", ".join(f"{k} x{v}" for k, v in sorted(report["matmul_kernels"].items()))
        timed = "; ".join(
            f"{c['shape']}: {c['kernel']} (xla {c['xla_us']:.0f} us, aten {c['aten_us']:.0f} us)"
            for c in host_kernels.choices()
        )
        lines.append(f"  matmul kernels (measured per shape): {counts} ({timed})")
    print("\n".join(lines))
    return report
