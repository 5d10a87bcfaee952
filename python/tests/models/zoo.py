"""The model zoo: real Hugging Face `transformers` architectures and `torchvision` models, built
from small configurations with random weights (nothing is downloaded), each with example inputs.

A `ModelSpec` says how to build the model and its inputs and which tensor outputs to compare.
`SUBSET` names the deterministic few that `make test` runs; `TRAIN` those that also take one
training step (loss and gradients compared with eager).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import torch


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    name: str
    family: str  # decoder | encoder | encoder-decoder | vision | audio | torchvision
    build: Callable[[], torch.nn.Module]
    inputs: Callable[[], dict]  # keyword arguments for forward (fresh tensors each call)


SEQ, BATCH, VOCAB = 8, 2, 128
IMAGE = 32  # Hugging Face vision models
TV_IMAGE = 64  # torchvision models


def _randomize_zero_weights(model: torch.nn.Module) -> torch.nn.Module:
    """Some models zero-initialise their heads (torchvision's ViT); all-zero logits would make
    the comparison with eager vacuous, so such weight matrices get small random values."""
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() >= 2 and not p.any():
                p.copy_(torch.randn(p.shape, generator=g) * 0.02)
    return model


def _ids(vocab=VOCAB, batch=BATCH, seq=SEQ):
    g = torch.Generator().manual_seed(0)
    return torch.randint(3, vocab, (batch, seq), generator=g)


def _text_inputs(**extra):
    def make():
        ids = _ids()
        mask = torch.ones_like(ids)
        mask[1, -2:] = 0  # a padded second row exercises the attention mask
        return {"input_ids": ids, "attention_mask": mask, **extra}

    return make


def _lm_inputs():
    return {"input_ids": _ids()}


def _seq2seq_inputs():
    return {"input_ids": _ids(), "decoder_input_ids": _ids(seq=6)}


def _pixels(channels=3, size=IMAGE, batch=1):
    def make():
        g = torch.Generator().manual_seed(0)
        return {"pixel_values": torch.randn(batch, channels, size, size, generator=g)}

    return make


def _hf(config_name: str, model_name: str, **config):
    def build():
        import transformers

        cfg = getattr(transformers, config_name)(**config)
        if hasattr(cfg, "use_cache"):
            cfg.use_cache = False
        torch.manual_seed(0)
        return _randomize_zero_weights(getattr(transformers, model_name)(cfg).eval())

    return build


# Shared small sizes: 2 layers, hidden 32, 4 heads, MLP 64.
_DEC = dict(
    vocab_size=VOCAB,
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    max_position_embeddings=64,
)
_ENC = dict(
    vocab_size=VOCAB,
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    max_position_embeddings=64,
)
_VIT = dict(
    image_size=IMAGE,
    patch_size=8,
    num_channels=3,
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=64,
)


def _hf_specs() -> list[ModelSpec]:
    S = ModelSpec
    dec, enc = "decoder", "encoder"
    return [
        # --- decoder-only language models ---
        S("llama", dec, _hf("LlamaConfig", "LlamaForCausalLM", num_key_value_heads=2, **_DEC), _lm_inputs),
        S(
            "mistral",
            dec,
            _hf("MistralConfig", "MistralForCausalLM", num_key_value_heads=2, sliding_window=4, **_DEC),
            _lm_inputs,
        ),
        S("qwen2", dec, _hf("Qwen2Config", "Qwen2ForCausalLM", num_key_value_heads=2, **_DEC), _lm_inputs),
        S("qwen3", dec, _hf("Qwen3Config", "Qwen3ForCausalLM", num_key_value_heads=2, head_dim=8, **_DEC), _lm_inputs),
        S("gemma", dec, _hf("GemmaConfig", "GemmaForCausalLM", num_key_value_heads=2, head_dim=8, **_DEC), _lm_inputs),
        S(
            "gemma2",
            dec,
            _hf("Gemma2Config", "Gemma2ForCausalLM", num_key_value_heads=2, head_dim=8, sliding_window=4, **_DEC),
            _lm_inputs,
        ),
        S(
            "gpt2",
            dec,
            _hf("GPT2Config", "GPT2LMHeadModel", vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4, n_positions=64),
            _lm_inputs,
        ),
        S("gpt_neox", dec, _hf("GPTNeoXConfig", "GPTNeoXForCausalLM", **_DEC), _lm_inputs),
        S("phi", dec, _hf("PhiConfig", "PhiForCausalLM", **_DEC), _lm_inputs),
        S("phi3", dec, _hf("Phi3Config", "Phi3ForCausalLM", num_key_value_heads=2, pad_token_id=0, **_DEC), _lm_inputs),
        S(
            "falcon",
            dec,
            _hf(
                "FalconConfig",
                "FalconForCausalLM",
                vocab_size=VOCAB,
                hidden_size=32,
                num_hidden_layers=2,
                num_attention_heads=4,
            ),
            _lm_inputs,
        ),
        S(
            "opt",
            dec,
            _hf(
                "OPTConfig",
                "OPTForCausalLM",
                vocab_size=VOCAB,
                hidden_size=32,
                ffn_dim=64,
                num_hidden_layers=2,
                num_attention_heads=4,
                word_embed_proj_dim=32,
                max_position_embeddings=64,
            ),
            _lm_inputs,
        ),
        S(
            "bloom",
            dec,
            _hf("BloomConfig", "BloomForCausalLM", vocab_size=VOCAB, hidden_size=32, n_layer=2, n_head=4),
            _lm_inputs,
        ),
        S(
            "gptj",
            dec,
            _hf(
                "GPTJConfig",
                "GPTJForCausalLM",
                vocab_size=VOCAB,
                n_embd=32,
                n_layer=2,
                n_head=4,
                rotary_dim=4,
                n_positions=64,
            ),
            _lm_inputs,
        ),
        S(
            "gpt_bigcode",
            dec,
            _hf(
                "GPTBigCodeConfig",
                "GPTBigCodeForCausalLM",
                vocab_size=VOCAB,
                n_embd=32,
                n_layer=2,
                n_head=4,
                n_positions=64,
            ),
            _lm_inputs,
        ),
        S(
            "codegen",
            dec,
            _hf(
                "CodeGenConfig",
                "CodeGenForCausalLM",
                vocab_size=VOCAB,
                n_embd=32,
                n_layer=2,
                n_head=4,
                rotary_dim=4,
                n_positions=64,
                n_ctx=64,
            ),
            _lm_inputs,
        ),
        S("stablelm", dec, _hf("StableLmConfig", "StableLmForCausalLM", num_key_value_heads=2, **_DEC), _lm_inputs),
        S(
            "starcoder2",
            dec,
            _hf("Starcoder2Config", "Starcoder2ForCausalLM", num_key_value_heads=2, **_DEC),
            _lm_inputs,
        ),
        S("olmo", dec, _hf("OlmoConfig", "OlmoForCausalLM", pad_token_id=0, **_DEC), _lm_inputs),
        S("granite", dec, _hf("GraniteConfig", "GraniteForCausalLM", num_key_value_heads=2, **_DEC), _lm_inputs),
        S(
            "mixtral",
            dec,
            _hf(
                "MixtralConfig",
                "MixtralForCausalLM",
                num_key_value_heads=2,
                num_local_experts=4,
                num_experts_per_tok=2,
                **_DEC,
            ),
            _lm_inputs,
        ),
        S(
            "qwen3_moe",
            dec,
            _hf(
                "Qwen3MoeConfig",
                "Qwen3MoeForCausalLM",
                num_key_value_heads=2,
                head_dim=8,
                num_experts=4,
                num_experts_per_tok=2,
                moe_intermediate_size=32,
                decoder_sparse_step=1,
                **_DEC,
            ),
            _lm_inputs,
        ),
        # --- encoders ---
        S("bert", enc, _hf("BertConfig", "BertForMaskedLM", **_ENC), _text_inputs()),
        S(
            "roberta",
            enc,
            _hf("RobertaConfig", "RobertaForMaskedLM", pad_token_id=1, **{**_ENC, "max_position_embeddings": 66}),
            _text_inputs(),
        ),
        S(
            "xlm_roberta",
            enc,
            _hf(
                "XLMRobertaConfig",
                "XLMRobertaForSequenceClassification",
                pad_token_id=1,
                num_labels=3,
                **{**_ENC, "max_position_embeddings": 66},
            ),
            _text_inputs(),
        ),
        S(
            "distilbert",
            enc,
            _hf(
                "DistilBertConfig",
                "DistilBertForMaskedLM",
                vocab_size=VOCAB,
                dim=32,
                hidden_dim=64,
                n_layers=2,
                n_heads=4,
                max_position_embeddings=64,
            ),
            _text_inputs(),
        ),
        S("albert", enc, _hf("AlbertConfig", "AlbertForMaskedLM", embedding_size=16, **_ENC), _text_inputs()),
        S("electra", enc, _hf("ElectraConfig", "ElectraForPreTraining", embedding_size=16, **_ENC), _text_inputs()),
        S("deberta", enc, _hf("DebertaConfig", "DebertaForMaskedLM", **_ENC), _text_inputs()),
        S(
            "deberta_v2",
            enc,
            _hf("DebertaV2Config", "DebertaV2ForSequenceClassification", num_labels=3, **_ENC),
            _text_inputs(),
        ),
        S("mpnet", enc, _hf("MPNetConfig", "MPNetForMaskedLM", **_ENC), _text_inputs()),
        S(
            "mobilebert",
            enc,
            _hf(
                "MobileBertConfig",
                "MobileBertForMaskedLM",
                vocab_size=VOCAB,
                hidden_size=32,
                embedding_size=16,
                intermediate_size=32,
                intra_bottleneck_size=16,
                true_hidden_size=16,
                num_hidden_layers=2,
                num_attention_heads=4,
                num_feedforward_networks=2,
                max_position_embeddings=64,
            ),
            _text_inputs(),
        ),
        S("convbert", enc, _hf("ConvBertConfig", "ConvBertForMaskedLM", embedding_size=32, **_ENC), _text_inputs()),
        S("megatron_bert", enc, _hf("MegatronBertConfig", "MegatronBertForMaskedLM", **_ENC), _text_inputs()),
        # --- encoder-decoders ---
        S(
            "t5",
            "encoder-decoder",
            _hf(
                "T5Config",
                "T5ForConditionalGeneration",
                vocab_size=VOCAB,
                d_model=32,
                d_kv=8,
                d_ff=64,
                num_layers=2,
                num_heads=4,
                decoder_start_token_id=0,
            ),
            _seq2seq_inputs,
        ),
        S(
            "bart",
            "encoder-decoder",
            _hf(
                "BartConfig",
                "BartForConditionalGeneration",
                vocab_size=VOCAB,
                d_model=32,
                encoder_layers=2,
                decoder_layers=2,
                encoder_attention_heads=4,
                decoder_attention_heads=4,
                encoder_ffn_dim=64,
                decoder_ffn_dim=64,
                max_position_embeddings=64,
            ),
            _seq2seq_inputs,
        ),
        S(
            "mbart",
            "encoder-decoder",
            _hf(
                "MBartConfig",
                "MBartForConditionalGeneration",
                vocab_size=VOCAB,
                d_model=32,
                encoder_layers=2,
                decoder_layers=2,
                encoder_attention_heads=4,
                decoder_attention_heads=4,
                encoder_ffn_dim=64,
                decoder_ffn_dim=64,
                max_position_embeddings=64,
            ),
            _seq2seq_inputs,
        ),
        S(
            "pegasus",
            "encoder-decoder",
            _hf(
                "PegasusConfig",
                "PegasusForConditionalGeneration",
                vocab_size=VOCAB,
                d_model=32,
                encoder_layers=2,
                decoder_layers=2,
                encoder_attention_heads=4,
                decoder_attention_heads=4,
                encoder_ffn_dim=64,
                decoder_ffn_dim=64,
                max_position_embeddings=64,
            ),
            _seq2seq_inputs,
        ),
        S(
            "marian",
            "encoder-decoder",
            _hf(
                "MarianConfig",
                "MarianMTModel",
                vocab_size=VOCAB,
                decoder_vocab_size=VOCAB,
                d_model=32,
                encoder_layers=2,
                decoder_layers=2,
                encoder_attention_heads=4,
                decoder_attention_heads=4,
                encoder_ffn_dim=64,
                decoder_ffn_dim=64,
                max_position_embeddings=64,
                pad_token_id=0,
            ),
            _seq2seq_inputs,
        ),
        S(
            "whisper",
            "encoder-decoder",
            _hf(
                "WhisperConfig",
                "WhisperForConditionalGeneration",
                vocab_size=VOCAB,
                d_model=32,
                encoder_layers=2,
                decoder_layers=2,
                encoder_attention_heads=4,
                decoder_attention_heads=4,
                encoder_ffn_dim=64,
                decoder_ffn_dim=64,
                num_mel_bins=16,
                max_source_positions=16,
                max_target_positions=32,
                pad_token_id=0,
                bos_token_id=1,
                eos_token_id=2,
                decoder_start_token_id=1,
            ),
            lambda: {
                "input_features": torch.randn(1, 16, 32, generator=torch.Generator().manual_seed(0)),
                "decoder_input_ids": _ids(batch=1, seq=6),
            },
        ),
        # --- vision ---
        S("vit", "vision", _hf("ViTConfig", "ViTForImageClassification", num_labels=10, **_VIT), _pixels()),
        S("deit", "vision", _hf("DeiTConfig", "DeiTForImageClassification", num_labels=10, **_VIT), _pixels()),
        S("beit", "vision", _hf("BeitConfig", "BeitForImageClassification", num_labels=10, **_VIT), _pixels()),
        S(
            "dinov2",
            "vision",
            _hf(
                "Dinov2Config",
                "Dinov2Model",
                **{k: v for k, v in _VIT.items() if k != "intermediate_size"},
                mlp_ratio=2,
            ),
            _pixels(),
        ),
        S(
            "swin",
            "vision",
            _hf(
                "SwinConfig",
                "SwinForImageClassification",
                image_size=IMAGE,
                patch_size=2,
                embed_dim=16,
                depths=[1, 1],
                num_heads=[2, 4],
                window_size=4,
                num_labels=10,
            ),
            _pixels(),
        ),
        S(
            "convnext",
            "vision",
            _hf(
                "ConvNextConfig",
                "ConvNextForImageClassification",
                num_stages=2,
                hidden_sizes=[16, 32],
                depths=[1, 1],
                num_labels=10,
            ),
            _pixels(),
        ),
        S(
            "resnet",
            "vision",
            _hf(
                "ResNetConfig",
                "ResNetForImageClassification",
                embedding_size=16,
                hidden_sizes=[16, 32],
                depths=[1, 1],
                num_labels=10,
            ),
            _pixels(),
        ),
        S(
            "regnet",
            "vision",
            _hf(
                "RegNetConfig",
                "RegNetForImageClassification",
                embedding_size=16,
                hidden_sizes=[16, 32],
                depths=[1, 1],
                groups_width=8,
                num_labels=10,
            ),
            _pixels(),
        ),
        S(
            "mobilevit",
            "vision",
            _hf(
                "MobileViTConfig",
                "MobileViTForImageClassification",
                image_size=IMAGE,
                patch_size=2,
                hidden_sizes=[32, 32, 32],
                neck_hidden_sizes=[8, 8, 16, 16, 16, 32, 64],
                num_attention_heads=4,
                num_labels=10,
                initializer_range=0.5,
            ),
            _pixels(),
        ),
        S(
            "clip",
            "vision",
            _hf(
                "CLIPConfig",
                "CLIPModel",
                text_config=dict(
                    vocab_size=VOCAB,
                    hidden_size=32,
                    intermediate_size=64,
                    num_hidden_layers=2,
                    num_attention_heads=4,
                    max_position_embeddings=64,
                ),
                vision_config=dict(
                    image_size=IMAGE,
                    patch_size=8,
                    hidden_size=32,
                    intermediate_size=64,
                    num_hidden_layers=2,
                    num_attention_heads=4,
                ),
                projection_dim=16,
            ),
            lambda: {"input_ids": _ids(), "pixel_values": _pixels(batch=1)()["pixel_values"]},
        ),
        S(
            "segformer",
            "vision",
            _hf(
                "SegformerConfig",
                "SegformerForSemanticSegmentation",
                num_encoder_blocks=2,
                depths=[1, 1],
                sr_ratios=[2, 1],
                hidden_sizes=[16, 32],
                patch_sizes=[7, 3],
                strides=[4, 2],
                num_attention_heads=[1, 2],
                mlp_ratios=[2, 2],
                decoder_hidden_size=32,
                num_labels=5,
            ),
            _pixels(),
        ),
        # --- audio ---
        S(
            "wav2vec2",
            "audio",
            _hf(
                "Wav2Vec2Config",
                "Wav2Vec2ForCTC",
                vocab_size=32,
                hidden_size=32,
                num_hidden_layers=2,
                num_attention_heads=4,
                intermediate_size=64,
                conv_dim=(16, 16),
                conv_stride=(5, 2),
                conv_kernel=(10, 3),
                num_conv_pos_embeddings=16,
                num_conv_pos_embedding_groups=4,
                do_stable_layer_norm=True,
            ),
            lambda: {"input_values": torch.randn(1, 400, generator=torch.Generator().manual_seed(0))},
        ),
    ]


def _tv(name: str, **kwargs):
    def build():
        import torchvision

        torch.manual_seed(0)
        return _randomize_zero_weights(getattr(torchvision.models, name)(weights=None, **kwargs).eval())

    return build


def _tv_specs() -> list[ModelSpec]:
    def px():
        return {"x": _pixels(size=TV_IMAGE)()["pixel_values"]}

    def S(name, **kw):
        return ModelSpec(f"tv_{name}", "torchvision", _tv(name, num_classes=10, **kw), px)

    return [
        S("resnet18"),
        S("resnet50"),
        S("resnext50_32x4d"),
        S("mobilenet_v2"),
        S("mobilenet_v3_small"),
        S("efficientnet_b0"),
        S("convnext_tiny"),
        S("regnet_y_400mf"),
        S("shufflenet_v2_x0_5"),
        S("squeezenet1_1"),
        S("mnasnet0_5"),
        S("densenet121"),
        S("googlenet", aux_logits=False, init_weights=True),
        S("swin_t"),
        ModelSpec("tv_vit_b_16", "torchvision", _tv("vit_b_16", image_size=TV_IMAGE, num_classes=10), px),
    ]


def _lm_masked_inputs():
    ids = _ids()
    mask = torch.ones_like(ids)
    mask[1, :2] = 0  # a left-padded second row, as batched generation pads
    return {"input_ids": ids, "attention_mask": mask}


# Decoders that also run with transformers' eager attention (attn_implementation="eager":
# KV heads repeated by transformers, softmax written out) besides the default SDPA.
EAGER_ATTENTION = ("llama", "qwen2", "gpt2", "mistral")


def _with_attention(build, implementation: str):
    def rebuilt():
        model = build()
        model.config._attn_implementation = implementation
        return model

    return rebuilt


def _decoder_variants(specs: list[ModelSpec]) -> list[ModelSpec]:
    """Every decoder without an attention mask (transformers' default SDPA path then calls
    `scaled_dot_product_attention(..., is_causal=True, enable_gqa=True)` for grouped-query
    configs) and with a padded one (`+mask`: the mask is materialised and KV heads are
    repeated by transformers); a few also with eager attention (`+eager_attn`)."""
    out = []
    for spec in specs:
        out.append(spec)
        if spec.family != "decoder":
            continue
        out.append(dataclasses.replace(spec, name=f"{spec.name}+mask", inputs=_lm_masked_inputs))
        if spec.name in EAGER_ATTENTION:
            out.append(
                dataclasses.replace(spec, name=f"{spec.name}+eager_attn", build=_with_attention(spec.build, "eager"))
            )
    return out


ALL: list[ModelSpec] = _decoder_variants(_hf_specs()) + _tv_specs()
BY_NAME = {s.name: s for s in ALL}

# Run by `make test` (small, deterministic, one per family and the ops each family brings).
SUBSET = ["llama", "llama+mask", "llama+eager_attn", "qwen2", "gpt2", "bert", "t5", "vit", "tv_resnet18"]
# Models that also take one training step in the zoo (loss + gradients vs eager).
TRAIN = {
    "llama",
    "gpt2",
    "bert",
    "t5",
    "vit",
    "tv_resnet18",
    "tv_mobilenet_v3_small",
    "qwen2",
    "distilbert",
    "convnext",
    "mixtral",
    "qwen3_moe",
    "whisper",
    "swin",
}
