"""Inception-v3 (Szegedy et al. 2016) in plain PyTorch, torchvision's layout without aux logits."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F


class _C(nn.Sequential):
    """conv + batch norm + relu."""

    def __init__(self, cin, cout, k, stride=1, padding=0):
        super().__init__(nn.Conv2d(cin, cout, k, stride, padding, bias=False), nn.BatchNorm2d(cout, eps=0.001),
                         nn.ReLU(inplace=True))


def _pool_branch(cin, cout):
    return nn.Sequential(nn.AvgPool2d(3, 1, 1), _C(cin, cout, 1))


class _A(nn.Module):
    def __init__(self, cin, pool):
        super().__init__()
        self.b1 = _C(cin, 64, 1)
        self.b5 = nn.Sequential(_C(cin, 48, 1), _C(48, 64, 5, padding=2))
        self.b3 = nn.Sequential(_C(cin, 64, 1), _C(64, 96, 3, padding=1), _C(96, 96, 3, padding=1))
        self.bp = _pool_branch(cin, pool)

    def forward(self, x):
        return torch.cat([self.b1(x), self.b5(x), self.b3(x), self.bp(x)], 1)


class _B(nn.Module):
    def __init__(self, cin):
        super().__init__()
        self.b3 = _C(cin, 384, 3, 2)
        self.bd = nn.Sequential(_C(cin, 64, 1), _C(64, 96, 3, padding=1), _C(96, 96, 3, 2))

    def forward(self, x):
        return torch.cat([self.b3(x), self.bd(x), F.max_pool2d(x, 3, 2)], 1)


class _Cb(nn.Module):
    def __init__(self, cin, c7):
        super().__init__()
        self.b1 = _C(cin, 192, 1)
        self.b7 = nn.Sequential(_C(cin, c7, 1), _C(c7, c7, (1, 7), padding=(0, 3)),
                                _C(c7, 192, (7, 1), padding=(3, 0)))
        self.bd = nn.Sequential(_C(cin, c7, 1), _C(c7, c7, (7, 1), padding=(3, 0)),
                                _C(c7, c7, (1, 7), padding=(0, 3)), _C(c7, c7, (7, 1), padding=(3, 0)),
                                _C(c7, 192, (1, 7), padding=(0, 3)))
        self.bp = _pool_branch(cin, 192)

    def forward(self, x):
        return torch.cat([self.b1(x), self.b7(x), self.bd(x), self.bp(x)], 1)


class _D(nn.Module):
    def __init__(self, cin):
        super().__init__()
        self.b3 = nn.Sequential(_C(cin, 192, 1), _C(192, 320, 3, 2))
        self.b7 = nn.Sequential(_C(cin, 192, 1), _C(192, 192, (1, 7), padding=(0, 3)),
                                _C(192, 192, (7, 1), padding=(3, 0)), _C(192, 192, 3, 2))

    def forward(self, x):
        return torch.cat([self.b3(x), self.b7(x), F.max_pool2d(x, 3, 2)], 1)


class _E(nn.Module):
    def __init__(self, cin):
        super().__init__()
        self.b1 = _C(cin, 320, 1)
        self.b3 = _C(cin, 384, 1)
        self.b3a, self.b3b = _C(384, 384, (1, 3), padding=(0, 1)), _C(384, 384, (3, 1), padding=(1, 0))
        self.bd = nn.Sequential(_C(cin, 448, 1), _C(448, 384, 3, padding=1))
        self.bda, self.bdb = _C(384, 384, (1, 3), padding=(0, 1)), _C(384, 384, (3, 1), padding=(1, 0))
        self.bp = _pool_branch(cin, 192)

    def forward(self, x):
        a, d = self.b3(x), self.bd(x)
        return torch.cat([self.b1(x), self.b3a(a), self.b3b(a), self.bda(d), self.bdb(d), self.bp(x)], 1)


class InceptionV3(nn.Module):
    def __init__(self, num_classes: int = 1000):
        super().__init__()
        self.stem = nn.Sequential(
            _C(3, 32, 3, 2), _C(32, 32, 3), _C(32, 64, 3, padding=1), nn.MaxPool2d(3, 2),
            _C(64, 80, 1), _C(80, 192, 3), nn.MaxPool2d(3, 2),
        )
        self.blocks = nn.Sequential(
            _A(192, 32), _A(256, 64), _A(288, 64), _B(288),
            _Cb(768, 128), _Cb(768, 160), _Cb(768, 160), _Cb(768, 192), _D(768), _E(1280), _E(2048),
        )
        self.fc = nn.Linear(2048, num_classes)

    def forward(self, x):
        x = self.blocks(self.stem(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))
