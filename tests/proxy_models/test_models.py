"""Models by name: parameter counts against the published figures, shapes, errors, seeding."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from autoaug.proxy_models.model_names import MODEL_NAMES
from autoaug.proxy_models.models import (
    MODELS,
    PUBLISHED_PARAMS,
    CifarResNet,
    WideResNet,
    build_model,
    count_parameters,
)


def test_models_lists_the_project_models():
    assert set(MODELS) == {"wrn-40-2", "wrn-28-10", "resnet-8", "resnet-20"}
    assert set(MODEL_NAMES) == set(MODELS)  # what a config checks without torch


def test_a_config_is_checked_without_importing_torch(tmp_path):
    """A search's driver and the command line validate a training configuration (its model name
    included) and size it to the data without torch (1.6 CPU-s a process): only what trains
    imports it."""
    code = (
        "import sys\n"
        "from autoaug.proxy_models.train_config import TrainConfig, eval_batch_size, resolve_config\n"
        "cfg = TrainConfig.from_preset('cpu', model='wrn-16-2')\n"
        "try:\n"
        "    TrainConfig.from_preset('cpu', model='wrn-41-2')\n"
        "except ValueError as exc:\n"
        "    assert '6n + 4' in str(exc), exc\n"
        "else:\n"
        "    raise AssertionError('wrn-41-2 accepted')\n"
        "assert eval_batch_size(cfg) == 256\n"
        "print('torch' in sys.modules)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == "False"


@pytest.mark.parametrize("name", sorted(PUBLISHED_PARAMS))
def test_parameter_count_within_2_percent_of_published(name):
    n = count_parameters(build_model(name, num_classes=10))
    assert abs(n / PUBLISHED_PARAMS[name] - 1) < 0.02, (name, n)


@pytest.mark.parametrize(
    "name, expected",
    # Exact counts of the reference constructions (WRN: authors' code; ResNet: option A).
    [("wrn-40-2", 2_243_546), ("wrn-28-10", 36_479_194), ("resnet-20", 269_722), ("resnet-8", 75_290)],
)
def test_exact_parameter_counts(name, expected):
    assert count_parameters(build_model(name)) == expected


def test_resnet_shortcuts_are_parameter_free():
    # Option A: the only parameters are convs, BNs and the classifier.
    model = build_model("resnet-20")
    convs = [m for m in model.modules() if isinstance(m, torch.nn.Conv2d)]
    assert len(convs) == 19  # 1 stem + 3 stages x 3 blocks x 2
    assert all(m.kernel_size == (3, 3) for m in convs)


@pytest.mark.parametrize("name", ["resnet-8", "resnet-20", "wrn-40-2"])
@pytest.mark.parametrize("size", [(32, 32), (64, 48), (7, 9)])
def test_any_input_size_and_class_count(name, size):
    model = build_model(name, num_classes=7, in_channels=1).eval()
    with torch.no_grad():
        out = model(torch.randn(2, 1, *size))
    assert out.shape == (2, 7)
    assert torch.isfinite(out).all()


def test_class_count_changes_only_the_head():
    a = count_parameters(build_model("resnet-8", num_classes=10))
    b = count_parameters(build_model("resnet-8", num_classes=100))
    assert b - a == 90 * 64 + 90  # 64 features -> 90 more weights each, plus 90 biases


def test_generic_names_build_the_family():
    assert isinstance(build_model("resnet-56"), CifarResNet)
    wrn = build_model("WRN-16-4")
    assert isinstance(wrn, WideResNet)
    assert wrn.fc.in_features == 256


def test_same_seed_same_weights():
    torch.manual_seed(3)
    a = build_model("resnet-8").state_dict()
    torch.manual_seed(3)
    b = build_model("resnet-8").state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_gradients_flow_and_training_step_reduces_loss():
    torch.manual_seed(0)
    model = build_model("resnet-8", num_classes=4)
    x, y = torch.randn(16, 3, 16, 16), torch.randint(0, 4, (16,))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    losses = []
    for _ in range(10):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0] * 0.5


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"name": "vgg-16"}, r"unknown model 'vgg-16': expected one of resnet-20, resnet-8"),
        ({"name": "resnet-9"}, r"depth must be 6n \+ 2.*got 9"),
        ({"name": "wrn-41-2"}, r"depth must be 6n \+ 4.*got 41"),
        ({"name": "wrn-40-0"}, r"widen_factor must be a positive integer, got 0"),
        ({"name": "resnet-8", "num_classes": 0}, r"num_classes must be a positive integer, got 0"),
        ({"name": "resnet-8", "in_channels": 2.5}, r"in_channels must be a positive integer, got 2.5"),
        ({"name": None}, r"model name must be a string, got None"),
    ],
)
def test_bad_arguments_raise_value_error(kwargs, match):
    with pytest.raises(ValueError, match=match):
        build_model(**kwargs)


def test_global_average_pooling_is_the_spatial_mean_and_spreads_the_gradient_evenly():
    from autoaug.proxy_models.models import GlobalAvgPool

    x = torch.randn(3, 5, 7, 6, requires_grad=True)
    out = GlobalAvgPool()(x)
    assert out.shape == (3, 5, 1, 1)
    torch.testing.assert_close(out, x.mean(dim=(2, 3), keepdim=True))
    out.sum().backward()
    torch.testing.assert_close(x.grad, torch.full_like(x, 1 / 42))
