"""The training examples of docs/store.md run as written (constants pointed at a test store)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

from autoaug.policies import presets
from autoaug.policies.store import PolicyStore

DOC = Path(__file__).resolve().parents[2] / "docs" / "store.md"


def example(name: str) -> str:
    text = DOC.read_text(encoding="utf-8")
    match = re.search(rf"<!-- example: {name} -->\n```python\n(.*?)```", text, re.S)
    assert match, f"example {name!r} not found in {DOC}"
    return match.group(1)


def configure(code: str, **constants) -> str:
    for key, value in constants.items():
        code, n = re.subn(rf"^{key} = .*$", f"{key} = {value!r}", code, count=1, flags=re.M)
        assert n == 1, f"constant {key} not found in the example"
    return code


@pytest.fixture(scope="module")
def image_folder(tmp_path_factory, cifar_sample):
    """256 real CIFAR-10 images as an ImageFolder tree of PNG files."""
    images, labels = cifar_sample
    root = tmp_path_factory.mktemp("imagefolder")
    for i, (image, label) in enumerate(zip(images, labels)):
        folder = root / f"class{label}"
        folder.mkdir(exist_ok=True)
        Image.fromarray(image).save(folder / f"{i:04d}.png")
    return root


@pytest.fixture(scope="module")
def store_uri(tmp_path_factory):
    uri = str(tmp_path_factory.mktemp("store"))
    PolicyStore(uri).save(presets.resolve("autoaugment-cifar10"), "cifar10-wrn")
    return uri


def run_example(tmp_path, code: str) -> str:
    script = tmp_path / "example.py"
    script.write_text(code)
    proc = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


@pytest.mark.slow
def test_torchvision_example_trains(tmp_path, image_folder, store_uri):
    code = configure(example("torchvision"), STORE=store_uri, DATA_ROOT=str(image_folder), EPOCHS=1)
    out = run_example(tmp_path, code)
    assert re.fullmatch(r"epoch 0: loss \d+\.\d{3}\n", out), out


@pytest.mark.slow
def test_dali_example_trains(tmp_path, image_folder, store_uri):
    code = configure(example("dali"), STORE=store_uri, DATA_ROOT=str(image_folder), EPOCHS=2)
    out = run_example(tmp_path, code)
    assert re.fullmatch(r"epoch 0: loss \d+\.\d{3}\nepoch 1: loss \d+\.\d{3}\n", out), out
