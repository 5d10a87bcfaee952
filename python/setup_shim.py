"""Builds the tpu device's native shim (the device guard, hooks, allocator, dispatch, autocast,
profiler and host kernels: torchtpu/csrc/*.cpp) into
torchtpu/_device_shim*.so against the installed torch: `scripts/setup.sh` runs
`python setup_shim.py build_ext --inplace` from python/ (never compiled at import)."""

import os

from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension, include_paths

setup(
    name="torchtpu-device-shim",
    packages=[],
    package_dir={"": "."},  # not the src/ layout setuptools would guess from python/src (Rust)
    ext_modules=[
        CppExtension(
            "torchtpu._device_shim",
            [
                "torchtpu/csrc/device_guard.cpp",
                "torchtpu/csrc/autocast.cpp",
                "torchtpu/csrc/dispatch.cpp",
                "torchtpu/csrc/host_kernels.cpp",
                "torchtpu/csrc/profiler.cpp",
            ],
            # Kineto's headers (the profiler bridge) live beside torch's; torch is built with it.
            include_dirs=[os.path.join(include_paths()[0], "kineto")],
            # -g0: Python's flags ask for debug info, which made each source's compile ~40%
            # longer and the library 37 MB instead of 1.1 MB.
            extra_compile_args=["-O2", "-g0", "-DUSE_KINETO"],
        )
    ],
    # ninja (setup installs it) compiles the sources in parallel, MAX_JOBS at a time; without it
    # setuptools compiles them one after another (~1 minute each).
    cmdclass={"build_ext": BuildExtension.with_options(use_ninja=True)},
)
