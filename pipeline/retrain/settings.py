"""The ``retrain`` section of params.yaml (:class:`RetrainConfig`, checked on construction) and the
metric champion and challenger are compared on (:class:`MetricSpec`: ``retrain.metric``, or the
task's ``task_settings.<task>.champion``)."""

from __future__ import annotations

from dataclasses import dataclass

from pydantic.dataclasses import dataclass as pydantic_dataclass

from pipeline.config.schema import SETTINGS, RetrainSettings, build
from pipeline.config.tasks import selection_metric, selection_split_of

TAG = "retrain."  # prefix of every registry tag retraining writes


@pydantic_dataclass(frozen=True, config=SETTINGS)
class RetrainConfig(RetrainSettings):
    """The ``retrain`` section of ``params.yaml`` (the schema's :class:`~pipeline.config.schema.RetrainSettings`)."""

    @classmethod
    def from_dict(cls, d: dict) -> RetrainConfig:
        return build(cls, d, "retrain")

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
