"""Builds the tpu device's native device guard (torchtpu/csrc/device_guard.cpp) into
torchtpu/_device_guard*.so against the installed torch: `scripts/setup.sh` runs
`python setup_guard.py build_ext --inplace` from python/ (never compiled at import)."""

from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension

setup(
    name="torchtpu-device-guard",
    packages=[],
    package_dir={"": "."},  # not the src/ layout setuptools would guess from python/src (Rust)
    ext_modules=[
        CppExtension(
            "torchtpu._device_guard",
            [
                "torchtpu/csrc/device_guard.cpp",
                "torchtpu/csrc/autocast.cpp",
                "torchtpu/csrc/dispatch.cpp",
                "torchtpu/csrc/host_kernels.cpp",
            ],
            extra_compile_args=["-O2"],
        )
    ],
    cmdclass={"build_ext": BuildExtension.with_options(use_ninja=False)},
)
