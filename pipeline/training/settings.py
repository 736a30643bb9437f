"""The ``train`` section of params.yaml as the settings object training reads (docs/training.md): the
schema's :class:`~pipeline.config.schema.TrainSettings` (types, ranges, defaults) with what training
derives from it."""

from __future__ import annotations

from dataclasses import replace

from pydantic.dataclasses import dataclass

from pipeline.config.schema import SETTINGS, TrainSettings, build, resolved_select_by
from pipeline.training.schedule import LRSchedule


@dataclass(frozen=True, config=SETTINGS)
class TrainConfig(TrainSettings):
    @classmethod
    def from_dict(cls, d: dict, where: str = "train") -> TrainConfig:
        return build(cls, d, where)

    def resolved(self, metric_kind: str) -> TrainConfig:
        """``select_by: auto`` made concrete for a task scored by ``metric_kind`` on its validation split."""
        return replace(self, select_by=resolved_select_by(self.select_by, metric_kind))

    def with_seed(self, index: int) -> TrainConfig:
        """The settings of the row's ``index``-th training (0: the first, seed ``seed``)."""
        return replace(self, seed=self.seed + index)

    def schedule(self) -> LRSchedule:
        return LRSchedule(
            self.lr,
            self.warmup_steps,
            self.lr_decay,
            self.lr_halve_after,
            self.plateau_factor,
            self.plateau_patience,
            self.min_lr,
        )
