"""TorchTitan's profiler with the tpu device's activity.

TorchTitan 0.3's `Profiler.build_torch_profiler` asks `torch.profiler` for the CPU, plus CUDA or
XPU where one is available: on tpu its trace would hold the host's ops only. `TpuProfiler` is
the same component (its Config, schedule, trace folders and memory snapshots unchanged) whose
profile also asks for `ProfilerActivity.PrivateUse1`, so the trace it writes has the tpu
programs with their device time, linked to their ops (docs/debugging.md).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, fields

import torch
from torchtitan.tools.profiler import Profiler


@contextlib.contextmanager
def _asking_for_the_device():
    """`torch.profiler.profile` with PrivateUse1 added to the activities, while TorchTitan builds
    its profiler (it calls it by that name)."""
    plain = torch.profiler.profile

    def profile(*args, activities=None, **kwargs):
        activities = list(activities or [torch.profiler.ProfilerActivity.CPU])
        if torch.profiler.ProfilerActivity.PrivateUse1 not in activities:
            activities.append(torch.profiler.ProfilerActivity.PrivateUse1)
        return plain(*args, activities=activities, **kwargs)

    torch.profiler.profile = profile
    try:
        yield
    finally:
        torch.profiler.profile = plain


class TpuProfiler(Profiler):
    @dataclass(kw_only=True, slots=True)
    class Config(Profiler.Config):
        pass

    def build_torch_profiler(self, **kwargs):
        with _asking_for_the_device():
            return super().build_torch_profiler(**kwargs)


def tpu_profiler_config(config: Profiler.Config) -> TpuProfiler.Config:
    """`config`'s settings, as a TpuProfiler's."""
    return TpuProfiler.Config(
        **{f.name: getattr(config, f.name) for f in fields(config)}
    )
