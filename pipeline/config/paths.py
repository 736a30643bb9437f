"""Where each stage reads and writes, relative to the repository root (all under data/)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pipeline.config.params import REPO_ROOT


@dataclass(frozen=True)
class TaskPaths:
    task: str
    root: Path = REPO_ROOT

    @property
    def shards(self) -> Path:
        return self.root / "data" / "shards" / self.task

    def split(self, name: str) -> Path:
        return self.shards / name

    @property
    def vocab(self) -> Path:
        return self.root / "data" / "vocab" / self.task

    def encoded(self, split: str) -> Path:
        """The id-encoded split the vocab stage writes for training (pipeline.vocab.encoded)."""
        return self.vocab / "ids" / split

    def checkpoints(self, mechanism: str) -> Path:
        return self.root / "data" / "checkpoints" / self.task / mechanism

    def train_state(self, mechanism: str) -> Path:
        """The train stage's working state, which no DVC output holds (its bytes depend on the run):
        last.pt (resumable) and run.json (the MLflow run and the sha256 of the model.pt it wrote)."""
        return self.root / "data" / "train_state" / self.task / mechanism

    def learning_curve(self, mechanism: str) -> Path:
        return self.root / "data" / "plots" / "learning_curves" / self.task / f"{mechanism}.csv"

    def evaluation(self, mechanism: str) -> Path:
        return self.root / "data" / "eval" / "runs" / self.task / mechanism

    def predictions(self, mechanism: str, split: str, seed: str | None = None) -> Path:
        """A split's prediction records: the first seed's, or another seed's (train.seeds > 1) under
        ``predictions/seeds/<seed>/``."""
        folder = self.evaluation(mechanism) / "predictions"
        return (folder if seed is None else folder / "seeds" / str(seed)) / f"{split}.jsonl"

    def seed_predictions(self, mechanism: str) -> list[str]:
        """The other seeds whose predictions the evaluate stage wrote, in seed order."""
        folder = self.evaluation(mechanism) / "predictions" / "seeds"
        return sorted((p.name for p in folder.iterdir() if p.is_dir()), key=int) if folder.is_dir() else []

    def intervals(self, task: str) -> Path:
        """The comparison's intervals and paired tests (git-tracked, read by the docs tables)."""
        return self.root / "data" / "eval" / "intervals" / f"{task}.json"

    @property
    def comparison(self) -> Path:
        return self.root / "data" / "eval" / "comparison"

    def comparison_plot(self, task: str) -> Path:
        return self.root / "data" / "plots" / "comparison" / f"{task}.csv"
