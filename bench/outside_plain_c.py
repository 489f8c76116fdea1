"""Plain-PyTorch models of the outside-zoo battery, third batch (2026-12-02): whole models users
run on CPUs that the first two batches covered only operator by operator: fast neural style
transfer, a HiFi-GAN vocoder and a YOLO-style detector (bench/outside_models.py lists them).
Each forward returns one float tensor.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.parametrizations import weight_norm


# ------------------------------------------------------------------ fast neural style (Johnson et al.)
class _ConvIN(nn.Module):
    """ReflectionPad2d + Conv2d + InstanceNorm2d(affine), as PyTorch's fast-neural-style example."""

    def __init__(self, cin: int, cout: int, k: int, stride: int = 1, upsample: int = 0, norm: bool = True):
        super().__init__()
        self.upsample = upsample
        self.pad = nn.ReflectionPad2d(k // 2)
        self.conv = nn.Conv2d(cin, cout, k, stride)
        self.norm = nn.InstanceNorm2d(cout, affine=True) if norm else None

    def forward(self, x):
        if self.upsample:
            x = F.interpolate(x, scale_factor=self.upsample, mode="nearest")
        x = self.conv(self.pad(x))
        return self.norm(x) if self.norm is not None else x


class StyleTransfer(nn.Module):
    """TransformerNet of PyTorch's fast-neural-style example at width 16 (the original: 32): 9x9
    and strided 3x3 convs with reflection padding and instance norm, 2 residual blocks, nearest
    upsampling convs back to RGB; (1, 3, 64, 64) -> (1, 3, 64, 64)."""

    def __init__(self, w: int = 16):
        super().__init__()
        self.down = nn.ModuleList([_ConvIN(3, w, 9), _ConvIN(w, 2 * w, 3, 2), _ConvIN(2 * w, 4 * w, 3, 2)])
        self.res = nn.ModuleList([nn.ModuleList([_ConvIN(4 * w, 4 * w, 3), _ConvIN(4 * w, 4 * w, 3)]) for _ in range(2)])
        self.up = nn.ModuleList([_ConvIN(4 * w, 2 * w, 3, upsample=2), _ConvIN(2 * w, w, 3, upsample=2)])
        self.out = _ConvIN(w, 3, 9, norm=False)

    def forward(self, x):
        for m in self.down:
            x = F.relu(m(x))
        for a, b in self.res:
            x = x + b(F.relu(a(x)))
        for m in self.up:
            x = F.relu(m(x))
        return self.out(x)


# ------------------------------------------------------------------ HiFi-GAN generator (V3-like, small)
class _ResBlock(nn.Module):
    """HiFi-GAN's ResBlock2: weight-normed dilated Conv1d (dilations 1, 3) with leaky ReLU, residual."""

    def __init__(self, ch: int, k: int = 3, dilations: tuple[int, ...] = (1, 3)):
        super().__init__()
        self.convs = nn.ModuleList([weight_norm(nn.Conv1d(ch, ch, k, dilation=d, padding=d * (k - 1) // 2))
                                    for d in dilations])

    def forward(self, x):
        for c in self.convs:
            x = x + c(F.leaky_relu(x, 0.1))
        return x


class HiFiGAN(nn.Module):
    """HiFi-GAN generator (V3-like) at width 64: a weight-normed Conv1d of 80 mel bins, upsampling
    by weight-normed ConvTranspose1d (8x, 8x, 4x), a dilated residual block after each, tanh;
    (1, 80, 32) mel frames -> (1, 1, 8192) samples."""

    def __init__(self, mels: int = 80, ch: int = 64, rates: tuple[int, ...] = (8, 8, 4)):
        super().__init__()
        self.pre = weight_norm(nn.Conv1d(mels, ch, 7, padding=3))
        self.ups, self.blocks = nn.ModuleList(), nn.ModuleList()
        for i, r in enumerate(rates):
            cin, cout = ch // 2**i, ch // 2 ** (i + 1)
            self.ups.append(weight_norm(nn.ConvTranspose1d(cin, cout, 2 * r, r, padding=r // 2)))
            self.blocks.append(_ResBlock(cout))
        self.post = weight_norm(nn.Conv1d(ch // 2 ** len(rates), 1, 7, padding=3))

    def forward(self, x):
        x = self.pre(x)
        for up, block in zip(self.ups, self.blocks):
            x = block(up(F.leaky_relu(x, 0.1)))
        return torch.tanh(self.post(F.leaky_relu(x)))


# ------------------------------------------------------------------ YOLO-style detector (v5/v8-like, tiny)
class _CBS(nn.Module):
    """Conv2d (no bias) + BatchNorm2d + SiLU."""

    def __init__(self, cin: int, cout: int, k: int = 1, s: int = 1):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, k, s, k // 2, bias=False)
        self.bn = nn.BatchNorm2d(cout)
        with torch.no_grad():  # trained-like statistics: activations stay near unit scale through the net
            self.bn.running_mean.uniform_(-0.1, 0.1)
            self.bn.running_var.uniform_(0.12, 0.2)
            self.bn.weight.uniform_(0.8, 1.2)
            self.bn.bias.uniform_(-0.1, 0.1)

    def forward(self, x):
        return F.silu(self.bn(self.conv(x)))


class _C2f(nn.Module):
    """YOLOv8's C2f: split the 1x1 conv's channels in two, a chain of bottlenecks on one half,
    concatenate every stage, 1x1 conv."""

    def __init__(self, cin: int, cout: int, n: int = 1):
        super().__init__()
        self.c = cout // 2
        self.cv1 = _CBS(cin, 2 * self.c)
        self.m = nn.ModuleList([nn.Sequential(_CBS(self.c, self.c, 3), _CBS(self.c, self.c, 3)) for _ in range(n)])
        self.cv2 = _CBS((2 + n) * self.c, cout)

    def forward(self, x):
        y = list(self.cv1(x).chunk(2, 1))
        for m in self.m:
            y.append(y[-1] + m(y[-1]))
        return self.cv2(torch.cat(y, 1))


class _SPPF(nn.Module):
    """Spatial pyramid pooling, fast: three chained 5x5 stride-1 max pools, concatenated."""

    def __init__(self, c: int):
        super().__init__()
        self.cv1, self.cv2 = _CBS(c, c // 2), _CBS(2 * c, c)

    def forward(self, x):
        x = self.cv1(x)
        y1 = F.max_pool2d(x, 5, 1, 2)
        y2 = F.max_pool2d(y1, 5, 1, 2)
        return self.cv2(torch.cat([x, y1, y2, F.max_pool2d(y2, 5, 1, 2)], 1))


class TinyYOLO(nn.Module):
    """A YOLOv8-style detector at width 16 on a (1, 3, 96, 96) image: strided Conv-BN-SiLU stem,
    C2f stages, SPPF, an FPN neck (nearest upsampling, concatenation) and a head whose two scales'
    box and class maps are flattened and concatenated: (1, 4 + 8 classes, 36 + 144 anchors)."""

    def __init__(self, w: int = 16, classes: int = 8):
        super().__init__()
        self.stem = nn.Sequential(_CBS(3, w, 3, 2), _CBS(w, 2 * w, 3, 2), _C2f(2 * w, 2 * w))
        self.p3 = nn.Sequential(_CBS(2 * w, 4 * w, 3, 2), _C2f(4 * w, 4 * w))  # stride 8
        self.p4 = nn.Sequential(_CBS(4 * w, 8 * w, 3, 2), _C2f(8 * w, 8 * w), _SPPF(8 * w))  # stride 16
        self.top = _C2f(12 * w, 4 * w)
        self.head3 = nn.Conv2d(4 * w, 4 + classes, 1)
        self.head4 = nn.Conv2d(8 * w, 4 + classes, 1)

    def forward(self, x):
        p3 = self.p3(self.stem(x))
        p4 = self.p4(p3)
        t = self.top(torch.cat([F.interpolate(p4, scale_factor=2.0, mode="nearest"), p3], 1))
        out = torch.cat([self.head4(p4).flatten(2), self.head3(t).flatten(2)], 2)
        return torch.cat([out[:, :4], out[:, 4:].sigmoid()], 1)
