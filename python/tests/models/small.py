"""The small models of the backend tests (also used by benches/passes_effect.py): an MLP, a
pre-norm transformer block with nn.MultiheadAttention, hand-written causal attention next to
SDPA, and a CNN with BatchNorm, grouped strided convolution and max-pool."""

import torch
import torch.nn.functional as F
from torch import nn


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(12, 32), nn.GELU(), nn.LayerNorm(32), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 5)
        )

    def forward(self, x):
        return self.net(x)


class MHABlock(nn.Module):
    """A pre-norm transformer block with nn.MultiheadAttention."""

    def __init__(self, d=16, heads=2):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.ff = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x):
        h = self.ln1(x)
        a, _ = self.attn(h, h, h, need_weights=False)
        x = x + a
        return x + self.ff(self.ln2(x))


class HandAttention(nn.Module):
    """Attention written out by hand, with a causal mask, plus SDPA for comparison."""

    def __init__(self, d=16, heads=2):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.out = nn.Linear(d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=-1)
        split = lambda z: z.view(b, t, self.heads, d // self.heads).transpose(1, 2)
        q, k, v = split(q), split(k), split(v)
        scores = q @ k.transpose(-2, -1) / (d // self.heads) ** 0.5
        causal = torch.ones(t, t, dtype=torch.bool).tril()
        scores = scores.masked_fill(~causal, float("-inf"))
        manual = scores.softmax(-1) @ v
        fused = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        y = (manual + fused).transpose(1, 2).reshape(b, t, d)
        return self.out(y)


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.c2 = nn.Conv2d(8, 8, 3, stride=2, groups=2)
        self.bn2 = nn.BatchNorm2d(8)
        self.pool = nn.MaxPool2d(2)
        self.fc = nn.Linear(8 * 1 * 1, 4)

    def forward(self, x):
        x = self.pool(F.relu(self.bn1(self.c1(x))))
        x = F.relu(self.bn2(self.c2(x)))
        return self.fc(torch.flatten(x.mean((2, 3), keepdim=True), 1))
