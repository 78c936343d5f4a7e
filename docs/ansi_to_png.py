"""Render a terminal capture with ANSI colours (``tmux capture-pane -p -e``) as a PNG.

    tmux capture-pane -p -e -t SESSION > pane.ansi
    python docs/ansi_to_png.py pane.ansi docs/progress-search.png

How the screenshots under docs/ were made (rich parses the escapes, PIL draws the text with
DejaVu Sans Mono).
"""

from __future__ import annotations

import sys

from PIL import Image, ImageDraw, ImageFont
from rich.color import Color
from rich.text import Text

FONT = "/usr/share/fonts/truetype/dejavu/DejaVuSansMono.ttf"
BG, FG = (30, 30, 30), (220, 220, 220)


def _rgb(color: Color | None, default):
    if color is None or color.is_default:
        return default
    return tuple(color.get_truecolor())


def render(ansi: str, out: str, size: int = 15) -> None:
    font = ImageFont.truetype(FONT, size)
    cw = font.getbbox("M")[2]
    lh = int(size * 1.35)
    lines = ansi.rstrip("\n").split("\n")
    while lines and not Text.from_ansi(lines[-1]).plain.strip():
        lines.pop()
    width = max(len(Text.from_ansi(ln).plain) for ln in lines) + 2
    img = Image.new("RGB", (width * cw + 20, len(lines) * lh + 20), BG)
    draw = ImageDraw.Draw(img)
    for row, line in enumerate(lines):
        text = Text.from_ansi(line)
        col = 0
        for span_text, style in _segments(text):
            fg = _rgb(style.color if style else None, FG)
            draw.text((10 + col * cw, 10 + row * lh), span_text, font=font, fill=fg)
            col += len(span_text)
    img.save(out)


def _segments(text: Text):
    from rich.console import Console

    console = Console(width=10_000)
    for seg in text.render(console):
        if seg.text:
            yield seg.text, seg.style


if __name__ == "__main__":
    render(open(sys.argv[1], encoding="utf-8").read(), sys.argv[2])
