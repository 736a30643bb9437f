"""``compute_settings(..., deterministic=True)`` switches on what ``torch.use_deterministic_algorithms``
does (the kernel switch, and TorchInductor's flag for ``torch.compile``) without loading TorchInductor
in a process that never compiles. Each case runs in a fresh interpreter: the test process has loaded
TorchInductor long ago."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.helpers import REPO

NOT_COMPILED = """
import json, sys
from pipeline.runtime.device import compute_settings
settings = compute_settings(1, True)
import torch
loaded = "torch._inductor" in sys.modules
import torch._inductor.config as inductor
print(json.dumps({"recorded": settings["deterministic"], "kernels": torch.are_deterministic_algorithms_enabled(),
                  "inductor_loaded": loaded, "inductor_flag": inductor.deterministic}))
"""

COMPILER_LOADED = """
import json
import torch._inductor.config as inductor
assert not inductor.deterministic
from pipeline.runtime.device import compute_settings
import torch
settings = compute_settings(1, True)
print(json.dumps({"recorded": settings["deterministic"], "kernels": torch.are_deterministic_algorithms_enabled(),
                  "inductor_flag": inductor.deterministic}))
"""


def fresh_process(code: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "TORCHINDUCTOR_DETERMINISTIC"}
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_deterministic_kernels_without_loading_the_compiler_and_its_flag_set_when_it_loads():
    assert fresh_process(NOT_COMPILED) == {
        "recorded": True,
        "kernels": True,
        "inductor_loaded": False,
        "inductor_flag": True,
    }


def test_with_the_compiler_loaded_already_both_switches_are_set():
    assert fresh_process(COMPILER_LOADED) == {"recorded": True, "kernels": True, "inductor_flag": True}
