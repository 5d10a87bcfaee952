"""Causal, per-document attention with `F.scaled_dot_product_attention` and a dense mask.

TorchTitan 0.3 gives language models two masked attention backends, and neither runs here:
- "flex" calls `torch.compile(flex_attention)` (Inductor) and `flex_attention` itself refuses a
  CPU tensor that needs a gradient ("FlexAttention does not support backward on CPU") and a tpu
  tensor unless torchtpu lifts PyTorch's device check ("only supported on CUDA, CPU, HPU, or MPS
  devices");
- "varlen" calls the CUDA flash-attention kernel (`varlen_attn`, bf16 only);
and it refuses "sdpa" for language models (`get_attention_config`: SDPA takes no per-document
positions). This module is a `VarlenAttention` to TorchTitan, so the decoder builds it the same
varlen metadata (`cu_seq_q`: where each packed document starts), but it runs plain SDPA on a
boolean mask (same document and causal) built from that metadata with elementwise ops: the
same attention as "varlen"/"flex" compute, on any device, in fp32 or bf16.
"""

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torchtitan.models.common.attention import VarlenAttention, VarlenMetadata


class DocumentCausalSDPA(VarlenAttention):
    @dataclass(kw_only=True, slots=True)
    class Config(VarlenAttention.Config):
        pass  # window_size: only (-1, 0), causal over the whole document

    def __init__(self, config: Config) -> None:
        super(VarlenAttention, self).__init__()  # not VarlenAttention's flash-attention setup
        if tuple(config.window_size) != (-1, 0):
            raise ValueError(f"DocumentCausalSDPA is causal only, got window_size={config.window_size}")
        self.window_size = config.window_size

    def forward(
        self,
        q_BLNH: torch.Tensor,
        k_BLNH: torch.Tensor,
        v_BLNH: torch.Tensor,
        *,
        attention_masks: VarlenMetadata,
        scale: float | None = None,
        out_transform=None,
        enable_gqa: bool = False,
        **kwargs,
    ) -> torch.Tensor:
        if out_transform is not None:
            raise NotImplementedError("DocumentCausalSDPA returns no log-sum-exp (out_transform)")
        B, L = q_BLNH.shape[:2]
        device = q_BLNH.device
        # Document index of each packed token (B*L of them): how many documents start at or before it.
        starts = attention_masks.cu_seq_q[:-1].to(device)
        token = torch.arange(B * L, device=device, dtype=starts.dtype)
        doc = (token[:, None] >= starts[None, :]).sum(dim=1).view(B, L)
        pos = torch.arange(L, device=device)
        mask = (doc[:, :, None] == doc[:, None, :]) & (pos[:, None] >= pos[None, :])  # (B, Lq, Lk)
        out_BNLH = F.scaled_dot_product_attention(
            q_BLNH.transpose(1, 2),
            k_BLNH.transpose(1, 2),
            v_BLNH.transpose(1, 2),
            attn_mask=mask[:, None],
            scale=scale,
            enable_gqa=enable_gqa,
        )
        return out_BNLH.transpose(1, 2)


def use_document_causal_sdpa(model_config) -> None:
    """Swap every layer's inner attention config (flex by default) for DocumentCausalSDPA's."""
    from torchtitan.models.common.attention import FlexAttention

    swapped = 0
    for _fqn, _cfg, parent, attr in list(model_config.traverse((FlexAttention.Config, VarlenAttention.Config))):
        new = DocumentCausalSDPA.Config()
        if isinstance(parent, list):
            parent[attr] = new
        else:
            setattr(parent, attr, new)
        swapped += 1
    if not swapped:
        raise ValueError("no FlexAttention/VarlenAttention config found to swap")
