"""Data-parallel training with torchrun and PyTorch DistributedDataParallel (nothing home-made).

A training stage with ``train.nproc`` > 1 (or ``train.nnodes`` > 1) relaunches its worker under
``torchrun`` (``torchrun_command``); each process then calls ``init_from_env``, which joins the
process group torchrun describes (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/PORT in the environment).
One process alone writes checkpoints, DVC outputs and MLflow records: the *main* rank, local rank 0
on the node whose launcher set ``OWNER_ENV`` (the train stage sets it for the torchrun it starts; a
node that only joins, :mod:`pipeline.stages.train_node`, does not). torchrun's c10d rendezvous
numbers the nodes in an order of its own (their host names), so global rank 0 may run on any
machine; the main rank is the one on the machine that holds the stage's outputs.

Each rank trains on its own share of every epoch's batches (``shard_batches``); the per-token loss
is normalised by the token count summed over all ranks, so DDP's gradient average equals the
gradient of one process on the combined batch.
"""

from __future__ import annotations

import ipaddress
import os
import re
import socket
import sys
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist

from pipeline.config.validation import SettingsError

OWNER_ENV = "COPYSEQ_TRAIN_OWNER"  # "1": this node's launcher is the train stage (it owns the outputs)
ENDPOINT_HELP = "give host:port of the machine that runs the stage, reachable from every machine (e.g. 10.0.0.1:29500)"
# host:port, or [IPv6]:port; the host a name or an IPv4 address (checked further by getaddrinfo)
ENDPOINT = re.compile(r"\[(?P<ipv6>[^\[\]]+)\]:(?P<port>\d+)|(?P<host>[\w.-]+):(?P<port2>\d+)")


class JobMismatch(RuntimeError):
    """The nodes of one torchrun job disagree (two claim the outputs, or other settings or data)."""


@dataclass(frozen=True)
class DistContext:
    rank: int = 0
    world: int = 1
    local_rank: int = 0
    main: int = 0  # the rank that writes checkpoints and logs (see OWNER_ENV)

    @property
    def is_main(self) -> bool:
        return self.rank == self.main

    @property
    def enabled(self) -> bool:
        return self.world > 1


ONE_PROCESS = DistContext()  # the default: no process group


def init_from_env(device_type: str, timeout_s: float | None = None) -> DistContext:
    """Join the process group torchrun set up (nccl on CUDA, gloo on the CPU); one process: no group.
    ``timeout_s``: how long a collective waits for a silent peer before failing (a machine that
    vanished without closing its connections); a peer that dies on a live machine fails it at once.
    The main rank: :func:`main_rank` of every process's claim (``OWNER_ENV`` and local rank 0)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return ONE_PROCESS
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if not dist.is_initialized():
        timeout = {"timeout": timedelta(seconds=timeout_s)} if timeout_s else {}
        dist.init_process_group("nccl" if device_type == "cuda" else "gloo", **timeout)
    if device_type == "cuda":
        torch.cuda.set_device(local_rank)
    claims: list = [None] * dist.get_world_size()
    dist.all_gather_object(claims, os.environ.get(OWNER_ENV) == "1" and local_rank == 0)
    one_machine = int(os.environ.get("LOCAL_WORLD_SIZE", world)) == world
    return DistContext(dist.get_rank(), dist.get_world_size(), local_rank, main_rank(claims, one_machine))


def main_rank(claims: list[bool], one_machine: bool) -> int:
    """The rank that writes: the one process that claims the outputs (local rank 0 on the train
    stage's node). No claim: rank 0 when the job runs on one machine (torchrun started by hand);
    across machines that is an error, as are two claims (two machines ran the stage)."""
    owners = [rank for rank, claim in enumerate(claims) if claim]
    if len(owners) == 1:
        return owners[0]
    if len(owners) > 1:
        raise JobMismatch(
            f"ranks {owners} each run the train stage (dvc repro / python -m flows.train) of one job: run the "
            "stage on one machine only, which holds its outputs, and `python -m pipeline.stages.train_node` "
            "on the others (docs/training.md)"
        )
    if one_machine:
        return 0
    raise JobMismatch(
        "no machine of this job runs the train stage, so none would write its outputs: run `dvc repro "
        "train@<task>-<mechanism>` on the machine that holds them and `python -m pipeline.stages.train_node` "
        "on the others (docs/training.md)"
    )


def check_same_job(identity: str, ctx: DistContext) -> None:
    """Fail on every rank unless all ranks train the same job: ``identity`` is a hash of this rank's
    train and model settings and data (a machine with another params.yaml or another vocab stage
    output would otherwise train other batches under the same gradient average)."""
    if not ctx.enabled:
        return
    seen: list = [None] * ctx.world
    dist.all_gather_object(seen, identity)
    others = [rank for rank, value in enumerate(seen) if value != seen[ctx.main]]
    if others:
        raise JobMismatch(
            f"ranks {others} have other train/model settings or data than rank {ctx.main} (the one that writes "
            "the outputs): every machine needs the same params.yaml and the same data/vocab/<task> "
            "(e.g. `dvc pull`), at the same commit"
        )


def lost_contact(err: BaseException) -> bool:
    """Whether ``err`` is a collective failing because another process of the job stopped or went
    silent (gloo and NCCL raise plain RuntimeErrors naming the transport; the store raises DistError)."""
    if isinstance(err, dist.DistError):
        return True
    text = str(err)
    return isinstance(err, RuntimeError) and any(
        mark in text for mark in ("gloo/transport", "Connection reset", "Connection closed", "NCCL", "Timed out")
    )


def broadcast_from_main(value, ctx: DistContext):
    """``value`` as the main rank has it, on every rank (a picklable object; unchanged with one process)."""
    if not ctx.enabled:
        return value
    box = [value if ctx.is_main else None]
    dist.broadcast_object_list(box, src=ctx.main)
    return box[0]


def shutdown(ctx: DistContext, completed: bool = False) -> None:
    """Leave the process group. ``completed``: this rank's work ended without error, so it first waits
    at a barrier for every other rank to end too: no process closes its connections while another
    still runs (the main rank writes the outputs after the last collective), as PyTorch advises
    (destroy the group once no rank communicates). After an error there is no barrier: the other
    ranks may never reach it."""
    if ctx.enabled and dist.is_initialized():
        if completed:
            dist.barrier()
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
    rdzv_timeout: int | None = None,
    rdzv_host: bool | None = None,
) -> list[str]:
    """``python -m torch.distributed.run`` (torchrun) running ``python -m module args`` on every process.

    One machine: a standalone rendezvous on a free local port. Several machines: run it on each with
    the same ``rdzv_endpoint`` host:port (reachable from all) and ``rdzv_id``; torchrun's c10d
    rendezvous assigns the node ranks. ``rdzv_host``: whether this machine hosts the rendezvous store
    at ``rdzv_endpoint`` (None: torchrun guesses from the host name, which misses an address of a
    second network interface). ``rdzv_timeout``: seconds a machine waits for the others to join (and
    for the rendezvous store to answer). No restarts (``--max-restarts=0``): a failed process fails
    the job on every machine, which the train stage resumes from its step checkpoint when run again.
    """
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={nproc}"]
    if nnodes > 1:
        if not rdzv_endpoint:
            raise SettingsError(f"train.nnodes is {nnodes} but train.rdzv_endpoint is not set: {ENDPOINT_HELP}")
        cmd += [f"--nnodes={nnodes}", "--rdzv-backend=c10d", f"--rdzv-endpoint={rdzv_endpoint}", f"--rdzv-id={rdzv_id}"]
        conf = ([f"join_timeout={rdzv_timeout}", f"read_timeout={rdzv_timeout}"] if rdzv_timeout else []) + (
            [f"is_host={int(rdzv_host)}"] if rdzv_host is not None else []
        )
        cmd += ["--max-restarts=0"] + ([f"--rdzv-conf={','.join(conf)}"] if conf else [])
    else:
        cmd += ["--standalone"]
    return cmd + ["-m", module, *args]


# --------------------------------------------------------------------------- #
# The rendezvous endpoint, checked before torchrun starts
# --------------------------------------------------------------------------- #


def parse_rdzv_endpoint(endpoint) -> tuple[str, int]:
    """``train.rdzv_endpoint`` as (host, port); anything but host:port (an IPv6 address in brackets,
    port 1-65535) is a :class:`SettingsError` naming the setting."""
    form = ENDPOINT.fullmatch(endpoint) if isinstance(endpoint, str) else None
    if form is not None:
        host, port = form["host"] or form["ipv6"], int(form["port"] or form["port2"])
        if 0 < port < 65536 and (form["ipv6"] is None or _is_ipv6(host)):
            return host, port
    raise SettingsError(
        f"train.rdzv_endpoint is {endpoint!r}: it must be host:port with a port from 1 to 65535 (an IPv6 "
        f"address in brackets: [fd00::1]:29500); {ENDPOINT_HELP}"
    )


def _is_ipv6(text: str) -> bool:
    try:
        return isinstance(ipaddress.ip_address(text), ipaddress.IPv6Address)
    except ValueError:
        return False


def check_rdzv_endpoint(endpoint, nnodes: int, host: bool) -> None:
    """Before torchrun starts (whose own errors come after a wait, deep in a traceback): with ``nnodes``
    > 1, ``train.rdzv_endpoint`` is set, parses (:func:`parse_rdzv_endpoint`) and its host resolves;
    on the machine that ``host``s the rendezvous (the one running the stage), to an address of this
    machine: one a socket can bind (the kernel refuses another machine's address), loopback included."""
    if nnodes <= 1:
        return
    if not endpoint:
        raise SettingsError(f"train.nnodes is {nnodes} but train.rdzv_endpoint is not set: {ENDPOINT_HELP}")
    name, port = parse_rdzv_endpoint(endpoint)
    said = f"train.rdzv_endpoint is {endpoint!r}"
    try:
        resolved = socket.getaddrinfo(name, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as err:
        raise SettingsError(f"{said} but the host {name} does not resolve ({err}); {ENDPOINT_HELP}") from None
    if not host:
        return
    addresses = sorted({sockaddr[0] for *_, sockaddr in resolved})
    if all(ipaddress.ip_address(a.split("%")[0]).is_unspecified for a in addresses):
        raise SettingsError(f"{said}: {name} means any address, which no other machine can reach; {ENDPOINT_HELP}")
    if not any(_binds(family, sockaddr) for family, _, _, _, sockaddr in resolved):
        shown = name if addresses == [name] else f"{name} ({', '.join(addresses)})"
        raise SettingsError(
            f"{said} but {shown} is not an address of this machine, which runs the stage and so hosts the "
            f"rendezvous: give one of its own addresses that the other machines reach (or run the stage on {name})"
        )


def _binds(family: int, sockaddr: tuple) -> bool:
    """Whether a socket binds to ``sockaddr``'s address (on any free port): only this machine's own do."""
    try:
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.bind((sockaddr[0], 0, *sockaddr[2:]))
        return True
    except OSError:
        return False
