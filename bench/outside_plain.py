"""Plain-PyTorch models of the outside-zoo battery (bench/outside_models.py lists them).

Small, self-contained definitions of common architectures that are not in tlm's zoo; each forward
returns one float tensor.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def _conv_bn_relu(cin: int, cout: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU())


class UNet(nn.Module):
    """Two-level U-Net: double 3x3 convs, max pool, ConvTranspose2d(k=2, s=2) up, torch.cat skips."""

    def __init__(self, cin: int = 3, classes: int = 2, width: int = 16):
        super().__init__()
        w = width
        self.enc1 = nn.Sequential(_conv_bn_relu(cin, w), _conv_bn_relu(w, w))
        self.enc2 = nn.Sequential(_conv_bn_relu(w, 2 * w), _conv_bn_relu(2 * w, 2 * w))
        self.mid = nn.Sequential(_conv_bn_relu(2 * w, 4 * w), _conv_bn_relu(4 * w, 4 * w))
        self.up2 = nn.ConvTranspose2d(4 * w, 2 * w, 2, stride=2)
        self.dec2 = nn.Sequential(_conv_bn_relu(4 * w, 2 * w), _conv_bn_relu(2 * w, 2 * w))
        self.up1 = nn.ConvTranspose2d(2 * w, w, 2, stride=2)
        self.dec1 = nn.Sequential(_conv_bn_relu(2 * w, w), _conv_bn_relu(w, w))
        self.head = nn.Conv2d(w, classes, 1)

    def forward(self, x):
        e1 = self.enc1(x)
        e2 = self.enc2(F.max_pool2d(e1, 2))
        m = self.mid(F.max_pool2d(e2, 2))
        d2 = self.dec2(torch.cat([self.up2(m), e2], dim=1))
        d1 = self.dec1(torch.cat([self.up1(d2), e1], dim=1))
        return self.head(d1)


class ChannelLayerNorm(nn.Module):
    """LayerNorm over the channels of an NCHW tensor, by permuting to NHWC and back."""

    def __init__(self, c: int):
        super().__init__()
        self.norm = nn.LayerNorm(c, eps=1e-6)

    def forward(self, x):
        return self.norm(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


class ConvNeXtBlock(nn.Module):
    def __init__(self, c: int):
        super().__init__()
        self.dw = nn.Conv2d(c, c, 7, padding=3, groups=c)
        self.norm = nn.LayerNorm(c, eps=1e-6)
        self.fc1 = nn.Linear(c, 4 * c)
        self.fc2 = nn.Linear(4 * c, c)
        self.gamma = nn.Parameter(torch.full((c,), 0.5))

    def forward(self, x):
        y = self.dw(x).permute(0, 2, 3, 1)
        y = self.fc2(F.gelu(self.fc1(self.norm(y))))
        return x + (self.gamma * y).permute(0, 3, 1, 2)


class ConvNeXtCNN(nn.Module):
    """ConvNeXt-style: 4x4/4 stem, depthwise 7x7 blocks with NHWC LayerNorm + GELU MLP, 3 stages."""

    def __init__(self, dims=(32, 64, 96), depths=(1, 2, 1), classes: int = 10):
        super().__init__()
        layers: list[nn.Module] = [nn.Conv2d(3, dims[0], 4, stride=4), ChannelLayerNorm(dims[0])]
        for i, (c, d) in enumerate(zip(dims, depths)):
            if i:
                layers += [ChannelLayerNorm(dims[i - 1]), nn.Conv2d(dims[i - 1], c, 2, stride=2)]
            layers += [ConvNeXtBlock(c) for _ in range(d)]
        self.features = nn.Sequential(*layers)
        self.norm = nn.LayerNorm(dims[-1], eps=1e-6)
        self.head = nn.Linear(dims[-1], classes)

    def forward(self, x):
        return self.head(self.norm(self.features(x).mean(dim=(2, 3))))


class Conv1dAudioEncoder(nn.Module):
    """Raw waveform -> strided Conv1d stack with GELU -> one TransformerEncoderLayer."""

    def __init__(self, dim: int = 64):
        super().__init__()
        self.convs = nn.Sequential(
            nn.Conv1d(1, 32, 10, stride=5), nn.GELU(),
            nn.Conv1d(32, dim, 3, stride=2), nn.GELU(),
            nn.Conv1d(dim, dim, 3, stride=2), nn.GELU(),
            nn.Conv1d(dim, dim, 3, stride=2), nn.GELU(),
            nn.Conv1d(dim, dim, 2, stride=2), nn.GELU(),
        )
        self.layer = nn.TransformerEncoderLayer(dim, 4, 2 * dim, dropout=0.0, activation="gelu",
                                                batch_first=True)

    def forward(self, wave):  # (1, samples)
        feats = self.convs(wave.unsqueeze(1)).transpose(1, 2)
        return self.layer(feats)


class MixerBlock(nn.Module):
    def __init__(self, tokens: int, dim: int):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.token_mlp = nn.Sequential(nn.Linear(tokens, 2 * tokens), nn.GELU(), nn.Linear(2 * tokens, tokens))
        self.norm2 = nn.LayerNorm(dim)
        self.channel_mlp = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))

    def forward(self, x):  # (B, tokens, dim)
        x = x + self.token_mlp(self.norm1(x).transpose(1, 2)).transpose(1, 2)
        return x + self.channel_mlp(self.norm2(x))


class MLPMixer(nn.Module):
    """MLP-Mixer: 8x8 patches of a 64x64 image, token-mixing and channel-mixing MLPs."""

    def __init__(self, image: int = 64, patch: int = 8, dim: int = 96, depth: int = 2, classes: int = 10):
        super().__init__()
        tokens = (image // patch) ** 2
        self.stem = nn.Conv2d(3, dim, patch, stride=patch)
        self.blocks = nn.Sequential(*[MixerBlock(tokens, dim) for _ in range(depth)])
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, classes)

    def forward(self, x):
        x = self.stem(x).flatten(2).transpose(1, 2)
        return self.head(self.norm(self.blocks(x)).mean(dim=1))


class GroupNormDecoder(nn.Module):
    """Latent (1, 64, 8, 8) -> 3x32x32 image: GroupNorm + SiLU convs, nearest x2 then bilinear x2."""

    def __init__(self, cin: int = 64):
        super().__init__()

        def block(a, b):
            return nn.Sequential(nn.Conv2d(a, b, 3, padding=1), nn.GroupNorm(8, b), nn.SiLU())

        self.b0 = block(cin, 64)
        self.b1 = block(64, 48)
        self.b2 = block(48, 32)
        self.out = nn.Conv2d(32, 3, 3, padding=1)

    def forward(self, z):
        x = self.b0(z)
        x = self.b1(F.interpolate(x, scale_factor=2, mode="nearest"))
        x = self.b2(F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=False))
        return torch.tanh(self.out(x))


class PlainTransformer(nn.Module):
    """torch.nn.TransformerEncoder, 2 layers, d_model 96, batch_first, on float features."""

    def __init__(self, dim: int = 96, layers: int = 2):
        super().__init__()
        layer = nn.TransformerEncoderLayer(dim, 4, 2 * dim, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)

    def forward(self, x):
        return self.encoder(x)


class PrimeMLP(nn.Module):
    """Linear(512, 1031) + ReLU: an output width that is prime."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(512, 1031)

    def forward(self, x):
        return F.relu(self.fc(x))


class DenseLayer(nn.Module):
    def __init__(self, cin: int, growth: int):
        super().__init__()
        self.body = nn.Sequential(
            nn.BatchNorm2d(cin), nn.ReLU(), nn.Conv2d(cin, 4 * growth, 1, bias=False),
            nn.BatchNorm2d(4 * growth), nn.ReLU(), nn.Conv2d(4 * growth, growth, 3, padding=1, bias=False))

    def forward(self, x):
        return torch.cat([x, self.body(x)], dim=1)


class DenseNetSmall(nn.Module):
    """Two DenseNet blocks (BN-ReLU-1x1-BN-ReLU-3x3, concatenated growth 12) with a transition."""

    def __init__(self, growth: int = 12, layers: int = 4, classes: int = 10):
        super().__init__()
        c = 24
        mods: list[nn.Module] = [nn.Conv2d(3, c, 3, stride=2, padding=1, bias=False)]
        for block in range(2):
            for _ in range(layers):
                mods.append(DenseLayer(c, growth))
                c += growth
            if block == 0:
                mods += [nn.BatchNorm2d(c), nn.ReLU(), nn.Conv2d(c, c // 2, 1, bias=False), nn.AvgPool2d(2)]
                c //= 2
        mods += [nn.BatchNorm2d(c), nn.ReLU()]
        self.features = nn.Sequential(*mods)
        self.head = nn.Linear(c, classes)

    def forward(self, x):
        return self.head(F.adaptive_avg_pool2d(self.features(x), 1).flatten(1))


class SqueezeExcite(nn.Module):
    def __init__(self, c: int, reduced: int):
        super().__init__()
        self.reduce = nn.Conv2d(c, reduced, 1)
        self.expand = nn.Conv2d(reduced, c, 1)

    def forward(self, x):
        s = F.adaptive_avg_pool2d(x, 1)
        return x * torch.sigmoid(self.expand(F.silu(self.reduce(s))))


class InvertedResidual(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int, expand: int = 4):
        super().__init__()
        mid = cin * expand
        self.use_res = stride == 1 and cin == cout
        self.body = nn.Sequential(
            nn.Conv2d(cin, mid, 1, bias=False), nn.BatchNorm2d(mid), nn.SiLU(),
            nn.Conv2d(mid, mid, 3, stride=stride, padding=1, groups=mid, bias=False), nn.BatchNorm2d(mid), nn.SiLU(),
            SqueezeExcite(mid, max(8, cin // 4)),
            nn.Conv2d(mid, cout, 1, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = self.body(x)
        return x + y if self.use_res else y


class MobileNetSE(nn.Module):
    """Depthwise-separable inverted residuals with SiLU and squeeze-excite (EfficientNet/MobileNetV3-like)."""

    def __init__(self, classes: int = 10):
        super().__init__()
        cfg = [(16, 24, 2), (24, 24, 1), (24, 40, 2), (40, 40, 1), (40, 64, 2)]
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(16), nn.SiLU())
        self.blocks = nn.Sequential(*[InvertedResidual(a, b, s) for a, b, s in cfg])
        self.head = nn.Sequential(nn.Conv2d(64, 128, 1), nn.SiLU())
        self.fc = nn.Linear(128, classes)

    def forward(self, x):
        x = self.head(self.blocks(self.stem(x)))
        return self.fc(x.mean(dim=(2, 3)))


class LSTMTagger(nn.Module):
    """nn.LSTM (2 layers, hidden 96) over float features, a Linear per step."""

    def __init__(self, cin: int = 48, hidden: int = 96):
        super().__init__()
        self.lstm = nn.LSTM(cin, hidden, num_layers=2, batch_first=True)
        self.fc = nn.Linear(hidden, 16)

    def forward(self, x):
        return self.fc(self.lstm(x)[0])


class EmbeddingBagModel(nn.Module):
    """Token ids -> nn.Embedding (per token) and nn.EmbeddingBag (mean over bags of 8) -> Linear."""

    def __init__(self, vocab: int = 1000, dim: int = 64, bag: int = 8):
        super().__init__()
        self.bag = bag
        self.embed = nn.Embedding(vocab, dim)
        self.bags = nn.EmbeddingBag(vocab, dim, mode="mean")
        self.fc = nn.Linear(2 * dim, 32)

    def forward(self, ids):  # (1, S)
        tok = self.embed(ids).mean(dim=1)  # (1, dim)
        bags = self.bags(ids.reshape(-1, self.bag))  # (S / bag, dim)
        return self.fc(torch.cat([tok.expand(bags.shape[0], -1), bags], dim=1))


class TemporalBlock(nn.Module):
    def __init__(self, c: int, dilation: int, kernel: int = 3):
        super().__init__()
        self.pad = (kernel - 1) * dilation
        self.conv1 = nn.Conv1d(c, c, kernel, dilation=dilation)
        self.conv2 = nn.Conv1d(c, c, kernel, dilation=dilation)

    def forward(self, x):
        y = F.relu(self.conv1(F.pad(x, (self.pad, 0))))
        y = F.relu(self.conv2(F.pad(y, (self.pad, 0))))
        return F.relu(x + y)


class TCN(nn.Module):
    """Temporal conv net: causal (left-padded) dilated Conv1d residual blocks, dilations 1, 2, 4, 8."""

    def __init__(self, cin: int = 16, c: int = 48):
        super().__init__()
        self.inp = nn.Conv1d(cin, c, 1)
        self.blocks = nn.Sequential(*[TemporalBlock(c, d) for d in (1, 2, 4, 8)])
        self.out = nn.Conv1d(c, 8, 1)

    def forward(self, x):  # (1, channels, time)
        return self.out(self.blocks(self.inp(x)))
