"""Make the offline assets the TorchTitan example trains on: a tiny BPE tokenizer and a
JSON-lines text dataset, both from generated text (no download, no copied data set).

    python examples/torchtitan/make_assets.py [OUT]      # OUT defaults to examples/torchtitan/assets

writes
    OUT/tokenizer/tokenizer.json          the `tokenizers` BPE model (byte-level, VOCAB_SIZE ids)
    OUT/tokenizer/tokenizer_config.json   bos/eos as TorchTitan's HuggingFaceTokenizer reads them
    OUT/c4_test/train.jsonl               one {"text": ...} object a line

TorchTitan's `HuggingFaceTokenizer` loads `tokenizer.json`, then reads `bos_token`, `eos_token`
and `added_tokens_decoder` from `tokenizer_config.json`; it adds BOS/EOS itself (the dataset
encodes with add_bos=True, add_eos=True) when the tokenizer does not add them to "" (ours has
no post-processor, so it does not). The `c4_test` dataset is `load_dataset(path, split="train")`
over a folder: a lone `*.jsonl` file there is the train split. The same seed gives the same
bytes on every run (the BPE trainer runs on one thread).
"""

import argparse
import json
import os
import random
from pathlib import Path

VOCAB_SIZE = 512  # the config sets the model's vocab (and the loss) to this
BOS, EOS = "<|begin_of_text|>", "<|end_of_text|>"
SPECIALS = [BOS, EOS]
SEED = 0
N_DOCS = 2000

_ADJ = "quick lazy bright dark small large quiet loud red green blue old young warm cold".split()
_NOUN = "fox dog cat bird tree river stone cloud house road field garden window engine lamp".split()
_VERB = "see find follow watch build paint move carry hold open reach".split()
_PLACE = "hill bridge market harbour forest valley station tower village meadow".split()
_NUM = "one two three four five six seven eight nine ten".split()


def _sentence(rng: random.Random) -> str:
    kind = rng.randrange(4)
    a, b = rng.choice(_ADJ), rng.choice(_ADJ)
    n, m = rng.choice(_NOUN), rng.choice(_NOUN)
    v, p = rng.choice(_VERB), rng.choice(_PLACE)
    vs = v[:-1] + "ies" if v.endswith("y") else v + ("es" if v.endswith(("ch", "sh")) else "s")
    if kind == 0:
        return f"The {a} {n} {vs} the {b} {m} near the {p}."
    if kind == 1:
        return f"{rng.choice(_NUM).capitalize()} {a} {n}s {v} {rng.choice(_NUM)} {m}s."
    if kind == 2:
        return f"Every {n} by the {p} {vs} a {b} {m}, and the {m} stays."
    return f"Why does the {n} go to the {p}? Because the {a} {m} is there."


def make_texts(n_docs: int = N_DOCS, seed: int = SEED) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(_sentence(rng) for _ in range(rng.randint(2, 12))) for _ in range(n_docs)]


def make_tokenizer(texts: list[str], out: Path) -> None:
    os.environ["RAYON_NUM_THREADS"] = "1"  # one thread: the same merges on every run
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=SPECIALS,  # ids 0 and 1
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),  # any byte encodes
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    out.mkdir(parents=True, exist_ok=True)
    tok.save(str(out / "tokenizer.json"))
    special = {"lstrip": False, "normalized": False, "rstrip": False, "single_word": False, "special": True}
    config = {
        "added_tokens_decoder": {str(tok.token_to_id(t)): {"content": t, **special} for t in SPECIALS},
        "bos_token": BOS,
        "eos_token": EOS,
        "clean_up_tokenization_spaces": False,
        "model_max_length": 131072,
        "tokenizer_class": "PreTrainedTokenizerFast",
    }
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")


def make_dataset(texts: list[str], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "train.jsonl", "w") as f:
        for t in texts:
            f.write(json.dumps({"text": t}) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", default=str(Path(__file__).resolve().parent / "assets"))
    args = parser.parse_args()
    out = Path(args.out)
    texts = make_texts()
    make_tokenizer(texts, out / "tokenizer")
    make_dataset(texts, out / "c4_test")
    print(f"wrote {out / 'tokenizer'} ({VOCAB_SIZE} ids) and {out / 'c4_test'} ({len(texts)} documents)")


if __name__ == "__main__":
    main()
