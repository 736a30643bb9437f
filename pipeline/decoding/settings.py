"""The ``evaluate`` section of params.yaml as a typed, checked settings object: decoding (beam search),
which splits are scored and how, where and how deterministically it runs, and the heat map."""

from __future__ import annotations

from pydantic.dataclasses import dataclass

from pipeline.config.params import section
from pipeline.config.schema import SETTINGS, EvalSettings, HeatmapSettings, build

HeatmapConfig = HeatmapSettings  # evaluate.heatmap: the example of the CopyNet Figure 3-style heat map


@dataclass(frozen=True, config=SETTINGS)
class EvalConfig(EvalSettings):
    """The schema's :class:`~pipeline.config.schema.EvalSettings` (types, ranges, defaults) with the
    metric each split is scored by."""

    @classmethod
    def from_dict(cls, d: dict, where: str = "evaluate") -> EvalConfig:
        return build(cls, d, where)

    @classmethod
    def from_params(cls, params: dict) -> EvalConfig:
        """The ``evaluate`` section of (effective) params."""
        return cls.from_dict(section(params, "evaluate"))

    def metric_for(self, split: str) -> str:
        return dict(self.split_metrics).get(split, self.metric)
