"""One retraining run, in order (the ``retrain`` flow wraps :func:`retrain`; docs/tracking.md):

1. **refresh** the data: ``dvc pull`` (optional; a failed pull is fatal only with
   ``pull_required``), then ``dvc repro`` of the task's data stages (``retrain.repro_targets``).
2. **train** the challenger in-process into ``data/retrain/<task>/runs/<stamp>/``, never through
   ``dvc repro train@...``, so a crash leaves only an orphan run directory.
3. **freeze the test set**: champion and challenger are both decoded, with the same code, on the
   copy of the test split pinned on the champion's version; old numbers are never trusted.
4. **decide**: promote iff there is no champion, or the challenger beats it by more than
   ``margin``. Promotion registers a version and moves the ``champion`` alias, last.

Every run, promoted, kept, skipped or failed, appends one line to
``data/retrain/<task>/decisions.jsonl`` (the record :func:`retrain` returns). One run per task at a
time (a lock in ``data/retrain/<task>/``). A failure anywhere before the alias move leaves the
alias, the champion's version and its artifacts exactly as they were.

``step(fn, retries, retry_delay_s)`` wraps each step: the flow passes Prefect tasks with retries; by
default a step runs once, here.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path

from pipeline.config.params import load_params, project_root, section
from pipeline.config.tasks import effective_params
from pipeline.retrain import commands, steps
from pipeline.retrain.decision import decide, promotion_tags
from pipeline.retrain.settings import RetrainConfig, metric_spec
from pipeline.retrain.state import RunInProgress, append_decision, freeze_test, new_stamp, now_iso, run_lock
from pipeline.tracking.settings import TrackingConfig

Step = Callable[[Callable, int, float], Callable]


def run_once(fn: Callable, retries: int = 0, retry_delay_s: float = 0.0) -> Callable:
    """The default ``step``: the function itself, run once (no retries without an orchestrator)."""
    return fn


def retrain(params_path: str | None = None, run_stamp: str | None = None, step: Step = run_once) -> dict:
    """One run: refresh, train, evaluate both on the frozen test, promote or keep; the decision record."""
    params = load_params(params_path)
    cfg = RetrainConfig.from_dict(section(params, "retrain"))
    root = project_root(params_path)
    tparams = effective_params(params, cfg.task)
    spec = metric_spec(tparams, cfg)
    eval_settings = dict(section(tparams, "evaluate"))
    stamp = run_stamp or new_stamp()
    state_dir = root / "data" / "retrain" / cfg.task
    run_dir = state_dir / "runs" / stamp
    tracking = TrackingConfig.from_params(params)

    def retried(fn: Callable) -> Callable:
        return step(fn, cfg.retries, cfg.retry_delay_s)

    record: dict = {
        "run": stamp,
        "task": cfg.task,
        "started": now_iso(),
        "metric": spec.name,
        "higher_is_better": spec.higher_is_better,
        "margin": cfg.margin,
    }
    with contextlib.ExitStack() as held:
        try:
            held.enter_context(run_lock(state_dir))
        except RunInProgress as err:  # an overlapping run: recorded, nothing else touched
            record.update(decision="skipped", reason=str(err), finished=now_iso())
            append_decision(state_dir / "decisions.jsonl", record)
            print(f"retrain {cfg.task}: skipped: {err}")
            return record
        try:
            _run(record, root, cfg, tparams, spec, eval_settings, run_dir, tracking, retried)
        except BaseException as err:
            record.update(decision="failed", error=f"{type(err).__name__}: {err}"[:2000], finished=now_iso())
            append_decision(state_dir / "decisions.jsonl", record)
            raise
        record["finished"] = now_iso()
        append_decision(state_dir / "decisions.jsonl", record)
    print(f"retrain {cfg.task}: {record['reason']}")
    return record


def _run(record, root: Path, cfg, tparams, spec, eval_settings, run_dir: Path, tracking, retried) -> None:
    """The steps between the lock and the decision log; fills ``record`` as they go."""
    prefix = tracking.registry_prefix  # registered model <prefix><task>
    record["refresh"] = retried(commands.refresh_data)(root, cfg)
    champion = steps.current_champion(cfg.task, prefix)
    record["champion"] = None if champion is None else {"version": champion.version, "mechanism": champion.mechanism}
    mechanism = cfg.mechanism or (champion.mechanism if champion else None)
    if not mechanism:
        raise ValueError("params.yaml retrain.mechanism is null and there is no champion to take it from")
    trained = retried(steps.train_challenger)(root, tparams, cfg.task, mechanism, run_dir)
    record["challenger"] = {
        "mechanism": mechanism,
        "run_id": trained["run_id"],
        "dir": str(run_dir),
        "data": trained["data"],
    }
    pinned = champion.frozen_test_sha if (champion and cfg.frozen_test == "pin") else None
    test = retried(freeze_test)(root, cfg.task, spec.split, pinned)
    record["frozen_test"] = {"content_sha256": test["content_sha256"], "rows": test["rows"], "dir": str(test["dir"])}

    challenger_metrics = retried(steps.score_checkpoint)(
        trained["checkpoint"], trained["vocab"], mechanism, test["dir"], spec.split, eval_settings, "challenger"
    )
    record["challenger"]["value"] = spec.value(challenger_metrics)
    champion_value = None
    if champion is not None:
        champion_metrics = retried(steps.score_champion)(cfg.task, champion, test["dir"], spec.split, eval_settings)
        champion_value = record["champion"]["value"] = spec.value(champion_metrics)
    promote, reason = decide(
        spec, record["challenger"]["value"], champion_value, cfg.margin, champion.version if champion else None
    )
    record["reason"] = reason
    steps.log_decision(tracking.experiment(cfg.task), trained["run_id"], spec, record, promote, task=cfg.task)
    if promote:
        tags = promotion_tags(record, spec, challenger_metrics)
        version = retried(steps.register_challenger)(cfg.task, trained, tparams, tags, prefix)
        record["challenger"]["version"] = version
        retried(steps.move_alias)(cfg.task, version, reason, prefix)  # last: the only change
        record["decision"] = "promoted"
    else:
        record["decision"] = "kept_champion"
