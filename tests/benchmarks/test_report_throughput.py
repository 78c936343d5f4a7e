"""benchmarks/report_throughput.py: its arguments checked in one line before a search starts."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--checkpoint-mib", "17,big"], "--checkpoint-mib '17,big': expected sizes in MiB from 0 to 1024"),
        (["--checkpoint-mib", "-1"], "--checkpoint-mib '-1': expected sizes in MiB from 0 to 1024"),
        (["--trials", "0"], "--trials 0: expected at least 1"),
        (["--concurrency", "-2"], "--concurrency -2: expected at least 1"),
    ],
)
def test_bad_arguments_are_refused_in_one_line_before_any_search(load_benchmark, cifar_dir, argv, said, capsys):
    rt = load_benchmark("report_throughput")
    with pytest.raises(SystemExit) as exit_:
        rt.main(["--data", str(cifar_dir), *argv])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert said in err and "Traceback" not in err
