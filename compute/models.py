"""Small models that build offline: an MLP and a tiny transformer classifier.

They serve the demo and the tests (nothing is downloaded); a real deployment plugs in its
own models behind the same runner interface.
"""

from __future__ import annotations

import torch
from torch import nn

from compute.errors import InvalidJob


class MLP(nn.Module):
    """A classifier over dense features."""

    def __init__(self, in_features: int = 16, hidden: int = 64, classes: int = 4) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(in_features, hidden),
            nn.ReLU(),
            nn.Linear(hidden, hidden),
            nn.ReLU(),
            nn.Linear(hidden, classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class Block(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(dim)
        self.q_proj = nn.Linear(dim, dim)
        self.k_proj = nn.Linear(dim, dim)
        self.v_proj = nn.Linear(dim, dim)
        self.out_proj = nn.Linear(dim, dim)
        self.norm2 = nn.LayerNorm(dim)
        self.ff_in = nn.Linear(dim, 2 * dim)
        self.ff_out = nn.Linear(2 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        h = self.norm1(x)
        q, k, v = (p(h).view(b, t, self.heads, d // self.heads).transpose(1, 2)
                   for p in (self.q_proj, self.k_proj, self.v_proj))
        attn = torch.softmax(q @ k.transpose(-2, -1) / (d // self.heads) ** 0.5, dim=-1)
        x = x + self.out_proj((attn @ v).transpose(1, 2).reshape(b, t, d))
        return x + self.ff_out(torch.relu(self.ff_in(self.norm2(x))))


class TinyTransformer(nn.Module):
    """A sequence classifier over token ids; LoRA targets its attention projections."""

    def __init__(self, vocab: int = 64, dim: int = 32, heads: int = 4, layers: int = 2, seq_len: int = 16,
                 classes: int = 4) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.pos = nn.Parameter(torch.zeros(1, seq_len, dim))
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, classes)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens) + self.pos[:, : tokens.shape[1]]
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x).mean(dim=1))


MODELS = {"mlp": MLP, "tiny-transformer": TinyTransformer}


def build_model(name: str, **config: int) -> nn.Module:
    try:
        factory = MODELS[name]
    except KeyError:
        raise InvalidJob(f"unknown model {name!r}; choose one of {', '.join(sorted(MODELS))}.") from None
    return factory(**config)
