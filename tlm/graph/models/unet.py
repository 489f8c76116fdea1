"""Plain-PyTorch encoder-decoder models of the zoo: a U-Net (transposed-conv up-sampling, concatenated
skips) and a Stable-Diffusion-VAE-style decoder (group norm, SiLU, nearest up-sampling, one
self-attention block over the latent grid). Weights are random (PyTorch's default init).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


# ---------------------------------------------------------------- U-Net (Ronneberger et al.)
def _double_conv(cin: int, cout: int) -> nn.Sequential:
    """Two 3x3 conv + BatchNorm + ReLU."""
    return nn.Sequential(
        nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True),
        nn.Conv2d(cout, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True),
    )


class UNet(nn.Module):
    """U-Net with `levels` down-samplings: encoder widths width * 2^i, 2x2 max pooling, a bottleneck at
    width * 2^levels, ConvTranspose2d(k=2, stride=2) up-sampling, torch.cat skips, a 1x1 head.
    [N, cin, H, W] -> [N, classes, H, W] (H, W divisible by 2^levels)."""

    def __init__(self, cin: int = 3, classes: int = 2, width: int = 32, levels: int = 3):
        super().__init__()
        widths = [width * 2**i for i in range(levels + 1)]
        self.down = nn.ModuleList()
        c = cin
        for w in widths[:-1]:
            self.down.append(_double_conv(c, w))
            c = w
        self.mid = _double_conv(c, widths[-1])
        self.ups = nn.ModuleList()
        self.dec = nn.ModuleList()
        for w in reversed(widths[:-1]):
            self.ups.append(nn.ConvTranspose2d(2 * w, w, 2, stride=2))
            self.dec.append(_double_conv(2 * w, w))
        self.head = nn.Conv2d(width, classes, 1)

    def forward(self, x):
        skips = []
        for block in self.down:
            x = block(x)
            skips.append(x)
            x = F.max_pool2d(x, 2)
        x = self.mid(x)
        for up, dec, skip in zip(self.ups, self.dec, reversed(skips)):
            x = dec(torch.cat([up(x), skip], dim=1))
        return self.head(x)


# ---------------------------------------------------------------- VAE decoder (Stable Diffusion style)
class _ResBlock(nn.Module):
    """x + conv(silu(gn(conv(silu(gn(x)))))), a 1x1 conv on the shortcut when channels change."""

    def __init__(self, cin: int, cout: int):
        super().__init__()
        self.norm1, self.conv1 = nn.GroupNorm(32, cin, eps=1e-6), nn.Conv2d(cin, cout, 3, padding=1)
        self.norm2, self.conv2 = nn.GroupNorm(32, cout, eps=1e-6), nn.Conv2d(cout, cout, 3, padding=1)
        self.skip = nn.Conv2d(cin, cout, 1) if cin != cout else nn.Identity()

    def forward(self, x):
        h = self.conv1(F.silu(self.norm1(x)))
        h = self.conv2(F.silu(self.norm2(h)))
        return self.skip(x) + h


class _Attention(nn.Module):
    """Single-head self-attention over the H*W positions of a feature map, with a residual."""

    def __init__(self, c: int):
        super().__init__()
        self.norm = nn.GroupNorm(32, c, eps=1e-6)
        self.q, self.k, self.v, self.out = (nn.Linear(c, c) for _ in range(4))
        self.scale = c ** -0.5

    def forward(self, x):
        n, c, h, w = x.shape
        t = self.norm(x).reshape(n, c, h * w).transpose(1, 2)  # [N, HW, C]
        att = torch.softmax(self.q(t) @ self.k(t).transpose(1, 2) * self.scale, dim=-1)
        y = self.out(att @ self.v(t))
        return x + y.transpose(1, 2).reshape(n, c, h, w)


class _Upsample(nn.Module):
    """Nearest-neighbour x2 then a 3x3 conv."""

    def __init__(self, c: int):
        super().__init__()
        self.conv = nn.Conv2d(c, c, 3, padding=1)

    def forward(self, x):
        return self.conv(F.interpolate(x, scale_factor=2.0, mode="nearest"))


class VAEDecoder(nn.Module):
    """The Stable Diffusion VAE decoder's layout, narrower and with one residual block per level:
    conv_in, mid (res, attention, res), then per level of `channels` a residual block and (but for
    the last) a x2 up-sampling, then GroupNorm + SiLU + conv_out.
    Latent [N, 4, s, s] -> image [N, 3, s * 2^(len(channels) - 1), ...]."""

    def __init__(self, latent: int = 4, channels: tuple[int, ...] = (256, 128, 64, 32), out: int = 3):
        super().__init__()
        c = channels[0]
        self.conv_in = nn.Conv2d(latent, c, 3, padding=1)
        self.mid = nn.Sequential(_ResBlock(c, c), _Attention(c), _ResBlock(c, c))
        blocks = []
        for i, cout in enumerate(channels):
            blocks.append(_ResBlock(c, cout))
            if i < len(channels) - 1:
                blocks.append(_Upsample(cout))
            c = cout
        self.up = nn.Sequential(*blocks)
        self.norm_out = nn.GroupNorm(32, c, eps=1e-6)
        self.conv_out = nn.Conv2d(c, out, 3, padding=1)

    def forward(self, z):
        h = self.up(self.mid(self.conv_in(z)))
        return self.conv_out(F.silu(self.norm_out(h)))
