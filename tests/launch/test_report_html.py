"""What a person opens in a browser about a finished search: ``autoaug report NAME --html`` (one
self-contained page: no request outside the file, its images inline), loaded in headless
Chromium when one is installed; one tiny real smoke search (warm-started from a published
policy, so the page shows both grids) for the module."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from autoaug.launch.cli import main

TINY = ["--set", "train.epochs=2", "--set", "train.train_size=256", "--set", "train.val_size=128"]
BROWSERS = ("chromium", "chromium-browser", "google-chrome")
#: What would make a browser reach outside the file: a remote src/href, a CSS import or url().
REMOTE = re.compile(
    r"""(?:src|href|action|poster)\s*=\s*["']?\s*(?:https?:)?//|@import|url\(\s*["']?\s*(?:https?:)?//""", re.I
)


@pytest.fixture(scope="module")
def finished(tmp_path_factory, cifar_small, shared_ray) -> Path:
    """The runs root of a finished 2-trial smoke search ``s`` (2 epochs: learning curves)."""
    root = tmp_path_factory.mktemp("report-html")
    argv = [
        "search", "--preset", "smoke", "--data", str(cifar_small), "--name", "s", "--num-trials", "2",
        "--concurrency", "1", "--space", "randaugment", "--warm-start", "randaugment:n=2,m=9", *TINY,
        "--storage", str(root / "runs"), "--store", str(root / "store"), "-q",
    ]  # fmt: skip
    assert main(argv) == 0
    return root


def _page(finished: Path, out: Path, name: str = "s", storage: Path | None = None) -> str:
    assert main(["report", name, "--storage", str(storage or finished / "runs"), "--html", str(out)]) == 0
    return out.read_text(encoding="utf-8")


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_html_report_is_one_self_contained_page_with_every_section_and_inline_images(finished, tmp_path, capsys):
    from autoaug.launch.report_html import SECTIONS

    text = _page(finished, tmp_path / "r.html")
    assert f"wrote {tmp_path / 'r.html'}" in capsys.readouterr().out
    assert not (tmp_path / "s-report.png").exists()  # --html alone: no PNG besides
    assert not REMOTE.search(text), REMOTE.search(text).group(0)
    assert "<script" not in text.lower()
    srcs = re.findall(r'src="([^"]*)"', text)
    assert srcs and all(s.startswith("data:image/png;base64,") for s in srcs)
    assert all(h.startswith("#") for h in re.findall(r'href="([^"]*)"', text))
    for ident, heading in SECTIONS:
        assert f'<section id="{ident}"><h2>{heading}</h2>' in text
    # the trials over time and their learning curves, and the grids of the stored policy and warm start
    assert len(srcs) >= 4
    assert "the stored policy s@1" in text and "the warm start randaugment:n=2,m=9" in text
    assert "what made it" in text and "learning curves" in text.lower()
    assert "no comparison attached to s@1" in text


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_page_says_when_the_data_cannot_be_read_and_is_written_all_the_same(finished, tmp_path):
    runs = tmp_path / "runs"
    shutil.copytree(finished / "runs" / "s", runs / "s")
    result = json.loads((runs / "s" / "result.json").read_text())
    result["provenance"]["dataset"]["source"] = str(tmp_path / "moved" / "train.parquet")
    (runs / "s" / "result.json").write_text(json.dumps(result))
    config = json.loads((runs / "s" / "search_config.json").read_text())
    config["optuna"]["storage"] = f"sqlite:///{runs / 's' / 'optuna.db'}"
    (runs / "s" / "search_config.json").write_text(json.dumps(config))
    text = _page(finished, tmp_path / "r.html", storage=runs)
    assert f"the search&#x27;s data {tmp_path / 'moved' / 'train.parquet'} cannot be read here" in text
    assert '<section id="compare">' in text


def _browser() -> str | None:
    return next((found for b in BROWSERS if (found := shutil.which(b))), None)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_headless_chromium_renders_the_page_without_console_errors(finished, tmp_path):
    from PIL import Image

    from autoaug.launch.report_html import SECTIONS

    browser = _browser()
    if browser is None:
        if os.environ.get("CI"):
            pytest.fail("no chromium on PATH in CI (.ci/run installs it: apt-get install chromium)")
        pytest.skip("no chromium on PATH (apt-get install chromium)")
    page = tmp_path / "r.html"
    _page(finished, page)
    flags = [
        browser, "--headless", "--disable-gpu", "--no-sandbox", "--no-first-run", "--hide-scrollbars",
        f"--user-data-dir={tmp_path / 'profile'}", "--enable-logging=stderr", "--v=0",
        "--host-resolver-rules=MAP * ~NOTFOUND",  # nothing outside the file could load anyway
        "--window-size=1280,3000",
    ]  # fmt: skip
    shot = tmp_path / "page.png"
    ran = subprocess.run([*flags, f"--screenshot={shot}", page.as_uri()], capture_output=True, text=True, timeout=300)
    assert ran.returncode == 0 and shot.is_file(), ran.stderr[-3000:]
    assert not re.search(r"CONSOLE\(\d+\)|Uncaught|Failed to load resource", ran.stderr), ran.stderr[-3000:]
    assert shot.stat().st_size > 50_000  # figures, not a blank page
    image = Image.open(shot).convert("RGB").resize((320, 750))
    assert len(image.getcolors(1 << 20) or ()) > 500  # photographs and plots, not a few flat colours
    dom = subprocess.run([*flags, "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=300)
    assert dom.returncode == 0, dom.stderr[-3000:]
    for _, heading in SECTIONS:
        assert f"<h2>{heading}</h2>" in dom.stdout
    assert dom.stdout.count('<img src="data:image/png;base64,') >= 4
    keep = os.environ.get("AUTOAUG_KEEP_SCREENSHOT")
    if keep:  # to look at it
        shutil.copy(shot, keep)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_optuna_dashboard_serves_the_search_study_with_its_trials_params_and_scores_per_epoch(finished):
    """Optuna Dashboard (the ``dashboard`` extra) serving ``sqlite:///RUN/optuna.db`` on 127.0.0.1 --
    its own WSGI application, what ``optuna-dashboard`` runs, on a server bound before it starts
    (nothing to wait for): the trials read through its JSON API carry the policy's parameters, the
    scores per epoch as intermediate values, the objective named and the parameters explained
    (docs/search.md)."""
    import threading
    import urllib.request
    from wsgiref.simple_server import WSGIRequestHandler, make_server

    from autoaug.search.score import METRIC
    from autoaug.search.tune.study import PARAMS_ATTR, TUNE_TRIAL_ATTR

    try:
        from optuna_dashboard import wsgi
    except ImportError:
        if os.environ.get("CI"):
            pytest.fail("optuna-dashboard is not installed in CI (the dev extra brings it: .[dashboard])")
        pytest.skip("optuna-dashboard is not installed (pip install -e '.[dashboard]')")

    class Quiet(WSGIRequestHandler):
        def log_message(self, *args) -> None:  # no access log on the test's output
            pass

    db = finished / "runs" / "s" / "optuna.db"
    server = make_server("127.0.0.1", 0, wsgi(f"sqlite:///{db}"), handler_class=Quiet)  # bound here
    port = server.server_address[1]
    serving = threading.Thread(target=server.serve_forever, daemon=True)
    serving.start()
    try:

        def get(path: str):
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=60) as r:
                return json.loads(r.read())

        (summary,) = get("/api/studies")["study_summaries"]
        assert summary["study_name"] == "s"
        study = get(f"/api/studies/{summary['study_id']}")
        attrs = {a["key"]: a["value"] for a in study["user_attrs"]}
        assert "n" in json.loads(attrs[PARAMS_ATTR]) and "use_OP" in json.loads(attrs[PARAMS_ATTR])
        assert study["objective_names"] == [METRIC]  # shown as the objective's name, not "Objective 0"
        trials = study["trials"]
        assert len(trials) == 2 and {t["state"] for t in trials} <= {"Complete", "Pruned"}
        for t in trials:
            params = {p["name"]: p["param_external_value"] for p in t["params"]}
            assert {"n", "m"} <= set(params) and any(k.startswith("use_") for k in params)
            steps = {iv["step"] for iv in t["intermediate_values"]}
            assert steps and steps <= {1, 2}  # the scores per epoch
            assert TUNE_TRIAL_ATTR in {a["key"] for a in t["user_attrs"]}
        assert max(len(t["intermediate_values"]) for t in trials) == 2  # one trial ran both epochs
    finally:
        server.shutdown()  # the server this test started
        server.server_close()
        serving.join()
