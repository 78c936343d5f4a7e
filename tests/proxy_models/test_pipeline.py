"""The DALI input pipeline: batches, seeding, exact resume, decode paths, bad input."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from autoaug.proxy_models.data import DatasetError, open_dataset
from autoaug.proxy_models.pipeline import CIFAR10_MEAN, CIFAR10_STD, DaliLoader, checked_indices
from autoaug.proxy_models.splits import reduced_split

# A policy with no sub-policies but the standard base: exercises the crop/flip step alone,
# independently of the policies package.
STANDARD = SimpleNamespace(sub_policies=(), base="standard")
CROP = SimpleNamespace(sub_policies=(), base="crop")
NONE = SimpleNamespace(sub_policies=(), base="none")


@pytest.fixture(scope="module")
def cifar(cifar_dir):
    return open_dataset(cifar_dir)


@pytest.fixture(scope="module")
def split(cifar):
    return reduced_split(cifar.labels, train_size=600, val_size=300, seed=0)


def _epoch(loader):
    return [(x.clone(), y.clone()) for x, y in loader]


def _unnormalize(x: torch.Tensor) -> torch.Tensor:
    mean = torch.tensor(CIFAR10_MEAN).view(1, 3, 1, 1)
    std = torch.tensor(CIFAR10_STD).view(1, 3, 1, 1)
    return (x * std + mean).round().clamp(0, 255).permute(0, 2, 3, 1).to(torch.uint8)


def test_validation_batches_cover_every_image_once_in_order(cifar, split):
    loader = DaliLoader(cifar, split.val, batch_size=128, train=False)
    assert len(loader) == 3
    for _ in range(2):  # a second pass (epoch) yields the same data again
        batches = _epoch(loader)
        assert [len(y) for _, y in batches] == [128, 128, 44]
        x = torch.cat([b[0] for b in batches])
        y = torch.cat([b[1] for b in batches])
        assert x.dtype == torch.float32 and x.shape == (300, 3, 32, 32)
        assert y.dtype == torch.int64 and torch.equal(y, torch.from_numpy(cifar.labels[split.val]))
    # No augmentation on validation: un-normalizing gives back the decoded images.
    ref, _ = cifar.images(split.val[:128])
    assert torch.equal(_unnormalize(batches[0][0]), torch.from_numpy(ref))


def test_train_batches_shuffle_drop_last_and_match_labels(cifar, split):
    loader = DaliLoader(cifar, split.train, batch_size=128, policy=NONE, train=True, seed=1)
    assert len(loader) == 4 and loader.num_images == 512
    batches = _epoch(loader)
    assert [len(y) for _, y in batches] == [128] * 4
    pos = loader.epoch_order(0)[:128]
    assert torch.equal(batches[0][1], torch.from_numpy(cifar.labels[split.train[pos]]))
    # base "none" and no policy: the images are the decoded ones, in the shuffled order
    ref, _ = cifar.images(split.train[pos])
    assert torch.equal(_unnormalize(batches[0][0]), torch.from_numpy(ref))


def test_standard_crop_flip_changes_images_within_pad(cifar, split):
    loader = DaliLoader(cifar, split.train, batch_size=128, policy=STANDARD, train=True, seed=1)
    x, _ = next(iter(loader))
    pos = loader.epoch_order(0)[:128]
    ref = torch.from_numpy(cifar.images(split.train[pos])[0])
    out = _unnormalize(x)
    assert out.shape == ref.shape
    changed = (out != ref).flatten(1).any(1).float().mean().item()
    assert changed > 0.8  # 1 - P(offset (4,4) and no flip) = 1 - 1/81/2
    # Every crop is a shifted (and maybe flipped) copy: some 24x24 window matches exactly.
    for i in range(8):
        o, r = out[i], ref[i]
        found = False
        for img in (r, r.flip(1)):
            padded = torch.zeros(40, 40, 3, dtype=torch.uint8)
            padded[4:36, 4:36] = img
            for dy in range(9):
                for dx in range(9):
                    if torch.equal(padded[dy : dy + 32, dx : dx + 32], o):
                        found = True
        assert found, f"image {i} is not a pad-4 crop/flip of its source"


@pytest.mark.parametrize("policy", [NONE, CROP, STANDARD], ids=lambda p: p.base)
def test_training_applies_the_policys_base(policy, marker_image, outcome_of, tmp_path):
    """256 copies of a one-colour image with a marker pixel: where the marker lands after the
    loader is the shift and mirror of the base (none: nothing; crop: shifts within the 4 px
    padding, never mirrored; standard: the same shifts, mirrored about half the time)."""
    import io

    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(marker_image).save(buf, format="PNG")
    path = tmp_path / "marker.parquet"
    pq.write_table(
        pa.table({"image": pa.array([buf.getvalue()] * 256, pa.binary()), "label": pa.array([0, 1] * 128, pa.int8())}),
        path,
    )
    for decode in ("memory", "dali"):
        loader = DaliLoader(
            open_dataset(path), range(256), batch_size=256, policy=policy, seed=3, decode=decode, image_size=32
        )
        x, _ = next(iter(loader))
        got = [outcome_of(marker_image, img) for img in _unnormalize(x).numpy()]
        shifts = {(dy, dx) for dy, dx, _ in got}
        mirrored = sum(m for _, _, m in got) / len(got)
        if policy.base == "none":
            assert shifts == {(0, 0)} and mirrored == 0
            continue
        assert {dy for dy, _ in shifts} == {dx for _, dx in shifts} == set(range(-4, 5))
        assert mirrored == 0 if policy.base == "crop" else 0.35 < mirrored < 0.65
    # evaluation batches never get the base
    x, _ = next(iter(DaliLoader(open_dataset(path), range(256), batch_size=256, policy=policy, train=False)))
    assert {outcome_of(marker_image, img) for img in _unnormalize(x).numpy()} == {(0, 0, False)}


def test_same_seed_same_batches_other_seed_other_batches(cifar, split):
    a = _epoch(DaliLoader(cifar, split.train, batch_size=128, policy=STANDARD, seed=5))
    b = _epoch(DaliLoader(cifar, split.train, batch_size=128, policy=STANDARD, seed=5))
    c = _epoch(DaliLoader(cifar, split.train, batch_size=128, policy=STANDARD, seed=6))
    assert all(torch.equal(p[0], q[0]) and torch.equal(p[1], q[1]) for p, q in zip(a, b))
    assert not torch.equal(a[0][1], c[0][1])


@pytest.mark.parametrize("decode", ["memory", "dali"])
def test_resume_from_state_dict_gives_the_uninterrupted_batches(cifar, split, decode):
    kwargs = dict(batch_size=128, policy=STANDARD, seed=2, decode=decode, image_size=32)
    straight = DaliLoader(cifar, split.train, **kwargs)
    first = _epoch(straight)
    state = straight.state_dict()
    second = _epoch(straight)
    assert not torch.equal(first[0][0], second[0][0])  # epochs differ
    resumed = DaliLoader(cifar, split.train, **kwargs)
    resumed.load_state_dict(state)
    again = _epoch(resumed)
    assert all(torch.equal(p[0], q[0]) and torch.equal(p[1], q[1]) for p, q in zip(second, again))


def test_dali_decoding_matches_memory_decoding(cifar, split):
    mem = _epoch(DaliLoader(cifar, split.val, batch_size=100, train=False, decode="memory"))
    dali = _epoch(DaliLoader(cifar, split.val, batch_size=100, train=False, decode="dali", image_size=32))
    for (xm, ym), (xd, yd) in zip(mem, dali):
        assert torch.equal(ym, yd)
        # libjpeg-turbo (PIL) vs DALI's CPU decoder: identical up to IDCT rounding.
        diff = (_unnormalize(xm).float() - _unnormalize(xd).float()).abs().mean().item()
        assert diff < 1.0


def test_larger_images_are_resized_to_image_size(tmp_path, cifar):
    import io

    from PIL import Image

    rng = np.random.default_rng(0)
    rows = []
    for k in range(8):
        buf = io.BytesIO()
        Image.fromarray(rng.integers(0, 255, (48 + 8 * k, 64, 3), dtype=np.uint8)).save(buf, format="JPEG")
        rows.append(buf.getvalue())
    path = tmp_path / "big.parquet"
    pq.write_table(pa.table({"image": pa.array(rows, pa.binary()), "label": pa.array([0, 1] * 4, pa.int8())}), path)
    ds = open_dataset(path)
    for decode in ("memory", "dali"):
        x, y = next(iter(DaliLoader(ds, range(8), batch_size=8, train=False, decode=decode, image_size=24)))
        assert x.shape == (8, 3, 24, 24) and y.tolist() == [0, 1] * 4


def test_corrupt_image_fails_before_training_in_both_decode_modes(tmp_path, cifar):
    rows = [cifar.encoded(i) for i in range(10)]
    rows[7] = rows[7][:100]
    path = tmp_path / "bad.parquet"
    pq.write_table(pa.table({"image": pa.array(rows, pa.binary()), "label": pa.array([0] * 10, pa.int16())}), path)
    ds = open_dataset(path)
    for decode in ("memory", "dali"):
        with pytest.raises(DatasetError, match=r"bad.parquet row 7: truncated JPEG"):
            DaliLoader(ds, range(10), batch_size=4, decode=decode, image_size=32)
    loader = DaliLoader(ds, range(10), batch_size=4, decode="dali", image_size=32, skip_corrupt=True, train=False)
    assert loader.num_skipped == 1 and sum(len(y) for _, y in loader) == 9


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"indices": []}, "no images selected"),
        ({"indices": [0, 10**6]}, "out of range"),
        ({"indices": range(10), "batch_size": 0}, "batch_size must be a positive integer"),
        ({"indices": range(10), "batch_size": 64}, "fewer than one batch of 64"),
        ({"indices": range(10), "device": "tpu"}, "device must be one of"),
    ],
)
def test_bad_loader_arguments(cifar, kwargs, match):
    with pytest.raises(ValueError, match=match):
        DaliLoader(cifar, **{"batch_size": 4, **kwargs})


class _PipelineBuilt(Exception):
    """Raised by the fake pipeline_def once the pipeline's arguments are recorded."""


def _device_id_dali_gets(monkeypatch, loader) -> int | None:
    """The ``device_id`` the loader builds its DALI pipeline with, on any machine: DALI's
    ``pipeline_def`` is replaced by one that records the pipeline's arguments, and torch's
    current CUDA device is 0 (as on a machine whose GPU 0 is not the run's)."""
    import nvidia.dali

    seen = {}

    def fake_pipeline_def(fn=None, **_):
        def build(**kwargs):
            seen.update(kwargs)
            raise _PipelineBuilt

        return build if fn is not None else (lambda f: build)

    monkeypatch.setattr(nvidia.dali, "pipeline_def", fake_pipeline_def)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    with pytest.raises(_PipelineBuilt):
        next(iter(loader))
    return seen["device_id"]


@pytest.mark.parametrize(("device", "expected"), [("cuda:1", 1), ("gpu:2", 2), ("cuda", 0), ("gpu", 0), ("cpu", None)])
def test_loader_runs_dali_on_the_cuda_device_it_is_given(monkeypatch, cifar, split, device, expected):
    loader = DaliLoader(cifar, split.val, batch_size=100, train=False, device=device)
    assert loader.device == ("cpu" if device == "cpu" else "gpu")
    assert _device_id_dali_gets(monkeypatch, loader) == expected


def test_training_run_on_cuda_n_augments_on_gpu_n(monkeypatch, cifar, split):
    """A run configured for ``cuda:1`` trains its model on GPU 1: its images are augmented there
    too, not on torch's current device (GPU 0)."""
    from autoaug.proxy_models.train import _make_loader
    from autoaug.proxy_models.train_config import TrainConfig

    config = TrainConfig.from_preset("smoke", data="unused", device="cuda:1", batch_size=64)
    for train in (True, False):
        loader = _make_loader(
            cifar, split.train, config, torch.device("cuda:1"), policy=STANDARD, train=train, num_threads=1
        )
        assert _device_id_dali_gets(monkeypatch, loader) == 1


@pytest.mark.parametrize("device", ["cuda:x", "tpu", "cuda:", "gpu:-1", 0])
def test_loader_refuses_a_malformed_device(cifar, split, device):
    with pytest.raises(ValueError, match=r"device must be one of 'cpu', 'gpu', 'cuda', 'cuda:N'.*got"):
        DaliLoader(cifar, split.val, batch_size=100, train=False, device=device)


class _Five:
    source = "five.parquet"

    def __len__(self) -> int:
        return 5


@pytest.mark.parametrize("indices, bad", [([0, -1, 2], -1), ([4, 5, 9], 5)])
def test_an_index_out_of_range_is_named_in_one_line(indices, bad):
    with pytest.raises(DatasetError, match=rf"^five\.parquet: index {bad} out of range for 5 images$"):
        checked_indices(_Five(), indices, 2)
    assert checked_indices(_Five(), [4, 0], 2).tolist() == [4, 0]
