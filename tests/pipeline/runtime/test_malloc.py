"""glibc's malloc as the pipeline sets it in a process that decodes (math_pins.keep_freed_memory, from
pin_entry_point: the evaluate stage, predict, the server): freed blocks up to 32 MiB are reused
instead of mapped fresh from the kernel (a search step's score tensors: benchmarks/bench_process_settings.py --setting malloc);
the arithmetic is the same, and so are the bits. Training processes keep glibc's defaults."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

from pipeline.runtime.math_pins import MMAP_THRESHOLD, TRIM_THRESHOLD
from tests.helpers import REPO
from tests.pipeline.runtime.test_math_pins import _run

pytestmark = pytest.mark.skipif(
    platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc's malloc settings"
)

# Allocate, write and free 24, 16 and 8 MiB, five times over, after one warm-up round, and count the
# page faults: under glibc's own defaults some of these blocks come fresh from the kernel again (on
# this project's machine about 2,000 faults over the five rounds); kept, they come back from the heap.
PROBE = """
import ctypes, resource, sys
sys.orig_argv = [sys.executable, "-m", sys.argv[1]]  # as `python -m <module>` starts: pin_entry_point reads it
import pipeline
from pipeline.runtime import math_pins
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
libc.memset.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]
def cycle():
    for mib in (24, 16, 8):
        block = libc.malloc(mib << 20)
        libc.memset(block, 1, mib << 20)
        libc.free(block)
cycle()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(5):
    cycle()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before, math_pins.freed_memory_kept)
"""


def _probe(module: str, **env: str) -> tuple[int, bool]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_") and k != "COPYSEQ_MALLOC"}
    proc = subprocess.run([sys.executable, "-c", PROBE, module], cwd=REPO, env={**base, "PYTHONPATH": str(REPO), **env},
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    faults, kept = proc.stdout.split()
    return int(faults), kept == "True"


def test_decoding_processes_keep_freed_blocks_training_ones_do_not_and_the_user_can_say_no():
    kept, applied = _probe("flows.evaluate")
    system, trained = _probe("flows.train")
    assert applied and not trained
    assert system > 0 and kept * 10 <= system, (kept, system)
    assert _probe("pipeline.serving.predict")[1]
    assert not _probe("flows.evaluate", COPYSEQ_MALLOC="system")[1]
    assert not _probe("flows.evaluate", MALLOC_MMAP_THRESHOLD_="1048576")[1]  # the user's own glibc setting wins


def test_the_allocator_setting_changes_no_bit(tmp_path):
    # The same tiny training and evaluation, glibc's malloc kept as a decoding process keeps it
    # (MALLOC_ variables, as keep_freed_memory sets them) and at its defaults.
    kept = {"MALLOC_MMAP_THRESHOLD_": str(MMAP_THRESHOLD), "MALLOC_TRIM_THRESHOLD_": str(TRIM_THRESHOLD)}
    kept = _run(tmp_path, "kept", True, kept, one_core=False)
    system = _run(tmp_path, "system", True, {"COPYSEQ_MALLOC": "system"}, one_core=False)
    for mechanism in ("copynet", "wean"):
        assert kept[mechanism] == system[mechanism], mechanism  # weights, losses, beam scores, metrics
        assert kept[mechanism]["valid_loss"][-1] < kept[mechanism]["valid_loss"][0]  # it trained
