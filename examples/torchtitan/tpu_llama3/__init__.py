"""TorchTitan configs for the llama3 debug model on torchtpu's `tpu` device.

`torchrun ... -m torchtitan.train --module tpu_llama3 --config llama3_debug_tpu` with
`examples/torchtitan` on PYTHONPATH; see examples/torchtitan/README.md.
"""
