"""The ``retrain`` section of params.yaml (:class:`RetrainConfig`, checked on construction) and the
metric champion and challenger are compared on (:class:`MetricSpec`: ``retrain.metric``, or the
task's ``task_settings.<task>.champion``)."""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.config.tasks import selection_metric, selection_split_of
from pipeline.config.validation import dataclass_from_dict

TAG = "retrain."  # prefix of every registry tag retraining writes


@dataclass(frozen=True)
class RetrainConfig:
    """The ``retrain`` section of ``params.yaml``; ValueError listing every bad setting."""

    task: str
    mechanism: str | None = None  # the challenger's mechanism; null: the champion's
    cron: str = "0 3 * * 0"  # the deployment's schedule (Sundays 03:00)
    deployment: str | None = None  # null: retrain-<task>
    metric: str | None = None  # "<split>.<key>[.<key>...]"; null: pipeline.config.tasks.selection_metric
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
            problems.append(f"metric must be 'valid.<key>' (e.g. valid.top1), got {self.metric!r}")
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
        split, key = selection_split_of(cfg.metric, "retrain.metric")
        return MetricSpec(split, tuple(key.split(".")), bool(cfg.higher_is_better))
    split, key, higher = selection_metric(params, cfg.task)
    return MetricSpec(split, tuple(key.split(".")), higher)
