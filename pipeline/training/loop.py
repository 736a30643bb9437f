"""Training loop: token-budget batches from id-encoded splits, Adam or SGD, gradient clipping,
warm-up and decay, validation and early stopping, atomic step checkpoints that resume exactly,
data parallelism across processes (DDP), and a guard against non-finite losses.

No Prefect or MLflow in here: callers pass ``on_step`` / ``on_validate`` to log wherever they like.

Checkpoint directory layout (rank 0 writes; every file is written to a temp name and renamed):
  last.pt      model, optimizer, schedule, early-stopping state and the position in the epoch
               (epoch, batches done, optimizer steps): written every ``checkpoint_every`` steps,
               every ``checkpoint_minutes`` minutes, at each validation and at the end of an epoch
  model.pt     weights of the best validation, with the model config (for evaluation)
  history.json one row per validation (the learning curve)
  steps/       with train.keep_checkpoints K: the weights at each of the last K validations
               (step-<step>.pt, model.pt's format), for checkpoint averaging (pipeline.training.averaging)
  .next/       the run in progress: its model.pt (best so far), history.json and steps/, in the same
               layout. Only a run that completes and beats the untrained model moves them over the
               three above (:func:`promote`, model.pt last); a run that fails (``NoImprovement``,
               ``NonFiniteLoss``) removes .next/, and an interrupted one leaves it for its resumption
               (a fresh run removes it first). So no run deletes an earlier run's model.pt, history.json
               or steps/ without replacing them with complete ones of its own.

Gradient accumulation (``train.update_freq`` N): each optimizer step sums the gradients of N
consecutive batches (of every rank), scaled so the step is the gradient of the mean loss over all
their target tokens: the same step as one batch holding all N (an epoch's last step takes what is
left). Step counters (``validate_every``, ``max_steps``, warm-up) count optimizer steps.

Resuming happens only when last.pt is unfinished and carries the same fingerprint (model, training
and data settings); anything else starts afresh, so neither a params change nor a rerun of a finished
training (e.g. after a code change) continues a stale run. The fingerprint does not cover the code:
after changing the code under an *interrupted* run, delete its last.pt to start afresh.

Exact resumption: the batches of an epoch are a function of (seed, epoch) and the dropout noise of a
step is seeded from (seed, step, rank), so no random-number state has to be saved, and a run resumed
from any checkpoint ends with the weights of an uninterrupted one.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import math
import os
import shutil
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, Dataset
from tqdm import tqdm

from models.graphed import bucket_shape
from models.registry import build_model
from pipeline.io.files import write_json_atomic
from pipeline.runtime.device import autocast, compute_settings, nondeterministic_ops_named, resolve_device
from pipeline.training.averaging import STEPS_DIR, prune, snapshot_path
from pipeline.training.checkpoints import save_atomic
from pipeline.training.distributed import (
    ONE_PROCESS,
    DistContext,
    all_reduce_sum,
    broadcast_from_main,
    check_same_job,
    shard_batches,
)
from pipeline.training.schedule import EarlyStopping, LRSchedule
from pipeline.training.settings import TrainConfig
from pipeline.vocab.batching import token_batches
from pipeline.vocab.encoded import EncodedSplit
from pipeline.vocab.vocabulary import Vocab


class NonFiniteLoss(RuntimeError):
    """Training produced a NaN or infinite loss or gradient; nothing of that step was saved."""


class NoImprovement(RuntimeError):
    """No validation beat the untrained model's: the run produced no usable model (an earlier run's
    model.pt, if any, is kept)."""


STAGING = ".next"  # the run in progress' model.pt, history.json and steps/ (see the module docstring)


def staging_dir(ckpt_dir: Path) -> Path:
    """Where a run writes its outputs until it completes: a hidden folder of ``ckpt_dir``."""
    return Path(ckpt_dir) / STAGING


def promote(ckpt_dir: Path) -> None:
    """Move a completed run's staged steps/, history.json and model.pt over ``ckpt_dir``'s (each by
    rename; model.pt last, so a model.pt of this run means the rest is too), then remove the staging
    folder. The earlier run's steps/ are replaced even when this run keeps none: they are not of its model."""
    ckpt_dir, staged = Path(ckpt_dir), staging_dir(ckpt_dir)
    if (ckpt_dir / STEPS_DIR).exists():
        os.replace(ckpt_dir / STEPS_DIR, staged / f".{STEPS_DIR}.replaced")  # removed with the staging folder
    if (staged / STEPS_DIR).exists():
        os.replace(staged / STEPS_DIR, ckpt_dir / STEPS_DIR)
    for name in ("history.json", "model.pt"):
        os.replace(staged / name, ckpt_dir / name)
    shutil.rmtree(staged)


def discard_staged(ckpt_dir: Path) -> None:
    """Remove a run's staged outputs (a failed run, or what an interrupted one left to a fresh run)."""
    shutil.rmtree(staging_dir(ckpt_dir), ignore_errors=True)


def kept_or_none(ckpt_dir: Path) -> str:
    """What a failed run leaves as model.pt, in words."""
    model = Path(ckpt_dir) / "model.pt"
    if model.exists():
        return f"the earlier {model} was kept, not replaced by this run's"
    return f"no model.pt was written to {ckpt_dir}"


def seed_everything(seed: int) -> None:
    import random

    random.seed(seed)
    torch.manual_seed(seed)


def step_seed(seed: int, step: int, rank: int) -> int:
    """The random seed of one optimizer step on one rank (dropout, noisy switches)."""
    return int(np.random.SeedSequence([seed, step, rank]).generate_state(1, dtype=np.uint64)[0] >> 1)


def build_seeded_model(mechanism: str, model_cfg, seed: int) -> torch.nn.Module:
    """The model's initial weights come from the training seed, so a run is reproducible."""
    seed_everything(seed)
    return build_model(mechanism, model_cfg)


# Learning-curve fields that measure the machine, not the model: they go to MLflow and the log, never
# into a file DVC tracks (history.json, the learning-curve CSV), so a rerun rewrites those files
# byte for byte.
WALL_CLOCK = ("tokens_per_s",)


def without_wall_clock(history: list[dict]) -> list[dict]:
    return [{k: v for k, v in row.items() if k not in WALL_CLOCK} for row in history]


def fingerprint(*parts: dict) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:16]


def nll_loss(model, batch) -> tuple[torch.Tensor, int]:
    """Mean loss per target token: in training mode the mechanism's objective (CopyNet eq. 10's
    negative log-likelihood unless the mechanism trains another, see Seq2Seq.forward), in eval mode
    the negative log-likelihood for every mechanism (validation loss)."""
    gold = model(batch)  # (B, T)
    n_tokens = batch.n_tokens
    return -gold.sum() / max(n_tokens, 1), n_tokens


class BatchDataset(Dataset):
    """Item i of an epoch: the Batch of the i-th row-index array (built in a DataLoader worker when
    ``train.workers`` > 0). Holds the split's paths only; the worker memory-maps the data."""

    def __init__(self, split: EncodedSplit, batches: list[np.ndarray], source_vocab: Vocab | None):
        self.split, self.batches, self.source_vocab = split, batches, source_vocab

    def __len__(self) -> int:
        return len(self.batches)

    def __getitem__(self, i: int):
        return self.split.batch(self.batches[i], self.source_vocab)


def batch_loader(
    split: EncodedSplit, batches: list[np.ndarray], cfg: TrainConfig, device: torch.device, source_vocab: Vocab | None
) -> DataLoader:
    return DataLoader(
        BatchDataset(split, batches, source_vocab),
        batch_size=None,
        shuffle=False,
        num_workers=cfg.workers,
        pin_memory=device.type == "cuda",
        persistent_workers=False,
        prefetch_factor=4 if cfg.workers else None,
    )


def row_range(split: EncodedSplit, limit: int | None) -> np.ndarray:
    """Indices of the split's first ``limit`` rows (all when None)."""
    return np.arange(len(split) if limit is None else min(limit, len(split)))


def epoch_batches(
    lengths: tuple[np.ndarray, np.ndarray], rows: np.ndarray, cfg: TrainConfig, shuffle: bool, seed: int
) -> list[np.ndarray]:
    """Row-index arrays of one pass over ``rows`` (token-budget batches, see batching.token_batches)."""
    src_len, tgt_len = lengths
    return [
        rows[b]
        for b in token_batches(src_len[rows], tgt_len[rows], cfg.batch_size, cfg.max_tokens, shuffle=shuffle, seed=seed)
    ]


@torch.no_grad()
def evaluate_loss(
    model,
    split: EncodedSplit,
    cfg: TrainConfig,
    device: torch.device,
    ctx: DistContext = ONE_PROCESS,
    source_vocab: Vocab | None = None,
) -> dict:
    """Validation loss and perplexity: log p(y) per target token over the split's first
    ``max_valid_examples`` rows, shared out over the ranks and summed."""
    model.eval()
    rows = row_range(split, cfg.max_valid_examples)
    batches = epoch_batches(split.lengths(), rows, cfg, shuffle=False, seed=0)
    totals = torch.zeros(2, dtype=torch.float64, device=device)  # (-sum log p, tokens)
    for rows_b in batches[ctx.rank :: ctx.world]:
        batch = split.batch(rows_b, source_vocab).to(device)
        with autocast(device, cfg.amp):
            gold = model(batch)
        totals += torch.stack(
            [-gold.double().sum(), torch.tensor(float(batch.n_tokens), device=device, dtype=torch.float64)]
        )
    total, tokens = all_reduce_sum(totals, ctx).tolist()
    mean = total / max(tokens, 1)
    return {"valid_loss": mean, "valid_ppl": math.exp(min(mean, 50.0))}


@dataclass
class Progress:
    """Where a run stands; saved in last.pt."""

    epoch: int = 1  # the epoch in progress (1-based)
    batch: int = 0  # this rank's batches of the epoch already trained on
    step: int = 0  # optimizer steps done
    loss_sum: float = 0.0  # objective summed over target tokens since the last validation (all ranks)
    tokens: int = 0  # target tokens since the last validation (all ranks)
    best: float = math.inf  # the best validation's criterion (model.pt; lower is better): its loss, or
    # minus its metric with train.select_by: metric; history[0] is the untrained model's
    best_loss: float = math.inf  # that validation's loss: the tie-break between equal metrics
    completed: bool = False
    history: list[dict] = field(default_factory=list)


def train(
    model: torch.nn.Module,
    train_split: EncodedSplit,
    valid_split: EncodedSplit,
    cfg: TrainConfig,
    ckpt_dir: Path,
    model_config: dict,
    data_hash: str = "",
    on_validate: Callable[[dict], None] | None = None,
    on_step: Callable[[dict], None] | None = None,
    progress: bool | None = None,
    ctx: DistContext = ONE_PROCESS,
    source_vocab: Vocab | None = None,
    model_info: dict | None = None,
    state_dir: Path | None = None,
    run_key: str = "",
    score_valid: Callable[[torch.nn.Module], float] | None = None,
) -> list[dict]:
    """Train; returns the learning curve (one dict per validation, the first at step 0: the untrained
        model). ``source_vocab``: pass it for a model that reads source words (Read-Again's sentence
        ends). ``model_info``: what model.pt records besides weights and config (pipeline.training.checkpoints:
        mechanism, vocabularies). ``ckpt_dir`` receives model.pt and history.json, whose bytes depend on
        the inputs only (no run identity, no wall-clock figure: DVC tracks them); ``state_dir`` (default
        ``ckpt_dir``) the resumable last.pt. ``run_key``: the training run's identity (the train stage's
        MLflow run id): a last.pt of another run is never resumed. ``score_valid``: the task's metric on the
    validation split (higher is better; :mod:`pipeline.decoding.validation`), required by
    ``train.select_by: metric``, where it chooses model.pt and early stopping (the loss breaks ties; the
    plateau decay still reads the loss, so the training itself is the same under either choice). Raises ``NonFiniteLoss`` on a NaN/inf
        loss and ``NoImprovement`` when no validation beat the untrained model's. ``ckpt_dir``'s model.pt,
        history.json and steps/ are replaced only when the run completes without either (see the
        module docstring: until then they are staged in ``ckpt_dir/.next``)."""
    ckpt_dir = Path(ckpt_dir)
    state_dir = Path(state_dir) if state_dir is not None else ckpt_dir
    staged = staging_dir(ckpt_dir)  # model.pt, history.json and steps/ of this run until it completes
    if cfg.select_by == "metric" and score_valid is None and ctx.is_main:
        raise ValueError("train.select_by: metric needs the task's validation metric (score_valid)")
    device = resolve_device(cfg.device, ctx.local_rank if ctx.enabled else None)
    compute_settings(cfg.threads, cfg.deterministic)
    model.to(device)
    if cfg.compile:
        model.compile_recurrence()
    if cfg.cuda_graphs:
        if device.type != "cuda":
            print(f"train.cuda_graphs needs a CUDA device: training on {device} without graphs", file=sys.stderr)
        elif not hasattr(model, "graph_recurrence"):
            print("train.cuda_graphs: this model has no recurrence to graph; training without", file=sys.stderr)
        else:
            model.graph_recurrence()
    # A run resumes only its own last.pt: same settings, data and training run. The run is in the
    # fingerprint because model.pt (the best validation so far) may date from before the interruption:
    # resumed under another MLflow run (the first one was not found again), the run that logged the
    # early epochs would not be the one the model is registered under. Such a run starts afresh.
    job = {"data": data_hash, **(model_info or {})}
    fp = fingerprint(asdict(cfg), model_config, {**job, "run": run_key})
    # Every rank must train the same job (settings and data: each machine reads its own copies).
    check_same_job(fingerprint(asdict(cfg), model_config, job), ctx)
    # the metric's column name as the main rank's scorer has it (the only rank with a scorer)
    metric_name = broadcast_from_main(getattr(score_valid, "name", "valid_metric"), ctx)
    net = (
        DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
        if ctx.enabled
        else model
    )
    optimizer = _optimizer(cfg, model, device)
    schedule, stopper, prog = cfg.schedule(), EarlyStopping(cfg.patience, cfg.min_delta), Progress()

    last = state_dir / "last.pt"
    ckpt, resumed = None, False
    if ctx.is_main:  # the main rank decides from its own files; the others follow (they may have none)
        # of a write a killed run never finished
        for stale in {*ckpt_dir.glob(".*.tmp"), *state_dir.glob(".*.tmp"), *staged.rglob(".*.tmp")}:
            stale.unlink(missing_ok=True)
        ckpt = _load_resumable(last, device if not ctx.enabled else torch.device("cpu"))
        resumed = ckpt is not None and ckpt.get("fingerprint") == fp and not ckpt["progress"]["completed"]
        if ckpt is not None and ckpt.get("fingerprint") != fp:
            print(f"{last} is of other settings, data or training run; starting afresh", file=sys.stderr)
        if resumed and math.isfinite(ckpt["progress"]["best"]) and not (staged / "model.pt").exists():
            # The best weights so far are gone (DVC deletes a stage output it holds no record of: `dvc exp run`
            # after an interrupted run does): resumed, a run whose best epoch came before the interruption
            # would end without a model.pt.
            resumed = False
            print(f"{staged / 'model.pt'} (the best weights before {last}) is gone; starting afresh", file=sys.stderr)
        if not resumed:  # a fresh run: what an interrupted one staged is not its own (the outputs stay)
            discard_staged(ckpt_dir)
    # With several processes the main rank's checkpoint goes to all: another machine has no last.pt.
    ckpt = broadcast_from_main(ckpt if resumed else None, ctx)
    resumed = ckpt is not None
    if resumed:
        model.load_state_dict(ckpt["model"])
        optimizer.load_state_dict(ckpt["optimizer"])
        schedule.load_state_dict(ckpt["schedule"])
        stopper.load_state_dict(ckpt["early_stopping"])
        prog = Progress(**ckpt["progress"])
        if ctx.is_main:
            print(f"resuming from {last} at epoch {prog.epoch}, batch {prog.batch}, step {prog.step}", file=sys.stderr)

    def checkpoint() -> None:
        if ctx.is_main:
            save_atomic(
                {
                    "model": model.state_dict(),
                    "optimizer": optimizer.state_dict(),
                    "schedule": schedule.state_dict(),
                    "early_stopping": stopper.state_dict(),
                    "progress": asdict(prog),
                    "fingerprint": fp,
                },
                last,
            )

    def validate(seconds: float) -> None:
        row = {
            "step": prog.step,
            "epoch": prog.epoch if prog.step else 0,
            "train_loss": prog.loss_sum / prog.tokens if prog.tokens else None,
            "lr": optimizer.param_groups[0]["lr"],
            "tokens_per_s": prog.tokens / max(seconds, 1e-9),
            "processes": ctx.world,
        }
        with nondeterministic_ops_named(device, "train.deterministic"):
            row.update(evaluate_loss(model, valid_split, cfg, device, ctx, source_vocab))
            if cfg.select_by == "metric":
                row[metric_name] = validation_metric(model, score_valid, ctx, device)
        if not math.isfinite(row["valid_loss"]):
            raise NonFiniteLoss(
                f"validation loss is {row['valid_loss']} at step {prog.step} (epoch {prog.epoch}); "
                f"nothing of this run was saved after step {prog.step}"
            )
        model.train()
        prog.history.append(row)
        prog.loss_sum, prog.tokens = 0.0, 0
        criterion = -row[metric_name] if cfg.select_by == "metric" else row["valid_loss"]
        if (criterion, row["valid_loss"]) < (prog.best, prog.best_loss):
            prog.best, prog.best_loss = criterion, row["valid_loss"]
            if ctx.is_main:
                save_atomic(
                    {
                        "model": model.state_dict(),
                        "model_config": model_config,
                        **(model_info or {}),
                        "step": prog.step,
                        "epoch": prog.epoch,
                        "valid_loss": row["valid_loss"],
                        **({metric_name: row[metric_name]} if cfg.select_by == "metric" else {}),
                    },
                    staged / "model.pt",
                )
        if ctx.is_main and cfg.keep_checkpoints and prog.step:
            weights = {"model": model.state_dict(), "model_config": model_config, **(model_info or {})}
            save_atomic(
                {**weights, "step": prog.step, "epoch": prog.epoch, "valid_loss": row["valid_loss"]},
                snapshot_path(staged, prog.step),
            )
            prune(staged, cfg.keep_checkpoints)
        schedule.observe(row["valid_loss"])
        stopper.observe(criterion)
        if ctx.is_main:
            write_json_atomic(staged / "history.json", without_wall_clock(prog.history))
            trained = f"train_loss {row['train_loss']:.4f} " if row["train_loss"] is not None else "(untrained) "
            metric = f"{metric_name} {row[metric_name]:.2f} " if metric_name in row else ""
            print(
                f"step {prog.step} (epoch {row['epoch']}): {trained}valid_loss {row['valid_loss']:.4f} "
                f"{metric}lr {row['lr']:.3g} ({row['tokens_per_s']:.0f} tok/s)",
                file=sys.stderr,
            )
            if on_validate is not None:
                on_validate(row)

    def finished() -> bool:
        return stopper.should_stop or (cfg.max_steps is not None and prog.step >= cfg.max_steps)

    def fit() -> None:
        """The epochs from where ``prog`` stands, then the validation of the steps since the last one."""
        rows = row_range(train_split, cfg.max_train_examples)
        lengths = train_split.lengths()
        if not prog.history:  # the untrained model's validation loss: the baseline training must beat
            validate(0.0)
        model.train()
        clock = last_ckpt = time.perf_counter()
        while prog.epoch <= cfg.epochs and not finished():
            batches = shard_batches(epoch_batches(lengths, rows, cfg, shuffle=True, seed=cfg.seed + prog.epoch), ctx)
            loader = batch_loader(train_split, batches[prog.batch :], cfg, device, source_vocab)
            bar = tqdm(
                loader,
                desc=f"epoch {prog.epoch}/{cfg.epochs}",
                unit="batch",
                initial=prog.batch,
                total=len(batches),
                disable=True
                if not ctx.is_main
                else (None if progress is None else not progress),  # None: off without a TTY
                mininterval=1.0,
                leave=False,
            )
            for group in accumulation_groups(bar, cfg.update_freq):
                group = [batch.to(device, non_blocking=True) for batch in group]
                with nondeterministic_ops_named(device, "train.deterministic"):
                    loss_value = _train_step(net, model, optimizer, schedule, group, cfg, device, ctx, prog)
                prog.batch += len(group)
                if ctx.is_main and on_step is not None and prog.step % cfg.log_every == 0:
                    on_step(
                        {
                            "step": prog.step,
                            "epoch": prog.epoch,
                            "loss": loss_value,
                            "lr": optimizer.param_groups[0]["lr"],
                        }
                    )
                if cfg.validate_every and prog.step % cfg.validate_every == 0:
                    validate(time.perf_counter() - clock)
                    clock = time.perf_counter()
                    checkpoint()
                    last_ckpt = time.perf_counter()
                elif (cfg.checkpoint_every and prog.step % cfg.checkpoint_every == 0) or (
                    cfg.checkpoint_minutes and time.perf_counter() - last_ckpt >= 60 * cfg.checkpoint_minutes
                ):
                    checkpoint()
                    last_ckpt = time.perf_counter()
                if finished():
                    break
            if finished():
                break
            if not cfg.validate_every:  # validate at each epoch's end
                validate(time.perf_counter() - clock)
                clock = time.perf_counter()
            prog.epoch, prog.batch = prog.epoch + 1, 0
            if prog.epoch <= cfg.epochs and not finished():
                checkpoint()
                last_ckpt = time.perf_counter()
        if prog.tokens and not stopper.should_stop:  # steps since the last validation (max_steps, validate_every)
            validate(time.perf_counter() - clock)

    try:
        fit()
    except NonFiniteLoss as err:  # the run cannot complete: nothing of it may stay as an output
        if not ctx.is_main:
            raise
        discard_staged(ckpt_dir)
        kept = kept_or_none(ckpt_dir)
        raise NonFiniteLoss(f"{err} {kept[0].upper()}{kept[1:]}.") from None
    prog.completed = True
    checkpoint()
    untrained = prog.history[0]
    initial = -untrained[metric_name] if cfg.select_by == "metric" else untrained["valid_loss"]
    if not (prog.best, prog.best_loss) < (initial, untrained["valid_loss"]):
        kept = ""
        if ctx.is_main:
            discard_staged(ckpt_dir)
            kept = f"; {kept_or_none(ckpt_dir)}"
        what = metric_name if cfg.select_by == "metric" else "validation loss"
        trained = (
            f"best {abs(prog.best):.4f} after {prog.step} steps"
            if prog.step
            else f"no training step ran: train.epochs {cfg.epochs}, train.max_steps {cfg.max_steps}"
        )
        raise NoImprovement(
            f"training did not improve on the untrained model's {what} {abs(initial):.4f} ({trained}){kept}: "
            "this run's model cannot be evaluated or registered. Check train.lr (too high diverges, too low "
            "stalls), the data and the epochs."
        )
    if ctx.is_main:
        promote(ckpt_dir)
    return prog.history


def validation_metric(model, score_valid: Callable | None, ctx: DistContext, device: torch.device) -> float:
    """The task's validation metric, computed by the main rank (the one process that has a scorer:
    another machine may hold the encoded splits only) and sent to every rank, so that each takes the
    same checkpoint and early-stopping decisions."""
    value = score_valid(model) if score_valid is not None and ctx.is_main else 0.0
    if not ctx.enabled:
        return value
    return float(all_reduce_sum(torch.tensor([value], dtype=torch.float64, device=device), ctx)[0])


def accumulation_groups(batches: Iterable, n: int) -> Iterator[list]:
    """Consecutive groups of ``n`` batches (one optimizer step each); the last may be shorter."""
    it = iter(batches)
    while group := list(itertools.islice(it, n)):
        yield group


def _load_resumable(path: Path, device: torch.device) -> dict | None:
    """last.pt if it is a step checkpoint of this format (tensors and plain data only), else None."""
    if not path.exists():
        return None
    try:
        ckpt = torch.load(path, map_location=device, weights_only=True)
    except Exception as err:  # noqa: BLE001 - an older format or a foreign file: never resume from it
        print(f"{path} is not a resumable checkpoint ({type(err).__name__}); starting afresh", file=sys.stderr)
        return None
    return ckpt if isinstance(ckpt, dict) and "progress" in ckpt else None


def parameter_groups(model: torch.nn.Module, lr: float) -> list[dict] | list[torch.nn.Parameter]:
    """What the optimizer trains: the model's own groups when it has them (a backbone's: frozen
    parameters left out, the head at ``head_lr`` with its ``lr_scale``), else every parameter."""
    groups = getattr(model, "optimizer_groups", None)
    return groups(lr) if groups is not None else list(model.parameters())


def _optimizer(cfg: TrainConfig, model: torch.nn.Module, device: torch.device) -> torch.optim.Optimizer:
    # Fused Adam (one kernel over all parameters, CPU and CUDA) instead of the per-tensor loop.
    params = parameter_groups(model, cfg.lr)
    if cfg.optimizer == "adam":
        return torch.optim.Adam(params, lr=cfg.lr, fused=device.type in ("cpu", "cuda"))
    return torch.optim.SGD(params, lr=cfg.lr)


def _train_step(
    net,
    model,
    optimizer,
    schedule: LRSchedule,
    batches: list,
    cfg: TrainConfig,
    device: torch.device,
    ctx: DistContext,
    prog: Progress,
) -> float:
    """One optimizer step on this rank's ``batches`` (``train.update_freq`` of them, gradients
    accumulated); returns the step's mean loss over all ranks' tokens."""
    step = prog.step + 1
    lr = schedule.at(step, prog.epoch)
    for group in optimizer.param_groups:
        group["lr"] = lr * group.get("lr_scale", 1.0)  # a head's own learning rate follows the same schedule
    torch.manual_seed(step_seed(cfg.seed, step, ctx.rank))  # dropout noise: a function of the step
    mine = float(sum(batch.n_tokens for batch in batches))
    tokens = all_reduce_sum(torch.tensor([mine], device=device), ctx)  # all ranks' tokens of this step
    optimizer.zero_grad(set_to_none=True)
    total = torch.zeros((), device=device)
    for i, batch in enumerate(batches):
        # DDP all-reduces the gradients on the last batch's backward only (they accumulate before).
        sync = ctx.enabled and i < len(batches) - 1
        with net.no_sync() if sync else contextlib.nullcontext():
            if model.__dict__.get("_graphed") is not None:  # train.cuda_graphs on CUDA (Seq2Seq.graph_recurrence)
                batch = batch.padded(*bucket_shape(batch))  # the graphs' shapes; adds nothing to the objective
            with autocast(device, cfg.amp, cache=not cfg.cuda_graphs):
                gold = net(batch)  # (B, T) per-token objective, 0 at padding
            batch_total = -gold.sum()
            # DDP averages gradients over ranks: scaling by world / all tokens makes the average the
            # gradient of the mean over every rank's tokens of every batch of the step, as one process
            # on the combined batch.
            (batch_total * ctx.world / tokens[0]).backward()
        total = total + batch_total.detach().float()
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.clip)
    summed = all_reduce_sum(total.detach().reshape(1).double(), ctx)
    value = float(summed[0]) / float(tokens[0])
    if not (math.isfinite(value) and math.isfinite(float(grad_norm))):
        ids = [i for batch in batches for i in batch.ids]
        raise NonFiniteLoss(
            f"non-finite training loss {value} (gradient norm {float(grad_norm)}) at step {step} (epoch "
            f"{prog.epoch}, batch {prog.batch + 1}{f'-{prog.batch + len(batches)}' if len(batches) > 1 else ''} of the epoch on rank {ctx.rank}); rows {ids[:20]}"
            f"{' ...' if len(ids) > 20 else ''}. The step was not applied and no checkpoint was written "
            f"after step {prog.step}. Lower train.lr, add warm-up (train.warmup_steps) or check these rows."
        )
    optimizer.step()
    prog.step = step
    prog.loss_sum += value * float(tokens[0])
    prog.tokens += int(tokens[0])  # every rank's tokens: train_loss and tokens/s cover the whole job
    return value
