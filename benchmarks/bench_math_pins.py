"""Which CPU math pins make two machines compute the same bits: ``pipeline.runtime.math_check``'s fingerprints
(matrix products, exp/log/tanh, log_softmax, normal RNG, GRU, LSTM, Adam) in fresh processes that
simulate other x86-64 machines on this one, under three pin levels, and what each level costs.

Simulated machines (environment of the child process):
  this CPU              nothing changed
  AVX2-only             MKL_ENABLE_INSTRUCTIONS=AVX2, ONEDNN_MAX_CPU_ISA=AVX2, ATEN_CPU_CAPABILITY=avx2
                        (what a CPU without AVX-512 computes by default)
  other vendor          MKL's vendor check answered as the other vendor's CPU would (Intel <-> not
                        Intel; pipeline.runtime.math_pins.other_vendor_library), underneath the pins'
                        own answer where a level has one (LD_PRELOAD order: the pins' first)
  other vendor, AVX2    both
Pin levels: none; ``compatible`` (MKL_CBWR=COMPATIBLE,STRICT with the ATen/oneDNN pins: the pins
the former pin, SSE2 code); ``pinned`` (pipeline.runtime.math_pins.PINS, MKL_CBWR=AVX2, with MKL's
vendor check answered by pipeline.runtime.mkl_vendor). A level gives the same bits everywhere iff
its column holds one fingerprint set. Then the time of a (640 x 300) x (300 x 16,000) product (an
output layer's) under each level, on this CPU, in process CPU seconds.

    .venv/bin/python benchmarks/bench_math_pins.py          # ~1 min
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]

from pipeline.runtime import mkl_vendor  # noqa: E402
from pipeline.runtime.math_pins import AVX2_ONLY, PINS, cpu_model, other_vendor_library  # noqa: E402

LEVELS = {
    "none": {},
    "compatible": {**PINS, "MKL_CBWR": "COMPATIBLE,STRICT"},
    "pinned": dict(PINS),  # and MKL's vendor answer (fingerprints: LD_PRELOAD)
}


def machines(shim: Path | None) -> dict[str, dict[str, str]]:
    out = {"this CPU": {}, "AVX2-only": dict(AVX2_ONLY)}
    if shim is not None:
        out["other vendor"] = {"SIMULATED": str(shim)}
        out["other vendor, AVX2-only"] = {"SIMULATED": str(shim), **AVX2_ONLY}
    return out


def unpinned_params(workdir: Path) -> Path:
    """params.yaml with deterministic false, so the child process leaves its environment as given."""
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    for name in ("train", "evaluate"):
        params[name]["deterministic"] = False
    path = workdir / "params.yaml"
    path.write_text(yaml.safe_dump(params))
    return path


def fingerprints(machine_env: dict, level: str, params: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in {*PINS, *AVX2_ONLY, "LD_PRELOAD"}}
    env.update({k: v for k, v in machine_env.items() if k != "SIMULATED"})
    env.update(LEVELS[level])  # the pins win over the machine's own settings, as on a real machine
    # MKL's vendor check: the pins' answer first (it wins), the simulated CPU's own underneath.
    preload = [str(mkl_vendor.build(1))] if level == "pinned" else []
    env["LD_PRELOAD"] = ":".join(preload + ([machine_env["SIMULATED"]] if "SIMULATED" in machine_env else []))
    done = subprocess.run(
        [sys.executable, "-m", "pipeline.runtime.math_check", "--params", str(params)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,  # math_check exits 1 when the bits differ from the reference machine's: expected here
    )
    return json.loads(done.stdout)["fingerprints"]


def main(argv: list[str] | None = None) -> None:
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args(argv)  # --help; no options
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        shim, params = other_vendor_library(workdir), unpinned_params(workdir)
        sims = machines(shim)
        print(f"# CPU: {cpu_model()}; other-vendor simulation: {'on' if shim else 'off (no C compiler)'}")
        results = {level: {m: fingerprints(env, level, params) for m, env in sims.items()} for level in LEVELS}
        costs = {level: product_seconds(level, params) for level in LEVELS}
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
    print("\n| level | (640 x 300) x (300 x 16,000), ms (CPU) | / none |\n|---|---:|---:|")
    for level, seconds in costs.items():
        print(f"| {level} | {1e3 * seconds:.1f} | {seconds / costs['none']:.2f} |")


PRODUCT = (
    "import time, torch; torch.set_num_threads(1); a, w = torch.randn(640, 300), torch.randn(16000, 300); "
    "[a @ w.t() for _ in range(3)]; t = time.process_time(); [a @ w.t() for _ in range(10)]; "
    "print((time.process_time() - t) / 10)"
)


def product_seconds(level: str, params: Path) -> float:
    """CPU seconds of an output layer's product under ``level`` on this CPU (the median of 3 processes)."""
    env = {k: v for k, v in os.environ.items() if k not in {*PINS, *AVX2_ONLY, "LD_PRELOAD"}}
    env.update(LEVELS[level])
    if level == "pinned":
        env["LD_PRELOAD"] = str(mkl_vendor.build(1))
    times = [
        float(
            subprocess.run([sys.executable, "-c", PRODUCT], env=env, capture_output=True, text=True, check=True).stdout
        )
        for _ in range(3)
    ]
    return sorted(times)[1]


if __name__ == "__main__":
    main()
