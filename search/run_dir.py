"""The run directory ``{storage}/{name}`` of a search: a local folder or a URI.

It holds Ray Tune's experiment state and trial checkpoints (written by Tune), and the files
below, written atomically through :class:`autoaug.core.location.Location`.
"""
from __future__ import annotations

from typing import Any

from autoaug.core.location import Location
from autoaug.core.metrics import metrics_json

__all__ = ["RunDir", "CONFIG_FILE", "RESULT_FILE", "STUDY_FILE"]

#: The search's configuration, data description, Optuna storage and driver sessions.
CONFIG_FILE = "search_config.json"
#: Written when the search finished: the policy, where it was stored, its provenance.
RESULT_FILE = "result.json"
#: The default Optuna storage (SQLite) of a local run directory.
STUDY_FILE = "optuna.db"


class RunDir:
    """``{storage}/{name}``: a local folder or a URI (``file://`` is local)."""

    def __init__(self, storage: str, name: str):
        self.storage = storage
        self.name = name
        self.location = Location.parse(storage, what="run storage") / name
        self.uri = self.location.uri
        self.path = self.location.path
        self.local_path: str | None = self.location.local_path

    @property
    def fs(self) -> Any:
        return self.location.fs

    def __repr__(self) -> str:
        return f"RunDir({self.uri!r})"

    def exists(self, filename: str | None = None) -> bool:
        return self.location.exists(filename)

    def read_json(self, filename: str) -> Any:
        return self.location.read_json(filename)

    def write_json(self, filename: str, obj: Any) -> None:
        self.location.write_text(metrics_json(obj), filename)

    def delete(self) -> None:
        self.location.delete()

