"""Data-parallel training with torchrun and PyTorch DistributedDataParallel (nothing home-made).

A training stage with ``train.nproc`` > 1 (or ``train.nnodes`` > 1) relaunches its worker under
``torchrun`` (``torchrun_command``); each process then calls ``init_from_env``, which joins the
process group torchrun describes (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/PORT in the environment).
Rank 0 alone writes checkpoints, DVC outputs and MLflow records.

Each rank trains on its own share of every epoch's batches (``shard_batches``); the per-token loss
is normalised by the token count summed over all ranks, so DDP's gradient average equals the
gradient of one process on the combined batch.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class DistContext:
    rank: int = 0
    world: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def enabled(self) -> bool:
        return self.world > 1


ONE_PROCESS = DistContext()  # the default: no process group


def init_from_env(device_type: str) -> DistContext:
    """Join the process group torchrun set up (nccl on CUDA, gloo on the CPU); one process: no group."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return ONE_PROCESS
    if not dist.is_initialized():
        dist.init_process_group("nccl" if device_type == "cuda" else "gloo")
    ctx = DistContext(dist.get_rank(), dist.get_world_size(), int(os.environ.get("LOCAL_RANK", "0")))
    if device_type == "cuda":
        torch.cuda.set_device(ctx.local_rank)
    return ctx


def shutdown(ctx: DistContext) -> None:
    if ctx.enabled and dist.is_initialized():
        dist.destroy_process_group()


def all_reduce_sum(values: torch.Tensor, ctx: DistContext) -> torch.Tensor:
    """Sum a tensor over ranks (in place; unchanged with one process)."""
    if ctx.enabled:
        dist.all_reduce(values, op=dist.ReduceOp.SUM)
    return values


def shard_batches(batches: list, ctx: DistContext) -> list:
    """Rank r's batches: every world-th one from r, the same count on every rank (a remainder of
    fewer than ``world`` batches is left out of the epoch), so all ranks step together."""
    usable = len(batches) - len(batches) % ctx.world
    return batches[ctx.rank : usable : ctx.world]


def torchrun_command(
    module: str,
    args: list[str],
    nproc: int,
    nnodes: int = 1,
    rdzv_endpoint: str | None = None,
    rdzv_id: str = "copyseq",
) -> list[str]:
    """``python -m torch.distributed.run`` (torchrun) running ``python -m module args`` on every process.

    One machine: a standalone rendezvous on a free local port. Several machines: run the same command
    on each (the same ``rdzv_endpoint`` host:port, reachable from all, and the same ``rdzv_id``);
    torchrun's c10d rendezvous assigns the node ranks.
    """
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={nproc}"]
    if nnodes > 1:
        if not rdzv_endpoint:
            raise ValueError("train.nnodes > 1 needs train.rdzv_endpoint (host:port of the rendezvous)")
        cmd += [f"--nnodes={nnodes}", "--rdzv-backend=c10d", f"--rdzv-endpoint={rdzv_endpoint}", f"--rdzv-id={rdzv_id}"]
    else:
        cmd += ["--standalone"]
    return cmd + ["-m", module, *args]
