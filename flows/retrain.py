"""retrain: scheduled retraining with champion/challenger promotion (a Prefect deployment).

One run of ``retrain_flow`` (``params.yaml`` section ``retrain``); each step is a Prefect task
over a function of ``pipeline.retrain``, which documents the details:

1. **refresh** the data: ``dvc pull`` (optional; a failed pull is fatal only with
   ``pull_required``), then ``dvc repro`` of the task's data stages (``prepare@<task>``,
   ``vocab@<task>``), each a subprocess with a timeout whose stderr goes into the error.
2. **train** the challenger in-process into its own directory
   ``data/retrain/<task>/runs/<stamp>/{checkpoint,vocab}``, with a snapshot of the vocabularies;
   never ``dvc repro train@...``, so a crash leaves only an orphan run directory and a retried
   training resumes from its ``last.pt``.
3. **freeze the test set**: champion and challenger are both decoded, with the same code, on the
   copy of the test split pinned on the champion's version (``retrain.frozen_test_sha256``,
   ``data/retrain/<task>/frozen_test/<hash[:16]>``); old numbers are never trusted. With no pinned
   champion (or ``frozen_test: current``), the current test split is frozen and pinned at promotion.
4. **decide**: promote iff there is no champion, or the challenger beats it by more than
   ``margin`` on ``metric``. Promotion logs the challenger as a pyfunc model, registers a version
   (tags: metric values, margin, data hashes, reason) and moves the ``champion`` alias, last.
   Every run, promoted, kept or failed, appends one line to ``data/retrain/<task>/decisions.jsonl``.

One run per task at a time (a lock in ``data/retrain/<task>/``). A failure anywhere before the
alias move leaves the alias, the champion's version and its artifacts exactly as they were; each
step is retried ``retries`` times, ``retry_delay_s`` apart.

``python -m flows.retrain serve`` serves the deployment ``retrain/retrain-<task>`` on the cron
schedule from params (needs a Prefect server, see docs/tracking.md); ``python -m flows.retrain run`` runs once.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from prefect import flow, task
from prefect.cache_policies import NO_CACHE

from pipeline import retrain
from pipeline.config.params import load_params, project_root, section

# --------------------------------------------------------------------------- #
# Steps (Prefect tasks; their retries come from params, see retrain_flow)
# --------------------------------------------------------------------------- #


@task(cache_policy=NO_CACHE)
def refresh_data(root: Path, cfg: retrain.RetrainConfig) -> dict:
    """`dvc pull` (optional) and `dvc repro` of the task's data stages; what happened."""
    return retrain.refresh_data(root, cfg)


@task(cache_policy=NO_CACHE)
def train_challenger(root: Path, params: dict, task_name: str, mechanism: str, run_dir: Path) -> dict:
    """Train ``mechanism`` on the task's current train/valid shards into ``run_dir`` only."""
    return retrain.train_challenger(root, params, task_name, mechanism, run_dir)


@task(cache_policy=NO_CACHE)
def freeze_test(root: Path, task_name: str, split: str, pinned_sha: str | None) -> dict:
    """The test data both models are scored on: ``{'dir', 'content_sha256', 'rows'}``."""
    return retrain.freeze_test(root, task_name, split, pinned_sha)


@task(cache_policy=NO_CACHE)
def evaluate_model(
    checkpoint: Path, vocab_dir: Path, mechanism: str, test: dict, split: str, eval_settings: dict, who: str
) -> dict:
    """The challenger's metrics on the frozen test split."""
    return retrain.score_checkpoint(checkpoint, vocab_dir, mechanism, test["dir"], split, eval_settings, who)


@task(cache_policy=NO_CACHE)
def evaluate_champion(task_name: str, champion: retrain.Champion, test: dict, split: str, eval_settings: dict) -> dict:
    """The champion's metrics on the frozen test split, from its registered artifacts."""
    return retrain.score_champion(task_name, champion, test["dir"], split, eval_settings)


@task(cache_policy=NO_CACHE)
def register_challenger(task_name: str, trained: dict, params: dict, tags: dict, prefix: str = "") -> str:
    """Log the challenger as a pyfunc model in its MLflow run and register a version (no alias)."""
    return retrain.register_challenger(task_name, trained, params, tags, prefix)


@task(cache_policy=NO_CACHE)
def move_alias(task_name: str, version: str, reason: str, prefix: str = "") -> None:
    """Move the ``champion`` alias to ``version``."""
    retrain.move_alias(task_name, version, reason, prefix)


# --------------------------------------------------------------------------- #
# The flow
# --------------------------------------------------------------------------- #


@flow(name="retrain")
def retrain_flow(params_path: str | None = None, run_stamp: str | None = None) -> dict:
    """One scheduled run: refresh, train, evaluate both on the frozen test, promote or keep."""
    params = load_params(params_path)
    cfg = retrain.RetrainConfig.from_dict(section(params, "retrain"))
    root = project_root(params_path)
    tparams = retrain.task_params(params, cfg.task)
    spec = retrain.metric_spec(tparams, cfg)
    eval_settings = dict(section(tparams, "evaluate"))
    stamp = run_stamp or retrain.new_stamp()
    state_dir = root / "data" / "retrain" / cfg.task
    run_dir = state_dir / "runs" / stamp
    retry = {"retries": cfg.retries, "retry_delay_seconds": cfg.retry_delay_s}
    prefix = section(params, "tracking").get("registry_prefix") or ""  # registered model <prefix><task>

    record: dict = {
        "run": stamp,
        "task": cfg.task,
        "started": retrain.now_iso(),
        "metric": spec.name,
        "higher_is_better": spec.higher_is_better,
        "margin": cfg.margin,
    }
    with contextlib.ExitStack() as held:
        try:
            held.enter_context(retrain.run_lock(state_dir))
        except retrain.RunInProgress as err:  # an overlapping run: recorded, nothing else touched
            record.update(decision="skipped", reason=str(err), finished=retrain.now_iso())
            retrain.append_decision(state_dir / "decisions.jsonl", record)
            print(f"retrain {cfg.task}: skipped: {err}")
            return record
        try:
            record["refresh"] = refresh_data.with_options(**retry)(root, cfg)
            champion = retrain.current_champion(cfg.task, prefix)
            record["champion"] = (
                None if champion is None else {"version": champion.version, "mechanism": champion.mechanism}
            )
            mechanism = cfg.mechanism or (champion.mechanism if champion else None)
            if not mechanism:
                raise ValueError("params.yaml retrain.mechanism is null and there is no champion to take it from")
            trained = train_challenger.with_options(**retry)(root, tparams, cfg.task, mechanism, run_dir)
            record["challenger"] = {
                "mechanism": mechanism,
                "run_id": trained["run_id"],
                "dir": str(run_dir),
                "data": trained["data"],
            }
            pinned = champion.frozen_test_sha if (champion and cfg.frozen_test == "pin") else None
            test = freeze_test.with_options(**retry)(root, cfg.task, spec.split, pinned)
            record["frozen_test"] = {
                "content_sha256": test["content_sha256"],
                "rows": test["rows"],
                "dir": str(test["dir"]),
            }

            challenger_metrics = evaluate_model.with_options(**retry)(
                trained["checkpoint"], trained["vocab"], mechanism, test, spec.split, eval_settings, "challenger"
            )
            record["challenger"]["value"] = spec.value(challenger_metrics)
            champion_value = None
            if champion is not None:
                champion_metrics = evaluate_champion.with_options(**retry)(
                    cfg.task, champion, test, spec.split, eval_settings
                )
                champion_value = record["champion"]["value"] = spec.value(champion_metrics)
            promote, reason = retrain.decide(
                spec, record["challenger"]["value"], champion_value, cfg.margin, champion.version if champion else None
            )
            record["reason"] = reason
            retrain.log_decision(f"{prefix}{cfg.task}", trained["run_id"], spec, record, promote)

            if promote:
                tags = retrain.promotion_tags(record, spec, challenger_metrics)
                version = register_challenger.with_options(**retry)(cfg.task, trained, tparams, tags, prefix)
                record["challenger"]["version"] = version
                move_alias.with_options(**retry)(cfg.task, version, reason, prefix)  # last: the only change
                record["decision"] = "promoted"
            else:
                record["decision"] = "kept_champion"
        except BaseException as err:
            record.update(decision="failed", error=f"{type(err).__name__}: {err}"[:2000], finished=retrain.now_iso())
            retrain.append_decision(state_dir / "decisions.jsonl", record)
            raise
        record["finished"] = retrain.now_iso()
        retrain.append_decision(state_dir / "decisions.jsonl", record)
    print(f"retrain {cfg.task}: {record['reason']}")
    return record


# --------------------------------------------------------------------------- #
# Command line
# --------------------------------------------------------------------------- #


def main(argv: list[str] | None = None) -> int:
    """``python -m flows.retrain {serve,run} [--params FILE]``."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m flows.retrain", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "command",
        choices=["serve", "run"],
        help="serve: the deployment on its cron schedule (needs a Prefect server); run: once now",
    )
    parser.add_argument("--params", default=None, help="params file (default: the repository's params.yaml)")
    args = parser.parse_args(argv)
    params_path = str(Path(args.params).resolve()) if args.params else None
    if args.command == "run":
        retrain_flow(params_path)
        return 0
    if not os.environ.get("PREFECT_API_URL"):
        parser.error(
            "serve needs a running Prefect server: export PREFECT_API_URL=http://127.0.0.1:4200/api "
            "(see docs/tracking.md, 'Scheduled retraining')"
        )
    cfg = retrain.RetrainConfig.from_dict(section(load_params(params_path), "retrain"))
    retrain_flow.serve(
        name=cfg.deployment_name,
        cron=cfg.cron,
        parameters={"params_path": params_path},
        limit=1,
        description=f"retrain {cfg.task}: promote a challenger only if it beats the champion",
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
