"""Images of any bit depth and mode become correct 8-bit RGB, on both decode paths of the loader.

Each case is built with PIL (or a minimal PNG writer, for 16-bit RGB, which PIL does not write)
and its expected 8-bit RGB pixels are computed independently from PIL's reading of the file (the
raw 16-bit values, the palette, the EXIF rotation...). The in-memory path (:func:`decode_image`,
``DaliLoader(decode="memory")``) must match exactly; the DALI path (``decode="dali"``, DALI's
``fn.decoders.image``) within 1 (it rounds 16-bit RGB where PIL keeps the high byte). Images DALI
mis-decodes are rejected up front on the DALI path, naming the row.
"""

from __future__ import annotations

import io
import struct
import zlib

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image

from autoaug.proxy_models.data import DatasetError, ParquetDataset
from autoaug.proxy_models.images import dali_decode_problem, decode_image

S = 24  # square, so the loader's resize + crop leave the pixels alone


def _encode(img: Image.Image, fmt: str, **kwargs) -> bytes:
    buf = io.BytesIO()
    img.save(buf, fmt, **kwargs)
    return buf.getvalue()


def _png16(array: np.ndarray, color_type: int) -> bytes:
    """A 16-bit PNG (color type 0 gray, 2 RGB, 4 gray+alpha, 6 RGBA) of a uint16 array."""
    h, w = array.shape[:2]
    rows = array.astype(">u2").reshape(h, -1).tobytes()
    stride = len(rows) // h
    raw = b"".join(b"\x00" + rows[i * stride : (i + 1) * stride] for i in range(h))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 16, color_type, 0, 0, 0))
        + chunk(b"IDAT", zlib.compress(raw))
        + chunk(b"IEND", b"")
    )


def _gray(values: np.ndarray) -> np.ndarray:
    return np.repeat(np.asarray(values, np.uint8)[:, :, None], 3, axis=2)


def _round16(values: np.ndarray) -> np.ndarray:
    """16-bit -> 8-bit with rounding, computed in float (the loader uses integers)."""
    return np.rint(np.asarray(values, np.float64) * 255 / 65535).astype(np.uint8)


def _cases() -> dict[str, tuple[bytes, np.ndarray]]:
    """name -> (encoded bytes, expected uint8 S x S x 3)."""
    rng = np.random.default_rng(0)
    rgb8 = rng.integers(0, 256, (S, S, 3), dtype=np.uint8)
    # Mean ~124 on the 8-bit scale; low bytes random so rounding is exercised.
    gray16 = np.clip(rng.normal(124 * 257, 40 * 257, (S, S)), 0, 65535).astype(np.uint16)
    rgb16 = rng.integers(0, 65536, (S, S, 3)).astype(np.uint16)
    cases: dict[str, tuple[bytes, np.ndarray]] = {}

    data = _encode(Image.fromarray(gray16), "PNG")  # PIL writes mode I;16 as a 16-bit gray PNG
    with Image.open(io.BytesIO(data)) as im:
        assert im.mode == "I;16"
        cases["png-gray16"] = (data, _gray(_round16(np.asarray(im))))
    cases["png-gray16-raw"] = (_png16(gray16, 0), _gray(_round16(gray16)))
    data = _png16(rgb16, 2)
    with Image.open(io.BytesIO(data)) as im:  # PIL reads 16-bit RGB as 8-bit RGB (high byte)
        cases["png-rgb16"] = (data, np.asarray(im.convert("RGB")))
    alpha16 = np.full((S, S, 1), 20_000, np.uint16)
    data = _png16(np.concatenate([rgb16, alpha16], axis=2), 6)
    with Image.open(io.BytesIO(data)) as im:
        cases["png-rgba16"] = (data, np.asarray(im)[:, :, :3])
    data = _png16(np.stack([gray16, alpha16[:, :, 0]], axis=2), 4)
    with Image.open(io.BytesIO(data)) as im:
        cases["png-la16"] = (data, np.asarray(im)[:, :, :3])

    pal = Image.fromarray(rgb8).quantize(16)
    palette = np.asarray(pal.getpalette(), np.uint8).reshape(-1, 3)
    expected = palette[np.asarray(pal)]
    cases["png-palette"] = (_encode(pal, "PNG"), expected)
    data = _encode(pal, "PNG", transparency=3)  # index 3 transparent: its colour is kept
    with Image.open(io.BytesIO(data)) as im:
        assert im.mode == "P" and "transparency" in im.info
    cases["png-palette-transparent"] = (data, expected)
    rgba_pal = Image.fromarray(np.concatenate([rgb8, rgb8[:, :, :1]], axis=2), "RGBA").quantize(16)
    data = _encode(rgba_pal, "PNG")
    with Image.open(io.BytesIO(data)) as im:
        pal_rgba = np.asarray(im.getpalette("RGBA"), np.uint8).reshape(-1, 4)
        cases["png-palette-alpha"] = (data, pal_rgba[np.asarray(im)][:, :, :3])

    la = np.stack([rgb8[:, :, 0], rgb8[:, :, 1]], axis=2)
    cases["png-la"] = (_encode(Image.fromarray(la, "LA"), "PNG"), _gray(la[:, :, 0]))
    cases["png-1bit"] = (_encode(Image.fromarray(rgb8[:, :, 0] > 127), "PNG"), _gray((rgb8[:, :, 0] > 127) * 255))

    data = _encode(Image.fromarray(rgb8).convert("CMYK"), "JPEG", quality=95)
    with Image.open(io.BytesIO(data)) as im:
        assert im.mode == "CMYK"
        cases["jpeg-cmyk"] = (data, np.asarray(im.convert("RGB")))

    for orientation, turn in (
        (6, Image.Transpose.ROTATE_270),
        (8, Image.Transpose.ROTATE_90),
        (3, Image.Transpose.ROTATE_180),
        (2, Image.Transpose.FLIP_LEFT_RIGHT),
    ):
        exif = Image.Exif()
        exif[0x0112] = orientation
        data = _encode(Image.fromarray(rgb8), "JPEG", quality=95, exif=exif.tobytes())
        with Image.open(io.BytesIO(data)) as im:  # stored pixels, then the EXIF rotation
            cases[f"jpeg-exif{orientation}"] = (data, np.asarray(im.convert("RGB").transpose(turn)))
    exif = Image.Exif()
    exif[0x0112] = 6
    cases["png-exif6"] = (
        _encode(Image.fromarray(rgb8), "PNG", exif=exif.tobytes()),
        np.asarray(Image.fromarray(rgb8).transpose(Image.Transpose.ROTATE_270)),
    )

    cases["tiff-gray16"] = (_encode(Image.fromarray(gray16), "TIFF"), _gray(_round16(gray16)))
    floats = (gray16 / 65535).astype(np.float32)
    cases["tiff-float"] = (
        _encode(Image.fromarray(floats, "F"), "TIFF"),
        _gray(np.rint(floats.astype(np.float64) * 255)),
    )
    cases["pgm-16bit"] = (b"P5\n%d %d\n65535\n" % (S, S) + gray16.astype(">u2").tobytes(), _gray(_round16(gray16)))
    return cases


CASES = _cases()


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> ParquetDataset:
    path = tmp_path_factory.mktemp("modes") / "modes.parquet"
    table = pa.table(
        {
            "image": pa.array([b for b, _ in CASES.values()], pa.binary()),
            "label": pa.array([0] * len(CASES), pa.int64()),
        }
    )
    pq.write_table(table, path)
    return ParquetDataset(str(path))


def test_gray16_png_keeps_its_brightness():
    """Before: PIL's convert("RGB") clipped every 16-bit value above 255, so this decoded white."""
    data, expected = CASES["png-gray16"]
    decoded = decode_image(data)
    assert decoded.dtype == np.uint8 and decoded.shape == (S, S, 3)
    assert abs(decoded.mean() - 124) < 3 and np.array_equal(decoded, expected)


@pytest.mark.parametrize("name", list(CASES))
def test_memory_path_matches_the_pil_reference(dataset, name):
    i = list(CASES).index(name)
    decoded = dataset.image(i)
    assert decoded.dtype == np.uint8 and decoded.shape == (S, S, 3)
    assert np.array_equal(decoded, CASES[name][1]), (name, np.abs(decoded.astype(int) - CASES[name][1]).max())


def test_16bit_rgb_is_the_8bit_reading_of_the_16bit_values():
    data, expected = CASES["png-rgb16"]
    values = np.frombuffer(zlib.decompress(data[41:-16]), np.uint8)  # IDAT: filter byte + big-endian rows
    rows = values.reshape(S, 1 + S * 6)[:, 1:].copy().view(">u2").reshape(S, S, 3)
    assert np.abs(decode_image(data).astype(int) - rows / 257).max() <= 1


def _loader_pixels(ds, decode: str) -> np.ndarray:
    from autoaug.proxy_models.pipeline import DaliLoader

    loader = DaliLoader(
        ds,
        np.arange(len(ds)),
        batch_size=len(ds),
        train=False,
        image_size=S,
        decode=decode,
        mean=(0, 0, 0),
        std=(1, 1, 1),
        num_threads=1,
    )
    ((images, _),) = list(loader)
    return images.permute(0, 2, 3, 1).numpy()


@pytest.mark.parametrize("decode", ["memory", "dali"])
def test_both_loader_paths_give_the_reference_pixels(dataset, decode):
    pixels = _loader_pixels(dataset, decode)
    tolerance = 0 if decode == "memory" else 1
    for i, (name, (_, expected)) in enumerate(CASES.items()):
        diff = np.abs(pixels[i] - expected.astype(np.float32)).max()
        assert diff <= tolerance, (decode, name, diff)


def _dali_rejects() -> dict[str, bytes]:
    rng = np.random.default_rng(1)
    gray = rng.integers(0, 256, (S, S), dtype=np.uint8)
    return {
        "32-bit integer TIFF": _encode(Image.fromarray(gray.astype(np.int32) * 257, "I"), "TIFF"),
        "1-bit TIFF": _encode(Image.fromarray(gray > 127), "TIFF"),
        "LA TIFF": _encode(Image.fromarray(np.stack([gray, gray], axis=2), "LA"), "TIFF"),
        "palette TIFF": _encode(Image.fromarray(np.stack([gray] * 3, axis=2)).quantize(8), "TIFF"),
        "PGM maxval 1000": b"P5\n%d %d\n1000\n" % (S, S) + (gray.astype(">u2") * 3).tobytes(),
    }


@pytest.mark.parametrize("name", list(_dali_rejects()))
def test_dali_path_rejects_what_dali_misdecodes_up_front(tmp_path, name):
    data = _dali_rejects()[name]
    assert dali_decode_problem(data) is not None
    path = tmp_path / "bad.parquet"
    ok = CASES["png-palette"][0]
    pq.write_table(pa.table({"image": pa.array([ok, data], pa.binary()), "label": pa.array([0, 0])}), path)
    ds = ParquetDataset(str(path))
    # The in-memory path decodes it correctly...
    assert ds.image(1).shape == (S, S, 3)
    # ...the DALI path refuses it before any batch, naming the row and the way out.
    with pytest.raises(
        DatasetError,
        match=r"bad.parquet row 1: (TIFF in PIL mode|PNM image with maximum value)"
        r".*decode it in memory \(DaliLoader\(decode='memory'\)\)",
    ):
        ds.validate_encoded([0, 1])
    assert list(ds.validate_encoded([0, 1], skip_corrupt=True)) == [0]
    from autoaug.proxy_models.pipeline import DaliLoader

    with pytest.raises(DatasetError, match="row 1"):
        DaliLoader(ds, [0, 1], batch_size=1, train=False, image_size=S, decode="dali")


def test_pgm_with_other_maximum_is_scaled_on_the_memory_path():
    values = np.array([[0, 500, 1000, 250]], ">u2")
    decoded = decode_image(b"P5\n4 1\n1000\n" + values.tobytes())
    assert decoded[0, :, 0].tolist() == [0, 128, 255, 64]


@pytest.mark.parametrize(
    "data, match",
    [
        (
            _encode(Image.fromarray(np.array([[0, 70_000]], np.int32), "I"), "TIFF"),
            r"32-bit integer image \(PIL mode 'I'\) with values 0..70000; expected 8- or 16-bit data",
        ),
        (
            _encode(Image.fromarray(np.array([[0, np.nan]], np.float32), "F"), "TIFF"),
            r"floating-point image \(PIL mode 'F'\) with NaN or infinite values",
        ),
    ],
)
def test_values_without_an_8bit_reading_are_refused(data, match):
    with pytest.raises(ValueError, match=match):
        decode_image(data)
