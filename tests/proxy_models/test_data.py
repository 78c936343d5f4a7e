"""Datasets (Parquet, ImageFolder, torchvision CIFAR-10), reduced splits and bad-input errors."""

from __future__ import annotations

import io
import pickle
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image

from autoaug.proxy_models.data import DatasetError, ImageFolderDataset, ParquetDataset, TorchvisionCIFAR10, open_dataset
from autoaug.proxy_models.splits import _joint_counts, reduced_split

CIFAR_CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")


def _png(array: np.ndarray, mode: str | None = None) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(array, mode=mode).save(buf, format="PNG")
    return buf.getvalue()


def _write_parquet(
    path: Path, images: list[bytes], labels: list[int], *, classes=None, image_col="image", label_col="label"
) -> Path:
    table = pa.table({image_col: pa.array(images, pa.binary()), label_col: pa.array(labels, pa.int16())})
    if classes:
        table = table.replace_schema_metadata({"classes": ",".join(classes)})
    pq.write_table(table, path)
    return path


@pytest.fixture(scope="module")
def cifar(cifar_dir):
    return open_dataset(cifar_dir)


# ------------------------------------------------------------------------------------------------
# Real CIFAR-10 Parquet
# ------------------------------------------------------------------------------------------------


def test_parquet_folder_picks_split_file_and_reads_classes(cifar_dir, cifar):
    assert cifar.source.endswith("train.parquet")
    assert len(cifar) == 50_000
    assert cifar.classes == CIFAR_CLASSES
    assert cifar.labels.dtype == np.int64
    assert np.array_equal(np.bincount(cifar.labels), [5000] * 10)
    test = open_dataset(cifar_dir, split="test")
    assert len(test) == 10_000 and test.source.endswith("test.parquet")


def test_images_are_uint8_hwc_rgb_and_match_pil(cifar, cifar_sample):
    img = cifar.image(0)
    assert img.dtype == np.uint8 and img.shape == (32, 32, 3)
    batch, kept = cifar.images([0, 1, 2])
    assert batch.shape == (3, 32, 32, 3) and list(kept) == [0, 1, 2]
    ref = np.asarray(Image.open(io.BytesIO(cifar.encoded(2))).convert("RGB"))
    assert np.array_equal(batch[2], ref)


def test_reduced_split_is_stratified_disjoint_and_reproducible(cifar):
    a = reduced_split(cifar.labels, train_size=4000, val_size=1000, seed=0)
    b = reduced_split(cifar.labels, train_size=4000, val_size=1000, seed=0)
    assert np.array_equal(np.bincount(cifar.labels[a.train], minlength=10), [400] * 10)
    assert np.array_equal(np.bincount(cifar.labels[a.val], minlength=10), [100] * 10)
    assert len(np.intersect1d(a.train, a.val)) == 0
    assert np.array_equal(a.train, b.train) and np.array_equal(a.val, b.val)
    assert a.fingerprint == b.fingerprint
    # Pinned: the same seed must give the same indices on every machine (numpy PCG64 streams are
    # platform independent). If this changes, every recorded search result loses its meaning.
    assert a.fingerprint == "399f7275bdd86ec6fe021ae12e33dbe8e7222509fff6a90e6e67bb8cfefbb53d"
    c = reduced_split(cifar.labels, train_size=4000, val_size=1000, seed=1)
    assert not np.array_equal(a.train, c.train) and c.fingerprint != a.fingerprint


def test_reduced_split_default_validation_is_the_rest(cifar):
    s = reduced_split(cifar.labels, train_size=4000, seed=0)
    assert len(s.train) == 4000 and len(s.val) == 46_000
    assert len(np.union1d(s.train, s.val)) == 50_000


def test_split_records_dataset_fingerprint(cifar):
    s = reduced_split(cifar.labels, 4000, 1000, seed=0, dataset_fingerprint=cifar.fingerprint())
    d = s.to_dict(include_indices=True)
    assert d["dataset_fingerprint"] == cifar.fingerprint() and len(d["train_indices"]) == 4000
    assert s.fingerprint != reduced_split(cifar.labels, 4000, 1000, seed=0).fingerprint


def test_reduced_split_unbalanced_classes_are_proportional():
    labels = np.array([0] * 600 + [1] * 300 + [2] * 100)
    s = reduced_split(labels, train_size=100, val_size=50, seed=3)
    assert list(np.bincount(labels[s.train])) == [60, 30, 10]
    assert list(np.bincount(labels[s.val])) == [30, 15, 5]


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"train_size": 900, "val_size": 200}, "exceeds the dataset's 1000 images"),
        ({"train_size": -5}, "train_size must be a non-negative integer"),
    ],
)
def test_reduced_split_rejects_impossible_sizes(kwargs, match):
    with pytest.raises(DatasetError, match=match):
        reduced_split(np.arange(1000) % 10, **kwargs)


def test_reduced_split_allocates_train_and_val_jointly():
    # Rounding each subset on its own gave the only image of class 0 to both subsets (refused).
    s = reduced_split(np.array([0, 1]), train_size=1, val_size=1, seed=0)
    assert sorted([*s.train, *s.val]) == [0, 1]
    # Rounding each on its own wanted 900 train + 101 val images from a class of 1,000.
    labels = np.arange(9999) % 10
    s = reduced_split(labels, train_size=0, val_size=1001, seed=0)
    assert len(s.val) == 1001 and len(s.train) == 9999 - 1001
    assert len(np.intersect1d(s.train, s.val)) == 0
    shares = np.bincount(labels) / len(labels)
    assert np.all(np.abs(np.bincount(labels[s.val], minlength=10) - shares * 1001) < 1)
    assert np.all(np.abs(np.bincount(labels[s.train], minlength=10) - shares * 8998) < 1)
    # Three images a class, half of the six for training, the rest (default) for validation.
    s = reduced_split(np.array([0, 0, 0, 1, 1, 1]), train_size=3, seed=0)
    assert len(s.train) == 3 and len(s.val) == 3


def test_reduced_split_accepts_every_pair_that_fits_a_181_image_set():
    labels = np.repeat(np.arange(10), [19] * 9 + [10])
    sizes = np.bincount(labels)
    for train in range(1, 182):
        for val in range(0, 182 - train):
            t, v = _joint_counts(sizes, train, val)
            assert sum(t) == train and sum(v) == val
            assert all(a + b <= n for a, b, n in zip(t, v, sizes))


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"train_size": 2000}, "train_size 2000 exceeds the dataset's 1000 images"),
        ({"train_size": 0, "val_size": 1000}, "the split leaves no training images"),
        ({"train_size": 0, "val_size": 1001}, "val_size 1001 exceeds the dataset's 1000 images"),
        ({"val_size": "x" * 10_000}, "val_size must be a non-negative integer or None, got 'xxx"),
    ],
)
def test_reduced_split_refuses_only_what_does_not_fit(kwargs, match):
    with pytest.raises(DatasetError, match=match) as info:
        reduced_split(np.arange(1000) % 10, **kwargs)
    assert len(str(info.value)) < 300


def test_file_uri_goes_through_pyarrow(cifar_test):
    ds = open_dataset(f"file://{cifar_test}")
    assert isinstance(ds, ParquetDataset) and len(ds) == 10_000


def test_fingerprint_is_stable_and_content_sensitive(tmp_path, cifar):
    rows = [cifar.encoded(i) for i in range(20)]
    labels = cifar.labels[:20].tolist()
    a = ParquetDataset(str(_write_parquet(tmp_path / "a.parquet", rows, labels)))
    b = ParquetDataset(str(_write_parquet(tmp_path / "b.parquet", rows, labels)))
    c = ParquetDataset(str(_write_parquet(tmp_path / "c.parquet", rows[:-1] + [rows[0]], labels)))
    assert a.fingerprint() == b.fingerprint() != c.fingerprint()


# ------------------------------------------------------------------------------------------------
# ImageFolder and torchvision CIFAR-10
# ------------------------------------------------------------------------------------------------


def test_imagefolder_tree_loads_with_same_labels(tmp_path, cifar):
    idx = np.concatenate([np.flatnonzero(cifar.labels == c)[:3] for c in range(10)])
    root = tmp_path / "tree"
    for i in idx:
        d = root / cifar.classes[cifar.labels[i]]
        d.mkdir(parents=True, exist_ok=True)
        (d / f"{i:05d}.jpg").write_bytes(cifar.encoded(int(i)))
    (root / "cat" / "notes.txt").write_text("not an image")
    ds = open_dataset(root)
    assert isinstance(ds, ImageFolderDataset)
    assert ds.classes == cifar.classes
    assert np.array_equal(ds.labels, cifar.labels[idx])
    images, _ = ds.images(range(len(ds)))
    ref, _ = cifar.images(idx)
    assert np.array_equal(images, ref)


def test_grayscale_rgba_and_mixed_sizes_become_rgb_of_one_size(tmp_path):
    rng = np.random.default_rng(0)
    gray = _png(rng.integers(0, 255, (40, 30), dtype=np.uint8))
    rgba = _png(rng.integers(0, 255, (32, 32, 4), dtype=np.uint8))
    rgb = _png(rng.integers(0, 255, (64, 48, 3), dtype=np.uint8))
    ds = ParquetDataset(str(_write_parquet(tmp_path / "m.parquet", [gray, rgba, rgb], [0, 1, 1])))
    assert ds.classes == ("0", "1")
    assert ds.image(0).shape == (40, 30, 3) and ds.image(1).shape == (32, 32, 3)
    gray_rgb = ds.image(0)
    assert np.array_equal(gray_rgb[..., 0], gray_rgb[..., 1])
    with pytest.raises(DatasetError, match="different sizes.*image size"):
        ds.images([0, 1, 2])
    batch, _ = ds.images([0, 1, 2], size=32)
    assert batch.shape == (3, 32, 32, 3) and batch.dtype == np.uint8


def _jpeg_turned(array: np.ndarray) -> bytes:
    """A JPEG stored as ``array`` whose EXIF orientation (6: rotate 90 degrees) turns it on decoding."""
    exif = Image.Exif()
    exif[0x0112] = 6
    buf = io.BytesIO()
    Image.fromarray(array).save(buf, format="JPEG", exif=exif.tobytes())
    return buf.getvalue()


def test_own_image_size_of_a_dataset_of_one_size(tmp_path):
    """The size an automatic ``image_size`` trains at: the shorter side of the one size every image
    has, as decoding gives it (EXIF orientation applied), read from the headers."""
    from autoaug.proxy_models.train import TrainConfig, resolve_config

    rng = np.random.default_rng(0)
    root = tmp_path / "signs"
    for c, n in (("a", 5), ("b", 3)):
        (root / c).mkdir(parents=True)
        for i in range(n):  # 40 wide, 48 high
            Image.fromarray(rng.integers(0, 255, (48, 40, 3), dtype=np.uint8)).save(root / c / f"{i}.png")
    (root / "b" / "turned.jpg").write_bytes(_jpeg_turned(rng.integers(0, 255, (40, 48, 3), dtype=np.uint8)))
    ds = open_dataset(root)
    assert ds.image_shapes() == {(48, 40): 9} and ds.image(8).shape == (48, 40, 3)
    assert ds.own_image_size() == 40  # the longer side is center-cropped, nothing is scaled
    config = resolve_config(TrainConfig.from_preset("cpu", data=str(root), train_size=4, val_size=2))
    assert config.image_size == 40 and config.is_resolved
    assert resolve_config(TrainConfig.from_preset("cpu", data=str(root), image_size=24), ds).image_size == 24


def test_own_image_size_of_images_of_several_sizes_asks_for_one(tmp_path):
    rng = np.random.default_rng(0)
    images = [_png(rng.integers(0, 255, shape, dtype=np.uint8)) for shape in [(30, 40, 3)] * 3 + [(64, 64, 3)] * 2]
    ds = ParquetDataset(str(_write_parquet(tmp_path / "m.parquet", images, [0, 1, 0, 1, 0])))
    assert ds.image_shapes() == {(30, 40): 3, (64, 64): 2}  # most common first
    with pytest.raises(DatasetError) as info:
        ds.own_image_size()
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(
        f"{ds.source}: the image size is automatic (the data's own size), but the images come "
        "in 2 sizes (width x height 40x30: 3 images, 64x64: 2 images); give one: --image-size N"
    )
    assert "e.g. --image-size 30, the shorter side of the most common size" in message


def test_an_unreadable_image_header_names_the_row(tmp_path):
    rng = np.random.default_rng(0)
    good = _png(rng.integers(0, 255, (8, 8, 3), dtype=np.uint8))
    ds = ParquetDataset(str(_write_parquet(tmp_path / "g.parquet", [good, b"\x89PNG\r\n\x1a\nbroken"], [0, 0])))
    with pytest.raises(DatasetError, match=r"g.parquet row 1: truncated PNG"):
        ds.image_shapes()


def test_a_null_image_names_its_row_once(tmp_path):
    """A null image is reported as `FILE row N: image is null`, the file and row once (every path
    that reads it: decoding one image, several, or the bytes DALI is fed)."""
    good = _png(np.zeros((8, 8, 3), dtype=np.uint8))
    path = tmp_path / "x.parquet"
    pq.write_table(pa.table({"image": pa.array([good, None, good], pa.binary()), "label": pa.array([0, 1, 0])}), path)
    ds = ParquetDataset(str(path))
    for read in (lambda: ds.image(1), lambda: ds.images([0, 1]), lambda: ds.encoded_numpy(1)):
        with pytest.raises(DatasetError) as info:
            read()
        assert str(info.value) == f"{path} row 1: image is null"


def test_split_classes_are_checked_before_training(tmp_path):
    """Fewer than 2 classes in training: an error with the counts; a declared class with no training
    image, or validation without a class training has: one DataWarning line each, with the counts."""
    import warnings

    from autoaug.core.errors import DataWarning
    from autoaug.proxy_models.splits import config_split
    from autoaug.proxy_models.train_config import TrainConfig

    images = [_png(np.full((8, 8, 3), i, dtype=np.uint8)) for i in range(60)]
    one = open_dataset(str(_write_parquet(tmp_path / "one.parquet", images, [0] * 60, classes=["cat", "dog"])))
    with pytest.raises(
        DatasetError,
        match=r"one.parquet: all 40 training images are of one class, 'cat' \(60 images "
        r"in the data\); the data hold 1 class \(2 declared\); expected at least 2",
    ):
        config_split(one, TrainConfig(train_size=40, val_size=10))

    labels = [i % 2 for i in range(57)] + [2, 2, 2]  # 'bird': 3 images; 'ship' declared, none
    rare = open_dataset(
        str(_write_parquet(tmp_path / "rare.parquet", images, labels, classes=["cat", "dog", "bird", "ship"]))
    )

    def split_warnings(**sizes):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            split = config_split(rare, TrainConfig(**sizes))
        assert all(issubclass(w.category, DataWarning) and "\n" not in str(w.message) for w in caught)
        return split, [str(w.message) for w in caught]

    split, messages = split_warnings(train_size=40, val_size=4)
    assert messages[0] == (
        f"{rare.source}: 1 of 4 classes have no training image in the split (40 training images): "
        "'ship' (0 images in the data); the model never learns them (a larger train_size or "
        "--train-per-class gives every class images)"
    )
    assert set(rare.labels[split.val]) == {0, 1} and len(messages) == 2
    assert messages[1] == (
        f"{rare.source}: validation (4 images) has no image of 1 of the 3 classes in training: "
        "'bird' (3 images in the data); their accuracy is not measured (a larger val_size covers them)"
    )
    _, messages = split_warnings(train_size=40, val_size=0)  # no validation asked for: nothing to warn about it
    assert len(messages) == 1 and "no training image" in messages[0]


def _fake_cifar_batches(root: Path, n_train: int = 20, n_test: int = 10) -> np.ndarray:
    """torchvision's on-disk CIFAR-10 format (pickled dicts of flat CHW rows)."""
    base = root / "cifar-10-batches-py"
    base.mkdir(parents=True)
    rng = np.random.default_rng(0)
    data = rng.integers(0, 255, (n_train, 3 * 32 * 32), dtype=np.uint8)
    labels = (np.arange(n_train) % 10).tolist()
    for k in range(1, 6):
        part = slice((k - 1) * n_train // 5, k * n_train // 5)
        with open(base / f"data_batch_{k}", "wb") as f:
            pickle.dump({"data": data[part], "labels": labels[part]}, f)
    with open(base / "test_batch", "wb") as f:
        pickle.dump({"data": data[:n_test], "labels": labels[:n_test]}, f)
    with open(base / "batches.meta", "wb") as f:
        pickle.dump({"label_names": list(CIFAR_CLASSES)}, f)
    return data.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)


def test_torchvision_cifar10_layout(tmp_path, monkeypatch):
    import torchvision.datasets.cifar as tv_cifar

    monkeypatch.setattr(tv_cifar, "check_integrity", lambda *a, **k: True)  # our files have other md5s
    pixels = _fake_cifar_batches(tmp_path)
    ds = open_dataset(tmp_path)
    assert isinstance(ds, TorchvisionCIFAR10)
    assert ds.classes == CIFAR_CLASSES and len(ds) == 20
    assert np.array_equal(ds.image(3), pixels[3])
    assert ds.own_image_size() == 32  # from the pixels it holds
    assert open_dataset(f"cifar10:{tmp_path}", split="test").labels.shape == (10,)
    # PNG round trip is lossless, so the DALI decode path sees the same pixels.
    assert np.array_equal(np.asarray(Image.open(io.BytesIO(ds.encoded(3)))), pixels[3])


def test_torchvision_cifar10_offline_says_how_to_point_at_local_data(tmp_path, monkeypatch):
    from urllib.error import URLError

    from torchvision.datasets import CIFAR10

    def offline(self):
        raise URLError("[Errno -3] Temporary failure in name resolution")

    monkeypatch.setattr(CIFAR10, "download", offline)
    with pytest.raises(DatasetError, match=r"downloading it failed.*Offline\? Point --data at local data"):
        open_dataset(f"cifar10:{tmp_path}")


# ------------------------------------------------------------------------------------------------
# Bad input
# ------------------------------------------------------------------------------------------------


def test_missing_path():
    with pytest.raises(DatasetError, match="dataset not found: /nonexistent/data"):
        open_dataset("/nonexistent/data")


def test_missing_column_lists_the_columns(tmp_path, cifar):
    path = _write_parquet(tmp_path / "cols.parquet", [cifar.encoded(0)], [0], image_col="jpeg")
    with pytest.raises(DatasetError, match=r"missing column\(s\) \['image'\].*columns \['jpeg', 'label'\]"):
        open_dataset(path)
    ds = open_dataset(path, image_column="jpeg")
    assert len(ds) == 1


def test_label_outside_class_range_names_the_row(tmp_path, cifar):
    rows = [cifar.encoded(i) for i in range(4)]
    path = _write_parquet(tmp_path / "labels.parquet", rows, [0, 1, 12, 2], classes=CIFAR_CLASSES)
    with pytest.raises(DatasetError, match=r"labels.parquet row 2: label 12 is outside the class range 0..9"):
        open_dataset(path)
    neg = _write_parquet(tmp_path / "neg.parquet", rows, [0, -1, 1, 2], classes=CIFAR_CLASSES)
    with pytest.raises(DatasetError, match="row 1: label -1"):
        open_dataset(neg)


def test_empty_dataset(tmp_path):
    path = _write_parquet(tmp_path / "empty.parquet", [], [])
    with pytest.raises(DatasetError, match="the dataset is empty"):
        open_dataset(path)
    (tmp_path / "tree" / "cat").mkdir(parents=True)
    with pytest.raises(DatasetError, match="the dataset is empty"):
        open_dataset(tmp_path / "tree")


def test_truncated_jpeg_names_the_row_and_skip_corrupt_counts(tmp_path, cifar):
    rows = [cifar.encoded(i) for i in range(6)]
    rows[4] = rows[4][: len(rows[4]) // 2]
    ds = open_dataset(_write_parquet(tmp_path / "trunc.parquet", rows, [0] * 6, classes=CIFAR_CLASSES))
    with pytest.raises(DatasetError, match=r"trunc.parquet row 4: truncated JPEG"):
        ds.images(range(6))
    with pytest.raises(DatasetError, match=r"row 4: truncated JPEG"):
        ds.validate_encoded(range(6))
    images, kept = ds.images(range(6), skip_corrupt=True)
    assert images.shape[0] == 5 and 4 not in kept
    assert len(ds.skipped_rows) == 1 and "row 4" in ds.skipped_rows[0]


def test_garbage_bytes_are_reported(tmp_path):
    ds = ParquetDataset(str(_write_parquet(tmp_path / "junk.parquet", [b"not an image at all"], [0])))
    with pytest.raises(DatasetError, match="row 0: unrecognised image format"):
        ds.image(0)


# ------------------------------------------------------------------------------------------------
# Labels and class names
# ------------------------------------------------------------------------------------------------


def _tiny_png() -> bytes:
    return _png(np.zeros((4, 4, 3), np.uint8))


def _labels_parquet(path: Path, labels, *, classes_meta: bytes | None = None, type_=None) -> Path:
    table = pa.table(
        {
            "image": pa.array([_tiny_png()] * len(labels), pa.binary()),
            "label": pa.array(labels, type_ if type_ is not None else pa.int64()),
        }
    )
    if classes_meta is not None:
        table = table.replace_schema_metadata({b"classes": classes_meta})
    pq.write_table(table, path)
    return path


@pytest.mark.parametrize(
    "label, k",
    [(17, "18"), (1_000_000, "1,000,001"), (10**9, "1,000,000,001"), (2**63 - 1, "9,223,372,036,854,775,808")],
)
def test_labels_without_class_names_must_be_0_to_k_minus_1(tmp_path, label, k):
    # Before: 17 trained an 18-class model, 10^6 a 1,000,001-class one, 10^9 ran out of memory.
    path = _labels_parquet(tmp_path / "l.parquet", [0, 1, 1, label])
    with pytest.raises(DatasetError) as info:
        open_dataset(path)
    msg = str(info.value)
    assert f"labels run 0..{label} and" in msg and f"of these {k} labels have no rows: 2, 3, 4" in msg
    assert "... (" in msg and "pass classes=/num_classes= to open_dataset" in msg
    assert "\n" not in msg and len(msg) < 500


def test_labels_without_class_names_all_present_name_the_classes(tmp_path):
    ds = open_dataset(_labels_parquet(tmp_path / "l.parquet", [2, 0, 1, 1]))
    assert ds.classes == ("0", "1", "2") and ds.num_classes == 3
    with pytest.raises(DatasetError, match=r"run 0..4 and 2 of these 5 labels have no rows: 1, 3;"):
        open_dataset(_labels_parquet(tmp_path / "gap.parquet", [0, 2, 4]))
    with pytest.raises(DatasetError, match=r"row 1: label -3 is negative; expected class labels 0..K-1"):
        open_dataset(_labels_parquet(tmp_path / "neg.parquet", [0, -3, 1]))
    with pytest.raises(DatasetError, match=r"row 1: label 18446744073709551615 is outside any class range"):
        open_dataset(_labels_parquet(tmp_path / "u64.parquet", [0, 2**64 - 1], type_=pa.uint64()))


def test_num_classes_and_class_names_from_the_caller(tmp_path):
    path = _labels_parquet(tmp_path / "l.parquet", [0, 1, 17])
    ds = open_dataset(path, num_classes=20)  # classes without rows are fine when the caller says so
    assert ds.num_classes == 20 and ds.classes[17] == "17"
    with pytest.raises(
        DatasetError,
        match=r"row 2: label 17 is outside the class range 0..9 \(10 classes\); "
        r"1 row\(s\) affected, with label\(s\) 17$",
    ):
        open_dataset(path, num_classes=10)
    names = [f"c{i}" for i in range(18)]
    assert open_dataset(path, classes=names).classes == tuple(names)
    assert open_dataset(path, classes=np.array(names)).classes == tuple(names)
    with pytest.raises(
        DatasetError,
        match=r"class names \(given by the caller\) must be a sequence of strings, "
        r"got str 'c0,c1",
    ):
        open_dataset(path, classes=",".join(names))
    with pytest.raises(DatasetError, match="3 class names given but num_classes=18"):
        open_dataset(path, classes=["a", "b", "c"], num_classes=18)
    with pytest.raises(
        DatasetError,
        match=r"num_classes 1000000000000000000000000000000 is invalid; "
        r"expected an integer from 1 to 100,000",
    ):
        open_dataset(path, num_classes=10**30)
    with pytest.raises(DatasetError, match=r"class name 1 \(given by the caller\) is ''"):
        open_dataset(path, classes=["a", ""] + names[2:])


def test_labels_outside_the_stored_class_names_are_listed(tmp_path):
    path = _labels_parquet(tmp_path / "l.parquet", [0, 1, 12, 15, 12], classes_meta=b"a,b,c")
    with pytest.raises(
        DatasetError,
        match=r"l.parquet row 2: label 12 is outside the class range 0..2 "
        r"\(3 classes\); 3 row\(s\) affected, with label\(s\) 12, 15$",
    ):
        open_dataset(path)
    many = _labels_parquet(tmp_path / "many.parquet", list(range(3, 40)), classes_meta=b"a,b,c")
    with pytest.raises(DatasetError, match=r"label\(s\) 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, \.\.\. \(37 in all\)$"):
        open_dataset(many)


@pytest.mark.parametrize(
    "meta, match",
    [
        (b"a,,b", r"class name 1 \(schema metadata 'classes'\) is ''; expected a non-empty string"),
        (b"a,b,a", r"class name 'a' \(schema metadata 'classes'\) appears twice \(classes 0 and 2\)"),
        (b"\xff\xfe,b", r"the schema metadata 'classes' is not UTF-8 text \(invalid start byte at byte 0\)"),
        (
            b",".join(b"c%d" % i for i in range(100_001)),
            r"more than 100,000 class names \(schema metadata "
            r"'classes'\); expected 1 to 100,000",
        ),
    ],
)
def test_bad_class_names_in_the_metadata(tmp_path, meta, match):
    with pytest.raises(DatasetError, match=match) as info:
        open_dataset(_labels_parquet(tmp_path / "m.parquet", [0, 1], classes_meta=meta))
    assert str(info.value).startswith(str(tmp_path / "m.parquet")) and len(str(info.value)) < 300


def test_long_class_name_gives_a_short_message(tmp_path):
    name = "x" * 100_000
    with pytest.raises(DatasetError) as info:
        open_dataset(_labels_parquet(tmp_path / "m.parquet", [0, 1], classes_meta=f"{name},{name}".encode()))
    assert "appears twice" in str(info.value) and len(str(info.value)) < 400


def test_caller_classes_must_agree_with_an_imagefolder_tree(tmp_path):
    for cls in ("cat", "dog"):
        (tmp_path / "tree" / cls).mkdir(parents=True)
        (tmp_path / "tree" / cls / "a.png").write_bytes(_tiny_png())
    assert open_dataset(tmp_path / "tree", num_classes=2).classes == ("cat", "dog")
    with pytest.raises(DatasetError, match="has 2 classes, but num_classes=3 was given"):
        open_dataset(tmp_path / "tree", num_classes=3)
    with pytest.raises(DatasetError, match=r"its classes \['cat', 'dog'\] differ from the class names given"):
        open_dataset(tmp_path / "tree", classes=["dog", "cat"])


def test_decode_cache_sees_a_file_rewritten_in_place(tmp_path):
    import os

    path = tmp_path / "d.parquet"
    _write_parquet(path, [_png(np.full((4, 4, 3), 10, np.uint8))] * 2, [0, 1])
    first, _ = open_dataset(path).images([0, 1])
    _write_parquet(path, [_png(np.full((4, 4, 3), 200, np.uint8))] * 2, [0, 1])  # same path, same rows
    os.utime(path, ns=(os.stat(path).st_atime_ns, os.stat(path).st_mtime_ns + 10**9))
    second, _ = open_dataset(path).images([0, 1])
    assert first[0, 0, 0, 0] == 10 and second[0, 0, 0, 0] == 200

    tree = tmp_path / "tree" / "a"
    tree.mkdir(parents=True)
    (tree / "x.png").write_bytes(_png(np.full((4, 4, 3), 10, np.uint8)))
    first, _ = open_dataset(tmp_path / "tree").images([0])
    (tree / "x.png").write_bytes(_png(np.full((4, 4, 3), 200, np.uint8)))
    os.utime(tree / "x.png", ns=(0, os.stat(tree / "x.png").st_mtime_ns + 10**9))
    second, _ = open_dataset(tmp_path / "tree").images([0])
    assert first[0, 0, 0, 0] == 10 and second[0, 0, 0, 0] == 200
