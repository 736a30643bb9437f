"""Champion/challenger retraining, the library part: every step of ``flows/retrain.py`` without Prefect.

* **settings**: :class:`RetrainConfig` (``params.yaml`` section ``retrain``, checked on
  construction) and :class:`MetricSpec`, the metric both models are compared on
  (:func:`metric_spec`: ``retrain.metric``, or the task's ``task_settings.<task>.champion``).
* **refreshing the data** (:func:`refresh_data`): ``dvc pull`` and ``dvc repro`` through
  :func:`run_command`, each a subprocess in its own process group with a timeout (the whole group
  is killed: dvc starts children), whose stderr goes into the :class:`CommandError`.
* **training** (:func:`train_challenger`): in-process (``pipeline.train_job``) into the run's own
  directory ``data/retrain/<task>/runs/<stamp>/{checkpoint,vocab}``, with a snapshot of the
  vocabularies; a retry resumes from its ``last.pt`` and reopens its MLflow run (``run.json``).
* **the frozen test set** (:func:`freeze_test`): the champion's version carries
  ``retrain.frozen_test_sha256`` (the test split's manifest ``content_sha256`` when it was
  promoted) and a copy of that split lives in ``data/retrain/<task>/frozen_test/<hash[:16]>``,
  written whole or not at all (:func:`copy_dir_atomic`) and checked byte for byte against its
  manifest before each use (:func:`verify_split`). With no pinned champion, the current test split
  is frozen; a pinned copy that is gone is re-made only from a split with the same content, else
  an error (never a silent switch of test set).
* **scoring** (:func:`score_checkpoint`, :func:`score_champion`): champion and challenger are
  decoded on exactly that copy with the same code (``pipeline.evaluate``); old numbers are never
  trusted. The champion's files come from the registry (:func:`champion_files`).
* **the decision** (:func:`decide`): promote iff there is no champion, or the challenger beats it
  by strictly more than ``margin`` (a tie keeps the champion, NaN never wins), whatever the
  metric's direction; the reason is one line (``promoted: ...`` / ``kept champion: ...``).
* **promotion** (:func:`register_challenger`, then :func:`move_alias`): the challenger is logged
  as a pyfunc model and registered as a version tagged with :func:`promotion_tags` (metric values,
  margin, data hashes, reason); the ``champion`` alias moves last.
* **records**: :func:`append_decision` appends one JSON line to ``data/retrain/<task>/decisions.jsonl``,
  rewriting the file atomically so a reader never sees half a line; :func:`log_decision` puts the
  scores and the decision on the challenger's MLflow run; :func:`run_lock` (``fcntl``) lets one
  run per task at a time hold ``data/retrain/<task>/``.

MLflow is reached only through ``pipeline.tracking`` (runs, registry), imported inside the
functions that need it.
"""

from __future__ import annotations

import fcntl
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from pipeline.config.params import section
from pipeline.config.paths import TaskPaths
from pipeline.config.validation import dataclass_from_dict
from pipeline.io.files import copy_dir_atomic, sha256_file, write_json_atomic, write_text_atomic
from pipeline.io.shards import content_sha256, read_manifest, read_split

TAG = "retrain."  # prefix of every registry tag retraining writes
DVC = [sys.executable, "-m", "dvc"]  # the dvc of this environment, whatever PATH holds


# --------------------------------------------------------------------------- #
# Settings
# --------------------------------------------------------------------------- #


@dataclass(frozen=True)
class RetrainConfig:
    """The ``retrain`` section of ``params.yaml``; ValueError listing every bad setting."""

    task: str
    mechanism: str | None = None  # the challenger's mechanism; null: the champion's
    cron: str = "0 3 * * 0"  # the deployment's schedule (Sundays 03:00)
    deployment: str | None = None  # null: retrain-<task>
    metric: str | None = None  # "<split>.<key>[.<key>...]"; null: pipeline.config.tasks.primary_metric
    higher_is_better: bool = True
    margin: float = 0.0  # promote iff the challenger is better by MORE than this
    pull: bool = True  # `dvc pull` before reproducing
    pull_required: bool = False  # a failed pull (no remote, offline) fails the run only when true
    repro_targets: tuple[str, ...] = ("vocab@{task}",)  # `dvc repro` targets ({task} filled in); [] skips
    frozen_test: str = "pin"  # pin: the champion's test copy | current: today's test split for both
    command_timeout_s: float = 3600.0
    retries: int = 2
    retry_delay_s: float = 30.0

    def __post_init__(self):
        problems = []
        if not isinstance(self.task, str) or not self.task:
            problems.append(f"task must be a task name, got {self.task!r}")
        if self.frozen_test not in ("pin", "current"):
            problems.append(f"frozen_test must be 'pin' or 'current', got {self.frozen_test!r}")
        if isinstance(self.margin, bool) or not isinstance(self.margin, (int, float)) or not self.margin >= 0:
            problems.append(f"margin must be a number >= 0, got {self.margin!r}")
        if self.metric is not None and "." not in str(self.metric):
            problems.append(f"metric must be '<split>.<key>' (e.g. test.top1), got {self.metric!r}")
        if isinstance(self.retries, bool) or not isinstance(self.retries, int) or self.retries < 0:
            problems.append(f"retries must be an int >= 0, got {self.retries!r}")
        if not self.command_timeout_s > 0 or not self.retry_delay_s >= 0:
            problems.append("command_timeout_s must be > 0 and retry_delay_s >= 0")
        if problems:
            raise ValueError("params.yaml retrain: " + "; ".join(problems))

    @classmethod
    def from_dict(cls, d: dict) -> RetrainConfig:
        """From the params section (a list of repro targets becomes a tuple; unknown keys: an error)."""
        d = dict(d)
        if "repro_targets" in d:
            d["repro_targets"] = tuple(d["repro_targets"] or ())
        return dataclass_from_dict(cls, d)

    @property
    def deployment_name(self) -> str:
        """The Prefect deployment's name: ``deployment``, or ``retrain-<task>``."""
        return self.deployment or f"retrain-{self.task}"


@dataclass(frozen=True)
class MetricSpec:
    """The metric champion and challenger are compared on: a path into one split's metrics."""

    split: str
    keys: tuple[str, ...]  # path into the split's metrics dict, e.g. ("top1",)
    higher_is_better: bool

    @property
    def name(self) -> str:
        return ".".join((self.split, *self.keys))

    def value(self, split_metrics: dict) -> float:
        node = split_metrics
        for key in self.keys:
            if not isinstance(node, dict) or key not in node:
                raise KeyError(f"metric {self.name!r} not in the evaluation's metrics {sorted(split_metrics)}")
            node = node[key]
        return float(node)

    def gain(self, challenger: float, champion: float) -> float:
        """How much better the challenger is (positive: better), whatever the direction."""
        return challenger - champion if self.higher_is_better else champion - challenger


def metric_spec(params: dict, cfg: RetrainConfig) -> MetricSpec:
    """``cfg.metric`` (with ``cfg.higher_is_better``), or the task's champion metric from params."""
    if cfg.metric:
        split, *keys = cfg.metric.split(".")
        return MetricSpec(split, tuple(keys), bool(cfg.higher_is_better))
    from pipeline.config.tasks import primary_metric

    split, key, higher = primary_metric(params, cfg.task)
    return MetricSpec(split, tuple(key.split(".")), higher)


def task_params(params: dict, task_name: str, mechanism: str | None = None) -> dict:
    """The params a stage of ``task_name`` (and ``mechanism``) reads: the task's overrides applied."""
    from pipeline.config.tasks import effective_params

    return effective_params(params, task_name, mechanism)


# --------------------------------------------------------------------------- #
# The decision
# --------------------------------------------------------------------------- #


def decide(
    spec: MetricSpec, challenger: float, champion: float | None, margin: float, champion_version: str | None = None
) -> tuple[bool, str]:
    """Promote iff no champion, or gain(challenger, champion) > margin (strictly; NaN never wins)."""
    if champion is None:
        return True, f"no champion yet; challenger {spec.name} = {challenger:.4f}"
    gain = spec.gain(challenger, champion)
    verdict = (
        f"{spec.name}: challenger {challenger:.4f} vs champion v{champion_version} {champion:.4f}, "
        f"gain {gain:+.4f} ({'higher' if spec.higher_is_better else 'lower'} is better), margin {margin:g}"
    )
    if math.isnan(challenger) or not gain > margin:
        return False, f"kept champion: {verdict}"
    return True, f"promoted: {verdict}"


def metric_tags(metrics: dict) -> dict[str, str]:
    """The registry's ``metric.<split>.<key>`` version tags (what best_version ranks by)."""
    from pipeline.tracking.registry import metric_tags as tags

    return tags(metrics)


def promotion_tags(record: dict, spec: MetricSpec, challenger_metrics: dict) -> dict[str, str]:
    """The tags of the version a promotion registers, from the run's decision record (its reason,
    both values, the margin, the frozen test's and the training data's hashes) and the challenger's
    metrics on the frozen test split (``metric.<split>.<key>``)."""
    champion, challenger = record["champion"], record["challenger"]
    return {
        f"{TAG}reason": record["reason"],
        f"{TAG}run": record["run"],
        f"{TAG}metric": spec.name,
        f"{TAG}value": repr(challenger["value"]),
        f"{TAG}previous_champion": champion["version"] if champion else "none",
        f"{TAG}previous_value": repr(champion["value"] if champion else None),
        f"{TAG}margin": repr(record["margin"]),
        f"{TAG}frozen_test_sha256": record["frozen_test"]["content_sha256"],
        **{f"{TAG}data.{s}.content_sha256": h for s, h in challenger["data"].items()},
        "run_id": challenger["run_id"],
        **metric_tags({spec.split: challenger_metrics}),
    }


# --------------------------------------------------------------------------- #
# Commands (dvc)
# --------------------------------------------------------------------------- #


class CommandError(RuntimeError):
    """A command that could not start, failed or timed out; ``stderr``: what it wrote there."""

    def __init__(self, message: str, stderr: str = ""):
        super().__init__(message)
        self.stderr = stderr

    @property
    def summary(self) -> str:
        """One line: the command's failure and the last line it wrote to stderr."""
        last = next((line for line in reversed(self.stderr.splitlines()) if line.strip()), "")
        return str(self).splitlines()[0].removesuffix("; stderr:") + (f": {last.strip()}" if last else "")


def run_command(cmd: list[str], cwd: Path, timeout_s: float) -> str:
    """Run ``cmd`` in its own process group; its stdout, or CommandError with the exit status and
    the tail of its stderr. On timeout the whole group is killed (dvc starts children)."""
    shown = " ".join(cmd)
    try:
        proc = subprocess.Popen(
            cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
        )
    except OSError as err:
        raise CommandError(f"`{shown}` could not start in {cwd}: {err}") from err
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        raise CommandError(f"`{shown}` timed out after {timeout_s:g}s in {cwd}; stderr:\n{err[-4000:]}", err) from None
    if proc.returncode != 0:
        raise CommandError(f"`{shown}` failed with exit status {proc.returncode} in {cwd}; stderr:\n{err[-4000:]}", err)
    return out


def refresh_data(root: Path, cfg: RetrainConfig) -> dict:
    """`dvc pull` (optional) and `dvc repro` of the task's data stages; what happened.

    A failed pull is fatal only with ``cfg.pull_required``; otherwise it is reported and skipped."""
    targets = [t.format(task=cfg.task) for t in cfg.repro_targets]
    report: dict = {"pull": "off", "repro": targets}
    if cfg.pull:
        try:
            run_command([*DVC, "pull", *(["--with-deps", *targets] if targets else [])], root, cfg.command_timeout_s)
            report["pull"] = "ok"
        except CommandError as err:
            if cfg.pull_required:
                raise
            report["pull"] = f"failed, continuing (pull_required: false): {err.summary}"
            print(f"retrain {cfg.task}: {report['pull']}", file=sys.stderr)
    if targets:
        run_command([*DVC, "repro", *targets], root, cfg.command_timeout_s)
    return report


# --------------------------------------------------------------------------- #
# Files: copies, the frozen test split, the decision log, the lock
# --------------------------------------------------------------------------- #


def verify_split(split_dir: Path, expected_sha: str | None = None) -> dict:
    """The split's manifest after checking every part's bytes against it (and its content hash
    against ``expected_sha``); ValueError naming the file that differs."""
    manifest = read_manifest(split_dir)
    for part in manifest["parts"]:
        actual = sha256_file(split_dir / part["file"])
        if actual != part["sha256"]:
            raise ValueError(
                f"{split_dir / part['file']}: sha256 {actual} differs from its manifest's {part['sha256']}"
            )
    content = content_sha256(p["sha256"] for p in manifest["parts"])
    if content != manifest["content_sha256"] or (expected_sha and content != expected_sha):
        raise ValueError(
            f"{split_dir}: content_sha256 {content} differs from the expected "
            f"{expected_sha or manifest['content_sha256']}"
        )
    return manifest


def freeze_test(root: Path, task_name: str, split: str, pinned_sha: str | None) -> dict:
    """The test data both models are scored on: ``{'dir', 'content_sha256', 'rows'}``.

    ``pinned_sha`` (the champion's): its copy under data/retrain/<task>/frozen_test/, re-copied from
    the current split if that still has the same content; else an error (never a silent switch).
    None: the current split is copied there (kept if an identical copy exists).
    """
    current = TaskPaths(task_name, root).split(split)
    frozen_root = root / "data" / "retrain" / task_name / "frozen_test"
    if pinned_sha is None:
        pinned_sha = verify_split(current)["content_sha256"]
    target = frozen_root / pinned_sha[:16]
    if not target.exists():
        if not current.exists() or read_manifest(current)["content_sha256"] != pinned_sha:
            raise FileNotFoundError(
                f"the champion was scored on {split} data with content_sha256 {pinned_sha}, but its frozen copy "
                f"{target} is missing and {current} holds other data; restore the copy, or set "
                f"retrain.frozen_test: current to score both models on today's {split} split"
            )
        copy_dir_atomic(current, target)
    manifest = verify_split(target, pinned_sha)
    return {"dir": target, "content_sha256": pinned_sha, "rows": manifest["rows"]}


def append_decision(path: Path, record: dict) -> None:
    """Append one JSON line; the file is rewritten atomically (old lines + the new one), under a lock
    of its own, so a run that is turned away (another holds the run lock) can still record it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.parent / ".decisions.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # held for one read-and-rename only
        old = path.read_text(encoding="utf-8") if path.exists() else ""
        write_text_atomic(path, old + json.dumps(record, sort_keys=True, ensure_ascii=False, default=str) + "\n")


class RunInProgress(RuntimeError):
    """Another retrain run of the task holds its lock."""


@contextmanager
def run_lock(state_dir: Path) -> Iterator[None]:
    """One retrain run per task at a time (a served schedule and a manual run may overlap);
    RunInProgress when another run holds it."""
    state_dir.mkdir(parents=True, exist_ok=True)
    with open(state_dir / ".lock", "w") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RunInProgress(f"another retrain run holds {state_dir / '.lock'}; this one did nothing") from None
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def new_stamp() -> str:
    """A run's directory name: UTC time plus a random suffix (``20250105T030000Z-1a2b3c``)."""
    return datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ") + "-" + uuid.uuid4().hex[:6]


def now_iso() -> str:
    """The UTC time now, ISO 8601 to the second."""
    return datetime.now(UTC).isoformat(timespec="seconds")


# --------------------------------------------------------------------------- #
# Training and scoring
# --------------------------------------------------------------------------- #


def train_challenger(root: Path, params: dict, task_name: str, mechanism: str, run_dir: Path) -> dict:
    """Train ``mechanism`` on the task's current train/valid shards into ``run_dir`` only.

    Not ``dvc repro train@...``: that stage writes ``data/checkpoints/<task>/<mechanism>`` and
    ``dvc.lock``, so a crash half-way would leave the pipeline's own model half-replaced. Here a
    crash leaves only an orphan run directory; a second call resumes from its ``last.pt``, with the
    first call's vocabulary snapshot and MLflow run."""
    from pipeline.tracking.runs import RunLogger, provenance_tags
    from pipeline.train_job import TrainJob

    paths = TaskPaths(task_name, root)
    vocab_dir, ckpt_dir = run_dir / "vocab", run_dir / "checkpoint"
    if not vocab_dir.exists():  # a retry keeps the first attempt's snapshot
        subword = paths.shards / "subword.model"  # a sentencepiece corpus is served with its model
        copy_dir_atomic(paths.vocab, vocab_dir, extra=[subword] if subword.exists() else [])
    # The snapshot holds the vocabularies and the splits encoded with them (pipeline.vocab.encoded). The
    # mechanism's own overrides (task_settings.<task>.mechanisms) apply as in the train stage
    # (merging the task's layers again over params that already hold them changes nothing).
    params = task_params(params, task_name, mechanism)
    job = TrainJob(paths, mechanism, params, vocab_dir=vocab_dir)
    model_cfg, train_cfg = job.model_cfg, job.train_cfg
    manifests = {s: read_manifest(paths.split(s)) for s in ("train", "valid")}

    run_file = run_dir / "run.json"
    previous = json.loads(run_file.read_text())["run_id"] if run_file.exists() else None
    experiment = f"{section(params, 'tracking').get('experiment_prefix') or ''}{task_name}"
    tags = {**provenance_tags(manifests), "task": task_name, "mechanism": mechanism, f"{TAG}run": run_dir.name}
    with RunLogger(experiment, f"retrain-{mechanism}", previous, tags=tags) as run:
        write_json_atomic(run_file, {"run_id": run.run_id})
        if previous != run.run_id:
            run.params({"model": vars(model_cfg), "train": vars(train_cfg)})
        history = job.run(
            on_validate=lambda row: run.metrics(row, step=row["step"]), checkpoints=ckpt_dir, run_key=run.run_id
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
    """Decode ``test_dir`` with beam search (``pipeline.evaluate``) and score it: the split's metrics."""
    from pipeline.checkpoints import load_model
    from pipeline.evaluate import EvalConfig, decode_table, score_records
    from pipeline.io.shards import first_rows
    from pipeline.train import resolve_device
    from pipeline.vocab.vocabulary import Vocab

    cfg = EvalConfig.from_dict({k: v for k, v in eval_settings.items() if k != "heatmap"})
    device = resolve_device(cfg.device)
    vocabs = (Vocab.load(vocab_dir / "src.vocab"), Vocab.load(vocab_dir / "tgt.vocab"))
    model, _ = load_model(checkpoint, mechanism, device, vocabs)
    table = first_rows(read_split(test_dir), cfg.max_examples)  # as the evaluate stage scores it
    records = decode_table(model, table, *vocabs, cfg, device, desc=desc)
    return score_records(records, cfg, split)


# --------------------------------------------------------------------------- #
# The registry (pipeline.tracking.registry / pipeline.tracking.serving), in one place
# --------------------------------------------------------------------------- #


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
    from pipeline.tracking import registry

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
    from pipeline.tracking import registry

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
    from pipeline.tracking import registry, serving

    prepare = (params.get("prepare") or {}).get(task_name) or {}
    config = serving.ServingConfig.from_params(
        task_name,
        trained["mechanism"],
        prepare,
        section(params, "evaluate"),
        params.get("serving"),
        extra={"run_id": trained["run_id"], f"{TAG}run": tags[f"{TAG}run"]},
    )
    subword = trained["vocab"] / "subword.model"
    uri = serving.log_pyfunc_model(
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
    from pipeline.tracking import registry

    registry.set_champion(task_name, version, reason, prefix)


def log_decision(experiment: str, run_id: str, spec: MetricSpec, record: dict, promote: bool) -> None:
    """The frozen-test scores and the decision on the challenger's MLflow run."""
    from pipeline.tracking.runs import RunLogger

    with RunLogger(experiment, "retrain", run_id) as run:
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
