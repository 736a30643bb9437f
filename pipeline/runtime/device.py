"""Where a stage computes and what fixes its arithmetic: the device (``auto``: CUDA when present),
bf16 autocast, the thread count and deterministic kernels (recorded with the run, beside the math
pins of :mod:`pipeline.runtime.math_pins`), and a clear error for an operation that has no
deterministic kernel. Shared by training, decoding, serving and retraining."""

from __future__ import annotations

import os
import re
import sys
from contextlib import contextmanager

import torch

from pipeline.config.validation import SettingsError
from pipeline.runtime.math_pins import math_state

DEVICE_FORM = re.compile(r"auto|cpu|cuda(?::(\d+))?")  # what a device setting may say; group 1: a CUDA index


class NondeterministicOperation(RuntimeError):
    """``deterministic: true``, and the model ran an operation that has no deterministic kernel on
    this device (PyTorch raises for those under ``torch.use_deterministic_algorithms(True)``)."""


@contextmanager
def nondeterministic_ops_named(device: torch.device, setting: str):
    """Turn PyTorch's error for an operation without a deterministic kernel (raised under
    ``torch.use_deterministic_algorithms(True)``) into one that names the operation, the device and
    the setting to change; any other error passes unchanged."""
    try:
        yield
    except RuntimeError as err:
        message = str(err)
        if "does not have a deterministic implementation" not in message:
            raise
        raise NondeterministicOperation(
            f"{setting} is true, but the operation {message.split()[0]} has no deterministic kernel on {device} "
            f"(torch {torch.__version__}), so this run could not repeat itself bit for bit. Set {setting}: false "
            f"for this task to run it anyway (its results then vary in the last bits from run to run). "
            f"PyTorch said: {message}"
        ) from err


def check_device(name: str, setting: str = "device", nproc: int = 1) -> None:
    """Refuse, as one line naming ``setting``, a device this machine cannot give, before any work
    (torch itself fails later, deep inside, and a checkpoint loaded onto a missing GPU looks corrupt):
    not ``auto``, ``cpu``, ``cuda`` or ``cuda:N``; CUDA without a CUDA device; an index past the last
    device; ``nproc`` processes (train.nproc, one GPU each) on fewer GPUs."""
    form = DEVICE_FORM.fullmatch(name) if isinstance(name, str) else None
    if form is None:
        raise SettingsError(f"{setting} is {name!r}: it must be auto, cpu, cuda or cuda:N (N: a CUDA device's index)")
    cuda = torch.cuda.is_available()
    if name == "cpu" or (name == "auto" and not cuda):
        return
    if not cuda:
        raise SettingsError(
            f"{setting} is {name!r} but this machine has no CUDA device (torch.cuda.is_available() is false); "
            "use auto or cpu"
        )
    count = torch.cuda.device_count()
    if form.group(1) is not None and int(form.group(1)) >= count:
        raise SettingsError(
            f"{setting} is {name!r} but this machine has {count} CUDA device(s), cuda:0 to cuda:{count - 1}; "
            "use one of those, or auto"
        )
    if form.group(1) is None and nproc > count:  # process i of a torchrun job takes cuda:i
        raise SettingsError(
            f"{setting} is {name!r} with train.nproc {nproc} processes (one GPU each) but this machine has "
            f"{count} CUDA device(s); set train.nproc to at most {count}, or {setting}: cpu"
        )


def resolve_device(name: str, local_rank: int | None = None, setting: str = "device") -> torch.device:
    """``auto``: CUDA when present, else the CPU; ``cuda`` in a process of a distributed job
    (``local_rank`` given): that process's GPU. A device this machine cannot give is a
    :class:`SettingsError` naming ``setting`` (:func:`check_device`)."""
    check_device(name, setting)
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda" and local_rank is not None:
        return torch.device("cuda", local_rank)
    return torch.device(name)


def autocast(device: torch.device, amp: str = "auto", cache: bool = True):
    """bf16 autocast (AMP) on CUDA with ``auto``, on any device with ``bf16``; ``off``: none. bf16 keeps
    float32's range, so the finite NEG mask value stays finite (fp16 would turn it into -inf); the
    output layers score in float32 (models.seq2seq.at_least_fp32). ``cache``: autocast's cache of
    lower-precision weight copies, which CUDA graphs (``train.cuda_graphs``) need off."""
    enabled = amp == "bf16" or (amp == "auto" and device.type == "cuda")
    return torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=enabled, cache_enabled=cache)


def use_deterministic_kernels() -> None:
    """``torch.use_deterministic_algorithms(True)`` without its start-up cost. That function also sets
    TorchInductor's ``deterministic`` flag, and importing TorchInductor's settings to do so loads the
    compiler (about 1.7 s, more than a tiny stage's training). Here the flag waits in the environment
    variable those settings read when ``torch.compile`` first loads them; where they are loaded
    already, the public function sets both at once. The kernel switch itself is the call the public
    function makes."""
    if "torch._inductor.config" in sys.modules:
        torch.use_deterministic_algorithms(True)
        return
    os.environ["TORCHINDUCTOR_DETERMINISTIC"] = "1"  # torch/_inductor/config.py: deterministic = os.getenv(...)
    torch._C._set_deterministic_algorithms(True)


def compute_settings(threads: int, deterministic: bool) -> dict:
    """Fix what decides the floating-point reduction order of a stage (thread count, deterministic
    kernels; on CUDA also cuBLAS's workspace) and return it, with what the process's math libraries
    were pinned to (pipeline.runtime.math_pins: set before torch loaded), to be recorded with the run."""
    if threads:
        torch.set_num_threads(threads)
    if deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # deterministic cuBLAS (CUDA >= 10.2)
        use_deterministic_kernels()
    return {
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "deterministic": torch.are_deterministic_algorithms_enabled(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        **math_state(),  # the CPU's model name and instruction sets, the math pins and whether they hold
    }
