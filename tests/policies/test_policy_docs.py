"""docs/policies.md: its Python examples run on real images, its op table is the declarations'."""

from __future__ import annotations

import re
import runpy
from pathlib import Path

import pytest

from autoaug.policies import ops

DOC = Path(__file__).resolve().parents[2] / "docs" / "policies.md"
BLOCKS = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.S)


def test_doc_has_the_examples():
    assert len(BLOCKS) >= 4
    assert any("apply_policy" in b for b in BLOCKS) and any("to_torchvision" in b for b in BLOCKS)


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_doc_example_runs(index, images64, cifar_dir, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "cifar10-jpeg").symlink_to(cifar_dir, target_is_directory=True)  # the set-up block reads it
    # a real file, so that DALI's autograph can read the pipeline function's source
    script = tmp_path / f"example_{index}.py"
    script.write_text(BLOCKS[index], encoding="utf-8")
    runpy.run_path(str(script), init_globals={"images": images64})
    if "render_grid" in BLOCKS[index]:
        assert (tmp_path / "preview.png").stat().st_size > 10_000


def test_op_table_is_generated_from_the_declarations():
    """The op table of docs/policies.md is ``ops.docs_table()`` (ranges, sign, each backend's
    operators, from the declarations): no row missing, stale or extra."""
    text = DOC.read_text(encoding="utf-8")
    expected = ops.docs_table()
    assert ops.DOCS_TABLE_HEADER in text, "docs/policies.md has no op table"
    table = text[text.index(ops.DOCS_TABLE_HEADER) :].split("\n\n")[0].rstrip()
    assert table == expected, f"docs/policies.md's op table is out of date; the declarations give:\n{expected}"
