"""Plain-PyTorch architectures that no installed library provides (torchvision does not work
with this torch). Each follows its paper / the torchvision reference layout; weights are random.
"""

from __future__ import annotations

import torch
from torch import nn


def _conv_bn(cin: int, cout: int, k: int, stride: int = 1, groups: int = 1, act=nn.ReLU, dim: int = 2):
    conv = nn.Conv2d if dim == 2 else nn.Conv3d
    bn = nn.BatchNorm2d if dim == 2 else nn.BatchNorm3d
    layers = [conv(cin, cout, k, stride, k // 2, groups=groups, bias=False), bn(cout)]
    if act is not None:
        layers.append(act(inplace=True) if act in (nn.ReLU, nn.ReLU6, nn.Hardswish) else act())
    return nn.Sequential(*layers)


# ---------------------------------------------------------------- ResNet family (2D and 3D)
class _Residual(nn.Module):
    """relu(body(x) + shortcut(x)); the shortcut projects when stride or channels change."""

    def __init__(self, body: nn.Module, cin: int, out: int, stride: int, dim: int):
        super().__init__()
        self.body = body
        self.down = None
        if stride != 1 or cin != out:
            self.down = _conv_bn(cin, out, 1, stride, act=None, dim=dim)

    def forward(self, x):
        return torch.relu(self.body(x) + (x if self.down is None else self.down(x)))


class _Basic(_Residual):
    expansion = 1

    def __init__(self, cin, planes, stride, groups=1, width=64, dim=2):
        body = nn.Sequential(
            _conv_bn(cin, planes, 3, stride, dim=dim), _conv_bn(planes, planes, 3, act=None, dim=dim)
        )
        super().__init__(body, cin, planes, stride, dim)


class _Bottleneck(_Residual):
    expansion = 4

    def __init__(self, cin, planes, stride, groups=1, width=64, dim=2):
        mid = int(planes * (width / 64.0)) * groups
        body = nn.Sequential(
            _conv_bn(cin, mid, 1, dim=dim),
            _conv_bn(mid, mid, 3, stride, groups=groups, dim=dim),
            _conv_bn(mid, planes * 4, 1, act=None, dim=dim),
        )
        super().__init__(body, cin, planes * 4, stride, dim)


class ResNet(nn.Module):
    """ResNet / ResNeXt / Wide ResNet (torchvision layout); dim=3 gives the 3D (video) ResNet."""

    def __init__(self, block: str, depths, groups=1, width=64, dim=2, num_classes=1000):
        super().__init__()
        blk = _Basic if block == "basic" else _Bottleneck
        conv = nn.Conv2d if dim == 2 else nn.Conv3d
        pool = nn.MaxPool2d if dim == 2 else nn.MaxPool3d
        bn = nn.BatchNorm2d if dim == 2 else nn.BatchNorm3d
        stem_k, stem_s, stem_p = (7, 2, 3) if dim == 2 else ((3, 7, 7), (1, 2, 2), (1, 3, 3))
        layers = [conv(3, 64, stem_k, stem_s, stem_p, bias=False), bn(64), nn.ReLU(inplace=True)]
        if dim == 2:
            layers.append(pool(3, 2, 1))
        cin = 64
        for i, depth in enumerate(depths):
            planes = 64 * 2**i
            for j in range(depth):
                stride = 2 if (j == 0 and i > 0) else 1
                layers.append(blk(cin, planes, stride, groups, width, dim))
                cin = planes * blk.expansion
        self.features = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1) if dim == 2 else nn.AdaptiveAvgPool3d(1)
        self.fc = nn.Linear(cin, num_classes)

    def forward(self, x):
        return self.fc(torch.flatten(self.pool(self.features(x)), 1))


# ---------------------------------------------------------------- DenseNet-121
class _DenseLayer(nn.Module):
    def __init__(self, cin, growth, bn_size=4):
        super().__init__()
        self.body = nn.Sequential(
            nn.BatchNorm2d(cin), nn.ReLU(inplace=True), nn.Conv2d(cin, bn_size * growth, 1, bias=False),
            nn.BatchNorm2d(bn_size * growth), nn.ReLU(inplace=True),
            nn.Conv2d(bn_size * growth, growth, 3, padding=1, bias=False),
        )

    def forward(self, x):
        return torch.cat([x, self.body(x)], 1)


class DenseNet(nn.Module):
    def __init__(self, blocks=(6, 12, 24, 16), growth=32, init=64, num_classes=1000):
        super().__init__()
        layers = [nn.Conv2d(3, init, 7, 2, 3, bias=False), nn.BatchNorm2d(init), nn.ReLU(inplace=True),
                  nn.MaxPool2d(3, 2, 1)]
        c = init
        for i, n in enumerate(blocks):
            for _ in range(n):
                layers.append(_DenseLayer(c, growth))
                c += growth
            if i != len(blocks) - 1:
                layers += [nn.BatchNorm2d(c), nn.ReLU(inplace=True), nn.Conv2d(c, c // 2, 1, bias=False),
                           nn.AvgPool2d(2, 2)]
                c //= 2
        layers += [nn.BatchNorm2d(c), nn.ReLU(inplace=True)]
        self.features = nn.Sequential(*layers)
        self.fc = nn.Linear(c, num_classes)

    def forward(self, x):
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(self.features(x), 1), 1))


# ---------------------------------------------------------------- VGG-16
class VGG(nn.Module):
    CFG16 = (64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M")

    def __init__(self, cfg=CFG16, num_classes=1000):
        super().__init__()
        layers, c = [], 3
        for v in cfg:
            if v == "M":
                layers.append(nn.MaxPool2d(2, 2))
            else:
                layers += [nn.Conv2d(c, v, 3, padding=1), nn.ReLU(inplace=True)]
                c = v
        self.features = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(7)
        self.classifier = nn.Sequential(
            nn.Linear(512 * 49, 4096), nn.ReLU(True), nn.Linear(4096, 4096), nn.ReLU(True),
            nn.Linear(4096, num_classes),
        )
        # torchvision's VGG init: without it (no BatchNorm to rescale) each layer shrinks the
        # activations ~0.6x and the logits are the last bias alone, whatever the input
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
                nn.init.zeros_(m.bias)
            elif isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, 0, 0.01)
                nn.init.zeros_(m.bias)

    def forward(self, x):
        return self.classifier(torch.flatten(self.pool(self.features(x)), 1))


# ---------------------------------------------------------------- MobileNetV3-Large
class _SE(nn.Module):
    def __init__(self, c, squeeze):
        super().__init__()
        self.fc1, self.fc2 = nn.Conv2d(c, squeeze, 1), nn.Conv2d(squeeze, c, 1)

    def forward(self, x):
        s = nn.functional.adaptive_avg_pool2d(x, 1)
        return x * nn.functional.hardsigmoid(self.fc2(torch.relu(self.fc1(s))))


def _div8(v: float) -> int:
    return max(8, int(v + 4) // 8 * 8)


class _InvRes(nn.Module):
    def __init__(self, cin, k, exp, cout, se, act, stride):
        super().__init__()
        layers = []
        if exp != cin:
            layers.append(_conv_bn(cin, exp, 1, act=act))
        layers.append(_conv_bn(exp, exp, k, stride, groups=exp, act=act))
        if se:
            layers.append(_SE(exp, _div8(exp // 4)))
        layers.append(_conv_bn(exp, cout, 1, act=None))
        self.body = nn.Sequential(*layers)
        self.residual = stride == 1 and cin == cout

    def forward(self, x):
        y = self.body(x)
        return x + y if self.residual else y


class MobileNetV3(nn.Module):
    # kernel, expansion, out, squeeze-excite, activation (HS = hardswish), stride
    LARGE = (
        (3, 16, 16, False, "RE", 1), (3, 64, 24, False, "RE", 2), (3, 72, 24, False, "RE", 1),
        (5, 72, 40, True, "RE", 2), (5, 120, 40, True, "RE", 1), (5, 120, 40, True, "RE", 1),
        (3, 240, 80, False, "HS", 2), (3, 200, 80, False, "HS", 1), (3, 184, 80, False, "HS", 1),
        (3, 184, 80, False, "HS", 1), (3, 480, 112, True, "HS", 1), (3, 672, 112, True, "HS", 1),
        (5, 672, 160, True, "HS", 2), (5, 960, 160, True, "HS", 1), (5, 960, 160, True, "HS", 1),
    )

    def __init__(self, num_classes=1000):
        super().__init__()
        layers, c = [_conv_bn(3, 16, 3, 2, act=nn.Hardswish)], 16
        for k, exp, out, se, act, s in self.LARGE:
            layers.append(_InvRes(c, k, exp, out, se, nn.ReLU if act == "RE" else nn.Hardswish, s))
            c = out
        layers.append(_conv_bn(c, 6 * c, 1, act=nn.Hardswish))
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(nn.Linear(6 * c, 1280), nn.Hardswish(), nn.Linear(1280, num_classes))

    def forward(self, x):
        return self.classifier(torch.flatten(nn.functional.adaptive_avg_pool2d(self.features(x), 1), 1))


# ---------------------------------------------------------------- DCGAN generator
class DCGANGenerator(nn.Module):
    """DCGAN generator (Radford et al.): noise [N, nz] -> image [N, 3, 64, 64]."""

    def __init__(self, nz: int = 100, ngf: int = 64):
        super().__init__()
        self.nz = nz
        chans = (nz, ngf * 8, ngf * 4, ngf * 2, ngf)
        layers = []
        for i in range(4):
            stride, pad = (1, 0) if i == 0 else (2, 1)
            layers += [nn.ConvTranspose2d(chans[i], chans[i + 1], 4, stride, pad, bias=False),
                       nn.BatchNorm2d(chans[i + 1]), nn.ReLU(True)]
        layers += [nn.ConvTranspose2d(ngf, 3, 4, 2, 1, bias=False), nn.Tanh()]
        self.net = nn.Sequential(*layers)

    def forward(self, z):
        return self.net(z.reshape(z.shape[0], self.nz, 1, 1))
