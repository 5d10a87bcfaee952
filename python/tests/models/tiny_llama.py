"""The tiny Llama of the tests that train or serve a Hugging Face model: one config, one token
dataset, so a test changes the model in one place. Grouped-query attention (4 heads, 2 KV heads)
as real Llama configs have it."""

from __future__ import annotations

import torch

VOCAB = 128


def config(**overrides):
    import transformers

    base = dict(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
    )
    base.update(overrides)
    return transformers.LlamaConfig(**base)


def model(seed: int = 0, **overrides):
    """A `LlamaForCausalLM` on the CPU, its weights drawn from `seed`."""
    import transformers

    torch.manual_seed(seed)
    return transformers.LlamaForCausalLM(config(**overrides))


class Tokens(torch.utils.data.Dataset):
    """`n` sequences of `length` token ids, each drawn from its own seed (the same on every rank
    and device), as causal-LM batches (`labels` = `input_ids`)."""

    def __init__(self, n: int = 16, length: int = 8):
        self.n, self.length = n, length

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        ids = torch.randint(3, VOCAB, (self.length,), generator=torch.Generator().manual_seed(i))
        return {"input_ids": ids, "labels": ids}
