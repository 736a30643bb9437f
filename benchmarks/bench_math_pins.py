"""Which CPU math pins make two machines compute the same bits: ``pipeline.runtime.math_check``'s fingerprints
(matrix products, exp/log, log_softmax, normal RNG, GRU, LSTM) in fresh processes that simulate other
x86-64 machines on this one, under three pin levels.

Simulated machines (environment of the child process):
  this CPU              nothing changed
  AVX2-only             MKL_ENABLE_INSTRUCTIONS=AVX2, ONEDNN_MAX_CPU_ISA=AVX2, ATEN_CPU_CAPABILITY=avx2
                        (what a CPU without AVX-512 computes by default)
  other vendor          MKL made to believe it runs on the other vendor's CPU (Intel <-> not Intel; a
                        two-function library, LD_PRELOADed, that answers MKL's vendor check:
                        pipeline.runtime.math_pins.other_vendor_library; skipped without a C compiler)
  other vendor, AVX2    both
Pin levels: none; ``avx2-branch`` (MKL_CBWR=AVX2,STRICT with the ATen/oneDNN pins: what MKL's own
docs suggest, reproducible on Intel CPUs only); ``pinned`` (pipeline.runtime.math_pins.PINS: MKL's COMPATIBLE
branch). A level gives the same bits everywhere iff its column holds one fingerprint set.

    .venv/bin/python benchmarks/bench_math_pins.py          # ~30 s
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]

from pipeline.runtime.math_pins import AVX2_ONLY, PINS, cpu_model, other_vendor_library  # noqa: E402

LEVELS = {
    "none": {},
    "avx2-branch": {**PINS, "MKL_CBWR": "AVX2,STRICT"},
    "pinned": dict(PINS),
}


def machines(shim: Path | None) -> dict[str, dict[str, str]]:
    out = {"this CPU": {}, "AVX2-only": dict(AVX2_ONLY)}
    if shim is not None:
        out["other vendor"] = {"LD_PRELOAD": str(shim)}
        out["other vendor, AVX2-only"] = {"LD_PRELOAD": str(shim), **AVX2_ONLY}
    return out


def unpinned_params(workdir: Path) -> Path:
    """params.yaml with deterministic false, so the child process leaves its environment as given."""
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    for name in ("train", "evaluate"):
        params[name]["deterministic"] = False
    path = workdir / "params.yaml"
    path.write_text(yaml.safe_dump(params))
    return path


def fingerprints(machine_env: dict, level_env: dict, params: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in {*PINS, *AVX2_ONLY, "LD_PRELOAD"}}
    env.update(machine_env)
    env.update(level_env)  # the pins win over the machine's own settings, as on a real machine
    done = subprocess.run(
        [sys.executable, "-m", "pipeline.runtime.math_check", "--params", str(params)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout)["fingerprints"]


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        shim, params = other_vendor_library(workdir), unpinned_params(workdir)
        sims = machines(shim)
        print(f"# CPU: {cpu_model()}; other-vendor simulation: {'on' if shim else 'off (no C compiler)'}")
        results = {
            level: {m: fingerprints(env, level_env, params) for m, env in sims.items()}
            for level, level_env in LEVELS.items()
        }
    ops = list(next(iter(results["none"].values())))
    for level, by_machine in results.items():
        print(f"\n## {level}: {' '.join(f'{k}={v}' for k, v in LEVELS[level].items()) or 'no pins'}")
        print("| operation | " + " | ".join(by_machine) + " | same everywhere |")
        print("|---|" + "---|" * len(by_machine) + "---|")
        for op in ops:
            values = [by_machine[m][op] for m in by_machine]
            print(f"| {op} | " + " | ".join(v[:8] for v in values) + f" | {'yes' if len(set(values)) == 1 else 'NO'} |")
        same = all(len({by_machine[m][op] for m in by_machine}) == 1 for op in ops)
        print(f"\n{level}: {'the same bits on every simulated machine' if same else 'machines differ'}")


if __name__ == "__main__":
    main()
