"""`Trainer.Config`s for TorchTitan 0.3's llama3 debug model, sized for torchtpu.

Start from `torchtitan.models.llama3.config_registry.llama3_debugmodel` (6 layers, dim 256,
16 heads) and change only what a short offline run needs:
- the tokenizer and data set that `make_assets.py` writes (default: examples/torchtitan/assets;
  `--hf-assets-path` and `--dataloader.dataset-path` point elsewhere), so the model's vocab is
  that tokenizer's 512 ids;
- 64 tokens a sequence, 4 sequences a rank, 5 steps, a log line every step;
- attention: TorchTitan's own (`flex_attention` with its per-document causal BlockMask,
  compiled by the default backend, which sends tpu graphs to torchtpu);
- fp32 parameters (`mixed_precision_param float32`): no bf16 autocast/FSDP casts;
- no validation, checkpoint or profiler unless asked (`--checkpoint.enable`,
  `--profiler.enable-profiling`), dumps under examples/torchtitan/outputs;
- the profiler asks for the tpu device's activity too (`profiler.py`: TorchTitan asks for CUDA
  or XPU only), so its trace has the device's programs and their device time.
Every field stays overridable from the command line (`--help` lists them).
"""

from pathlib import Path

import make_assets
from torchtitan.models.llama3.config_registry import llama3_debugmodel
from torchtitan.trainer import Trainer

from tpu_llama3.profiler import tpu_profiler_config

HERE = Path(__file__).resolve().parent.parent  # examples/torchtitan
ASSETS = HERE / "assets"


def _set_vocab(config: Trainer.Config, vocab: int) -> None:
    model = config.model_spec.model
    model.vocab_size = vocab
    model.tok_embeddings.num_embeddings = vocab
    model.lm_head.out_features = vocab
    config.loss.loss_fn.global_vocab_size = vocab


def llama3_debug_tpu() -> Trainer.Config:
    config = llama3_debugmodel()
    _set_vocab(config, make_assets.VOCAB_SIZE)
    config.hf_assets_path = str(ASSETS / "tokenizer")
    config.dataloader.dataset_path = str(ASSETS / "c4_test")
    config.dump_folder = str(HERE / "outputs")
    config.training.seq_len = 64
    config.training.local_batch_size = 4
    config.training.steps = 5
    config.training.mixed_precision_param = "float32"
    config.metrics.log_freq = 1
    config.debug.seed = 0
    config.validator.enable = False
    config.checkpoint.enable = False
    config.checkpoint.interval = 5
    config.profiler = tpu_profiler_config(config.profiler)
    config.profiler.enable_profiling = False
    config.profiler.profile_freq = 5
    return config
