"""Options accepted by torch.compile(..., backend="torchtpu", options={...})."""

from __future__ import annotations

import dataclasses
import os

from torchtpu import _C
from torchtpu.errors import OptionsError


@dataclasses.dataclass(frozen=True)
class Options:
    # Raise instead of falling back to eager (unsupported op, compile or PJRT failure, a
    # torchtpu bug). Default: TORCHTPU_FALLBACK=error in the environment (see policy.py).
    strict: bool = False
    # Write each graph's IR (as exported and after the passes) and StableHLO here.
    dump_dir: str | None = None
    # The pass pipeline run before lowering (torchtpu-opt --pass-pipeline syntax; a list of
    # pass names is joined with commas). The default is the compiler's own.
    passes: str = _C.DEFAULT_PIPELINE
    # Alias outputs to inputs of their type so PJRT reuses the (per-call, private) input
    # buffers: mutated inputs such as batch norm's running statistics, and any input whose
    # buffer an output of its type can take. Default (None): where the platform can donate,
    # which the CPU plugin cannot (it reads inputs in place; an alias there only adds a copy).
    donate: bool | None = None
    # In inference graphs, give convolution weights to XLA in HWIO (its CPU layout), permuted
    # once per weight version, instead of relaying them in every call (weight_layout.py).
    relayout_weights: bool = True
    # Inference graphs that mutate no input and return no alias of one are compiled without
    # AOTAutograd's runtime wrapper (which would have nothing to do).
    skip_aot_wrapper: bool = True
    # In inference graphs, fold each batch norm into the convolution before it, the folded
    # weight and bias computed once per version of the tensors they come from
    # (batch_norm_folding.py).
    fold_batch_norm: bool = True
    # In training graphs, saved activations laid out like a convolution's cross from the
    # forward to the backward program NHWC, so neither transposes them (saved_layout.py).
    relayout_saved: bool = True
    # How training graphs are split into forward and backward: "min_cut" (recompute views
    # and cheap elementwise work in the backward, save less; what Inductor uses) or
    # "default" (AOTAutograd's default_partition: save every value the backward reads).
    partitioner: str = "min_cut"
    # XLA option overrides for this model's compiles, by XLA DebugOptions field name
    # (docs/performance.md, "XLA's options"); unset, inference graphs get
    # backend.INFERENCE_XLA_OPTIONS: {"xla_cpu_...": value} with
    # bool, int or str values (repeated and enum fields in XLA's flag syntax). Kept as sorted
    # (name, value) pairs: Options are hashed into graph fingerprints.
    xla_options: tuple | None = None
    # Raise `IndexOutOfRangeError` for an index out of range (x[idx], gather, scatter,
    # embedding, a loss target), as eager does, where XLA would clamp it: each graph computes
    # one extra bool output, read after each call (index_checks.py). Default: on, unless
    # TORCHTPU_CHECK_INDICES=0.
    check_indices: bool = True
    # Inference graphs with symbolic sizes pad each size that only indexes independent rows (a
    # batch) up to the next of these sizes, so that a loop over changing sizes compiles one
    # program per bucket (buckets.py, docs/backend.md "Buckets"); () turns it off. Default:
    # TORCHTPU_BUCKETS, else buckets.DEFAULT_BUCKETS (8, 16, ..., 1024).
    buckets: tuple = ()
    # On the host platform (the CPU plugin), run each matmul (mm, bmm, addmm) in the faster of
    # XLA's dot and ATen's CPU GEMM (MKL / oneDNN), both timed on its shape once at compile
    # time (host_kernels.py, docs/performance.md "Host kernels"). TORCHTPU_HOST_KERNELS=0
    # turns every host kernel off.
    host_kernels: bool = True
    # Take part in PyTorch's AOTAutograd cache (torch._functorch.config.enable_autograd_cache):
    # a later process on the same caches skips AOTAutograd's tracing of this model's graphs;
    # inference graphs then go through AOTAutograd's wrapper (skip_aot_wrapper does not apply)
    # and backward graphs compile with their forward. Off by default: the cache's key costs a
    # process about 1 s (Inductor's imports, hashes of torch and triton), more than it saves on
    # small models (docs/cache.md, "Warm start without tracing"). aot_compile and
    # caching_precompile use it whatever this says.
    autograd_cache: bool = False

    @staticmethod
    def from_dict(options: dict | None) -> Options:
        options = dict(options or {})
        known = {f.name for f in dataclasses.fields(Options)}
        unknown = sorted(set(options) - known)
        if unknown:
            raise OptionsError(f"unknown torchtpu option(s) {unknown}; known: {sorted(known)}")
        if "strict" not in options:
            from torchtpu.policy import fallback_is_error

            options["strict"] = fallback_is_error()
        if "check_indices" not in options:
            from torchtpu.index_checks import check_indices_default

            options["check_indices"] = check_indices_default()
        from torchtpu.compiled import buckets

        options["buckets"] = buckets.parse(options["buckets"]) if "buckets" in options else buckets.default()
        if "dump_dir" not in options and os.environ.get("TORCHTPU_DUMP_DIR"):
            options["dump_dir"] = os.environ["TORCHTPU_DUMP_DIR"]
        for flag in (
            "strict",
            "donate",
            "relayout_weights",
            "relayout_saved",
            "fold_batch_norm",
            "skip_aot_wrapper",
            "check_indices",
            "host_kernels",
            "autograd_cache",
        ):
            # Only real booleans: "no" or "false" would be truthy. (donate=None is the default:
            # the compile asks the platform, `_C.donates_by_default`.)
            if (
                flag in options
                and not isinstance(options[flag], bool)
                and not (flag == "donate" and options[flag] is None)
            ):
                raise OptionsError(f"torchtpu option {flag!r} must be True or False, got {options[flag]!r}")
        xla = options.get("xla_options")
        if xla is not None:
            if not isinstance(xla, dict) or not all(
                isinstance(k, str) and k.startswith("xla_") and isinstance(v, (bool, int, str)) for k, v in xla.items()
            ):
                raise OptionsError(
                    "torchtpu option 'xla_options' must be a dict of XLA DebugOptions field names (xla_...) to bool, int "
                    f"or str values, got {xla!r}"
                )
            options["xla_options"] = tuple(sorted(xla.items()))
        if options.get("partitioner", "min_cut") not in ("min_cut", "default"):
            raise OptionsError(
                f"torchtpu option 'partitioner' must be 'min_cut' or 'default', got {options['partitioner']!r}"
            )
        if isinstance(options.get("passes"), (list, tuple)) and all(isinstance(p, str) for p in options["passes"]):
            options["passes"] = ",".join(options["passes"])
        if "passes" in options and not isinstance(options["passes"], str):
            raise OptionsError(
                f"torchtpu option 'passes' must be a pipeline string or a list of pass names, got {options['passes']!r}"
            )
        if options.get("dump_dir") is not None:
            if not isinstance(options["dump_dir"], (str, os.PathLike)):
                raise OptionsError(f"torchtpu option 'dump_dir' must be a path, got {options['dump_dir']!r}")
            options["dump_dir"] = os.fspath(options["dump_dir"])
        opts = Options(**options)
        # The compiler parses the pipeline (syntax, pass names, their options) without running it.
        try:
            _C.check_pipeline(opts.passes)
        except OptionsError as e:
            raise OptionsError(f"torchtpu option passes={opts.passes!r}: {e}") from None
        return opts
