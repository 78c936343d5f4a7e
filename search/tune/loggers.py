"""Experiment logging of a search through Ray Tune's own logger callbacks.

* **TensorBoard**: Tune adds its ``TBXLoggerCallback`` by itself (``tensorboardX`` comes with
  ``ray[tune]``): every trial folder ``{run dir}/trial_<id>/`` of the run directory holds an
  ``events.out.tfevents.*`` file with the trial's metrics per epoch (``ray/tune/val_accuracy``,
  ``ray/tune/train_loss``...) and its parameters as hparams, so
  ``tensorboard --logdir {run dir}`` shows every trial of the search (:func:`event_files`).
* **MLflow**: with ``SearchConfig.mlflow_uri`` (``--mlflow-uri``), Ray's
  ``MLflowLoggerCallback`` logs one MLflow run per trial -- its parameters (the sub-policies'
  op / probability / magnitude choices) and its metrics per epoch -- in the MLflow experiment
  named like the search, at that tracking URI (a local folder / ``file://`` URI, a ``sqlite://``
  database or an ``http(s)://`` tracking server).
"""

from __future__ import annotations

import importlib.util
import os
from typing import Any

__all__ = ["experiment_loggers", "event_files", "check_mlflow_uri", "allow_file_store"]


def check_mlflow_uri(uri: str) -> None:
    """``ValueError`` (one line) unless ``mlflow`` is importable and answers at ``uri`` (checked
    before Ray starts, so a typo does not fail the search at its first trial)."""
    if not isinstance(uri, str) or not uri.strip():
        raise ValueError(f"mlflow_uri {uri!r}: expected an MLflow tracking URI (a folder, file://, sqlite://, http://)")
    if importlib.util.find_spec("mlflow") is None:
        raise ValueError(
            f"--mlflow-uri {uri}: the Python package 'mlflow' is not installed "
            "(pip install mlflow-skinny, or pip install 'autoaug[mlflow]')"
        )
    allow_file_store(uri)
    try:
        from mlflow import MlflowClient

        MlflowClient(tracking_uri=_tracking_uri(uri)).search_experiments(max_results=1)
    except Exception as exc:  # noqa: BLE001 - MLflow raises many kinds; the user gets one line
        first = " ".join(str(exc).split())[:300]
        raise ValueError(
            f"--mlflow-uri {uri}: MLflow cannot use this tracking URI ({type(exc).__name__}: {first})"
        ) from None


def allow_file_store(uri: str) -> None:
    """MLflow 3 refuses its file store (a folder, ``file://``) unless ``MLFLOW_ALLOW_FILE_STORE``
    is set; a folder is what a researcher without a tracking server has, so allow it."""
    if "://" not in uri or uri.startswith("file://"):
        os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")


def _tracking_uri(uri: str) -> str:
    # A bare folder is MLflow's file store; give MLflow an absolute file:// URI so that the
    # trial processes and the driver agree whatever their working directories.
    if "://" in uri or uri.startswith("databricks"):
        return uri
    return "file://" + os.path.abspath(os.path.expanduser(uri))


def experiment_loggers(uri: str | None, name: str, sampler: str) -> list[Any]:
    """The logger callbacks an experiment ``name`` adds to Tune's defaults (CSV, JSON,
    TensorBoard): MLflow at the tracking URI ``uri`` (None: none)."""
    if not uri:
        return []
    from ray.air.integrations.mlflow import MLflowLoggerCallback

    allow_file_store(uri)

    return [
        MLflowLoggerCallback(
            tracking_uri=_tracking_uri(uri),
            experiment_name=name,
            tags={"autoaug.search": name, "autoaug.sampler": sampler},
            save_artifact=False,
        )
    ]


def event_files(run_dir: str) -> list[str]:
    """The TensorBoard event files of a local run directory, one or more per trial folder."""
    found = []
    for root, _, files in os.walk(run_dir):
        found += [os.path.join(root, f) for f in files if f.startswith("events.out.tfevents.")]
    return sorted(found)
