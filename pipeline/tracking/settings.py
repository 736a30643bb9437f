"""The ``tracking`` section of params.yaml: the names runs and models are kept under."""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.config.validation import dataclass_from_dict


@dataclass(frozen=True)
class TrackingConfig:
    experiment_prefix: str = ""  # MLflow experiment of a task = prefix + task name
    registry_prefix: str = ""  # registered model of a task = prefix + task name (alias `champion`)

    def __post_init__(self) -> None:
        for name in ("experiment_prefix", "registry_prefix"):
            value = getattr(self, name)
            if value is None:  # `null` in params.yaml: no prefix
                object.__setattr__(self, name, "")
            elif not isinstance(value, str):
                raise ValueError(f"params.yaml tracking.{name} must be a string, got {value!r}")

    @classmethod
    def from_params(cls, params: dict) -> TrackingConfig:
        return dataclass_from_dict(cls, params.get("tracking") or {})

    def experiment(self, task: str) -> str:
        """The MLflow experiment of ``task``'s runs."""
        return f"{self.experiment_prefix}{task}"
