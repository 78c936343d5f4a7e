"""Every relative link of README.md and docs/*.md resolves: the file exists, and a ``#anchor``
into a markdown page names one of its headings, as GitHub generates heading anchors (lower case,
punctuation dropped, spaces to hyphens, ``-1``, ``-2`` for repeated headings).

Links inside code (fenced blocks, inline code) are not links and are not checked; nor are
absolute URLs (``http:``, ``mailto:``...).
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote

import pytest

REPO = Path(__file__).resolve().parent.parent
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]

FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.S | re.M)
INLINE_CODE = re.compile(r"(`+)(?:(?!\1).)+?\1", re.S)
#: ``[text](target)`` and ``![alt](target)``; the target up to whitespace or the closing parenthesis.
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^(#{1,6})[ \t]+(.+?)[ \t]*#*[ \t]*$", re.M)
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def _prose(text: str) -> str:
    """``text`` without fenced code blocks (a ``# comment`` in a bash block is no heading)."""
    return FENCE.sub("", text)


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading's text (github-slugger, after markdown rendering)."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link renders as its text
    text = text.replace("`", "")
    text = re.sub(r"(\*{1,3})(.+?)\1", r"\2", text)  # emphasis markers are not in the rendered text
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML tags
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)  # punctuation goes; letters, digits, _, - and spaces stay
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """Every heading anchor of ``page``, with GitHub's ``-N`` suffixes for repeated ones."""
    seen: dict[str, int] = {}
    found = set()
    for match in HEADING.finditer(_prose(page.read_text(encoding="utf-8"))):
        base = slug(match.group(2))
        n = seen.get(base, 0)
        found.add(base if n == 0 else f"{base}-{n}")
        seen[base] = n + 1
    return found


def links(page: Path) -> list[str]:
    text = INLINE_CODE.sub("", _prose(page.read_text(encoding="utf-8")))
    return [m.group(1) for m in LINK.finditer(text)]


def _shown(path: Path) -> str:
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)


def broken_links(page: Path) -> list[str]:
    """What is wrong with each relative link of ``page``, one line each."""
    problems = []
    for target in links(page):
        if SCHEME.match(target):
            continue
        path_part, _, fragment = target.partition("#")
        path = (page.parent / unquote(path_part)).resolve() if path_part else page
        if not path.exists():
            problems.append(f"{target}: {_shown(path)} does not exist")
            continue
        if fragment and path.suffix == ".md" and unquote(fragment) not in anchors(path):
            problems.append(f"{target}: no heading of {_shown(path)} has the anchor #{fragment}")
    return problems


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_every_relative_link_and_anchor_resolves(page):
    problems = broken_links(page)
    assert not problems, f"{_shown(page)}:\n" + "\n".join(problems)


def test_anchors_are_generated_as_github_does():
    assert slug("Time budget: `--time-budget`") == "time-budget---time-budget"
    assert slug("Does the search win? (measured)") == "does-the-search-win-measured"
    assert slug("Population Based Augmentation: `--method pba` (a schedule)") == (
        "population-based-augmentation---method-pba-a-schedule"
    )
    assert slug("Per-class, **balanced** accuracy") == "per-class-balanced-accuracy"


def test_a_broken_link_is_found(tmp_path):
    (tmp_path / "other.md").write_text("# Other page\n\n## A section\n", encoding="utf-8")
    page = tmp_path / "page.md"
    page.write_text(
        "# Page\n\n```bash\n# not a heading\n```\n\n"
        "[ok](other.md#a-section) [ok](#page) `[code](missing.md)` [web](https://example.com/x)\n"
        "[gone](missing.md) [bad anchor](other.md#not-a-section) [bad own](#not-a-heading)\n",
        encoding="utf-8",
    )
    problems = broken_links(page)
    assert [p.split(":")[0] for p in problems] == ["missing.md", "other.md#not-a-section", "#not-a-heading"]
