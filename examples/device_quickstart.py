"""The same small transformer on the `tpu` device, three ways, beside CPU eager: eager on tpu
(strict mode: one compiled program per op), DeferAndFuse (runs of ops fused into one program),
and `torch.compile` on tpu tensors. Only the device string changes.

    .venv/bin/python examples/device_quickstart.py      (part of `make demo`)

Each way is checked against CPU eager (tolerance 1e-4) with no CPU fallback, then timed: the
first call (which compiles) and the steady-state time per call, the four measured interleaved
in one run.
"""

import statistics
import time

import torch

import torchtpu
from quickstart import TinyTransformer, median_us


def main():
    torch.manual_seed(0)
    model = TinyTransformer().eval()
    ids = torch.randint(0, 1000, (4, 32))
    on_tpu = TinyTransformer().eval().to("tpu")  # the changed line
    on_tpu.load_state_dict(model.state_dict())
    ids_tpu = ids.to("tpu")
    compiled = torch.compile(on_tpu, backend="torchtpu")

    def strict(x):
        with torchtpu.eager.mode("strict"):
            return on_tpu(x).cpu()

    def fused(x):
        with torchtpu.eager.mode("defer_and_fuse"):
            return on_tpu(x).cpu()

    ways = {
        "CPU eager": (model, ids),
        "tpu eager (strict)": (strict, ids_tpu),
        "tpu DeferAndFuse": (fused, ids_tpu),
        "tpu torch.compile": (lambda x: compiled(x).cpu(), ids_tpu),
    }
    fallbacks = torchtpu.stats()["eager_cpu_fallbacks"]
    first = {}
    with torch.no_grad():
        want = model(ids)
        for name, (fn, arg) in ways.items():
            start = time.perf_counter()
            out = fn(arg)
            first[name] = time.perf_counter() - start
            torch.testing.assert_close(out, want, rtol=1e-4, atol=1e-4)
        assert torchtpu.stats()["eager_cpu_fallbacks"] == fallbacks, "a CPU fallback ran"
        print("every way matches CPU eager (tolerance 1e-4), with no CPU fallback")
        samples = {name: [] for name in ways}
        for _ in range(5):  # interleaved: this machine is noisy
            for name, (fn, arg) in ways.items():
                samples[name].append(median_us(fn, arg, n=10))
    base = statistics.median(samples["CPU eager"])
    print(f"{'':22s} {'first call':>11s} {'steady/call':>12s} {'vs CPU eager':>13s}")
    for name in ways:
        steady = statistics.median(samples[name])
        print(f"{name:22s} {first[name]:10.2f}s {steady:10.0f}us {steady / base:12.2f}x")


if __name__ == "__main__":
    main()
