"""Plain-PyTorch models of the outside-zoo battery, second batch (2026-12-02): recurrent,
masked-attention, encoder-decoder, pixel-shuffle, graph and batched models (bench/outside_models.py
lists them). Each forward returns one float tensor.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class BiGRU(nn.Module):
    """Bidirectional nn.GRU (2 layers, hidden 64) over float features, a Linear per step."""

    def __init__(self, cin: int = 40, hidden: int = 64):
        super().__init__()
        self.gru = nn.GRU(cin, hidden, num_layers=2, batch_first=True, bidirectional=True)
        self.fc = nn.Linear(2 * hidden, 10)

    def forward(self, x):
        return self.fc(self.gru(x)[0])


class PaddedAttention(nn.Module):
    """nn.MultiheadAttention with a key padding mask computed from the input (positions whose
    features sum below zero are padding), then a residual LayerNorm: boolean masks in the graph."""

    def __init__(self, dim: int = 64, heads: int = 4):
        super().__init__()
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.norm = nn.LayerNorm(dim)

    def forward(self, x):  # (1, S, dim)
        pad = x.sum(-1) < 0
        pad[:, 0] = False  # every row keeps one key
        y, _ = self.attn(x, x, x, key_padding_mask=pad, need_weights=False)
        return self.norm(x + y)


class Seq2SeqTransformer(nn.Module):
    """nn.Transformer (1 encoder + 1 decoder layer, d 64) on one (1, 40, 64) input: source = the
    input, target = its first 24 steps, with the causal mask nn.Transformer makes."""

    def __init__(self, dim: int = 64):
        super().__init__()
        self.model = nn.Transformer(dim, 4, num_encoder_layers=1, num_decoder_layers=1, dim_feedforward=128,
                                    batch_first=True, dropout=0.0)

    def forward(self, x):
        tgt = x[:, :24]
        mask = nn.Transformer.generate_square_subsequent_mask(24)
        return self.model(x, tgt, tgt_mask=mask, tgt_is_causal=True)


class ESPCN(nn.Module):
    """Sub-pixel super-resolution (ESPCN): 5x5 and 3x3 convs with tanh, then PixelShuffle x3."""

    def __init__(self, scale: int = 3):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(1, 64, 5, padding=2), nn.Tanh(), nn.Conv2d(64, 32, 3, padding=1),
                                  nn.Tanh(), nn.Conv2d(32, scale * scale, 3, padding=1))
        self.shuffle = nn.PixelShuffle(scale)

    def forward(self, x):
        return torch.sigmoid(self.shuffle(self.body(x)))


class GraphConv(nn.Module):
    """Two rounds of message passing on a fixed random graph (60 nodes, 240 edges): gather the
    source nodes' features, scatter-add them into the targets (index_add_), degree-normalise."""

    def __init__(self, dim: int = 32, nodes: int = 60, edges: int = 240):
        super().__init__()
        gen = torch.Generator().manual_seed(1)
        self.register_buffer("src", torch.randint(0, nodes, (edges,), generator=gen))
        self.register_buffer("dst", torch.randint(0, nodes, (edges,), generator=gen))
        self.lin1 = nn.Linear(dim, dim)
        self.lin2 = nn.Linear(dim, dim)

    def _propagate(self, h):  # (nodes, dim)
        msg = h.index_select(0, self.src)
        out = torch.zeros_like(h).index_add_(0, self.dst, msg)
        deg = torch.zeros(h.shape[0], 1).index_add_(0, self.dst, torch.ones(self.dst.shape[0], 1))
        return out / deg.clamp(min=1)

    def forward(self, x):  # (nodes, dim)
        h = F.relu(self.lin1(self._propagate(x)))
        return self.lin2(self._propagate(h)) + x


class BatchedCNN(nn.Module):
    """A small CNN at batch 4 with channels_last weights: strided convs, BN, hardswish, global
    average pool, then log_softmax over 10 classes."""

    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(3, 24, 3, stride=2, padding=1), nn.BatchNorm2d(24), nn.Hardswish(),
                                  nn.Conv2d(24, 48, 3, stride=2, padding=1), nn.BatchNorm2d(48), nn.Hardswish(),
                                  nn.Conv2d(48, 96, 3, stride=2, padding=1), nn.BatchNorm2d(96), nn.Hardswish())
        self.fc = nn.Linear(96, 10)
        self.to(memory_format=torch.channels_last)

    def forward(self, x):
        return F.log_softmax(self.fc(self.body(x).mean((2, 3))), dim=-1)
