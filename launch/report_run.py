"""What ``autoaug report`` runs (:mod:`autoaug.launch.report_cmd` builds its parser): the search's
study read, the PNG drawn (:func:`autoaug.search.report.write_report`) or the HTML page written
(:mod:`autoaug.launch.report_html`), and what the search found printed, or as ``--json``."""

from __future__ import annotations

import argparse
import os

from autoaug.core.errors import UserInputError
from autoaug.launch.output import dump_json
from autoaug.launch.report_html import write_html_report
from autoaug.search.decide.op_effects import describe_effects, plot_effects
from autoaug.search.decide.rescore import describe_selection
from autoaug.search.decide.rungs import describe_rungs, from_study
from autoaug.search.methods.base import method_of
from autoaug.search.records import ran_text
from autoaug.search.report import importances, load_report_data, op_frequencies, top_trials, write_report
from autoaug.search.run_dir import RESULT_FILE, RunDir, default_runs_root

__all__ = ["run"]


def run(args: argparse.Namespace) -> int:
    """Draw (or write the page of) search ``args.name`` and print what it found."""
    if args.top < 1:
        raise UserInputError(f"--top must be >= 1, got {args.top}")
    data = load_report_data(args.name, args.storage or default_runs_root())
    page = None
    if args.html:
        page = write_html_report(args.name, args.storage or default_runs_root(), args.html, top=args.top)
    path = write_report(data, args.out or f"{args.name}-report.png", top=args.top) if args.out or not page else None
    effects = ops_path = None
    provenance: dict = {}
    run = RunDir(args.storage or default_runs_root(), args.name)
    if run.exists(RESULT_FILE):  # a finished search: its gain, what helps and hurts on its data
        provenance = run.read_json(RESULT_FILE).get("provenance") or {}
        effects = provenance.get("op_effects")
        if path:
            ops_path = plot_effects(effects or {}, os.path.splitext(path)[0] + "-ops.png")
    # from the study (also while the search runs), at the rungs its method says its configuration has
    config = (provenance.get("search") or {}).get("config") or {}
    method = method_of(config)
    rungs = from_study(data.study, (method.rungs(config) if method is not None else ()) or None)
    if args.json:
        counts, mags = op_frequencies(data.trials, args.top, data.space)
        imp, reason = importances(data.study, data.trials)
        print(
            dump_json(
                {
                    "png": path,
                    "html": page,
                    "run_dir": data.run_dir,
                    "finished_trials": len(data.trials),
                    "best": {
                        "number": max(data.trials, key=lambda t: t.value).number,
                        "value": max(t.value for t in data.trials),
                    },
                    "family": data.space.family,
                    "top_ops": {op: {"count": n, "mean_magnitude_bin": mags[op]} for op, n in counts.most_common()},
                    "top_trials": top_trials(data.trials, args.top, data.space),
                    "importances": imp,
                    "importances_note": reason,
                    "selection": provenance.get("selection"),
                    "op_effects": effects,
                    "op_effects_png": ops_path,
                    "rungs": rungs,
                }
            )
        )
    else:
        for written in (path, page):
            if written:
                print(f"wrote {written} ({len(data.trials)} finished trials of search {args.name})")
        for line in describe_selection(provenance.get("selection"), ran_text(provenance)):
            print(line)
        for line in describe_effects(effects):
            print(line)
        for line in describe_rungs(rungs):
            print(line)
        if ops_path:
            print(f"wrote {ops_path} (what helps and hurts on this data)")
    return 0
