"""Run `torchtitan.train` on the CPU: the reference run for the tpu one (same config, same data).

    PYTHONPATH=examples/torchtitan torchrun --nproc-per-node=N examples/torchtitan/train_cpu.py \
        --module tpu_llama3 --config llama3_debug_tpu [overrides...]

TorchTitan 0.3 has no CPU device: `torchtitan.tools.utils` takes
`torch._utils._get_available_device_type() or "cuda"`, so with no accelerator it picks
`torch.cuda` and stops at `torch.cuda.set_device`. This launcher sets that module's
`device_type`/`device_module` to "cpu" and a `torch.cpu` with the calls TorchTitan makes and
`torch.cpu` lacks (device name and properties, memory statistics: zeros), before any other
TorchTitan module binds them; the process group is then gloo. It also keeps torch from loading
torchtpu (TORCH_DEVICE_BACKEND_AUTOLOAD=0): with the PrivateUse1 backend registered,
`torch._C._get_accelerator()` is tpu even in a CPU program, and TorchTitan's
`barrier(device_ids=[0])` then asks gloo for a tpu barrier ("No backend type associated with
device type tpu"). And FSDP reduces gradients with SUM: TorchTitan sets the FSDP gradient divide
factor to 1.0, which FSDP turns into `ReduceOp.PREMUL_SUM(1.0)`, and gloo refuses it ("Cannot
use ReduceOp.PREMUL_SUM with Gloo"); forcing sum reductions gives the same sums. Nothing else
changes.
"""

import os
import platform
import sys
import types

if os.environ.get("TORCHTPU_DEVICE") == "1":
    sys.exit("train_cpu.py runs on the CPU: unset TORCHTPU_DEVICE (or use `-m torchtitan.train` for tpu)")
os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"  # before torch is imported: plain CPU PyTorch

import torch  # noqa: E402


def _cpu_module() -> types.ModuleType:
    mod = types.ModuleType("torchtitan_cpu_device")
    for name in ("current_device", "device_count", "is_available", "synchronize", "set_device", "Stream", "Event"):
        setattr(mod, name, getattr(torch.cpu, name))
    mod.current_device = lambda: 0  # torch.cpu's returns "cpu"; TorchTitan uses an index
    mod.get_device_name = lambda device=None: platform.processor() or platform.machine() or "cpu"
    mod.get_device_properties = lambda device=None: types.SimpleNamespace(
        name=mod.get_device_name(), total_memory=os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    )
    mod.memory_stats = lambda device=None: {}
    mod.reset_peak_memory_stats = lambda device=None: None
    mod.empty_cache = lambda: None
    return mod


import torchtitan.tools.utils as _utils  # noqa: E402  (before the modules that import its names)

_utils.device_type, _utils.device_module = "cpu", _cpu_module()

import torchtitan.distributed.fsdp as _fsdp  # noqa: E402

_disable_division = _fsdp.disable_fsdp_gradient_division


def _sum_reductions(model) -> None:
    _disable_division(model)
    for module in model.modules():
        if isinstance(module, torch.distributed.fsdp.FSDPModule):
            module.set_force_sum_reduction_for_comms(True)


_fsdp.disable_fsdp_gradient_division = _sum_reductions

from torchtitan.train import main  # noqa: E402

if __name__ == "__main__":
    main()
