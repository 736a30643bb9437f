"""The same bits on every x86-64 machine: pin the CPU math libraries' code paths before torch loads.

A fixed thread count and deterministic algorithms (``train.threads``/``train.deterministic``) make a
run repeat itself on one machine, not on another: PyTorch's own kernels (ATen), Intel MKL (matrix
products; ``exp``/``log``/``tanh`` through MKL's VML) and oneDNN (the LSTM kernels) choose their code
by the CPU they find (instruction set: SSE4, AVX2, AVX-512, AMX; and MKL by vendor too), and each
code path sums in its own order. In a model far from convergence those last bits grow into points
of accuracy. The pins, set in the environment before torch loads (each library reads them once):

  ``ATEN_CPU_CAPABILITY=avx2``   ATen's vectorised kernels (softmax, reductions, the normal RNG) at
                                 AVX2, which every x86-64 CPU of the last decade has
  ``ONEDNN_MAX_CPU_ISA=AVX2``    oneDNN (LSTM forward and backward) at most AVX2
  ``MKL_CBWR=AVX2``              MKL's Conditional Numerical Reproducibility on its ``AVX2`` branch
                                 (not ``STRICT``, below)
  MKL's vendor check answered    MKL honours ``AVX2`` only where it believes the CPU is Intel's;
                                 :mod:`pipeline.runtime.mkl_vendor` answers "Intel" in the process
                                 (and its children), so every CPU with AVX2 runs that one branch

Why not MKL's ``COMPATIBLE`` branch (the one MKL documents for Intel *and* non-Intel CPUs, pinned
formerly): it is SSE2 code, 2.5-3x slower for the matrix products that dominate training
(benchmarks/bench_math_pins.py), and it is no more vendor-neutral than the AVX2 branch for what the
pipeline computes. What makes a branch give other bits on another vendor's CPU is an instruction
whose result is implementation-defined (the approximate reciprocals ``rcpps``/``rsqrtps``); the
AVX2-branch kernels the pipeline runs hold none, except VML's float ``sqrt``, which the pipeline
does not call (``benchmarks/audit_math_kernels.py`` runs every mechanism under valgrind and
disassembles what ran).

Why not ``STRICT`` (``MKL_CBWR=AVX2,STRICT``, pinned formerly): it makes MKL's products
reproducible whatever the alignment of their arrays, at 2-3x the cost of a one-row product (the
decoder's step on one sentence); the pipeline does not need it. Every tensor it hands MKL starts on
a 64-byte boundary (PyTorch's CPU allocator) at an offset its shapes decide, so the alignment is
the same on every machine; and no product was found to depend on it (900 random products at
random misalignments, 1 and 2 threads: ``tests/pipeline/runtime/test_math_pins.py`` keeps checking
a set of them).

What is promised, and tested (``tests/pipeline/runtime/test_math_pins.py``: training in processes that
see other instruction sets and another CPU vendor; fingerprints equal to the reference machine's):
the same bits on every x86-64 CPU with AVX2, for the same code, the same pinned library versions
(requirements-lock.txt) and the same thread count. Not promised: other architectures (ARM: other
libraries), GPUs (other kernels; deterministic there means run to run on one GPU model), CPUs
without AVX2 (the pins then cap nothing and the run says so).

Which processes pin: every ``python -m flows.<stage>`` / ``python -m pipeline.<module>`` process
and ``mlflow models serve``'s server pins at package import (:func:`pin_entry_point`), unless its
``deterministic`` settings are false (train stages: ``train.deterministic``; evaluate, ``predict``
and serving: ``evaluate.deterministic``; the others: either). The pins are inherited by child
processes (torchrun workers, ``dvc repro`` under the retraining flow: the environment, and the
vendor answer through ``LD_PRELOAD``). A process that imported torch before pinning is recorded as
not pinned (:func:`math_state`), never silently claimed pinned.

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
from pipeline.runtime import mkl_vendor

PINS: dict[str, str] = {
    "ATEN_CPU_CAPABILITY": "avx2",
    "ONEDNN_MAX_CPU_ISA": "AVX2",
    "MKL_CBWR": "AVX2",
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
    """Set the pins in this process's environment (children inherit it) and answer MKL's vendor
    check (:mod:`pipeline.runtime.mkl_vendor`) when ``enabled``, and record what is in force: the pins
    count only when every one is set, MKL will take its AVX2 branch (an Intel CPU, or the vendor
    answered) and torch was not loaded before (its libraries read them once). Idempotent: the first
    call decides. Returns :func:`math_state`."""
    if not _state:
        x86 = platform.machine().lower() in X86
        vendor_why = ""
        if enabled:
            os.environ.update(PINS)
            # Deterministic cuBLAS (a GPU) reads its workspace setting at the process's first call.
            os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
            if x86 and "torch" not in sys.modules:
                vendor_why = mkl_vendor.answer_intel()
        in_force = all(os.environ.get(key) == value for key, value in PINS.items())
        intel_path = cpu_vendor() == "GenuineIntel" or (
            "torch" not in sys.modules and mkl_vendor.intel_answer_in_force()
        )
        _state["mkl_intel_check"] = (
            "native (Intel CPU)"
            if cpu_vendor() == "GenuineIntel"
            else ("answered: Intel" if intel_path else "not answered")
        )
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
        elif not x86:
            _state.update(pinned="false", why=f"{platform.machine()} is not x86-64: the pins apply to x86-64 only")
        elif "avx2" not in cpu_flags() or "fma" not in cpu_flags():
            _state.update(pinned="partial", why="this CPU has no AVX2 and FMA: its results differ from AVX2 machines'")
        elif not intel_path:
            _state.update(
                pinned="false",
                why=f"MKL would not take its AVX2 branch on this {cpu_vendor() or 'unknown'} CPU: "
                + (vendor_why or "its vendor check was not answered"),
            )
            warnings.warn(
                f"math libraries not pinned: {_state['why']}; this process's results may differ from other machines'",
                RuntimeWarning,
                stacklevel=2,
            )
        else:
            _state.update(pinned="true", why="" if enabled else "inherited from the parent process")
    return math_state()


def math_state() -> dict[str, str]:
    """What decides this process's arithmetic, for the run's tags: the CPU, its instruction sets,
    the pin variables in its environment, MKL's vendor check and whether the pins are in force."""
    return {
        "cpu": cpu_model(),
        "cpu_isa": " ".join(f for f in ("avx2", "fma", "avx512f", "amx_tile") if f in cpu_flags()) or "none",
        "math_pins": " ".join(f"{k}={os.environ[k]}" for k in PINS if k in os.environ) or "none",
        "mkl_intel_check": _state.get("mkl_intel_check", "not answered"),
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
    """A shared library that answers MKL's vendor check as the other vendor's CPU would (an Intel
    CPU answers "not Intel", any other "Intel"); None without a C compiler. Loaded into a child
    process *after* the pins (``ctypes.CDLL(..., RTLD_GLOBAL)`` before torch), it plays the CPU
    under them: an unpinned process then takes the code paths MKL takes on that vendor's CPUs,
    while a pinned one keeps the pins' own answer (loaded first, it wins), as on a real machine of
    that vendor. (``LD_PRELOAD``-ed instead, it would override the pins, which no CPU can do.)"""
    return mkl_vendor.build(0 if cpu_vendor() == "GenuineIntel" else 1, Path(workdir))


def cpu_vendor() -> str:
    """The CPU's vendor string (``GenuineIntel``, ``AuthenticAMD``, ...), "" where unknown."""
    for line in _cpuinfo_lines():
        if line.lower().startswith("vendor_id"):
            return line.split(":", 1)[1].strip()
    return ""


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


def sleep_idle_openmp_threads() -> None:
    """``OMP_WAIT_POLICY=PASSIVE`` unless the user set it: a GNU OpenMP thread (PyTorch's CPU kernels,
    MKL) with nothing to do sleeps at once instead of spinning. Alone that costs nothing; on a machine
    shared with other jobs a spinning thread burns the time slice the thread it waits for needs
    (benchmarks/bench_process_settings.py --setting omp-wait-policy). The work each thread does is the same, so are the bits
    (tests/pipeline/runtime/test_omp_wait_policy.py). Not a pin (results do not depend on it), but
    read, as the pins are, when the library loads: ``pipeline/__init__.py`` calls it, so every entry
    point (the stage flows, ``python -m pipeline.*`` such as a second machine's train_node, serving)
    and the processes they start (torchrun's workers) sleep their idle threads."""
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


# glibc's mallopt parameters (malloc.h) and the values keep_freed_memory sets.
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
MMAP_THRESHOLD = 32 << 20  # glibc's largest: blocks up to 32 MiB come from the heap, reused
TRIM_THRESHOLD = 256 << 20  # free memory kept at the heap's top before it is given back
_MALLOC_SETTINGS = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_", "GLIBC_TUNABLES")
# The processes that only decode (the evaluate stage, predict; the server is told by SERVER_MODEL_PATH).
DECODING_MODULES = ("flows.evaluate", "pipeline.serving.predict")
freed_memory_kept = False  # whether keep_freed_memory set glibc's malloc in this process


def keep_freed_memory() -> bool:
    """Let glibc's malloc reuse freed blocks of up to 32 MiB instead of mapping fresh pages for each.

    A search step allocates a few (rows, V) score tensors and frees them (64 rows x 50,000 words:
    12.8 MB each). By default glibc maps blocks over its adaptive threshold fresh from the kernel and
    gives the heap's free top back past twice that threshold, so a process that only decodes pays
    a thousand page faults a step, and the kernel zeroing those pages (greedy, 64 sentences at a
    time, 50,000 words: 1,300-1,400 faults a step and 12-17% of the speed;
    benchmarks/bench_process_settings.py --setting malloc). Here blocks up to 32 MiB come from the heap and up to 256 MiB
    of free heap stay with the process. The addresses change, not the arithmetic: PyTorch aligns
    every tensor to 64 bytes either way, so the bits are the same (the benchmark compares every
    hypothesis; tests/pipeline/runtime/test_malloc.py a whole run). Set only where a process decodes
    (:func:`pin_entry_point`): a training process measured 6-8% slower with it. Left alone: a user's
    own malloc settings (``MALLOC_*_``, ``GLIBC_TUNABLES``), ``COPYSEQ_MALLOC=system``, and a C
    library other than glibc. Returns whether it set them."""
    global freed_memory_kept
    if os.environ.get("COPYSEQ_MALLOC") == "system" or any(key in os.environ for key in _MALLOC_SETTINGS):
        return False
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    import ctypes

    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    freed_memory_kept = bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(
        mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD)
    )
    return freed_memory_kept


def pin_entry_point() -> None:
    """Pin this process if it is one of the project's command-line entry points (``python -m
    flows.*`` / ``python -m pipeline.*``) or ``mlflow models serve``'s server, per its settings.
    Called where the ``flows`` and ``pipeline`` packages are imported, before any module of theirs
    imports torch. Anything else that imports these packages (a notebook, pytest) is left alone. A
    process that only decodes (:data:`DECODING_MODULES`, the server) also keeps freed memory
    (:func:`keep_freed_memory`)."""
    if _state:
        return
    module = entry_module()
    if module and module.split(".")[0] in ("flows", "pipeline"):
        pin_math_libraries(wants_pins(module, sys.argv[1:]))
        if module in DECODING_MODULES:
            keep_freed_memory()
    elif os.environ.get(SERVER_MODEL_PATH):
        pin_math_libraries(serving_wants_pins(os.environ[SERVER_MODEL_PATH]))
        keep_freed_memory()
