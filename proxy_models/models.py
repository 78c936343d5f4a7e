"""Proxy and final models, built by name.

>>> from proxy_models.models import build_model, MODELS
>>> model = build_model("wrn-40-2", num_classes=10)      # AutoAugment's proxy, 2.24M parameters
>>> sorted(MODELS)
['resnet-20', 'resnet-8', 'wrn-28-10', 'wrn-40-2']

Two families, both for small images (CIFAR-style stems: one 3x3 convolution, three stages, strides
1/2/2) and both ending in global average pooling, so any input size (even non-square) and any
number of classes work:

* ``wrn-D-K``: Wide Residual Networks (Zagoruyko & Komodakis, BMVC 2016), pre-activation basic
  blocks, 1x1 projection shortcuts where the width changes, as in the authors' code and in the
  AutoAugment / Fast AutoAugment / PBA code bases. ``wrn-40-2`` has 2,243,546 parameters for 10
  classes (published: 2.2M), ``wrn-28-10`` 36,479,194 (published: 36.5M).
* ``resnet-D``: CIFAR ResNets (He et al., CVPR 2016, section 4.2): post-activation basic blocks,
  widths 16/32/64, parameter-free "option A" shortcuts (stride-2 subsampling + zero-padded
  channels), so ``resnet-20`` has the published 0.27M parameters (269,722); ``resnet-8`` is the
  smallest member (n=1, 75,290 parameters) and the CPU proxy.

Names in :data:`MODELS` are the ones this project uses; :func:`build_model` also accepts any valid
``wrn-D-K`` (D = 6n + 4) or ``resnet-D`` (D = 6n + 2), e.g. ``resnet-56``.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from autoaug.proxy_models.model_names import check_model_name
from autoaug.proxy_models.model_names import parse_model_name as _parse

__all__ = [
    "MODELS",
    "PUBLISHED_PARAMS",
    "CifarResNet",
    "WideResNet",
    "build_model",
    "check_model_name",
    "count_parameters",
]


def _init_weights(module: nn.Module) -> None:
    """He (fan-out) init for convolutions, unit/zero batch norm, zero linear bias.

    The initialisation of the WRN and CIFAR-ResNet reference code bases.
    """
    for m in module.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.BatchNorm2d):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Linear):
            nn.init.kaiming_uniform_(m.weight, a=5**0.5)  # PyTorch's default for Linear weights
            nn.init.zeros_(m.bias)


class GlobalAvgPool(nn.Module):
    """Global average pooling to ``N x C x 1 x 1``. On CUDA it is a mean over the spatial axes:
    ``nn.AdaptiveAvgPool2d``'s backward kernel on CUDA adds with atomics (torch lists it among the
    non-deterministic operations), so a ``deterministic`` run would not repeat; the mean's backward
    is an elementwise copy. On the CPU it stays ``adaptive_avg_pool2d`` (deterministic there, and
    bit for bit what every CPU result so far was computed with)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.is_cuda:
            return x.mean(dim=(2, 3), keepdim=True)
        return F.adaptive_avg_pool2d(x, 1)


# --------------------------------------------------------------------------------------------
# Wide ResNet
# --------------------------------------------------------------------------------------------
class _WideBasic(nn.Module):
    """Pre-activation block: BN-ReLU-conv3x3-(dropout)-BN-ReLU-conv3x3, plus shortcut."""

    def __init__(self, in_planes: int, planes: int, stride: int, dropout: float) -> None:
        super().__init__()
        self.bn1 = nn.BatchNorm2d(in_planes)
        self.conv1 = nn.Conv2d(in_planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=1, padding=1, bias=False)
        self.dropout = nn.Dropout(dropout) if dropout > 0 else nn.Identity()
        self.shortcut: nn.Module | None = None
        if stride != 1 or in_planes != planes:
            self.shortcut = nn.Conv2d(in_planes, planes, 1, stride=stride, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(x))
        # The projection shortcut sees the pre-activated input (as in the authors' code).
        residual = x if self.shortcut is None else self.shortcut(out)
        out = self.conv1(out)
        out = self.conv2(self.dropout(F.relu(self.bn2(out))))
        return out + residual


class WideResNet(nn.Module):
    """WRN-depth-widen_factor for small images (3 stages of (depth - 4) / 6 blocks)."""

    def __init__(
        self,
        depth: int = 40,
        widen_factor: int = 2,
        num_classes: int = 10,
        in_channels: int = 3,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        if depth < 10 or (depth - 4) % 6 != 0:
            raise ValueError(f"WideResNet depth must be 6n + 4 with n >= 1 (10, 16, 22, 28, 40...), got {depth}")
        if widen_factor < 1:
            raise ValueError(f"WideResNet widen_factor must be a positive integer, got {widen_factor}")
        _check_head(num_classes, in_channels)
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"WideResNet dropout must be in [0, 1), got {dropout}")
        n = (depth - 4) // 6
        widths = [16, 16 * widen_factor, 32 * widen_factor, 64 * widen_factor]
        self.conv1 = nn.Conv2d(in_channels, widths[0], 3, stride=1, padding=1, bias=False)
        layers: list[nn.Module] = []
        in_planes = widths[0]
        for planes, stride in zip(widths[1:], (1, 2, 2)):
            for i in range(n):
                layers.append(_WideBasic(in_planes, planes, stride if i == 0 else 1, dropout))
                in_planes = planes
        self.blocks = nn.Sequential(*layers)
        self.bn = nn.BatchNorm2d(in_planes)
        self.pool = GlobalAvgPool()
        self.fc = nn.Linear(in_planes, num_classes)
        _init_weights(self)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.blocks(self.conv1(x))
        out = self.pool(F.relu(self.bn(out)))
        return self.fc(torch.flatten(out, 1))


# --------------------------------------------------------------------------------------------
# CIFAR ResNet (He et al. 2016)
# --------------------------------------------------------------------------------------------
class _ZeroPadShortcut(nn.Module):
    """Option A shortcut: subsample spatially, zero-pad the new channels (no parameters)."""

    def __init__(self, in_planes: int, planes: int, stride: int) -> None:
        super().__init__()
        self.stride = stride
        self.extra = planes - in_planes

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.stride != 1:
            x = x[:, :, :: self.stride, :: self.stride]
        if self.extra:
            before = self.extra // 2
            x = F.pad(x, (0, 0, 0, 0, before, self.extra - before))
        return x


class _BasicBlock(nn.Module):
    """Post-activation block: conv3x3-BN-ReLU-conv3x3-BN, add shortcut, ReLU."""

    def __init__(self, in_planes: int, planes: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or in_planes != planes:
            self.shortcut = _ZeroPadShortcut(in_planes, planes, stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class CifarResNet(nn.Module):
    """ResNet-depth for small images: 3 stages of (depth - 2) / 6 blocks, widths 16/32/64."""

    def __init__(self, depth: int = 20, num_classes: int = 10, in_channels: int = 3) -> None:
        super().__init__()
        if depth < 8 or (depth - 2) % 6 != 0:
            raise ValueError(f"CIFAR ResNet depth must be 6n + 2 with n >= 1 (8, 14, 20, 32, 44, 56...), got {depth}")
        _check_head(num_classes, in_channels)
        n = (depth - 2) // 6
        self.conv1 = nn.Conv2d(in_channels, 16, 3, stride=1, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        layers: list[nn.Module] = []
        in_planes = 16
        for planes, stride in zip((16, 32, 64), (1, 2, 2)):
            for i in range(n):
                layers.append(_BasicBlock(in_planes, planes, stride if i == 0 else 1))
                in_planes = planes
        self.blocks = nn.Sequential(*layers)
        self.pool = GlobalAvgPool()
        self.fc = nn.Linear(in_planes, num_classes)
        _init_weights(self)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.pool(self.blocks(out))
        return self.fc(torch.flatten(out, 1))


# --------------------------------------------------------------------------------------------
# Registry
# --------------------------------------------------------------------------------------------
def _check_head(num_classes: int, in_channels: int) -> None:
    if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 1:
        raise ValueError(f"num_classes must be a positive integer, got {num_classes!r}")
    if isinstance(in_channels, bool) or not isinstance(in_channels, int) or in_channels < 1:
        raise ValueError(f"in_channels must be a positive integer, got {in_channels!r}")


def _wrn(depth: int, widen_factor: int) -> Callable[..., nn.Module]:
    def build(num_classes: int = 10, in_channels: int = 3) -> nn.Module:
        return WideResNet(depth, widen_factor, num_classes=num_classes, in_channels=in_channels)

    build.__name__ = f"wrn_{depth}_{widen_factor}"
    build.__doc__ = f"WRN-{depth}-{widen_factor} (Zagoruyko & Komodakis 2016)."
    return build


def _resnet(depth: int) -> Callable[..., nn.Module]:
    def build(num_classes: int = 10, in_channels: int = 3) -> nn.Module:
        return CifarResNet(depth, num_classes=num_classes, in_channels=in_channels)

    build.__name__ = f"resnet_{depth}"
    build.__doc__ = f"CIFAR ResNet-{depth} (He et al. 2016, option A shortcuts)."
    return build


#: Model name -> builder ``(num_classes=10, in_channels=3) -> nn.Module`` (the names:
#: :data:`autoaug.proxy_models.model_names.MODEL_NAMES`).
MODELS: dict[str, Callable[..., nn.Module]] = {
    "wrn-40-2": _wrn(40, 2),
    "wrn-28-10": _wrn(28, 10),
    "resnet-8": _resnet(8),
    "resnet-20": _resnet(20),
}

#: Parameter counts (10 classes) as published: WRN paper table 1 / AutoAugment table 2 for the
#: WRNs, He et al. 2016 table 6 for ResNet-20. ResNet-8 has no published figure (it is not in
#: He et al.'s table); the same construction at n = 1 gives 75,290.
PUBLISHED_PARAMS: dict[str, float] = {
    "wrn-40-2": 2.2e6,
    "wrn-28-10": 36.5e6,
    "resnet-20": 0.27e6,
}


def build_model(name: str, num_classes: int = 10, in_channels: int = 3) -> nn.Module:
    """Build a freshly initialised model by name (see :data:`MODELS`).

    Raises ``ValueError`` for an unknown name, a depth that does not fit the family, or a
    non-positive ``num_classes`` / ``in_channels``. Weights are drawn from torch's global RNG, so
    seed it (``torch.manual_seed``) for a reproducible initialisation.
    """
    family, depth, widen = _parse(name)
    _check_head(num_classes, in_channels)
    if family == "wrn":
        return WideResNet(depth, widen, num_classes=num_classes, in_channels=in_channels)
    return CifarResNet(depth, num_classes=num_classes, in_channels=in_channels)


def count_parameters(model: nn.Module, trainable_only: bool = True) -> int:
    """Number of (trainable) parameters of ``model``."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad or not trainable_only)
