"""The ``tracking`` section of params.yaml: the names runs and models are kept under."""

from __future__ import annotations

from pydantic.dataclasses import dataclass

from pipeline.config.schema import SETTINGS, TrackingSettings, build


@dataclass(frozen=True, config=SETTINGS)
class TrackingConfig(TrackingSettings):
    """The schema's :class:`~pipeline.config.schema.TrackingSettings`, ``null`` prefixes read as none."""

    def __post_init__(self) -> None:
        for name in ("experiment_prefix", "registry_prefix"):
            if getattr(self, name) is None:  # `null` in params.yaml: no prefix
                object.__setattr__(self, name, "")

    @classmethod
    def from_params(cls, params: dict) -> TrackingConfig:
        return build(cls, params.get("tracking"), "tracking")

    def experiment(self, task: str) -> str:
        """The MLflow experiment of ``task``'s runs."""
        return f"{self.experiment_prefix}{task}"
