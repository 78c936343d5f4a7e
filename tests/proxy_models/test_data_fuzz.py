"""Fuzz ``open_dataset`` with random and mutated Parquet files (hypothesis).

Whatever the file -- random tables (column types, labels, class metadata, image bytes), a valid
file with flipped, inserted or deleted bytes, a truncated file, a corrupt footer -- opening it,
decoding its rows and checking them for DALI either works or raises :class:`DatasetError` with a
one-line message of bounded length naming the file; never another exception.
"""

from __future__ import annotations

import io

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image

from autoaug.proxy_models.data import MAX_MESSAGE_CHARS, DatasetError, open_dataset

SETTINGS = settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)


def _png(value: int, mode: str = "RGB") -> bytes:
    buf = io.BytesIO()
    Image.new(mode, (6, 5), value).save(buf, "PNG")
    return buf.getvalue()


def _valid_file(compression: str = "snappy") -> bytes:
    table = pa.table(
        {
            "image": pa.array([_png(v) for v in (0, 60, 120, 180, 240, 30)], pa.binary()),
            "label": pa.array([0, 1, 2, 0, 1, 2], pa.int16()),
            "source_path": pa.array([f"c{i % 3}/{i}.png" for i in range(6)]),
        }
    )
    table = table.replace_schema_metadata({"classes": "cat,dog,eel"})
    sink = io.BytesIO()
    pq.write_table(table, sink, compression=compression)
    return sink.getvalue()


VALID = {c: _valid_file(c) for c in ("snappy", "none", "zstd")}


def _exercise(path) -> None:
    """Open, decode every row, check rows for DALI, fingerprint; only DatasetError may escape."""
    try:
        ds = open_dataset(path)
        rows = range(len(ds))
        ds.images(rows, size=8, skip_corrupt=True)
        ds.validate_encoded(rows, skip_corrupt=True)
        ds.fingerprint()
        assert len(ds.classes) >= 1 and ds.labels.dtype == np.int64
        assert ((ds.labels >= 0) & (ds.labels < len(ds.classes))).all()
    except DatasetError as exc:
        text = str(exc)
        assert "\n" not in text and 0 < len(text) <= MAX_MESSAGE_CHARS, text[:300]
        assert str(path.name) in text or "no decodable images" in text, text[:300]


@st.composite
def _mutated(draw) -> bytes:
    data = bytearray(VALID[draw(st.sampled_from(sorted(VALID)))])
    for _ in range(draw(st.integers(1, 6))):
        kind = draw(st.sampled_from(["flip", "footer", "insert", "delete", "truncate"]))
        if kind == "footer" and len(data) > 10:  # the Thrift footer (file metadata) before "<length>PAR1"
            i = len(data) - 8 - draw(st.integers(1, min(300, len(data) - 9)))
            data[i] = draw(st.integers(0, 255))
            continue
        i = draw(st.integers(0, max(0, len(data) - 1)))
        if kind == "flip" and data:
            data[i] = draw(st.integers(0, 255))
        elif kind == "insert":
            data[i:i] = draw(st.binary(min_size=1, max_size=16))
        elif kind == "delete":
            del data[i : i + draw(st.integers(1, 32))]
        else:
            del data[i:]
    return bytes(data)


@SETTINGS
@given(_mutated())
def test_mutated_parquet_files(tmp_path, data):
    path = tmp_path / "fuzz.parquet"
    path.write_bytes(data)
    _exercise(path)


_label_types = st.sampled_from(
    [
        pa.int8(),
        pa.int16(),
        pa.int32(),
        pa.int64(),
        pa.uint8(),
        pa.uint32(),
        pa.uint64(),
        pa.float32(),
        pa.string(),
        pa.bool_(),
    ]
)


@st.composite
def _tables(draw) -> pa.Table:
    n = draw(st.integers(0, 6))
    label_type = draw(_label_types)
    if pa.types.is_integer(label_type):
        info = np.iinfo(label_type.to_pandas_dtype())
        values = draw(
            st.lists(
                st.one_of(st.none(), st.integers(int(info.min), int(info.max)), st.integers(0, 4)),
                min_size=n,
                max_size=n,
            )
        )
    elif pa.types.is_floating(label_type):
        values = draw(st.lists(st.floats(width=32), min_size=n, max_size=n))
    elif pa.types.is_boolean(label_type):
        values = draw(st.lists(st.booleans(), min_size=n, max_size=n))
    else:
        values = draw(st.lists(st.text(max_size=5), min_size=n, max_size=n))
    image = st.one_of(
        st.none(),
        st.binary(max_size=40),
        st.sampled_from([_png(10), _png(200, "L"), _png(3, "P"), b"\x89PNG\r\n\x1a\n", b"\xff\xd8\xff"]),
    )
    images = draw(st.lists(image, min_size=n, max_size=n))
    image_type = draw(st.sampled_from([pa.binary(), pa.large_binary(), pa.string()]))
    if pa.types.is_string(image_type):
        images = [None if b is None else b.decode("latin-1") for b in images]
    columns = {"image": pa.array(images, image_type), "label": pa.array(values, label_type)}
    if draw(st.booleans()):
        columns["source_path"] = pa.array(
            draw(st.lists(st.one_of(st.none(), st.text(max_size=300)), min_size=n, max_size=n)), pa.string()
        )
    names = list(columns)
    if draw(st.integers(0, 9)) == 0:  # a missing or renamed column
        names[draw(st.integers(0, 1))] = draw(st.text(min_size=1, max_size=200))
    table = pa.table(list(columns.values()), names=names)
    meta = draw(
        st.one_of(
            st.none(), st.binary(max_size=40), st.sampled_from([b"a,b,c", b"a,,b", b"x,x", b"", b"\xff", b"a,b,c,d,e"])
        )
    )
    if meta is not None:
        table = table.replace_schema_metadata({b"classes": meta})
    return table


@SETTINGS
@given(_tables())
def test_random_parquet_tables(tmp_path, table):
    path = tmp_path / "random.parquet"
    pq.write_table(table, path)
    _exercise(path)


@pytest.mark.parametrize("compression", sorted(VALID))
def test_corrupt_footer_names_the_file(tmp_path, compression):
    data = bytearray(VALID[compression])
    footer_len = int.from_bytes(data[-8:-4], "little")
    start = len(data) - 8 - footer_len
    data[start : start + footer_len // 2] = b"\xff" * (footer_len // 2)
    path = tmp_path / "footer.parquet"
    path.write_bytes(bytes(data))
    with pytest.raises(DatasetError, match=r"footer.parquet: not readable as Parquet \(") as info:
        open_dataset(path)
    assert "\n" not in str(info.value) and len(str(info.value)) <= MAX_MESSAGE_CHARS
    # A footer length pointing before the start of the file, and a file that is only the magic.
    data[-8:-4] = (10**9).to_bytes(4, "little")
    path.write_bytes(bytes(data))
    with pytest.raises(DatasetError, match=r"footer.parquet: not readable as Parquet"):
        open_dataset(path)
    path.write_bytes(b"PAR1")
    with pytest.raises(DatasetError, match=r"footer.parquet: not readable as Parquet"):
        open_dataset(path)


def test_folder_of_parquet_files_ignores_other_files(tmp_path):
    (tmp_path / "part-0.parquet").write_bytes(VALID["none"])
    (tmp_path / "part-1.parquet").write_bytes(VALID["zstd"])
    (tmp_path / "README.md").write_text("not parquet")
    (tmp_path / ".hidden.parquet").write_bytes(b"junk")
    ds = open_dataset(tmp_path)
    assert len(ds) == 12 and ds.classes == ("cat", "dog", "eel")


def test_source_path_that_is_not_utf8(tmp_path):
    # Parquet strings are not validated on read; found by test_mutated_parquet_files.
    bad = pa.Array.from_buffers(
        pa.string(), 2, [None, pa.py_buffer(np.array([0, 2, 4], np.int32).tobytes()), pa.py_buffer(b"\x80\xffok")]
    )
    table = pa.table(
        {"image": pa.array([_png(0), _png(9)], pa.binary()), "label": pa.array([0, 0]), "source_path": bad}
    )
    pq.write_table(table, tmp_path / "p.parquet")
    ds = open_dataset(tmp_path / "p.parquet")
    assert ds.describe_row(1).endswith("row 1 (ok)") and "\ufffd" in ds.describe_row(0)
