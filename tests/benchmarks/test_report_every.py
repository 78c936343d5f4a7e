"""benchmarks/report_every.py: its arguments checked in one line before a search starts."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--report-every", "1,five"], "--report-every '1,five': expected whole numbers of epochs >= 1"),
        (["--report-every", "0"], "--report-every '0': expected whole numbers of epochs >= 1"),
        (["--trials", "0"], "--trials 0: expected at least 1"),
        (["--pack", "-1"], "--pack -1: expected at least 1"),
    ],
)
def test_bad_arguments_are_refused_in_one_line_before_any_search(load_benchmark, cifar_dir, argv, said, capsys):
    bench = load_benchmark("report_every")
    with pytest.raises(SystemExit) as exit_:
        bench.main(["--data", str(cifar_dir), *argv])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert said in err and "Traceback" not in err
