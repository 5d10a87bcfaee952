"""The Dynamo backend: torch.compile(model, backend="torchtpu", options={...}).

Dynamo hands over FX graphs (graph breaks give several); AOTAutograd turns each into
functional ATen graphs (forward and backward when training, or one inference graph) with the
decompositions of `decompositions.py`; each ATen graph is exported to the IR, compiled by the
Rust compiler and run on PJRT. What cannot be compiled runs eagerly, with the reason recorded
(`fallback.py` partitions, `policy.py` decides); with options={"strict": True} it raises.
"""

from __future__ import annotations

import collections
import dataclasses
import itertools
import logging

import torch
from functorch.compile import make_boxed_func
from torch._dynamo.backends.common import aot_autograd
from torch.utils._python_dispatch import is_traceable_wrapper_subclass

from torchtpu import _C, _stats, recompiles
from torchtpu import sharding as _sharding
from torchtpu._dynamo_skips import skip_device_kernels
from torchtpu._log import warn_once
from torchtpu.compiled import flex_attention, warm_start
from torchtpu.compiled.batch_norm_folding import FoldedInputs, fold_batch_norms
from torchtpu.compiled.decompositions import decomposition_table
from torchtpu.compiled.executor import CompiledGraph
from torchtpu.compiled.exporter import unsupported_nodes
from torchtpu.compiled.fallback import compile_graph, partition_around
from torchtpu.compiled.saved_layout import relayout_saved_activations
from torchtpu.compiled.weight_layout import RelaidInputs, relayout_conv_weights
from torchtpu.errors import TorchTPUError
from torchtpu.options import Options
from torchtpu.policy import inject_fault

log = logging.getLogger("torchtpu")
_graph_ids = itertools.count()
# Before anything compiled runs: Dynamo must not compile the tpu device's own kernels.
skip_device_kernels()


def _supported() -> set[str]:
    if not hasattr(_supported, "cache"):
        _supported.cache = set(_C.supported_ops())
    return _supported.cache


def _is_symbolic(gm: torch.fx.GraphModule) -> bool:
    for node in gm.graph.nodes:
        if node.op != "placeholder":
            continue
        val = node.meta.get("val")
        if isinstance(val, torch.SymInt) or (
            isinstance(val, torch.Tensor) and any(not isinstance(d, int) for d in val.shape)
        ):
            return True
    return False


# Programs of graphs with symbolic shapes, per (graph, options, concrete input signature),
# shared by every `_PerShape`: Dynamo hands a recompiled frame a new graph object, often the
# same graph, and a size it has seen must not be specialised again.
_SPECIALISED: collections.OrderedDict = collections.OrderedDict()
# Bounded, least recently used first out: a long-running process that sees ever new sizes
# keeps its memory (an evicted size is exported again; its program is still in the caches).
MAX_SPECIALISED = 512
# After this many sizes of one graph, a warning names the fixed-shape alternative.
MANY_SIZES = 8


def _fingerprint(gm: torch.fx.GraphModule) -> str:
    """What identifies an ATen graph's program besides its input signature: its code and its
    constants' values."""
    import hashlib

    from torch._subclasses.fake_tensor import unset_fake_temporarily

    h = hashlib.sha256(gm.code.encode())
    # AOTAutograd may call the compiler with its fake mode still active (graphs with symbolic
    # shapes: gpt2 at a second batch size); the constants are real tensors, read outside it.
    with unset_fake_temporarily():
        for node in gm.graph.nodes:
            if node.op == "get_attr":
                value = getattr(gm, node.target)
                if isinstance(value, torch.Tensor):
                    h.update(f"{node.target}:{value.dtype}:{tuple(value.shape)}".encode())
                    h.update(value.detach().contiguous().cpu().view(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


class _PerShape:
    """A graph with symbolic shapes, compiled once per concrete input signature. A new
    signature is exported with its sizes evaluated from the inputs (`specialize.Binding`, no
    re-trace) and compiled; where that cannot be done (data-dependent sizes, ops that fall
    back) the ATen graph is re-traced with those sizes instead. Dynamo's own guards decide
    when this graph is used at all.

    In an inference graph, a size that only indexes independent rows is padded to its bucket
    (option `buckets`, `buckets.py`): the signature runs through the bucket's program, its
    inputs padded and its outputs cut back."""

    def __init__(self, gm, opts: Options, kind: str):
        self.gm, self.opts, self.kind = gm, opts, kind
        self.compiled: dict = {}
        self.fingerprint = (_fingerprint(gm), opts, kind)
        self.name = f"{kind}_{self.fingerprint[0][:10]}"  # in stats()["buckets"]
        self.evaluable = None  # whether signatures can be specialised without a re-trace
        self.plan = None  # padding_analysis.Plan: which sizes are padded to buckets

    def __call__(self, *args):
        key = _signature(args)
        fn = self.compiled.get(key)
        if fn is None:
            fn = self.compiled[key] = self._for_signature(args, key)
        return fn(list(args))

    def _for_signature(self, args, key):
        from torchtpu.compiled import buckets
        from torchtpu.compiled.specialize import Binding, NotSpecializable

        plan = self._bucket_plan()
        try:
            binding = Binding(self.gm, args)
        except NotSpecializable:  # data-dependent sizes: re-traced per signature, never padded
            return self._program(args, key, "")
        # Under a sharding mesh the inputs' layouts travel on the tensors themselves, which
        # padded copies would not carry: exact sizes there.
        sizes = {} if _sharding.ACTIVE else buckets.padded_sizes(plan, binding, self.opts.buckets)
        label = buckets.label(plan, binding, sizes)
        if not sizes:  # every padded size is a bucket already, or above the largest
            return self._program(args, key, label)
        padded = buckets.Padded(plan, self.gm, binding, sizes)
        example = padded.padded_args(list(args))
        if plan.masks:
            # Masked before each op that combines values along a padded dim: one static
            # program per bucket, the real sizes its last inputs.
            padded.run = self._program(example, ("masked", *_signature(example)), label, masked=True)
        else:
            padded.run = self._program(example, _signature(example), label)
        log.info("%s: input signature %s runs in bucket %s", self.name, key, label)
        return padded

    def _bucket_plan(self):
        """Which sizes are padded, decided once per graph (inference graphs only: the
        backward of a training graph sums over the batch)."""
        if self.plan is None:
            from torchtpu.compiled.padding_analysis import Plan, analyse

            if self.kind != "inference":
                self.plan = Plan.exact_only(self.gm, f"{self.kind} graphs keep exact sizes (training)")
            elif not self.opts.buckets:
                self.plan = Plan.exact_only(self.gm, "bucketing is off (option buckets)")
            else:
                try:
                    self.plan = analyse(self.gm)
                except Exception as e:  # noqa: BLE001 - a bug in the analysis: said, and exact sizes
                    why = f"the padding analysis failed (a torchtpu bug): {type(e).__name__}: {e}"
                    warn_once(f"buckets:{self.fingerprint[0]}", f"torchtpu: {self.name}: {why}")
                    self.plan = Plan.exact_only(self.gm, why)
            _stats.record_buckets(self.name, self.plan, self.opts.buckets if self.kind == "inference" else ())
            for s, why in self.plan.exact.items():
                log.info("%s: size %s stays exact: %s", self.name, s, why)
        return self.plan

    def _program(self, args, key, label: str, masked: bool = False):
        """The program for this exact signature, from this process's programs or compiled."""
        fn = _SPECIALISED.get((self.fingerprint, key))
        if fn is not None:
            _SPECIALISED.move_to_end((self.fingerprint, key))
            return fn
        seen = [k for fp, k in _SPECIALISED if fp == self.fingerprint]
        recompiles.new_signature(self.name, seen, key, label)
        if masked:
            from torchtpu.compiled.buckets import masked_graph

            log.info("tracing a %s graph with its masks for bucket %s", self.kind, label)
            fn = compile_aten_graph(masked_graph(self.gm, self.plan, args), args, self.opts, self.kind)
        else:
            fn = self._specialise(args, key)
        _SPECIALISED[(self.fingerprint, key)] = fn
        while len(_SPECIALISED) > MAX_SPECIALISED:
            _SPECIALISED.popitem(last=False)
        _stats.bump("specialisations")
        if label:
            _stats.count_bucket_program(self.name, label)
        self._advise()
        return fn

    def _advise(self):
        """Each new size costs an XLA compile: say so once a graph has needed many, and name
        the fixed-shape alternative (docs/backend.md, "Generation")."""
        sizes = sum(1 for fp, _ in _SPECIALISED if fp == self.fingerprint)
        if sizes == MANY_SIZES:
            warn_once(
                f"many-sizes:{self.fingerprint[0]}",
                f"torchtpu: a {self.kind} graph has been compiled for {sizes} input sizes (one XLA compile each). "
                "For model.generate(), cache_implementation='static' gives fixed shapes (2 compiles); "
                "see docs/backend.md, 'Generation'.",
            )

    def _specialise(self, args, key):
        from torchtpu.compiled.specialize import Binding, NotSpecializable, has_unbacked

        log.info("specialising a %s graph for input signature %s", self.kind, key)
        if self.evaluable is None:
            # Once per graph: sizes can be evaluated (none data-dependent) and every op lowers.
            self.evaluable = not has_unbacked(self.gm) and not unsupported_nodes(
                self.gm, _supported(), sizes_known=True
            )
        if self.evaluable:
            try:
                return compile_aten_graph(self.gm, args, self.opts, self.kind, binding=Binding(self.gm, args))
            except NotSpecializable as e:
                log.info("re-tracing instead: %s", e)
        from torch.fx.experimental.proxy_tensor import make_fx

        static = make_fx(self.gm, tracing_mode="fake")(*args)
        return compile_aten_graph(static, args, self.opts, self.kind)


def _signature(args) -> tuple:
    return tuple((tuple(a.shape), a.dtype) if isinstance(a, torch.Tensor) else a for a in args)


# XLA options for inference graphs when the user sets none: YNNPACK only for single dots (XLA
# CPU's default also hands it reductions, elementwise fusions and convolutions). Measured side
# by side (benches/options_ab.py, docs/performance.md "XLA's options"): inference 1.05x on the
# geometric mean and no model slower (transformer block batch 1 1.12x, resnet18 batch 1 1.18x),
# a 2048^2 matmul 0.80 -> 0.85x of torch.mm; training graphs were mixed (0.87x-1.07x), so
# they keep XLA's default. The fields are XLA CPU's; other backends ignore them.
INFERENCE_XLA_OPTIONS = (("xla_cpu_experimental_ynn_fusion_type", "LIBRARY_FUSION_TYPE_INDIVIDUAL_DOT"),)
# An inference graph with int8 inputs (torchao's quantized weights): YNNPACK takes elementwise
# fusions too, which makes the int8 weights' conversion before XLA's dot cheaper. Measured on
# the 125M Llama's 512-token prefill, interleaved in one process (benches/quantization.py's
# model): int8 517 vs 599 ms, f32 506 vs 541 ms; docs/quantization.md.
QUANTIZED_INFERENCE_XLA_OPTIONS = (
    ("xla_cpu_experimental_ynn_fusion_type", "LIBRARY_FUSION_TYPE_INDIVIDUAL_DOT,LIBRARY_FUSION_TYPE_ELTWISE"),
)


def _has_int8_inputs(gm: torch.fx.GraphModule) -> bool:
    for node in gm.graph.find_nodes(op="placeholder"):
        val = node.meta.get("val")
        if isinstance(val, torch.Tensor) and val.dtype == torch.int8:
            return True
    return False


def compile_aten_graph(gm: torch.fx.GraphModule, example_inputs, opts: Options, kind: str, binding=None, link=None):
    """Compiles one ATen graph; returns a boxed callable. A graph with symbolic shapes is
    compiled per input signature (`_PerShape`), or for the one `binding` gives.

    Nodes the compiler does not take (no lowering, a form the registry's legality check
    refuses, an argument the IR cannot express) run eagerly, each alone, and every maximal
    region around them is compiled (`fallback.partition_and_compile`). What else fails is
    decided by `policy.on_failure`: a plugin failure runs the graph eagerly by policy, a bug
    inside torchtpu warns with a reproduction, strict raises either. `link` (a dict shared by
    one Dynamo graph's forward and backward) lets the backward lay its gradients out as the
    forward's inputs were (FSDP: gradients reduce-scattered to their parameters' shards)."""
    if kind == "inference" and opts.xla_options is None:
        chosen = QUANTIZED_INFERENCE_XLA_OPTIONS if _has_int8_inputs(gm) else INFERENCE_XLA_OPTIONS
        opts = dataclasses.replace(opts, xla_options=chosen)
    if binding is None and _is_symbolic(gm):
        per_shape = _PerShape(gm, opts, kind)
        return make_boxed_func(per_shape)
    name = f"{kind}_{next(_graph_ids)}"
    transforms = []  # input rewrites, applied in order before every call
    inference_weights = kind == "inference" and binding is None and not _sharding.ACTIVE
    if inference_weights and opts.fold_batch_norm:
        # Batch norms folded into the convolutions before them, the folded weights and
        # biases computed once per version of what they are made of (batch_norm_folding.py).
        gm, folds = fold_batch_norms(gm)
        if folds:
            transforms.append(FoldedInputs(folds))
    if inference_weights and opts.relayout_weights:
        # Convolution weights in the layout XLA's CPU convolutions use, permuted once per
        # weight version instead of in every call (weight_layout.py). Everything below,
        # the eager fallback included, then runs on the relaid inputs.
        gm, perms = relayout_conv_weights(gm)
        if perms:
            transforms.append(RelaidInputs(perms))
    boxed = _compile_static(gm, opts, kind, name, binding, link)
    if not transforms:
        return boxed

    def call(args):
        for t in transforms:
            args = t.apply(args)
        return boxed(args)

    call._boxed_call = True
    call.torchtpu_transforms = (transforms, boxed)  # what warm_start.describe saves
    return call


def _compile_static(gm, opts: Options, kind: str, name: str, binding, link):
    # A binding comes only with a graph `_PerShape` found free of unsupported ops.
    bad = {} if binding is not None else unsupported_nodes(gm, _supported())
    if bad:
        return make_boxed_func(partition_around(gm, bad, opts, name, f"graph {name}"))
    compiled = compile_graph(gm, opts, name, f"graph {name}", binding=binding)
    if link is not None and isinstance(compiled, CompiledGraph):
        if kind == "forward":
            link["forward"] = compiled
        elif kind == "backward":
            compiled.grads_of = link.get("forward")
    if compiled is None:
        _stats.bump("graphs_fallback")
        return make_boxed_func(gm.forward)
    boxed = make_boxed_func(compiled)
    if isinstance(compiled, CompiledGraph):
        boxed.torchtpu_graph = compiled  # what warm_start.describe saves
    return boxed


def _min_cut(joint, joint_inputs, **kwargs):
    from torch._functorch.partitioners import min_cut_rematerialization_partition

    return min_cut_rematerialization_partition(joint, joint_inputs, **kwargs)


def _default(joint, joint_inputs, **kwargs):
    from torch._functorch.partitioners import default_partition

    return default_partition(joint, joint_inputs, **kwargs)


def _partition(opts: Options):
    """The partition function for AOTAutograd: the option's partitioner, then (option
    `relayout_saved`) saved convolution activations relaid NHWC between the two graphs."""
    split = _PARTITIONERS[opts.partitioner]
    if not opts.relayout_saved:
        return split

    def partition(joint, joint_inputs, **kwargs):
        fw, bw = split(joint, joint_inputs, **kwargs)
        if not _sharding.ACTIVE:  # sharded programs keep the layouts their shardings name
            relayout_saved_activations(fw, bw, kwargs["num_fwd_outputs"])
        return fw, bw

    return partition


# How AOTAutograd splits a joint graph into forward and backward (option `partitioner`).
# min-cut recomputes views and cheap elementwise work in the backward instead of saving it:
# a transposed weight is no longer a materialised forward output but a view the backward's
# dot reads for free, and fewer activations cross between the two programs.
_PARTITIONERS = {"min_cut": _min_cut, "default": _default}


def _inference_without_wrapper(gm: torch.fx.GraphModule, example_inputs, opts: Options):
    """An inference graph with no input mutation and no output aliasing an input, compiled
    without AOTAutograd's runtime wrapper: nothing is left for the wrapper to do (no
    mutation to apply, no alias to regenerate, no autograd function); the tiny graph of
    `benches/call_overhead.py` saves about 1.7 us per call. None when the graph needs the
    wrapper."""
    if not all(isinstance(x, torch.Tensor) for x in example_inputs):
        return None
    if any(is_traceable_wrapper_subclass(x) for x in example_inputs):
        return None  # tensor subclasses (torchao's quantized weights): export refuses them
    if torch.is_grad_enabled() and any(x.requires_grad for x in example_inputs):
        return None
    if any(n.op == "get_attr" for n in gm.graph.nodes):
        return None  # tensors held by the module (AOTAutograd lifts and fakifies those)
    if torch.is_grad_enabled() and any(n.kwargs.get("requires_grad") for n in gm.graph.nodes):
        return None  # a leaf made inside the graph: its output needs autograd's wrapper
    from torch._functorch.aot_autograd import aot_export_joint_simple

    single = []

    def run_nodes(*args):
        # Through an Interpreter, so that each traced node keeps its Dynamo node's metadata
        # (the user's stack trace, which explain and the sharding plan cite).
        out = torch.fx.Interpreter(gm).run(*args)
        if isinstance(out, (tuple, list)):
            return tuple(out)
        single.append(True)
        return (out,)

    try:
        with torch.fx.traceback.preserve_node_meta():
            graph = aot_export_joint_simple(
                run_nodes, example_inputs, trace_joint=False, decompositions=decomposition_table()
            )
    except RuntimeError as e:
        # Its refusals (an input mutation, an output aliasing an input, pytrees): AOTAutograd's
        # wrappers handle those. Anything else is a tracing failure the wrapped path meets too.
        if "aot_export_joint_simple" not in str(e):
            raise
        return None
    # Export's tracing checks its inputs' metadata in the graph; Dynamo's guards already do.
    for node in list(graph.graph.nodes):
        if node.target is torch.ops.aten._assert_tensor_metadata.default and not node.users:
            graph.graph.erase_node(node)
    graph.recompile()
    boxed = compile_aten_graph(graph, example_inputs, opts, "inference")

    if warm_start.saving_ahead():  # aot_compile or caching_precompile: a callable they can save
        return warm_start.direct(gm, boxed, bool(single))

    def run(*args):
        out = boxed(list(args))
        return out[0] if single else out

    return run


def _dynamo_handles(e: BaseException) -> bool:
    """Exceptions Dynamo answers itself when a backend raises them (a data-dependent output
    shape graph-breaks and traces again, a scalar restarts the analysis, a frame is skipped):
    they must reach it unchanged. Everything else a backend raises is decided by the policy."""
    from torch._dynamo import exc

    handled = (*exc.exceptions_allowed_to_be_fallback, exc.SkipFrame, exc.ShortenTraceback)
    restart = getattr(exc, "TensorifyScalarRestartAnalysis", None)
    return isinstance(e, handled) or (restart is not None and isinstance(e, restart))


def torchtpu_backend(gm: torch.fx.GraphModule, example_inputs, options: dict | None = None, **kwargs):
    """Entry point registered as `torchtpu` in the torch_dynamo_backends group."""
    opts = Options.from_dict(options)
    try:
        inject_fault("trace")
        return _trace_and_compile(gm, example_inputs, opts, kwargs)
    except TorchTPUError:
        raise  # decided already: strict's refusals, the user's errors, recorded fallbacks
    except Exception as e:
        if _dynamo_handles(e):
            raise
        # Any other failure while tracing or compiling what Dynamo traced (a decomposition's
        # strides, a PyTorch tracing path that refuses the graph, a pass of ours) goes through
        # the failure policy: strict raises it as an InternalError, otherwise it is recorded
        # with a reproduction and the graph runs eagerly.
        from torchtpu import policy

        where = "graph tracing (AOTAutograd with torchtpu's decompositions)"
        policy.on_failure(policy.as_internal(e, "trace"), where, opts.strict, fx_code=gm.code)
        return gm.forward


def _trace_and_compile(gm: torch.fx.GraphModule, example_inputs, opts: Options, kwargs: dict):
    mode = kwargs.pop("mode", None)
    if mode not in (None, "default"):
        warn_once(
            f"mode:{mode}",
            f"torchtpu ignores mode={mode!r}: it has one compilation mode (settings go in options=, see docs/backend.md)",
        )
    _stats.bump("graphs_seen")
    recompiles.frame_compiled(example_inputs, opts)  # a frame Dynamo compiled before: why again
    # flex_attention's subgraphs become ATen ops before tracing (torchtpu/compiled/flex_attention.py).
    flex_attention.decompose(gm)
    cached = warm_start.takes_part(opts)  # AOTAutograd's cache keeps this graph's programs
    if opts.skip_aot_wrapper and (not cached or warm_start.saving_ahead()):
        direct = _inference_without_wrapper(gm, example_inputs, opts)
        if direct is not None:
            return direct

    link = {}  # this graph's forward, for its backward's gradient layouts

    def fw(g, inputs):
        return compile_aten_graph(g, inputs, opts, "forward", link=link)

    def bw(g, inputs):
        return compile_aten_graph(g, inputs, opts, "backward", link=link)

    def inference(g, inputs):
        return compile_aten_graph(g, inputs, opts, "inference")

    if not cached:
        return aot_autograd(
            fw_compiler=fw,
            bw_compiler=bw,
            inference_compiler=inference,
            decompositions=decomposition_table(),
            partition_fn=_partition(opts),
        )(gm, example_inputs)
    # AOTAutograd's cache keeps the compiled graphs (docs/cache.md, "Warm start without tracing").
    with warm_start.taking_part(opts):
        return aot_autograd(
            fw_compiler=warm_start.cacheable(fw, "forward"),
            bw_compiler=warm_start.cacheable(bw, "backward"),
            inference_compiler=warm_start.cacheable(inference, "inference"),
            decompositions=decomposition_table(),
            partition_fn=_partition(opts),
        )(gm, example_inputs)


__all__ = ["torchtpu_backend", "compile_aten_graph"]
