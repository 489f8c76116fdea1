"""A plain-PyTorch conv1d audio encoder for the zoo's training tasks (issue 48): narrow strided,
dilated, pointwise and depthwise Conv1d layers over raw audio, the kinds of conv1d that audio front
ends and temporal conv nets use and that wav2vec 2.0's 512-channel stack does not cover. Weights are
random (PyTorch's default init).
"""

from __future__ import annotations

from torch import nn

# (in channels, out channels, kernel, stride, dilation, groups): every layer a different conv1d task.
LAYERS = (
    (48, 64, 5, 2, 1, 1),
    (64, 64, 3, 1, 2, 1),
    (64, 96, 3, 2, 1, 1),
    (96, 96, 15, 1, 1, 96),  # depthwise, as in Conformer's convolution module
    (96, 96, 1, 1, 1, 1),  # pointwise
    (96, 128, 5, 2, 1, 1),
    (128, 128, 3, 1, 4, 1),
    (128, 128, 7, 1, 1, 128),  # depthwise
    (128, 160, 2, 2, 1, 1),
)


class Conv1dEncoder(nn.Module):
    """Raw audio [N, L] -> Conv1d(1, 48, k7, s4) + GELU -> LAYERS, each Conv1d (+ BatchNorm if depthwise) + GELU
    (length-preserving layers add their input back) -> [N, 160, ~L / 64]."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv1d(1, 48, 7, stride=4, padding=3), nn.GELU())
        self.layers = nn.ModuleList()
        self.residual = []
        for cin, cout, k, s, d, g in LAYERS:
            pad = d * (k - 1) // 2 if s == 1 else 0
            conv = nn.Conv1d(cin, cout, k, stride=s, padding=pad, dilation=d, groups=g)
            # BatchNorm after the depthwise layers only (Conformer's pattern); conv + bias + GELU elsewhere
            self.layers.append(nn.Sequential(conv, nn.BatchNorm1d(cout), nn.GELU()) if g > 1
                               else nn.Sequential(conv, nn.GELU()))
            self.residual.append(cin == cout and s == 1 and d * (k - 1) % 2 == 0)

    def forward(self, x):
        h = self.stem(x.unsqueeze(1))
        for layer, res in zip(self.layers, self.residual):
            h = h + layer(h) if res else layer(h)
        return h
