"""Training loop: Adam, gradient clipping, validation each epoch, atomic resumable checkpoints.

No Prefect or MLflow in here: the flow passes ``on_epoch`` to log wherever it likes.

Checkpoint directory layout:
  last.pt     model + optimizer + RNG states + epoch + fingerprint (resume after interruption)
  model.pt    weights of the best epoch by validation loss, with the model config (for evaluation)
  history.json one row per epoch (the learning curve)
Resuming happens only when last.pt is unfinished (an interrupted run) and carries the same
fingerprint (model, training and data settings); anything else starts afresh, so neither a params
change nor a rerun of a finished training (e.g. after a code change) continues a stale run. The
fingerprint does not cover the code: after changing the code under an *interrupted* run, delete
its last.pt to start afresh.
"""
from __future__ import annotations

import hashlib
import json
import math
import random
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

import pyarrow as pa
import torch
from tqdm import tqdm

from pipeline.batching import batch_from_rows, length_bucketed_batches, row_lengths
from pipeline.params import dataclass_from_dict
from pipeline.shards import atomic_path, write_json_atomic
from pipeline.vocab import PAD, Vocab


@dataclass(frozen=True)
class TrainConfig:
    epochs: int = 10
    batch_size: int = 64
    lr: float = 1e-3
    clip: float = 5.0  # max gradient L2 norm
    seed: int = 1234
    device: str = "auto"  # auto | cpu | cuda | cuda:N
    max_src_len: int | None = None
    threads: int = 0  # torch CPU threads (0: torch's default)
    optimizer: str = "adam"  # adam | sgd (Read-Again 4.1: SGD, lr 2, halved after epoch 5)
    lr_halve_after: int | None = None  # halve the learning rate after every epoch >= this one
    max_train_examples: int | None = None  # the first N training rows only (cpu presets)
    max_valid_examples: int | None = None  # the first N validation rows only

    def __post_init__(self):
        if self.optimizer not in ("adam", "sgd"):
            raise ValueError(f"train.optimizer must be 'adam' or 'sgd', got {self.optimizer!r}")

    @classmethod
    def from_dict(cls, d: dict) -> "TrainConfig":
        return dataclass_from_dict(cls, d)


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def autocast(device: torch.device):
    """bf16 autocast on CUDA (AMP); a no-op context on the CPU. bf16 keeps float32's range, so
    the finite NEG mask value stays finite (fp16 would turn it into -inf)."""
    return torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=device.type == "cuda")


def seed_everything(seed: int) -> None:
    random.seed(seed)
    torch.manual_seed(seed)


def build_seeded_model(mechanism: str, model_cfg, seed: int) -> torch.nn.Module:
    """The model's initial weights come from the training seed, so a run is reproducible."""
    from models import build_model

    seed_everything(seed)
    return build_model(mechanism, model_cfg)


def save_atomic(obj, path: Path) -> None:
    """torch.save to a temp file in the same directory, then rename: never a half-written file."""
    with atomic_path(path) as tmp:
        torch.save(obj, tmp)


def fingerprint(*parts: dict) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:16]


def first_rows(table: pa.Table, n: int | None) -> pa.Table:
    return table if n is None or n >= table.num_rows else table.slice(0, n)


def epoch_lr(cfg: TrainConfig, epoch: int) -> float:
    """cfg.lr, halved once for every finished epoch from ``lr_halve_after`` on (Read-Again 4.1:
    "halved after epoch 5": epochs 1-5 at lr, epoch 6 at lr/2, epoch 7 at lr/4, ...)."""
    if cfg.lr_halve_after is None or epoch <= cfg.lr_halve_after:
        return cfg.lr
    return cfg.lr * 0.5 ** (epoch - cfg.lr_halve_after)


def nll_loss(model, batch) -> tuple[torch.Tensor, int]:
    """Mean loss per target token: in training mode the mechanism's objective (CopyNet eq. 10's
    negative log-likelihood unless the mechanism trains another, see Seq2Seq.forward), in eval mode
    the negative log-likelihood for every mechanism (validation loss)."""
    gold = model(batch)  # (B, T)
    n_tokens = int((batch.tgt_out != PAD).sum())
    return -gold.sum() / max(n_tokens, 1), n_tokens


@torch.no_grad()
def evaluate_loss(model, table: pa.Table, src_vocab: Vocab, tgt_vocab: Vocab, cfg: TrainConfig,
                  device: torch.device) -> dict:
    model.eval()
    total, tokens = 0.0, 0
    for rows in length_bucketed_batches(row_lengths(table), cfg.batch_size, shuffle=False, seed=0):
        batch = batch_from_rows(table, rows, src_vocab, tgt_vocab, max_src_len=cfg.max_src_len).to(device)
        with autocast(device):
            loss, n = nll_loss(model, batch)
        total += loss.item() * n
        tokens += n
    mean = total / max(tokens, 1)
    return {"valid_loss": mean, "valid_ppl": math.exp(min(mean, 50.0))}


def train(
    model: torch.nn.Module,
    train_table: pa.Table,
    valid_table: pa.Table,
    src_vocab: Vocab,
    tgt_vocab: Vocab,
    cfg: TrainConfig,
    ckpt_dir: Path,
    model_config: dict,
    data_hash: str = "",
    on_epoch: Callable[[dict], None] | None = None,
    progress: bool | None = None,
) -> list[dict]:
    """Train, validating each epoch; returns the learning curve (one dict per epoch)."""
    ckpt_dir = Path(ckpt_dir)
    device = resolve_device(cfg.device)
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    seed_everything(cfg.seed)
    model.to(device)
    optim_cls = torch.optim.Adam if cfg.optimizer == "adam" else torch.optim.SGD
    optimizer = optim_cls(model.parameters(), lr=cfg.lr)
    train_table, valid_table = first_rows(train_table, cfg.max_train_examples), first_rows(valid_table, cfg.max_valid_examples)
    fp = fingerprint(asdict(cfg), model_config, {"data": data_hash})
    history: list[dict] = []
    start_epoch, best = 1, float("inf")

    last = ckpt_dir / "last.pt"
    if last.exists():
        ckpt = torch.load(last, map_location=device, weights_only=False)
        if ckpt.get("fingerprint") == fp and ckpt["epoch"] < cfg.epochs:
            model.load_state_dict(ckpt["model"])
            optimizer.load_state_dict(ckpt["optimizer"])
            random.setstate(ckpt["python_rng"])
            torch.set_rng_state(ckpt["torch_rng"])
            if device.type == "cuda" and ckpt.get("cuda_rng") is not None:
                torch.cuda.set_rng_state_all(ckpt["cuda_rng"])
            history, best, start_epoch = ckpt["history"], ckpt["best"], ckpt["epoch"] + 1
            print(f"resuming from {last} at epoch {start_epoch}", file=sys.stderr)

    lengths = row_lengths(train_table)
    for epoch in range(start_epoch, cfg.epochs + 1):
        model.train()
        for group in optimizer.param_groups:  # a function of the epoch, so a resumed run agrees
            group["lr"] = epoch_lr(cfg, epoch)
        batches = length_bucketed_batches(lengths, cfg.batch_size, shuffle=True, seed=cfg.seed + epoch)
        t0, seen_tokens, loss_sum = time.perf_counter(), 0, 0.0
        bar = tqdm(batches, desc=f"epoch {epoch}/{cfg.epochs}", unit="batch", disable=None if progress is None else not progress, mininterval=1.0, leave=False)
        for rows in bar:
            batch = batch_from_rows(train_table, rows, src_vocab, tgt_vocab, max_src_len=cfg.max_src_len).to(device)
            with autocast(device):
                loss, n = nll_loss(model, batch)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.clip)
            optimizer.step()
            seen_tokens += n
            loss_sum += loss.item() * n
            elapsed = time.perf_counter() - t0
            bar.set_postfix(loss=f"{loss.item():.3f}", tok_s=f"{seen_tokens / max(elapsed, 1e-9):.0f}")
        elapsed = time.perf_counter() - t0
        row = {"epoch": epoch, "train_loss": loss_sum / max(seen_tokens, 1),
               "tokens_per_s": seen_tokens / max(elapsed, 1e-9), "epoch_seconds": elapsed}
        row.update(evaluate_loss(model, valid_table, src_vocab, tgt_vocab, cfg, device))
        history.append(row)
        if row["valid_loss"] < best:
            best = row["valid_loss"]
            save_atomic({"model": model.state_dict(), "model_config": model_config, "epoch": epoch,
                         "valid_loss": best}, ckpt_dir / "model.pt")
        save_atomic({
            "model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch,
            "history": history, "best": best, "fingerprint": fp,
            "python_rng": random.getstate(), "torch_rng": torch.get_rng_state(),
            "cuda_rng": torch.cuda.get_rng_state_all() if device.type == "cuda" else None,
        }, last)
        write_json_atomic(ckpt_dir / "history.json", history)
        print(f"epoch {epoch}: train_loss {row['train_loss']:.4f} valid_loss {row['valid_loss']:.4f} "
              f"({row['tokens_per_s']:.0f} tok/s, {elapsed:.1f}s)", file=sys.stderr)
        if on_epoch is not None:
            on_epoch(row)
    return history
