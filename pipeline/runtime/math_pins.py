"""The same bits on every x86-64 machine: pin the CPU math libraries' code paths before torch loads.

A fixed thread count and deterministic algorithms (``train.threads``/``train.deterministic``) make a
run repeat itself on one machine, not on another: PyTorch's own kernels (ATen), Intel MKL (matrix
products; ``exp``/``log`` through MKL's VML) and oneDNN (the LSTM kernels) choose their code by the
CPU they find (instruction set: SSE4, AVX2, AVX-512, AMX; and MKL by vendor too), and each code
path sums in its own order. In a model far from convergence those last bits grow into points of
accuracy. The pins, set in the environment before torch loads (each library reads them once):

  ``ATEN_CPU_CAPABILITY=avx2``   ATen's vectorised kernels (softmax, reductions, the normal RNG) at
                                 AVX2, which every x86-64 CPU of the last decade has
  ``ONEDNN_MAX_CPU_ISA=AVX2``    oneDNN (LSTM forward and backward) at most AVX2
  ``MKL_CBWR=COMPATIBLE,STRICT`` MKL's Conditional Numerical Reproducibility on its ``COMPATIBLE``
                                 branch (SSE2 without approximate reciprocals), the one branch MKL
                                 documents as reproducible on Intel *and* non-Intel CPUs; ``STRICT``:
                                 bitwise-reproducible matrix products whatever the alignment

Why not MKL's ``AVX2`` branch (a quarter of the cost, docs/training.md): MKL honours it on Intel
CPUs only; on an AMD CPU it runs its own default path, whose ``exp``/``log`` (VML) give other bits
than the AVX2 branch on an Intel CPU (measured with ``benchmarks/bench_math_pins.py``, which also
simulates an Intel CPU on an AMD one). ``COMPATIBLE`` gives the same bits on both.

What is promised, and tested (``tests/pipeline/runtime/test_math_pins.py``, which trains in processes that see other
instruction sets and another CPU vendor): the same bits on every x86-64 CPU with AVX2, for the same
code, the same pinned library versions (requirements-lock.txt) and the same thread count. Not
promised: other architectures (ARM: other libraries), GPUs (other kernels; deterministic there means
run to run on one GPU model), CPUs without AVX2 (the pins then cap nothing and the run says so).

Which processes pin: every ``python -m flows.<stage>`` / ``python -m pipeline.<module>`` process
and ``mlflow models serve``'s server pins at package import (:func:`pin_entry_point`), unless its
``deterministic`` settings are false (train stages: ``train.deterministic``; evaluate, ``predict``
and serving: ``evaluate.deterministic``; the others: either). The pins are inherited by child
processes (torchrun workers, ``dvc repro`` under the retraining flow). A process that imported
torch before pinning is recorded as not pinned (:func:`math_state`), never silently claimed pinned.

Stdlib and pyyaml only: this module must be importable before torch.
"""

from __future__ import annotations

import os
import platform
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path

from pipeline.config.params import load_params
from pipeline.config.tasks import effective_params

PINS: dict[str, str] = {
    "ATEN_CPU_CAPABILITY": "avx2",
    "ONEDNN_MAX_CPU_ISA": "AVX2",
    "MKL_CBWR": "COMPATIBLE,STRICT",
}
X86 = ("x86_64", "amd64", "i686", "i386")

# The module that decides which setting a command-line process follows (None: either of the two).
_SETTING_OF_MODULE = {
    "flows.train": "train",
    "pipeline.stages.train": "train",
    "flows.evaluate": "evaluate",
    "pipeline.serving.predict": "evaluate",
}

_state: dict[str, str] = {}  # what pin_math_libraries did in this process (empty: not called)


def pin_math_libraries(enabled: bool = True, reason: str = "") -> dict[str, str]:
    """Set the pins in this process's environment (children inherit it) when ``enabled``, and
    record what is in force: the pins count only when every one is set and torch was not loaded
    before (its libraries read them once). Idempotent: the first call decides. Returns
    :func:`math_state`."""
    if not _state:
        if enabled:
            os.environ.update(PINS)
            # Deterministic cuBLAS (a GPU) reads its workspace setting at the process's first call.
            os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        in_force = all(os.environ.get(key) == value for key, value in PINS.items())
        if not in_force:
            _state.update(pinned="false", why=reason or ("" if enabled else "deterministic is false"))
        elif "torch" in sys.modules:
            _state.update(pinned="false", why="torch was loaded before the pins were set")
            warnings.warn(
                "math libraries pinned after torch was loaded: this process's results may differ across "
                "machines (pin before `import torch`: pipeline.runtime.math_pins)",
                RuntimeWarning,
                stacklevel=2,
            )
        elif platform.machine().lower() not in X86:
            _state.update(pinned="false", why=f"{platform.machine()} is not x86-64: the pins apply to x86-64 only")
        elif "avx2" not in cpu_flags():
            _state.update(pinned="partial", why="this CPU has no AVX2: its results differ from AVX2 machines'")
        else:
            _state.update(pinned="true", why="" if enabled else "inherited from the parent process")
    return math_state()


def math_state() -> dict[str, str]:
    """What decides this process's arithmetic, for the run's tags: the CPU, its instruction sets,
    the pin variables in its environment and whether they are in force."""
    return {
        "cpu": cpu_model(),
        "cpu_isa": " ".join(f for f in ("avx2", "fma", "avx512f", "amx_tile") if f in cpu_flags()) or "none",
        "math_pins": " ".join(f"{k}={os.environ[k]}" for k in PINS if k in os.environ) or "none",
        "math_pinned": _state.get("pinned", "false"),
        "math_pinned_why": _state.get("why", "pipeline.runtime.math_pins was not called in this process"),
    }


# --------------------------------------------------------------------------- #
# Another machine, simulated on this one (tests/pipeline/runtime/test_math_pins.py,
# benchmarks/bench_math_pins.py): environment for a child process
# --------------------------------------------------------------------------- #

# An AVX2-only CPU: every library capped at AVX2, as on a CPU without AVX-512.
AVX2_ONLY = {"MKL_ENABLE_INSTRUCTIONS": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2", "ATEN_CPU_CAPABILITY": "avx2"}


def other_vendor_library(workdir: Path) -> Path | None:
    """A shared library that, LD_PRELOADed, makes MKL believe it runs on the other vendor's CPU (an
    Intel CPU answers "not Intel" to MKL's vendor check, any other "Intel"), so MKL takes the code
    paths it takes there; None without a C compiler. Two functions, built with the system's cc."""
    import shutil
    import subprocess

    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        return None
    answer = 0 if "intel" in cpu_model().lower() else 1
    src, lib = Path(workdir) / "other_vendor.c", Path(workdir) / "libother_vendor.so"
    src.write_text(
        f"int mkl_serv_intel_cpu_true(void) {{ return {answer}; }}\nint mkl_serv_intel_cpu(void) {{ return {answer}; }}\n"
    )
    done = subprocess.run([cc, "-shared", "-fPIC", "-o", str(lib), str(src)], capture_output=True)
    return lib if done.returncode == 0 else None


def cpu_model() -> str:
    for line in _cpuinfo_lines():
        if line.lower().startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine() or "unknown"


def cpu_flags() -> set[str]:
    for line in _cpuinfo_lines():
        if line.lower().startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


def _cpuinfo_lines() -> list[str]:
    try:
        return Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace").splitlines()[:64]
    except OSError:  # not Linux: no model name or flags from here
        return []


# --------------------------------------------------------------------------- #
# Entry points: decide from params.yaml, before anything imports torch
# --------------------------------------------------------------------------- #


def entry_module(argv: Sequence[str] | None = None) -> str | None:
    """The module this process was started with (``python [options] -m <module>``), or None."""
    argv = list(sys.orig_argv if argv is None else argv)
    i = 1
    while i < len(argv):
        arg = argv[i]
        if arg == "-m":
            return argv[i + 1] if i + 1 < len(argv) else None
        if arg.startswith("-m"):
            return arg[2:]
        if arg in ("-X", "-W"):  # options with a value
            i += 2
            continue
        if arg.startswith("-c") or not arg.startswith("-"):
            return None  # python -c ... or python script.py ...
        i += 1
    return None


def wants_pins(module: str, args: Sequence[str]) -> bool:
    """Whether the process of ``module`` (with its command-line ``args``) runs deterministically:
    the ``deterministic`` setting that module follows, in the params file it reads (``--params``,
    default the repository's params.yaml), with the task's overrides (``--task``/``--corpus``)."""
    import argparse

    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--params", default=None)
    parser.add_argument("--task", default=None)
    parser.add_argument("--corpus", default=None)
    known, _ = parser.parse_known_args(list(args))
    try:
        params = load_params(known.params)
        task = known.task or known.corpus
        if task:
            params = effective_params(params, task)
    except (OSError, ValueError, KeyError):
        return True  # the stage itself reports the bad params file; meanwhile, pin
    setting = _SETTING_OF_MODULE.get(module)
    names = (setting,) if setting else ("train", "evaluate")
    return any(bool((params.get(name) or {}).get("deterministic", True)) for name in names)


def serving_wants_pins(model_path: str) -> bool:
    """Inside ``mlflow models serve``: the served model's own ``deterministic`` (serving.json)."""
    import json

    for config in Path(model_path).glob("**/serving.json"):
        try:
            return bool(json.loads(config.read_text(encoding="utf-8")).get("deterministic", True))
        except (OSError, ValueError):
            break
    return True


SERVER_MODEL_PATH = "__pyfunc_model_path__"  # set by `mlflow models serve` (mlflow.pyfunc.scoring_server)


def pin_entry_point() -> None:
    """Pin this process if it is one of the project's command-line entry points (``python -m
    flows.*`` / ``python -m pipeline.*``) or ``mlflow models serve``'s server, per its settings.
    Called where the ``flows`` and ``pipeline`` packages are imported, before any module of theirs
    imports torch. Anything else that imports these packages (a notebook, pytest) is left alone."""
    if _state:
        return
    module = entry_module()
    if module and module.split(".")[0] in ("flows", "pipeline"):
        pin_math_libraries(wants_pins(module, sys.argv[1:]))
    elif os.environ.get(SERVER_MODEL_PATH):
        pin_math_libraries(serving_wants_pins(os.environ[SERVER_MODEL_PATH]))
