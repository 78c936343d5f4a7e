"""Encoded image bytes: a cheap structural check before decoding, decoding to uint8 HWC RGB the
way DALI's decoder does it (any mode and bit depth), and which images DALI would decode
differently (so the DALI path can refuse them before training). The datasets of
:mod:`autoaug.proxy_models.data` use these for every source."""

from __future__ import annotations

import io
import re
from typing import TYPE_CHECKING

import numpy as np

from autoaug.core.values import clip, short_repr

if TYPE_CHECKING:
    from PIL import Image

__all__ = ["check_encoded", "to_rgb8", "to_rgb_array", "decode_image", "dali_decode_problem", "DALI_TIFF_MODES"]


def check_encoded(data: bytes) -> str | None:
    """Cheap structural check of encoded image bytes; returns a problem description or None.

    Detects empty payloads, unknown formats and truncated JPEG/PNG files (missing end-of-image
    marker / IEND chunk) without decoding, so the DALI decoding path can reject bad rows before
    training starts. Full decoding (:func:`decode_image`) catches everything else.
    """
    if not data:
        return "empty image bytes"
    if data[:3] == b"\xff\xd8\xff":
        # A JPEG ends with the EOI marker; some encoders append padding after it.
        if b"\xff\xd9" not in data[-64:]:
            return "truncated JPEG (no end-of-image marker)"
        return None
    if data[:8] == b"\x89PNG\r\n\x1a\n":
        if b"IEND" not in data[-16:]:
            return "truncated PNG (no IEND chunk)"
        return None
    if (
        data[:2] == b"BM"
        or data[:4] in (b"RIFF",)
        or data[:4] in (b"II*\x00", b"MM\x00*")
        or data[:2] in (b"P5", b"P6")
    ):
        return None
    return f"unrecognised image format (first bytes {data[:8]!r}; expected JPEG, PNG, BMP, WebP, TIFF or PNM)"


_SIXTEEN_BIT_MODES = ("I;16", "I;16B", "I;16L", "I;16N")
#: TIFF modes (as PIL names them) that DALI's decoder was checked to decode like :func:`decode_image`
#: (tests/proxy_models/test_decoding.py); others (1-bit, palette, LA, YCbCr, 32-bit integer TIFFs)
#: it mis-decodes or fails on mid-epoch, so the DALI path rejects them up front.
DALI_TIFF_MODES = ("L", "RGB", "RGBA", "CMYK", "F", *_SIXTEEN_BIT_MODES)


def to_rgb8(img) -> Image.Image:
    """A PIL image of any mode and bit depth as an 8-bit RGB PIL image, the way DALI's decoder does it.

    * EXIF orientation applied (DALI and browsers do; PIL's ``open`` does not);
    * 16-bit grayscale (``I;16*``, and ``I``, which PIL uses for 16-bit PNM/TIFF data and which
      must then hold values 0..65535) scaled to 0..255 with rounding (``round(v * 255 / 65535)``);
      ``convert("RGB")`` would clip every value above 255 to white;
    * 32-bit float (``F``) read as 0..1 (clipped), scaled to 0..255 with rounding;
    * everything else through ``convert("RGB")``: 16-bit RGB(A) PNGs arrive as 8-bit RGB(A),
      palette images (with or without transparency) take their palette colours, CMYK is converted,
      and alpha (``RGBA``, ``LA``, ``PA``) is dropped, keeping the colour under it (as DALI does,
      and as torchvision's default loader does).

    Raises ``ValueError`` for data that has no 8-bit reading (a mode-``I`` image outside 0..65535,
    NaN or infinite floats, modes PIL cannot convert).
    """
    from PIL import Image, ImageOps

    try:
        ImageOps.exif_transpose(img, in_place=True)
    except Exception:  # a malformed EXIF block: keep the stored orientation
        pass
    mode = img.mode
    if mode in _SIXTEEN_BIT_MODES or mode == "I":
        values = np.asarray(img).astype(np.int64)
        if mode == "I" and values.size and (values.min() < 0 or values.max() > 65535):
            raise ValueError(
                f"32-bit integer image (PIL mode 'I') with values {values.min()}..{values.max()}; "
                "expected 8- or 16-bit data (0..65535)"
            )
        gray = ((values * 255 + 32767) // 65535).astype(np.uint8)
    elif mode == "F":
        values = np.asarray(img, dtype=np.float64)
        if not np.isfinite(values).all():
            raise ValueError("floating-point image (PIL mode 'F') with NaN or infinite values")
        gray = np.rint(np.clip(values, 0.0, 1.0) * 255).astype(np.uint8)
    elif mode == "P" and "transparency" in img.info:
        return img.convert("RGBA").convert("RGB")  # the same colours, without PIL's warning
    else:
        return img.convert("RGB")
    return Image.fromarray(np.repeat(gray[:, :, None], 3, axis=2), "RGB")


def decode_image(data: bytes, size: int | None = None) -> np.ndarray:
    """Decode encoded bytes to uint8 HWC RGB (any mode and bit depth, see :func:`to_rgb8`);
    optionally resize (shorter side) + center-crop to ``size`` x ``size``. Raises ``ValueError``
    with PIL's reason for corrupt data."""
    from PIL import Image, ImageOps

    problem = check_encoded(data)
    if problem:
        raise ValueError(problem)
    try:
        with Image.open(io.BytesIO(data)) as img:
            img.load()
            rgb = to_rgb8(img)
    except Exception as exc:  # PIL raises OSError, SyntaxError, ValueError... for bad data
        raise ValueError(f"cannot decode image: {clip(str(exc), 300)}") from None
    if size is not None and rgb.size != (size, size):
        rgb = ImageOps.fit(rgb, (size, size), method=Image.BILINEAR)
    return np.asarray(rgb, dtype=np.uint8)


def dali_decode_problem(data: bytes) -> str | None:
    """Why DALI's image decoder would decode ``data`` differently from :func:`decode_image` (or fail
    on it mid-epoch), or None. JPEG, PNG (any bit depth, palette, alpha, EXIF), BMP and WebP are
    decoded alike; TIFFs outside :data:`DALI_TIFF_MODES` and PNM files whose maximum value is
    not 255 or 65535 are not. Reads only the header."""
    if data[:2] in (b"P5", b"P6"):
        fields = re.sub(rb"#[^\n]*", b" ", data[:1024]).split()
        maxval = fields[3] if len(fields) > 3 else b""
        if maxval not in (b"255", b"65535"):
            return (
                f"PNM image with maximum value {short_repr(maxval.decode('latin-1'), 12)}: DALI's decoder does "
                "not scale it (only 255 and 65535 are read correctly)"
            )
    elif data[:4] in (b"II*\x00", b"MM\x00*"):
        from PIL import Image

        try:
            with Image.open(io.BytesIO(data)) as img:
                mode = img.mode
        except Exception as exc:
            return f"cannot decode image: {clip(str(exc), 300)}"
        if mode not in DALI_TIFF_MODES:
            return (
                f"TIFF in PIL mode {short_repr(mode, 20)}: DALI's decoder mis-decodes or fails on it "
                f"(it reads TIFF modes {', '.join(DALI_TIFF_MODES)})"
            )
    return None


def to_rgb_array(array: np.ndarray, size: int | None) -> np.ndarray:
    from PIL import Image, ImageOps

    if array.ndim == 3 and array.shape[2] == 3 and (size is None or array.shape[:2] == (size, size)):
        return np.ascontiguousarray(array, dtype=np.uint8)
    img = Image.fromarray(array).convert("RGB")
    if size is not None and img.size != (size, size):
        img = ImageOps.fit(img, (size, size), method=Image.BILINEAR)
    return np.asarray(img, dtype=np.uint8)
