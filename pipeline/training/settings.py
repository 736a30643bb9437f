"""The ``train`` section of params.yaml as a typed, checked settings object (docs/training.md)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from pipeline.config.validation import dataclass_from_dict
from pipeline.training.schedule import LRSchedule

AMP_MODES = ("auto", "bf16", "off")
SELECT_BY = ("auto", "loss", "metric")
# train.select_by: auto, by the kind of metric the task is scored by (on the validation split). Exact
# match is chosen by its metric: there the validation loss bottoms out epochs before accuracy stops
# rising (docs/training.md, "Which checkpoint"); the text metrics keep the loss, which was not measured
# against their metric here.
AUTO_SELECT_BY = {"exact_match": "metric"}


@dataclass(frozen=True)
class TrainConfig:
    epochs: int = 10
    max_steps: int | None = None  # stop after this many optimizer steps (fairseq --max-update)
    batch_size: int = 64  # sentences per batch (per process)
    max_tokens: int | None = None  # padded source + target positions per batch (fairseq --max-tokens)
    update_freq: int = 1  # batches accumulated per optimizer step (fairseq --update-freq, OpenNMT-py accum_count)
    lr: float = 1e-3
    clip: float = 5.0  # max gradient L2 norm
    seed: int = 1234
    device: str = "auto"  # auto | cpu | cuda | cuda:N
    max_src_len: int | None = None
    threads: int = 0  # torch CPU threads (0: torch's default); a fixed count fixes the reduction order
    deterministic: bool = False  # torch.use_deterministic_algorithms: the same params give the same weights
    optimizer: str = "adam"  # adam | sgd (Read-Again 4.1: SGD, lr 2, halved after epoch 5)
    lr_halve_after: int | None = None  # halve the learning rate after every epoch >= this one
    warmup_steps: int = 0  # linear warm-up over the first N optimizer steps
    lr_decay: str = "none"  # none | inverse_sqrt | plateau
    plateau_factor: float = 0.5  # plateau decay: lr x this after plateau_patience bad validations
    plateau_patience: int = 1
    min_lr: float = 0.0
    patience: int | None = None  # early stopping: validations without improvement (null: never)
    min_delta: float = 0.0  # an improvement must lower the validation loss by more than this
    validate_every: int | None = None  # optimizer steps between validations (null: at each epoch's end)
    checkpoint_every: int | None = None  # optimizer steps between checkpoints (besides validations)
    checkpoint_minutes: float | None = None  # minutes between checkpoints
    keep_checkpoints: int = 0  # weights at each of the last K validations, in steps/ (evaluate.average_last)
    log_every: int = 50  # optimizer steps between on_step reports (train loss, lr, tokens/s)
    amp: str = "auto"  # auto: bf16 autocast on CUDA only | bf16: also on the CPU | off
    compile: bool = (
        False  # torch.compile the decoder's per-step recurrence and the output layer (Seq2Seq.compile_recurrence)
    )
    cuda_graphs: bool = (
        False  # replay the recurrent decoder's teacher forcing from CUDA graphs (models/graphed.py; CUDA only)
    )
    workers: int = 0  # DataLoader worker processes building batches (0: in the training process)
    nproc: int = 1  # processes per machine (torchrun; one per GPU)
    nnodes: int = 1  # machines
    rdzv_endpoint: str | None = None  # host:port of torchrun's rendezvous when nnodes > 1
    rdzv_timeout: int = 600  # seconds the first machine waits for the others, and a collective for a silent peer
    max_train_examples: int | None = None  # the first N training rows only (cpu presets)
    max_valid_examples: int | None = None  # the first N validation rows only
    seeds: int = 1  # trainings of the row, with seeds seed, seed + 1, ... (the first is the registered model)
    select_by: str = "auto"  # the best checkpoint and early stopping by: loss | metric (the task's, on valid) | auto
    select_beam: int = 1  # the beam that decodes the validation split for select_by: metric (1: greedy)

    def __post_init__(self):
        if self.optimizer not in ("adam", "sgd"):
            raise ValueError(f"train.optimizer must be 'adam' or 'sgd', got {self.optimizer!r}")
        if self.compile and self.cuda_graphs:
            raise ValueError("train.compile and train.cuda_graphs both replace the recurrence: choose one")
        if self.amp not in AMP_MODES:
            raise ValueError(f"train.amp must be one of {AMP_MODES}, got {self.amp!r}")
        for name in ("batch_size", "update_freq", "nproc", "nnodes", "log_every", "rdzv_timeout"):
            if getattr(self, name) < 1:
                raise ValueError(f"train.{name} must be >= 1, got {getattr(self, name)}")
        for name in ("max_steps", "max_tokens", "validate_every", "checkpoint_every", "checkpoint_minutes"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ValueError(f"train.{name} must be positive or null, got {value}")
        if self.select_by not in SELECT_BY:
            raise ValueError(f"train.select_by must be one of {SELECT_BY}, got {self.select_by!r}")
        for name in ("seeds", "select_beam"):
            if getattr(self, name) < 1:
                raise ValueError(f"train.{name} must be >= 1, got {getattr(self, name)}")
        if self.keep_checkpoints < 0:
            raise ValueError(f"train.keep_checkpoints must be >= 0, got {self.keep_checkpoints}")

    @classmethod
    def from_dict(cls, d: dict) -> TrainConfig:
        return dataclass_from_dict(cls, d)

    def resolved(self, metric_kind: str) -> TrainConfig:
        """``select_by: auto`` made concrete for a task scored by ``metric_kind`` on its validation split."""
        if self.select_by != "auto":
            return self
        return replace(self, select_by=AUTO_SELECT_BY.get(metric_kind, "loss"))

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
