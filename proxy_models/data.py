"""Image classification datasets and validation of their contents (AutoAugment's reduced splits
of them: :mod:`autoaug.proxy_models.splits`).

(Over 600 lines: the three sources share one validation path that is kept in one place so that
every source rejects bad input the same way; decoding image bytes is
:mod:`autoaug.proxy_models.images`.)

One interface, :class:`ImageDataset`, over three sources:

* a Parquet file, or a folder of Parquet files, with an encoded-image column (JPEG/PNG bytes) and an
  integer label column (names configurable). Any path or URI ``pyarrow`` reaches works
  (``s3://...``). A folder holding ``train.parquet``/``test.parquet`` picks the file for ``split``.
* an ImageFolder tree ``root/<class_name>/*.jpg|png|...`` (class index = sorted folder order, as in
  torchvision's ``ImageFolder``);
* CIFAR-10 in torchvision's format, ``cifar10:ROOT`` (downloaded by torchvision when online).

Every dataset yields uint8 HWC RGB images (grayscale and RGBA converted), integer labels and class
names. Bad input (a missing path or column, an empty dataset, a label outside the class range, an
undecodable or truncated image) raises :class:`DatasetError` naming the file/row and the problem,
before any training starts.

Classes: the class names come from the caller (``classes=`` / ``num_classes=``), from the data
(Parquet schema metadata ``classes``, ImageFolder folder names, CIFAR-10), or, for a Parquet file
without names, from the labels, which must then be ``0..K-1`` with every class present: a stray
label 17 (or 10^9) is reported, listing the labels without rows, instead of silently making an
18-class (or 10^9-class) model.
"""

from __future__ import annotations

import hashlib
import io
import itertools
import os
import threading
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from autoaug.core.errors import DataError
from autoaug.core.location import Location, is_uri
from autoaug.core.values import clip, short_repr
from autoaug.proxy_models.images import check_encoded, dali_decode_problem, decode_image, to_rgb_array

if TYPE_CHECKING:
    from autoaug.proxy_models.groups import GroupSpec

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff", ".ppm", ".pgm")


class DatasetError(DataError):
    """A dataset that cannot be used as given (the message names the file/row and the problem).

    The :class:`autoaug.core.errors.DataError` of this package (so also an ``AutoaugError`` and a
    ``ValueError``): one line of at most :data:`MAX_MESSAGE_CHARS` characters."""

    def __init__(self, message: object = "", *args: object) -> None:
        super().__init__(clip(str(message), MAX_MESSAGE_CHARS), *args)


#: Longest error message (one line) a dataset problem produces; values quoted in messages are
#: shortened (middle elided) so that hostile input cannot make a huge or multi-line message.
MAX_MESSAGE_CHARS = 1000


#: Most classes a dataset may have (class names from the data or the caller, ``num_classes``).
MAX_CLASSES = 100_000
_LISTED = 10  # values listed in an error message before "..."


def _list_values(values: Sequence[int], total: int) -> str:
    """``1, 5, 7`` or ``1, 5, 7, ... (1,000 in all)``: at most :data:`_LISTED` values."""
    shown = ", ".join(str(v) for v in list(values)[:_LISTED])
    return shown if total <= _LISTED else f"{shown}, ... ({total:,} in all)"


def _missing_labels(present: np.ndarray, k: int) -> list[int]:
    """The first :data:`_LISTED` labels of ``0..k-1`` not in sorted unique ``present``, without
    materialising ``0..k-1`` (``k`` may be 10^18)."""
    out: list[int] = []
    expected = 0
    for value in present.tolist() + [k]:
        while expected < value and len(out) < _LISTED:
            out.append(expected)
            expected += 1
        if len(out) >= _LISTED:
            break
        expected = value + 1
    return out


def _check_class_names(names: Sequence[object], source: str, origin: str) -> tuple[str, ...]:
    """Class names as a tuple of strings: 1..MAX_CLASSES non-empty, distinct strings."""
    try:
        if isinstance(names, (str, bytes)):
            raise TypeError
        names = list(itertools.islice(iter(names), MAX_CLASSES + 1))
    except TypeError:
        raise DatasetError(
            f"{source}: class names ({origin}) must be a sequence of strings, got "
            f"{type(names).__name__} {short_repr(names)}"
        ) from None
    if not 1 <= len(names) <= MAX_CLASSES:
        many = f"more than {MAX_CLASSES:,}" if len(names) > MAX_CLASSES else "0"
        raise DatasetError(f"{source}: {many} class names ({origin}); expected 1 to {MAX_CLASSES:,}")
    seen: dict[str, int] = {}
    for i, name in enumerate(names):
        if not isinstance(name, str) or not name:
            raise DatasetError(
                f"{source}: class name {i} ({origin}) is {short_repr(name)}; expected a non-empty string"
            )
        if name in seen:
            raise DatasetError(
                f"{source}: class name {short_repr(name)} ({origin}) appears twice "
                f"(classes {seen[name]} and {i}); expected distinct names"
            )
        seen[name] = i
    return tuple(names)


def _resolve_classes(
    labels: np.ndarray, source: str, classes: Sequence[str] | None, num_classes: int | None, meta_classes: bytes | None
) -> tuple[str, ...]:
    """The class names of a dataset whose rows carry integer ``labels``.

    In order: the caller's ``classes``; the caller's ``num_classes`` (names ``"0"..``); the names
    stored with the data (``meta_classes``, comma-separated UTF-8); otherwise the labels must be
    ``0..K-1`` with every class present (a label of 17 alone must not make an 18-class model).
    Labels outside the classes are reported by :meth:`ImageDataset._check_labels`.
    """
    if num_classes is not None:
        if (
            isinstance(num_classes, bool)
            or not isinstance(num_classes, (int, np.integer))
            or not (1 <= num_classes <= MAX_CLASSES)
        ):
            raise DatasetError(
                f"num_classes {short_repr(num_classes)} is invalid; expected an integer from 1 to {MAX_CLASSES:,}"
            )
    if classes is not None:
        names = _check_class_names(classes, source, "given by the caller")
        if num_classes is not None and len(names) != num_classes:
            raise DatasetError(f"{source}: {len(names)} class names given but num_classes={num_classes}")
        return names
    if num_classes is not None:
        return tuple(str(i) for i in range(int(num_classes)))
    if meta_classes is not None:
        try:
            text = meta_classes.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise DatasetError(
                f"{source}: the schema metadata 'classes' is not UTF-8 text ({exc.reason} "
                f"at byte {exc.start}); expected comma-separated class names"
            ) from None
        return _check_class_names(text.split(","), source, "schema metadata 'classes'")
    if len(labels) == 0:
        return ()
    if labels.min() < 0:
        i = int(np.argmin(labels))
        raise DatasetError(f"{source} row {i}: label {int(labels[i])} is negative; expected class labels 0..K-1")
    present = np.unique(labels)
    k = int(present[-1]) + 1
    if present.size != k:
        missing = _missing_labels(present, k)
        raise DatasetError(
            f"{source}: the data has no class names, so its labels must be 0..K-1 with every class "
            f"present, but the labels run 0..{k - 1} and {k - present.size:,} of these {k:,} labels have "
            f"no rows: {_list_values(missing, k - present.size)}; store the class names (schema "
            "metadata 'classes', comma-separated) or pass classes=/num_classes= to open_dataset"
        )
    return tuple(str(i) for i in range(k))


# ----------------------------------------------------------------------------------------------
# The dataset interface
# ----------------------------------------------------------------------------------------------

_DECODE_CACHE: OrderedDict[tuple, tuple[np.ndarray, np.ndarray]] = OrderedDict()
_DECODE_CACHE_LOCK = threading.Lock()
#: :meth:`ImageDataset.image_shapes` per dataset (``cache_key``), under the same lock.
_SHAPES_CACHE: dict[tuple, dict[tuple[int, int], int]] = {}
_DECODE_CACHE_MAX_BYTES = int(os.environ.get("AUTOAUG_DECODE_CACHE_MB", "2048")) * 2**20


class ImageDataset:
    """Images with integer labels and class names. Subclasses implement :meth:`encoded` and
    optionally :meth:`_decoded_array` (sources that already hold pixels)."""

    source: str
    classes: tuple[str, ...]
    labels: np.ndarray  # int64, one per row

    def __len__(self) -> int:
        return int(self.labels.shape[0])

    @property
    def num_classes(self) -> int:
        return len(self.classes)

    def describe_row(self, index: int) -> str:
        """Human-readable location of a row, for error messages."""
        return f"{self.source} row {index}"

    def encoded(self, index: int) -> bytes:
        """The encoded image bytes of one row (JPEG, PNG, ...)."""
        raise NotImplementedError

    def _decoded_array(self, index: int) -> np.ndarray | None:
        return None

    def image(self, index: int, size: int | None = None) -> np.ndarray:
        """One image as uint8 HWC RGB (resized + center-cropped to ``size`` when given)."""
        arr = self._decoded_array(index)
        if arr is not None:
            return to_rgb_array(arr, size)
        data = self.encoded(index)  # a null image's DatasetError already names the row
        try:
            return decode_image(data, size)
        except ValueError as exc:
            raise DatasetError(f"{self.describe_row(index)}: {exc}") from None

    def images(
        self, indices: Sequence[int] | np.ndarray, size: int | None = None, *, skip_corrupt: bool = False
    ) -> tuple[np.ndarray, np.ndarray]:
        """Decode ``indices`` into one uint8 NHWC array (all images must share a size, or pass
        ``size``). Returns ``(images, kept_indices)``; ``kept_indices`` differs from ``indices`` only
        with ``skip_corrupt=True``, in which case the skipped rows are counted in
        ``self.skipped_rows``. Decoded arrays are cached per process (``AUTOAUG_DECODE_CACHE_MB``),
        so trials reusing one worker decode their split once."""
        idx = np.asarray(indices, dtype=np.int64)
        key = (self.cache_key(), hashlib.sha1(idx.tobytes()).hexdigest(), size, skip_corrupt)
        with _DECODE_CACHE_LOCK:
            hit = _DECODE_CACHE.get(key)
            if hit is not None:
                _DECODE_CACHE.move_to_end(key)
        if hit is not None:
            return hit
        out: list[np.ndarray] = []
        kept_list: list[int] = []
        skipped: list[str] = []
        for i in idx.tolist():
            try:
                out.append(self.image(i, size))
                kept_list.append(i)
            except DatasetError as exc:
                if not skip_corrupt:
                    raise
                skipped.append(str(exc))
        if not out:
            raise DatasetError(f"{self.source}: no decodable images among {len(idx)} requested rows")
        shapes = {a.shape for a in out}
        if len(shapes) > 1:
            raise DatasetError(
                f"{self.source}: images have different sizes {sorted(shapes)[:4]}...; "
                "pass an image size (e.g. --image-size 32) so they are resized to one size"
            )
        batch = np.stack(out)
        kept = np.asarray(kept_list, dtype=np.int64)
        self.skipped_rows = getattr(self, "skipped_rows", []) + skipped
        with _DECODE_CACHE_LOCK:
            _DECODE_CACHE[key] = (batch, kept)
            while sum(b.nbytes for b, _ in _DECODE_CACHE.values()) > _DECODE_CACHE_MAX_BYTES and len(_DECODE_CACHE) > 1:
                _DECODE_CACHE.popitem(last=False)
        return batch, kept

    def image_shapes(self) -> dict[tuple[int, int], int]:
        """How many images have each ``(height, width)`` as decoding gives them (EXIF orientation
        applied), most common first. Read from the image headers, nothing decoded (about 2 s for
        50,000 images); cached per process, keyed like the decoded images. An unreadable image is
        a :class:`DatasetError` naming its row."""
        key = self.cache_key()
        with _DECODE_CACHE_LOCK:
            hit = _SHAPES_CACHE.get(key)
        if hit is not None:
            return dict(hit)
        from PIL import Image

        counts: dict[tuple[int, int], int] = {}
        for i in range(len(self)):
            arr = self._decoded_array(i)
            if arr is not None:
                shape = (int(arr.shape[0]), int(arr.shape[1]))
            else:
                data = self.encoded(i)
                try:
                    with Image.open(io.BytesIO(data)) as img:
                        width, height = img.size
                        turned = img.getexif().get(0x0112) in (5, 6, 7, 8)  # EXIF orientation: 90 degrees
                except Exception as exc:  # PIL raises OSError, SyntaxError, ValueError... for bad data
                    problem = check_encoded(data) or f"cannot read the image size: {clip(str(exc), 300)}"
                    raise DatasetError(f"{self.describe_row(i)}: {problem}") from None
                shape = (width, height) if turned else (height, width)
            counts[shape] = counts.get(shape, 0) + 1
        ordered = dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))
        with _DECODE_CACHE_LOCK:
            _SHAPES_CACHE[key] = ordered
        return dict(ordered)

    def own_image_size(self) -> int:
        """The square size a run trains at when its ``image_size`` is automatic: the shorter side
        of the images, which must all have one size (a dataset of 40x48 images, width x height,
        trains at 40: the longer side is center-cropped, nothing is scaled). Images of several sizes raise a
        :class:`DatasetError` asking for an explicit size."""
        shapes = self.image_shapes()
        if len(shapes) == 1:
            ((height, width),) = shapes
            return min(height, width)
        listed = ", ".join(f"{w}x{h}: {n:,} images" for (h, w), n in list(shapes.items())[:4])
        common = min(next(iter(shapes)))
        raise DatasetError(
            f"{self.source}: the image size is automatic (the data's own size), but the images come in "
            f"{len(shapes):,} sizes (width x height {listed}{', ...' if len(shapes) > 4 else ''}); give one: --image-size N "
            f"(or image_size: N in the config), e.g. --image-size {common}, the shorter side of the most common "
            "size (each image is resized so that its shorter side is N, then center-cropped to N x N)"
        )

    def validate_encoded(self, indices: Sequence[int] | np.ndarray, *, skip_corrupt: bool = False) -> np.ndarray:
        """Structural check (:func:`check_encoded`) of the rows DALI will decode. Raises
        :class:`DatasetError` for the first bad row, or (``skip_corrupt``) returns the good ones."""
        good = []
        for i in np.asarray(indices, dtype=np.int64).tolist():
            data = self.encoded(i)
            problem = check_encoded(data)
            if problem is None and (problem := dali_decode_problem(data)) is not None:
                problem += "; decode it in memory (DaliLoader(decode='memory')) or convert it to PNG"
            if problem is None:
                good.append(i)
            elif skip_corrupt:
                self.skipped_rows = getattr(self, "skipped_rows", []) + [f"{self.describe_row(i)}: {problem}"]
            else:
                raise DatasetError(f"{self.describe_row(i)}: {problem}")
        return np.asarray(good, dtype=np.int64)

    def cache_key(self) -> tuple:
        return (type(self).__name__, self.source, len(self))

    def groups(self, spec: str | GroupSpec) -> np.ndarray:
        """The group of every row, as int64 ids ``0..G-1`` numbered in order of first appearance,
        for splits that keep each group on one side (``reduced_split(..., groups=)``). ``spec``:
        ``COLUMN`` or ``COLUMN:REGEX`` (:mod:`autoaug.proxy_models.groups`). Reads the one column
        (or the file paths); no image is decoded. Cached per spec. Raises :class:`DatasetError`
        (a missing column, a null value, rows a pattern does not match) or ``UserInputError`` (a
        malformed spec), one line each."""
        from autoaug.proxy_models.groups import GroupSpec, group_ids

        spec = GroupSpec.parse(spec)
        cache = self.__dict__.setdefault("_group_cache", {})
        if spec.text not in cache:
            cache[spec.text] = group_ids(self._group_values(spec), spec, clip(self.source), self.describe_row)
        return cache[spec.text]

    def _group_values(self, spec: GroupSpec) -> Sequence[object]:
        """One value per row of ``spec.column`` (text when ``spec.pattern`` is set)."""
        raise DatasetError(
            f"{clip(self.source)}: group_by {spec.quoted}: this dataset has no columns or "
            "file paths to group by (expected a Parquet file with a group column or source_path, or "
            "an ImageFolder tree)"
        )

    def fingerprint(self) -> str:
        """sha256 identifying the dataset's content (labels and image bytes), stable across
        machines; cached on the object."""
        cached = getattr(self, "_fingerprint", None)
        if cached is None:
            h = hashlib.sha256()
            h.update(",".join(self.classes).encode())
            h.update(self.labels.astype("<i8").tobytes())
            self._update_content_hash(h)
            cached = self._fingerprint = h.hexdigest()
        return cached

    def _update_content_hash(self, h) -> None:
        for i in range(len(self)):
            data = self.encoded(i)
            h.update(len(data).to_bytes(8, "little"))
            h.update(data)

    def _check_labels(self) -> None:
        if len(self) == 0:
            raise DatasetError(f"{clip(self.source)}: the dataset is empty (0 images)")
        k = len(self.classes)
        bad = np.flatnonzero((self.labels < 0) | (self.labels >= k))
        if bad.size:
            i = int(bad[0])
            values = np.unique(self.labels[bad])
            raise DatasetError(
                f"{self.describe_row(i)}: label {int(self.labels[i])} is outside the class range "
                f"0..{k - 1} ({k} classes); {bad.size} row(s) affected, with label(s) "
                f"{_list_values(values.tolist(), values.size)}"
            )

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.source!r}, {len(self)} images, {len(self.classes)} classes)"


class ParquetDataset(ImageDataset):
    """Encoded images + labels in Parquet (one file, or every ``*.parquet`` of a folder)."""

    def __init__(
        self,
        source: str,
        *,
        image_column: str = "image",
        label_column: str = "label",
        classes: Sequence[str] | None = None,
        num_classes: int | None = None,
        split: str = "train",
    ):
        import pyarrow as pa

        source = os.fspath(source)
        self.source = source  # messages are clipped by DatasetError; the cache key needs all of it
        try:
            self._read(source, image_column, label_column, split)
        except DatasetError:
            raise
        except (pa.ArrowException, OSError, MemoryError, ValueError, TypeError, IndexError) as exc:
            # Corrupt footers/pages, truncated files, unreachable URIs: name the file and the reason.
            what = type(exc).__name__
            raise DatasetError(f"{self.source}: not readable as Parquet ({what}: {clip(str(exc), 400)})") from None
        schema, table, extra = self._schema, self._table, self._extra
        del self._table
        labels = table.column(label_column)
        if labels.null_count:
            first = int(np.flatnonzero(labels.is_null().to_numpy(zero_copy_only=False))[0])
            raise DatasetError(f"{self.source} row {first}: label is null")
        raw = labels.to_numpy()
        if raw.dtype == np.uint64 and raw.size and raw.max() > np.iinfo(np.int64).max:
            i = int(np.argmax(raw))
            raise DatasetError(
                f"{self.source} row {i}: label {int(raw[i])} is outside any class range (expected class labels 0..K-1)"
            )
        self.labels = raw.astype(np.int64)
        self._label_column = label_column
        # Parquet strings are not checked for UTF-8 when read: decode leniently (they only label rows).
        self._paths = (
            [
                None if b is None else b.decode("utf-8", "replace")
                for b in table.column("source_path").cast(pa.binary()).to_pylist()
            ]
            if extra
            else None
        )
        self.classes = _resolve_classes(
            self.labels, self.source, classes, num_classes, (schema.metadata or {}).get(b"classes")
        )
        self._check_labels()

    def _read(self, source: str, image_column: str, label_column: str, split: str) -> None:
        """Open ``source`` and read the columns (sets ``_schema``, ``_table``, ``_extra``,
        ``_images``, ``_offsets``, ``_data``); pyarrow's own errors are left to the caller."""
        import pyarrow as pa
        import pyarrow.dataset as pads
        import pyarrow.fs as pafs

        location = Location.parse(source, what="dataset")  # the one path/URI rule (file:// is local)
        fs, path = location.fs, location.path
        info = fs.get_file_info(path)
        if info.type == pafs.FileType.NotFound:
            raise DatasetError(
                f"dataset not found: {self.source} (expected a Parquet file, a folder of Parquet "
                "files, an ImageFolder tree or cifar10:ROOT)"
            )
        files: str | list[str] = path
        if info.type == pafs.FileType.Directory:
            split_file = f"{path.rstrip('/')}/{split}.parquet"
            if fs.get_file_info(split_file).type == pafs.FileType.File:
                files = split_file
                self.source = source.rstrip("/") + f"/{split}.parquet"
            else:  # every *.parquet below the folder (not a README or checksum file next to them)
                found = fs.get_file_info(pafs.FileSelector(path, recursive=True))
                files = sorted(
                    f.path
                    for f in found
                    if f.type == pafs.FileType.File
                    and f.path.endswith(".parquet")
                    and not any(part.startswith((".", "_")) for part in f.path[len(path) :].split("/"))
                )
                if not files:
                    raise DatasetError(
                        f"{self.source}: a folder without .parquet files (expected a Parquet file, "
                        "a folder of Parquet files, an ImageFolder tree or cifar10:ROOT)"
                    )
        # Which bytes were read (sizes and modification times): part of the decode-cache key, so a
        # file rewritten in place is decoded again rather than served from the cache.
        stats = fs.get_file_info([files] if isinstance(files, str) else files)
        self._file_stamp = tuple((f.path, f.size, f.mtime_ns) for f in stats)
        dataset = pads.dataset(files, filesystem=fs, format="parquet")
        self._scan = (files, fs)  # to read another column later (groups)
        schema = dataset.schema
        names = list(schema.names)
        missing = [c for c in (image_column, label_column) if c not in names]
        if missing:
            raise DatasetError(
                f"{self.source}: missing column(s) {short_repr(missing)}; the file has columns "
                f"{short_repr(names, 300)} (choose them with image_column=/label_column=, CLI "
                "--image-column/--label-column)"
            )
        image_type, label_type = schema.field(image_column).type, schema.field(label_column).type
        if not (pa.types.is_binary(image_type) or pa.types.is_large_binary(image_type)):
            raise DatasetError(
                f"{self.source}: column {short_repr(image_column)} has type {clip(str(image_type), 100)}, "
                "expected binary (encoded JPEG/PNG bytes)"
            )
        if not pa.types.is_integer(label_type):
            raise DatasetError(
                f"{self.source}: column {short_repr(label_column)} has type {clip(str(label_type), 100)}, "
                "expected an integer class index"
            )
        extra = (
            ["source_path"]
            if "source_path" in names
            and pa.types.is_string(schema.field("source_path").type)
            and "source_path" not in (image_column, label_column)
            else []
        )
        table = dataset.to_table(columns=[image_column, label_column, *extra])
        column = table.column(image_column)
        try:
            images = column.combine_chunks()
        except (pa.ArrowInvalid, pa.ArrowCapacityError):  # more than 2 GiB in a 32-bit-offset column
            images = column.cast(pa.large_binary()).combine_chunks()
        # Zero-copy views of the binary column: offsets (absolute positions into the data buffer).
        _, offsets_buf, data_buf = images.buffers()
        offset_type = np.int64 if pa.types.is_large_binary(images.type) else np.int32
        self._images = images
        self._offsets = np.frombuffer(offsets_buf, dtype=offset_type)[images.offset : images.offset + len(images) + 1]
        self._data = np.frombuffer(data_buf, dtype=np.uint8) if data_buf is not None else np.zeros(0, np.uint8)
        self._schema, self._table, self._extra = schema, table, extra

    def cache_key(self) -> tuple:
        return (*super().cache_key(), hashlib.sha1(repr(self._file_stamp).encode()).hexdigest())

    def describe_row(self, index: int) -> str:
        where = f" ({clip(str(self._paths[index]), 200)})" if self._paths else ""
        return f"{self.source} row {index}{where}"

    def encoded(self, index: int) -> bytes:
        value = self._images[index].as_py()
        if value is None:
            raise DatasetError(f"{self.describe_row(index)}: image is null")
        return value

    def encoded_numpy(self, index: int) -> np.ndarray:
        """Zero-copy uint8 view of one row's bytes (what DALI's decoder is fed)."""
        if self._images.null_count and not self._images[index].is_valid:
            raise DatasetError(f"{self.describe_row(index)}: image is null")
        start, end = int(self._offsets[index]), int(self._offsets[index + 1])
        return self._data[start:end]

    def _group_values(self, spec: GroupSpec) -> Sequence[object]:
        import pyarrow as pa
        import pyarrow.dataset as pads

        names = list(self._schema.names)
        what = f"{self.source}: group_by {spec.quoted}"
        if spec.column not in names:
            raise DatasetError(
                f"{what}: no column {short_repr(spec.column)}; the file has columns {short_repr(names, 300)} "
                "(expected a column of group keys, e.g. a track or patient id, or source_path:REGEX)"
            )
        if spec.column == self._label_column:
            raise DatasetError(
                f"{what}: {short_repr(spec.column)} is the class label column, so every class would be one "
                "group and no class could be on both sides of a split; expected a column of group keys"
            )
        kind = self._schema.field(spec.column).type
        if pa.types.is_dictionary(kind):
            kind = kind.value_type
        text = pa.types.is_string(kind) or pa.types.is_large_string(kind)
        if spec.pattern is not None and not text:
            raise DatasetError(
                f"{what}: column {short_repr(spec.column)} has type {clip(str(kind), 100)}; a pattern "
                f"searches text: group by {short_repr(spec.column)} alone"
            )
        if not (text or pa.types.is_integer(kind)):
            raise DatasetError(
                f"{what}: column {short_repr(spec.column)} has type {clip(str(kind), 100)}; expected "
                "integer or text group keys"
            )
        files, fs = self._scan
        try:
            column = pads.dataset(files, filesystem=fs, format="parquet").to_table(columns=[spec.column])
        except (pa.ArrowException, OSError) as exc:
            raise DatasetError(
                f"{what}: cannot read column {short_repr(spec.column)} ({type(exc).__name__}: {clip(str(exc), 300)})"
            ) from None
        values = column.column(spec.column).to_pylist()
        if len(values) != len(self):
            raise DatasetError(
                f"{what}: column {short_repr(spec.column)} has {len(values):,} rows, the images "
                f"{len(self):,} (the files changed while open?)"
            )
        return values

    def _update_content_hash(self, h) -> None:
        h.update((self._offsets - self._offsets[0]).astype("<i8").tobytes())
        h.update(self._data[int(self._offsets[0]) : int(self._offsets[-1])].tobytes())


class ImageFolderDataset(ImageDataset):
    """``root/<class_name>/<image files>``, classes in sorted folder order."""

    def __init__(self, root: str | os.PathLike):
        root = Path(root)
        if not root.is_dir():
            raise DatasetError(f"dataset not found: {root} is not a directory")
        self.source = str(root)
        class_dirs = sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
        if not class_dirs:
            raise DatasetError(f"{root}: no class folders (expected ImageFolder layout root/<class_name>/<image>)")
        files: list[Path] = []
        labels: list[int] = []
        for label, d in enumerate(class_dirs):
            for f in sorted(d.rglob("*")):
                if f.is_file() and f.suffix.lower() in IMAGE_EXTENSIONS:
                    files.append(f)
                    labels.append(label)
        self.classes = tuple(d.name for d in class_dirs)
        self._files = files
        self.labels = np.asarray(labels, dtype=np.int64)
        if not files:
            raise DatasetError(
                f"{root}: the dataset is empty (no files ending in {', '.join(IMAGE_EXTENSIONS)} "
                f"under {len(class_dirs)} class folders)"
            )
        self._check_labels()

    def describe_row(self, index: int) -> str:
        return str(self._files[index])

    def cache_key(self) -> tuple:
        stamp = self.__dict__.get("_file_stamp")
        if stamp is None:  # sizes and modification times of the files: a changed file is decoded again
            h = hashlib.sha1()
            for f in self._files:
                st = f.stat()
                h.update(f"{f}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
            stamp = self._file_stamp = h.hexdigest()
        return (*super().cache_key(), stamp)

    def encoded(self, index: int) -> bytes:
        return self._files[index].read_bytes()

    def _group_values(self, spec: GroupSpec) -> Sequence[object]:
        root = Path(self.source)
        paths = [f.relative_to(root).as_posix() for f in self._files]
        if spec.column != "source_path":
            raise DatasetError(
                f"{self.source}: group_by {spec.quoted}: an ImageFolder tree has no column "
                f"{short_repr(spec.column)}; group its images by their paths with source_path:REGEX "
                f"(paths relative to the root, e.g. {short_repr(paths[0])})"
            )
        return paths

    def _update_content_hash(self, h) -> None:
        # Relative paths and sizes: cheap for large trees (content is not re-read).
        root = Path(self.source)
        for f in self._files:
            h.update(str(f.relative_to(root)).encode())
            h.update(f.stat().st_size.to_bytes(8, "little"))


class TorchvisionCIFAR10(ImageDataset):
    """CIFAR-10 in torchvision's format (``cifar-10-batches-py`` under ``root``)."""

    def __init__(self, root: str | os.PathLike, *, split: str = "train", download: bool = True):
        from torchvision.datasets import CIFAR10

        root = Path(root).expanduser()
        self.source = f"cifar10:{root}"
        try:
            ds = CIFAR10(str(root), train=(split == "train"), download=False)
        except RuntimeError:
            if not download:
                raise DatasetError(
                    f"CIFAR-10 not found or corrupted under {root} (expected torchvision's {root}/cifar-10-batches-py)"
                ) from None
            try:
                ds = CIFAR10(str(root), train=(split == "train"), download=True)
            except Exception as exc:  # URLError, socket errors, HTTP errors...
                raise DatasetError(
                    f"CIFAR-10 is not under {root} and downloading it failed ({type(exc).__name__}: {exc}). "
                    "Offline? Point --data at local data instead: a Parquet file/folder with image bytes "
                    "and labels (e.g. AUTOAUG_CIFAR10=/path/cifar10-jpeg), an ImageFolder tree, or a folder "
                    "holding cifar-10-batches-py"
                ) from None
        self._data = ds.data  # N x 32 x 32 x 3 uint8
        self.labels = np.asarray(ds.targets, dtype=np.int64)
        self.classes = tuple(ds.classes)
        self._check_labels()

    def _decoded_array(self, index: int) -> np.ndarray:
        return self._data[index]

    def encoded(self, index: int) -> bytes:
        from PIL import Image

        buf = io.BytesIO()
        Image.fromarray(self._data[index]).save(buf, format="PNG")
        return buf.getvalue()

    def _update_content_hash(self, h) -> None:
        h.update(np.ascontiguousarray(self._data).tobytes())


def open_dataset(
    source: str | os.PathLike,
    split: str = "train",
    *,
    image_column: str = "image",
    label_column: str = "label",
    classes: Sequence[str] | None = None,
    num_classes: int | None = None,
    download: bool = True,
) -> ImageDataset:
    """Open a dataset from a path or URI.

    - ``cifar10:ROOT`` (or ``cifar10`` for ``~/.cache/autoaug/cifar10``), or a folder containing
      ``cifar-10-batches-py``: torchvision's CIFAR-10;
    - a ``.parquet`` file, a folder of Parquet files, a folder with ``<split>.parquet``, or a URI
      pyarrow reaches (``s3://bucket/data/``): :class:`ParquetDataset`;
    - any other folder: an ImageFolder tree.

    Classes: ``classes`` (names, in label order) or ``num_classes`` name the classes of a Parquet
    dataset; without them its schema metadata ``classes`` does, and without that its labels must
    be ``0..K-1`` with every class present. ImageFolder trees and CIFAR-10 name their own classes;
    ``classes``/``num_classes``, when given, must agree with them. Every problem raises
    :class:`DatasetError` (one line naming the file/row, the bad value and what was expected).
    """
    try:
        text = os.fspath(source)
    except TypeError:
        raise DatasetError(
            f"dataset source {short_repr(source)} is a {type(source).__name__}; expected a path or URI string"
        ) from None
    if isinstance(text, bytes) or "\0" in text:
        raise DatasetError(f"dataset source {short_repr(text)} is not a valid path (bytes or a NUL character)")
    if text == "cifar10" or text.startswith("cifar10:"):
        root = text.partition(":")[2] or os.path.join(Path.home(), ".cache", "autoaug", "cifar10")
        return _agree(TorchvisionCIFAR10(root, split=split, download=download), classes, num_classes)
    parquet = dict(
        image_column=image_column, label_column=label_column, classes=classes, num_classes=num_classes, split=split
    )
    if is_uri(text):
        return ParquetDataset(text, **parquet)
    path = Path(text.removeprefix("file://")).expanduser()
    try:
        exists, is_file = path.exists(), path.is_file()
    except OSError as exc:  # e.g. a name longer than the filesystem allows
        raise DatasetError(f"dataset {clip(text)} cannot be opened: {clip(exc.strerror or str(exc))}") from None
    if not exists:
        raise DatasetError(
            f"dataset not found: {clip(text)} (expected a Parquet file, a folder of Parquet "
            "files, an ImageFolder tree, or cifar10:ROOT)"
        )
    if is_file:
        if path.suffix != ".parquet":
            raise DatasetError(
                f"{clip(str(path))}: unsupported file type {short_repr(path.suffix)}; expected a "
                ".parquet file or a folder"
            )
        return ParquetDataset(str(path), **parquet)
    if (path / "cifar-10-batches-py").is_dir():
        return _agree(TorchvisionCIFAR10(path, split=split, download=False), classes, num_classes)
    if (path / f"{split}.parquet").is_file() or any(path.glob("*.parquet")):
        return ParquetDataset(str(path), **parquet)
    return _agree(ImageFolderDataset(path), classes, num_classes)


def _agree(ds: ImageDataset, classes: Sequence[str] | None, num_classes: int | None) -> ImageDataset:
    """``ds`` when the caller's ``classes``/``num_classes`` (if any) match the classes it names itself."""
    if num_classes is not None and num_classes != ds.num_classes:
        raise DatasetError(
            f"{clip(ds.source)}: has {ds.num_classes} classes, but num_classes={short_repr(num_classes)} was given"
        )
    if classes is not None and tuple(classes) != ds.classes:
        raise DatasetError(
            f"{clip(ds.source)}: its classes {short_repr(list(ds.classes))} differ from the "
            f"class names given, {short_repr(list(classes))}"
        )
    return ds
