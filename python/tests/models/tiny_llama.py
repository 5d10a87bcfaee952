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


# --- A servable checkpoint: the model beside a real tokenizer with a chat template -----------

BOS, EOS = "<|begin_of_text|>", "<|eot_id|>"
HEADER = ("<|start_header_id|>", "<|end_header_id|>")
# Llama 3's turn layout, written with our own special tokens.
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|start_header_id|>{{ m['role'] }}<|end_header_id|>\n\n"
    "{{ m['content'] }}<|eot_id|>{% endfor %}"
    "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"
)
_WORDS = (
    "the a quick lazy bright dark small large quiet red green blue old young warm cold fox dog cat bird tree "
    "river stone cloud house road field garden window engine lamp see find follow watch build paint move "
    "carry hold open reach hill bridge market harbour forest valley station tower village meadow one two "
    "three four five six seven eight nine ten why does go to is there and stays every by near because"
).split()


def tokenizer(vocab_size: int = 512, reserved_to: int | None = None):
    """A byte-level BPE tokenizer trained offline on generated sentences (as
    examples/torchtitan/make_assets.py trains one), with BOS/EOS, the chat headers and
    `CHAT_TEMPLATE`, as a `PreTrainedTokenizerFast`. `reserved_to` pads the vocabulary with
    reserved tokens up to that size, as Llama 3 reserves ids for later use, so a model with a
    real-sized vocabulary decodes every id it can emit."""
    import os
    import random

    os.environ.setdefault("RAYON_NUM_THREADS", "1")  # one thread: the same merges on every run
    import transformers
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    rng = random.Random(0)
    texts = [" ".join(rng.choice(_WORDS) for _ in range(rng.randint(4, 16))) + "." for _ in range(2000)]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    specials = [BOS, EOS, *HEADER]
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),  # any byte encodes
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    if reserved_to is not None and reserved_to > tok.get_vocab_size():
        # Not special: a decode that skips special tokens (the server's) still shows them as text.
        tok.add_tokens([f"<|reserved_{i}|>" for i in range(reserved_to - tok.get_vocab_size())])
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token=BOS, eos_token=EOS, chat_template=CHAT_TEMPLATE
    )


def save_servable(path, seed: int = 0, reserved_to: int | None = None, **overrides) -> str:
    """Writes a `LlamaForCausalLM` (weights drawn from `seed`, `config(**overrides)`, its vocabulary
    the tokenizer's) and its tokenizer to `path`, the folder `transformers serve PATH` loads
    offline; returns `path` as a string. The weights are drawn ten times wider than Llama's
    default (`initializer_range` 0.2): at 0.02 the tiny model's greedy answer is the same for
    every prompt, which would hide answers handed to the wrong request."""
    tok = tokenizer(reserved_to=reserved_to)
    overrides = {"max_position_embeddings": 512, "initializer_range": 0.2, **overrides}
    m = model(
        seed,
        vocab_size=len(tok),
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        **overrides,
    )
    m.generation_config.eos_token_id = tok.eos_token_id
    m.save_pretrained(str(path))
    tok.save_pretrained(str(path))
    return str(path)
