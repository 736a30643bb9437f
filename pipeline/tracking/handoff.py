"""The train stage's hand-off to the evaluate stage: ``run.json`` in the train state
(``data/train_state/<task>/<mechanism>/``, beside ``last.pt``, outside every DVC output: its run id
differs from run to run).

The train stage records the MLflow run it trains under and the settings it trains with when it
starts (:meth:`RunRecord.started`), and the sha256 of the model.pt it wrote when it completes
(:meth:`RunRecord.completed`); an interrupted training of the same settings reopens its run
(:meth:`RunRecord.resumable`). The evaluate stage reopens that run, registers the model under it and
refuses a model.pt that is not the file that run wrote (:meth:`RunRecord.training_run`). A
retraining run keeps its own ``run.json`` the same way (only the run id)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from pipeline.io.files import write_json_atomic

RUN_FILE = "run.json"


class IncompleteTraining(ValueError):
    """The training run recorded in run.json did not complete: there is no model of its own to evaluate."""


@dataclass(frozen=True)
class RunRecord:
    """``run.json`` in a training's state directory."""

    path: Path

    @classmethod
    def of(cls, state_dir: Path) -> RunRecord:
        return cls(Path(state_dir) / RUN_FILE)

    def _read(self) -> dict | None:
        return json.loads(self.path.read_text()) if self.path.exists() else None

    def run_id(self) -> str | None:
        """The recorded MLflow run id (None: no run recorded yet)."""
        recorded = self._read()
        return recorded["run_id"] if recorded else None

    def resumable(self, identity: dict) -> str | None:
        """The run id of an unfinished training of the same ``identity`` (settings and data), to reopen."""
        recorded = self._read()
        if recorded is None or recorded.get("identity") != identity or recorded.get("completed"):
            return None
        return recorded.get("run_id")

    def started(self, run_id: str, identity: dict | None = None) -> None:
        write_json_atomic(
            self.path, {"run_id": run_id} if identity is None else {"run_id": run_id, "identity": identity}
        )

    def completed(self, run_id: str, identity: dict, model_sha256: str) -> None:
        write_json_atomic(
            self.path, {"run_id": run_id, "identity": identity, "completed": True, "model_sha256": model_sha256}
        )

    def training_run(self) -> tuple[str | None, str | None]:
        """``(run id, model sha256)`` of the training that wrote the checkpoint: evaluation reopens that
        MLflow run, registers the model under it, and refuses a model.pt that is not the file that run
        wrote. ``(None, None)`` without run.json (a model pulled from a DVC remote, trained elsewhere):
        evaluation then opens a run of its own."""
        recorded = self._read()
        if recorded is None:
            return None, None
        if not recorded.get("completed"):
            raise IncompleteTraining(
                f"{self.path}: the training run {recorded.get('run_id')} did not complete; "
                "rerun the train stage before evaluating"
            )
        return recorded["run_id"], recorded.get("model_sha256")
