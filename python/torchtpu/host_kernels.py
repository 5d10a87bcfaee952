"""ATen's CPU kernels inside compiled programs, on the host platform (issue 48: "the best
kernel for each op"). The runtime's XLA FFI handler `torchtpu_aten_matmul_*` calls ATen's GEMM
(MKL / oneDNN) on XLA's own buffers, through a table of C functions the device shim
(`torchtpu._device_shim`, csrc/host_kernels.cpp) hands over once per process: `install()`.
Which kernel each matmul gets is decided by measurement at compile time, per shape (the
engine times both on the shape; `_C.kernel_choices()`), and kept with the program in the cache.
GPU and TPU plugins keep XLA's kernels. docs/performance.md, "Host kernels"."""

from __future__ import annotations

import logging

from torchtpu import _C
from torchtpu.errors import TorchTPUError

log = logging.getLogger("torchtpu")

_installed: bool | None = None


def install() -> bool:
    """Hands ATen's kernels to the runtime (once); False, logged once, where they cannot be
    (the device shim not built, or built for another table version)."""
    global _installed
    if _installed is None:
        try:
            from torchtpu import _device_shim

            _C.install_host_kernels(_device_shim.host_kernel_api())
            _installed = True
        except (ImportError, AttributeError, TorchTPUError) as e:
            log.warning("torchtpu: ATen's host kernels unavailable, XLA's kernels everywhere: %s", e)
            _installed = False
    return _installed


def choices() -> list[dict]:
    """Each matmul shape measured in this process: its op, shape (`[m x k]T @ [k x n] f32`, T
    where stored transposed), median microseconds of XLA's and ATen's kernels, the kernel
    chosen, and why XLA's was kept without a race (a failure), if so."""
    return _C.kernel_choices() if _installed else []
