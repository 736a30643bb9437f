"""Learning-rate schedule and early stopping, both small state machines saved in step checkpoints.

lr(step, epoch) = lr x warm-up x decay x halving x plateau factor:
- warm-up (``warmup_steps`` W): linear from lr / W to lr over the first W optimizer steps;
- decay ``inverse_sqrt`` (fairseq's, Vaswani et al. 2017): sqrt(W / step) after the warm-up
  (W taken as 1 without warm-up); ``plateau``: the factor shrinks by ``plateau_factor`` after
  ``plateau_patience`` validations without improvement (torch's ReduceLROnPlateau rule, kept here
  because it must combine with the step-wise warm-up, which torch's schedulers do not compose);
  ``none``: constant;
- halving (``lr_halve_after`` E, Read-Again 4.1 "halved after epoch 5"): 0.5^(epoch - E) from epoch E+1;
- never below ``min_lr`` after the warm-up.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

DECAYS = ("none", "inverse_sqrt", "plateau")


@dataclass
class LRSchedule:
    lr: float
    warmup_steps: int = 0
    decay: str = "none"
    halve_after: int | None = None
    plateau_factor: float = 0.5
    plateau_patience: int = 1
    min_lr: float = 0.0
    # state (plateau)
    factor: float = 1.0
    best: float = math.inf
    bad_validations: int = 0

    def __post_init__(self) -> None:
        if self.decay not in DECAYS:
            raise ValueError(f"train.lr_decay must be one of {DECAYS}, not {self.decay!r}")
        if (
            self.warmup_steps < 0
            or not 0 < self.plateau_factor < 1
            or self.plateau_patience < 1
            or not 0 <= self.min_lr <= self.lr
        ):
            raise ValueError(
                "need train.warmup_steps >= 0, 0 < plateau_factor < 1, plateau_patience >= 1, "
                f"0 <= min_lr <= lr; got {self}"
            )

    def at(self, step: int, epoch: int) -> float:
        """The learning rate of optimizer step ``step`` (1-based) in epoch ``epoch`` (1-based)."""
        rate = self.lr * self.factor
        if self.warmup_steps and step < self.warmup_steps:
            rate *= step / self.warmup_steps
            return rate
        if self.decay == "inverse_sqrt":
            rate *= math.sqrt(max(self.warmup_steps, 1) / step)
        if self.halve_after is not None and epoch > self.halve_after:
            rate *= 0.5 ** (epoch - self.halve_after)
        return max(rate, self.min_lr)

    def observe(self, valid_loss: float) -> None:
        """A validation result (plateau decay only)."""
        if self.decay != "plateau":
            return
        if valid_loss < self.best:
            self.best, self.bad_validations = valid_loss, 0
            return
        self.bad_validations += 1
        if self.bad_validations >= self.plateau_patience:
            self.factor *= self.plateau_factor
            self.bad_validations = 0

    def state_dict(self) -> dict:
        return {"factor": self.factor, "best": self.best, "bad_validations": self.bad_validations}

    def load_state_dict(self, state: dict) -> None:
        self.factor, self.best, self.bad_validations = state["factor"], state["best"], state["bad_validations"]


@dataclass
class EarlyStopping:
    """Stop after ``patience`` validations whose loss is not ``min_delta`` below the best (None: never)."""

    patience: int | None = None
    min_delta: float = 0.0
    best: float = math.inf
    bad_validations: int = 0

    def __post_init__(self) -> None:
        if self.patience is not None and self.patience < 1:
            raise ValueError(f"train.patience must be >= 1 or null, not {self.patience}")

    def observe(self, valid_loss: float) -> bool:
        """Record a validation; True if it is the best so far."""
        if valid_loss < self.best - self.min_delta:
            self.best, self.bad_validations = valid_loss, 0
            return True
        self.bad_validations += 1
        return False

    @property
    def should_stop(self) -> bool:
        return self.patience is not None and self.bad_validations >= self.patience

    def state_dict(self) -> dict:
        return asdict(self)

    def load_state_dict(self, state: dict) -> None:
        self.best, self.bad_validations = state["best"], state["bad_validations"]
