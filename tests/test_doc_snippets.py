"""Every ```python block of README.md and docs/*.md runs as written.

The documented set-up (README.md, "Running the examples"): a page's blocks run in order in one
Python namespace (like the cells of a notebook; the pages one after another in one process, each
in a fresh namespace), in a folder holding ``cifar10-jpeg/`` (the
CIFAR-10 Parquet) and ``cifar10-images/train`` (an ImageFolder tree), with a policy store at
``~/.autoaug/policies`` holding ``cifar10-r8`` and ``cifar10-wrn`` and a search ``cifar10-r8``'s
Optuna study under ``~/.autoaug/runs``. The test builds that folder (``HOME`` pointed into it)
and shortens the upper-case constants the examples tell you to set (``EPOCHS = 1``). Its
``cifar10-jpeg/`` holds every 8th image of the real train and test Parquet (6,250 and 1,250, all
10 classes, the same schema): enough for the examples' 4,000 + 1,000 split, and every command a
page runs decodes 6,250 images in its preflight instead of 50,000.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

REPO = Path(__file__).resolve().parent.parent
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
FENCE = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
#: Constants an example declares for the reader to set, and what the test sets them to.
SHORTEN = {"EPOCHS": "1"}


def blocks(page: Path) -> list[str]:
    return FENCE.findall(page.read_text(encoding="utf-8"))


PAGES_WITH_CODE = [p for p in PAGES if blocks(p)]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory, cifar_dir, cifar_sample, every_nth_row_of):
    import optuna

    from autoaug.policies import presets
    from autoaug.policies.store import PolicyStore
    from autoaug.search.space import SearchSpace

    root = tmp_path_factory.mktemp("docs")
    (root / "cifar10-jpeg").mkdir()
    for split in ("train", "test"):
        every_nth_row_of(cifar_dir / f"{split}.parquet", 8, root / "cifar10-jpeg" / f"{split}.parquet")
    images, labels = cifar_sample
    for i, (image, label) in enumerate(zip(images, labels)):
        folder = root / "cifar10-images" / "train" / f"class{label}"
        folder.mkdir(parents=True, exist_ok=True)
        Image.fromarray(image).save(folder / f"{i:04d}.png")
    home = root / "home"
    store = PolicyStore(str(home / ".autoaug" / "policies"))
    store.save(presets.resolve("autoaugment-cifar10"), "cifar10-r8")
    store.save(presets.resolve("autoaugment-cifar10"), "cifar10-wrn")
    run = home / ".autoaug" / "runs" / "cifar10-r8"
    run.mkdir(parents=True)
    space = SearchSpace()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(
        study_name="cifar10-r8",
        storage=f"sqlite:///{run / 'optuna.db'}",
        direction="maximize",
        sampler=optuna.samplers.RandomSampler(seed=0),
    )

    def objective(trial):
        space.suggest(trial)
        for epoch in range(1, 4):
            trial.report(0.1 * epoch + 0.01 * trial.number, epoch)
        return 0.3 + 0.01 * trial.number

    study.optimize(objective, n_trials=4)
    return root


def script_for(page: Path) -> str:
    parts = []
    for i, code in enumerate(blocks(page)):
        for name, value in SHORTEN.items():
            code = re.sub(rf"^{name} = .*$", f"{name} = {value}", code, flags=re.M)
        parts.append(f"# ---- block {i + 1} of {page.name}\n{code}")
    return "\n".join(parts)


#: Runs each page's script given on its command line in one Python process, each in a fresh
#: namespace from the work folder (as its own ``python page_examples.py`` would), and writes one
#: JSON line per page: its name and the traceback that stopped it (None: it ran to its end).
RUNNER = """
import json, os, runpy, sys, traceback
home = os.getcwd()
with open(sys.argv[1], "w") as report:
    for script in sys.argv[2:]:
        os.chdir(home)
        try:
            runpy.run_path(script, run_name="__main__")
            error = None
        except BaseException:
            error = traceback.format_exc()
        report.write(json.dumps({"script": os.path.basename(script), "error": error}) + "\\n")
        report.flush()
"""


@pytest.fixture(scope="module")
def page_runs(workdir) -> dict[str, str | None]:
    """Every page's blocks run (:data:`RUNNER`): one process for the pages, so that torch, DALI and
    Ray are imported once and not once a page; each page's script a real file (DALI's
    conditionals read the source). ``{script name: traceback or None}``; a page the process did
    not reach (it died) is missing."""
    scripts = []
    for page in PAGES_WITH_CODE:
        script = workdir / f"{page.stem}_examples.py"
        script.write_text(script_for(page), encoding="utf-8")
        scripts.append(str(script))
    (workdir / "run_pages.py").write_text(RUNNER, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("AUTOAUG_")}
    env.update(HOME=str(workdir / "home"), MPLBACKEND="Agg")
    report = workdir / "pages.jsonl"
    proc = subprocess.run(
        [sys.executable, str(workdir / "run_pages.py"), str(report), *scripts],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    runs = [json.loads(line) for line in report.read_text().splitlines()] if report.exists() else []
    return {"__process__": None if proc.returncode == 0 else proc.stderr[-4000:]} | {
        r["script"]: r["error"] for r in runs
    }


@pytest.mark.slow
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("page", PAGES_WITH_CODE, ids=[p.name for p in PAGES_WITH_CODE])
def test_every_python_block_of_the_page_runs(page, page_runs):
    script = f"{page.stem}_examples.py"
    assert script in page_runs, f"{page.name}: the process running the pages died first: {page_runs['__process__']}"
    assert page_runs[script] is None, f"{page.name}: {page_runs[script][-4000:]}"


def test_the_pages_have_examples():
    assert len(PAGES_WITH_CODE) >= 6
    assert sum(len(blocks(p)) for p in PAGES_WITH_CODE) >= 20
