"""MKL's vendor check, answered: one MKL code path on every x86-64 CPU.

Intel MKL (linked into torch's CPU build) picks its code by CPU vendor as well as by instruction
set: ``MKL_CBWR=AVX2`` (its AVX2 branch, bitwise reproducible) is honoured only where MKL's check
``mkl_serv_intel_cpu_true()`` says the CPU is Intel's; elsewhere MKL runs other code (on an AMD CPU
its VML ``exp``/``log`` then give other bits than on an Intel one). Two functions that answer
"Intel", loaded into the process before torch (``RTLD_GLOBAL``: the dynamic linker then resolves
MKL's calls to them, as it would under ``LD_PRELOAD``) and put in ``LD_PRELOAD`` for its children,
make MKL run the same AVX2 branch on every CPU that has AVX2 and FMA. They change nothing else: MKL
still checks the instruction sets itself, and the AVX2 branch's kernels the pipeline runs hold no
instruction whose result differs between vendors (``benchmarks/audit_math_kernels.py`` lists them;
docs/training.md, "The same bits on every machine").

Why compiled here rather than shipped: a binary in the repository would be an unreviewable blob;
these two functions are built by the system's C compiler (``cc``, as any Python package with a C
part needs) into a per-user cache, once (``make install`` does it; a process that finds it missing
builds it, atomically). Without a compiler the answer cannot be given: a non-Intel CPU then runs
unpinned, and the run says so (``math_pinned: false``), never claiming bits it cannot promise.

Stdlib only: it runs before torch loads. :func:`main` builds the library and prints its path
(``make install`` calls it as ``python -c "from pipeline.runtime import mkl_vendor; mkl_vendor.main()"``:
``python -m`` would import the module twice, the package's ``__init__`` having imported it, and warn).
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

SYMBOLS = ("mkl_serv_intel_cpu_true", "mkl_serv_intel_cpu")  # MKL's vendor checks (1: Intel)


def source(answer: int) -> str:
    """C source of the two vendor checks, answering ``answer`` (1: Intel, 0: not Intel)."""
    return "".join(f"int {name}(void) {{ return {answer}; }}\n" for name in SYMBOLS)


def cache_dir() -> Path:
    """Where built libraries live: ``$COPYSEQ_CACHE``, else ``$XDG_CACHE_HOME/copyseq``, else
    ``~/.cache/copyseq``."""
    if os.environ.get("COPYSEQ_CACHE"):
        return Path(os.environ["COPYSEQ_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "copyseq"


def build(answer: int, directory: Path | None = None) -> Path | None:
    """The shared library answering ``answer`` to MKL's vendor checks, built once into
    ``directory`` (default :func:`cache_dir`) by the system's C compiler and reused after; None
    when no compiler is found or the build fails. Written to a temporary name and renamed, so a
    concurrent or killed build never leaves a half-written library behind."""
    code = source(answer)
    digest = hashlib.sha256(code.encode()).hexdigest()[:12]
    directory = Path(directory) if directory is not None else cache_dir()
    lib = directory / f"libmkl_vendor_{answer}_{digest}.so"
    if lib.is_file():
        return lib
    cc = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        return None
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=directory) as tmp:
            src, out = Path(tmp) / "vendor.c", Path(tmp) / lib.name
            src.write_text(code, encoding="utf-8")
            done = subprocess.run([cc, "-shared", "-fPIC", "-O2", "-o", str(out), str(src)], capture_output=True)
            if done.returncode != 0:
                return None
            os.replace(out, lib)
    except OSError:
        return None
    return lib


def answer_intel() -> str:
    """Make MKL's vendor checks answer "Intel" in this process (loaded before torch) and in its
    children (``LD_PRELOAD``). Returns "" when done, else why not."""
    lib = build(1)
    if lib is None:
        return "no C compiler (cc) to build MKL's vendor answer (pipeline.runtime.mkl_vendor): run `make install`"
    try:
        ctypes.CDLL(str(lib), mode=ctypes.RTLD_GLOBAL)
    except OSError as err:
        return f"could not load {lib}: {err}"
    preload = os.environ.get("LD_PRELOAD", "")
    if str(lib) not in preload.split(":"):
        os.environ["LD_PRELOAD"] = f"{lib}:{preload}" if preload else str(lib)
    return ""


def intel_answer_in_force() -> bool:
    """Whether MKL's vendor check, looked up as the dynamic linker will look it up for torch, answers
    "Intel" (before torch loads, only a library loaded for that purpose defines it)."""
    try:
        check = ctypes.CDLL(None)[SYMBOLS[0]]
    except (OSError, AttributeError):
        return False
    check.restype = ctypes.c_int
    return check() == 1


def main() -> None:
    """``make install``'s step. Without a C compiler the install still completes (an Intel CPU does
    not need the answer); on another vendor's CPU the stages then say ``math_pinned: false``."""
    lib = build(1)
    if lib is None:
        print(
            "warning: could not build MKL's vendor answer (no working C compiler, cc): on a non-Intel CPU "
            "the stages will run MKL's own code path and record math_pinned: false; install cc "
            "(Debian: apt-get install gcc) and rerun `make install` for the same bits as every other machine",
            file=sys.stderr,
        )
        return
    print(lib)


if __name__ == "__main__":
    main()
