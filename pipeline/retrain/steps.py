"""The steps of a retraining run that train, score and promote (each one a Prefect task with retries
in the flow; :mod:`pipeline.retrain.run` calls them in order).

* **training** (:func:`train_challenger`): in-process (``pipeline.training.job``) into the run's own
  directory ``data/retrain/<task>/runs/<stamp>/{checkpoint,vocab}``, with a snapshot of the
  vocabularies; a retry resumes from its ``last.pt`` and reopens its MLflow run (``run.json``),
  which records the train and valid splits as its dataset inputs.
* **scoring** (:func:`score_checkpoint`, :func:`score_champion`): champion and challenger are
  decoded on exactly the frozen test copy with the same code (``pipeline.decoding``); old numbers
  are never trusted. The champion's files come from the registry (:func:`champion_files`).
* **promotion** (:func:`register_challenger`, then :func:`move_alias`): the challenger is logged as
  a pyfunc model and registered as a version tagged with
  :func:`pipeline.retrain.decision.promotion_tags`; the ``champion`` alias moves last.
* :func:`log_decision` puts the scores, the decision and the frozen test copy (a dataset input) on
  the challenger's MLflow run.
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from pipeline.config.params import section
from pipeline.config.paths import TaskPaths
from pipeline.config.tasks import effective_params
from pipeline.decoding.decode import decode_table
from pipeline.decoding.scoring import score_records
from pipeline.decoding.settings import EvalConfig
from pipeline.decoding.validation import job_scorer
from pipeline.io.files import copy_dir_atomic, write_json_atomic
from pipeline.io.shards import first_rows, read_manifest, read_split
from pipeline.retrain.settings import TAG, MetricSpec
from pipeline.runtime.device import resolve_device
from pipeline.serving.predictor import ServingConfig
from pipeline.serving.pyfunc import log_pyfunc_model
from pipeline.tracking import registry
from pipeline.tracking.runs import RunLogger, provenance_tags
from pipeline.tracking.settings import TrackingConfig
from pipeline.training.checkpoints import load_model
from pipeline.training.job import TrainJob
from pipeline.vocab.vocabulary import Vocab


def train_challenger(root: Path, params: dict, task_name: str, mechanism: str, run_dir: Path) -> dict:
    """Train ``mechanism`` on the task's current train/valid shards into ``run_dir`` only.

    Not ``dvc repro train@...``: that stage writes ``data/checkpoints/<task>/<mechanism>`` and
    ``dvc.lock``, so a crash half-way would leave the pipeline's own model half-replaced. Here a
    crash leaves only an orphan run directory; a second call resumes from its ``last.pt``, with the
    first call's vocabulary snapshot and MLflow run."""
    paths = TaskPaths(task_name, root)
    vocab_dir, ckpt_dir = run_dir / "vocab", run_dir / "checkpoint"
    if not vocab_dir.exists():  # a retry keeps the first attempt's snapshot
        subword = paths.shards / "subword.model"  # a sentencepiece corpus is served with its model
        copy_dir_atomic(paths.vocab, vocab_dir, extra=[subword] if subword.exists() else [])
    # The snapshot holds the vocabularies and the splits encoded with them (pipeline.vocab.encoded). The
    # mechanism's own overrides (task_settings.<task>.mechanisms) apply as in the train stage
    # (merging the task's layers again over params that already hold them changes nothing).
    params = effective_params(params, task_name, mechanism)
    job = TrainJob(paths, mechanism, params, vocab_dir=vocab_dir)
    model_cfg, train_cfg = job.model_cfg, job.train_cfg
    manifests = {s: read_manifest(paths.split(s)) for s in ("train", "valid")}

    run_file = run_dir / "run.json"
    previous = json.loads(run_file.read_text())["run_id"] if run_file.exists() else None
    experiment = TrackingConfig.from_params(params).experiment(task_name)
    tags = {**provenance_tags(manifests), "task": task_name, "mechanism": mechanism, f"{TAG}run": run_dir.name}
    with RunLogger(experiment, f"retrain-{mechanism}", previous, tags=tags) as run:
        write_json_atomic(run_file, {"run_id": run.run_id})
        run.datasets(task_name, {s: paths.split(s) for s in manifests}, stage="train")  # the data version it saw
        if previous != run.run_id:
            run.params({"model": vars(model_cfg), "train": vars(train_cfg)})
        history = job.run(
            on_validate=lambda row: run.metrics(row, step=row["step"]),
            checkpoints=ckpt_dir,
            run_key=run.run_id,
            score_valid=job_scorer(job),  # checkpoints chosen as the train stage chooses them
        )
    if not (ckpt_dir / "model.pt").exists():
        raise RuntimeError(f"training {mechanism} wrote no {ckpt_dir / 'model.pt'} (train.epochs = {train_cfg.epochs})")
    return {
        "run_id": run.run_id,
        "mechanism": mechanism,
        "checkpoint": ckpt_dir / "model.pt",
        "vocab": vocab_dir,
        "model_config": vars(model_cfg),
        "last_epoch": history[-1] if history else {},
        "data": {s: m["content_sha256"] for s, m in manifests.items()},
    }


def score_checkpoint(
    checkpoint: Path, vocab_dir: Path, mechanism: str, test_dir: Path, split: str, eval_settings: dict, desc: str
) -> dict:
    """Decode ``test_dir`` with beam search (``pipeline.decoding.decode``) and score it: the split's metrics."""
    cfg = EvalConfig.from_dict(eval_settings)
    device = resolve_device(cfg.device)
    vocabs = (Vocab.load(vocab_dir / "src.vocab"), Vocab.load(vocab_dir / "tgt.vocab"))
    model, _ = load_model(checkpoint, mechanism, device, vocabs)
    table = first_rows(read_split(test_dir), cfg.max_examples)  # as the evaluate stage scores it
    records = decode_table(model, table, *vocabs, cfg, device, desc=desc)
    return score_records(records, cfg, split)


@dataclass
class Champion:
    """The version the ``champion`` alias points at."""

    name: str  # the registered model
    version: str
    mechanism: str
    tags: dict = field(default_factory=dict)

    @property
    def frozen_test_sha(self) -> str | None:
        """The content hash of the test split it was promoted on (None: promoted without one)."""
        return self.tags.get(f"{TAG}frozen_test_sha256")


def current_champion(task_name: str, prefix: str = "") -> Champion | None:
    """The task's champion version (None: no alias yet); ValueError if it has no ``mechanism`` tag."""
    mv = registry.champion(task_name, prefix)
    if mv is None:
        return None
    tags = dict(mv.tags or {})
    mechanism = tags.get("mechanism")
    if not mechanism:
        raise ValueError(f"champion version {mv.version} of task {task_name} has no 'mechanism' tag")
    return Champion(mv.name, str(mv.version), mechanism, tags)


def champion_files(task_name: str, champion: Champion, dst: Path) -> tuple[Path, Path]:
    """Download the champion version's model.pt and vocabularies; (checkpoint, vocab_dir)."""
    root = registry.download_version(champion.name, champion.version, dst)
    checkpoints = sorted(root.rglob("model.pt"))
    vocabs = sorted(p.parent for p in root.rglob("tgt.vocab"))
    if len(checkpoints) != 1 or len(vocabs) != 1:
        raise FileNotFoundError(
            f"champion v{champion.version} of {task_name}: expected one model.pt and one "
            f"tgt.vocab in its artifacts under {root}, found {checkpoints} and {vocabs}"
        )
    return checkpoints[0], vocabs[0]


def score_champion(task_name: str, champion: Champion, test_dir: Path, split: str, eval_settings: dict) -> dict:
    """The champion's metrics on ``test_dir``: its files downloaded to a temporary directory, then
    scored as :func:`score_checkpoint` scores the challenger."""
    with tempfile.TemporaryDirectory(prefix="champion-") as tmp:
        checkpoint, vocab_dir = champion_files(task_name, champion, Path(tmp))
        return score_checkpoint(
            checkpoint, vocab_dir, champion.mechanism, test_dir, split, eval_settings, f"champion v{champion.version}"
        )


def register_challenger(task_name: str, trained: dict, params: dict, tags: dict, prefix: str = "") -> str:
    """Log the challenger as a pyfunc model in its MLflow run and register a version (no alias)."""
    prepare = (params.get("prepare") or {}).get(task_name) or {}
    config = ServingConfig.from_params(
        task_name,
        trained["mechanism"],
        prepare,
        section(params, "evaluate"),
        params.get("serving"),
        extra={"run_id": trained["run_id"], f"{TAG}run": tags[f"{TAG}run"]},
    )
    subword = trained["vocab"] / "subword.model"
    uri = log_pyfunc_model(
        trained["run_id"],
        trained["checkpoint"].parent,
        trained["vocab"],
        config,
        subword_model=subword if subword.exists() else None,
    )
    return str(registry.register(uri, task_name, {**tags, "mechanism": trained["mechanism"]}, prefix))


def move_alias(task_name: str, version: str, reason: str, prefix: str = "") -> None:
    """Point the ``champion`` alias at ``version`` (with its reason): the only change that makes
    a promotion visible, so a promotion does it last."""
    registry.set_champion(task_name, version, reason, prefix)


def log_decision(
    experiment: str, run_id: str, spec: MetricSpec, record: dict, promote: bool, task: str | None = None
) -> None:
    """The frozen copy's scores and the decision on the challenger's MLflow run; with ``task``, the
    frozen copy of the metric's split (validation) both models were scored on as the run's
    ``evaluation`` dataset input, named ``<task>/frozen_<split>`` (the run's training already
    recorded the live split under its own name)."""
    with RunLogger(experiment, "retrain", run_id) as run:
        if task is not None:
            name = f"frozen_{spec.split}"
            run.datasets(
                task, {name: Path(record["frozen_test"]["dir"])}, stage="evaluate", tags={name: {"frozen_test": "true"}}
            )
        run.metrics(
            {
                f"frozen_{spec.name}": record["challenger"]["value"],
                **(
                    {}
                    if record["champion"] is None or "value" not in record["champion"]
                    else {f"frozen_{spec.name}_champion": record["champion"]["value"]}
                ),
            }
        )
        run.mlflow.set_tags(
            {
                f"{TAG}decision": "promote" if promote else "keep",
                f"{TAG}reason": record["reason"],
                f"{TAG}frozen_test_sha256": record["frozen_test"]["content_sha256"],
            }
        )
