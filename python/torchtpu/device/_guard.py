"""The native device guard (`torchtpu._device_shim`, python/torchtpu/csrc/device_guard.cpp):
the current tpu device per thread, the device count autograd and PyTorch's guards see, streams
and events, and tpu tensors on any device (`create_empty_tensor(shape, dtype, index)`).

It is a C++ extension built ahead of time by `make setup` (scripts/setup.sh), never compiled at
import: PyTorch's own Python-backend guard pins every tensor to tpu:0 and reports one device."""

from __future__ import annotations

try:
    from torchtpu import _device_shim as guard
except ImportError as e:  # pragma: no cover - a checkout without `make setup`
    raise ImportError(
        "torchtpu: the tpu device's native device guard (torchtpu._device_shim) is not built; run `make setup` "
        f"(scripts/setup.sh builds it against the installed torch): {e}"
    ) from e

__all__ = ["guard"]
