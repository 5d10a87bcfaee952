"""Dynamo leaves the tpu device's kernels alone.

While a `torch.compile`d function runs, Dynamo is offered every Python frame that starts,
those the dispatcher starts too: an eager tpu op between two graphs (Longformer's `nonzero`
after a graph break) runs torchtpu's Python kernels, and Dynamo compiled their frames as if
they were the user's code (a graph of `inductor.resize_storage_bytes_` from the kernel that
resizes an out= tensor, which no backend lowers). The device's implementation files are put
on Dynamo's skip list (each file alone; `module.py`, the `torch.tpu` API a user's compiled
code may call, stays traceable, as do the files split from it: the device facts and streams it
answers with, `_devices.py` and `_streams.py`, and the patched torch functions, `_patches.py`). Called when the backend is first imported: `torch.compile`
does that before anything it compiles runs, and `import torch` never pays for Dynamo.
"""

from __future__ import annotations

import pathlib

_done = False

# The `torch.tpu` module, the device facts and streams it answers with, and the torch functions
# torchtpu patches (`torch.accelerator`'s, `Module._apply`, `data_ptr`): user-facing, traceable.
_USER_FACING = {"module.py", "_devices.py", "_streams.py", "_patches.py"}


def skip_device_kernels() -> None:
    global _done
    if _done:
        return
    from torch._dynamo import trace_rules

    device = pathlib.Path(__file__).parent / "device"
    files = sorted(str(p) for p in device.glob("*.py") if p.name not in _USER_FACING)
    # `trace_rules.add(module)` would add the package's folder for its `__init__.py`: exact
    # file paths are added instead (a skip-list entry is a path prefix).
    trace_rules.SKIP_DIRS.extend(files)
    trace_rules._recompile_re()
    _done = True
