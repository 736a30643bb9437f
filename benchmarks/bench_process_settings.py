"""What a process-wide setting of the pipeline costs or buys: training tokens/s and decoding sentences/s
under each value of the setting, in alternating fresh processes (the libraries read these settings
once, when they load, so every value needs processes of its own).

  --setting math-pins        none against the math pins (pipeline.runtime.math_pins.PINS and MKL's
                             vendor check answered, in the environment before the libraries load):
                             what the same bits on every x86-64 CPU cost
  --setting omp-wait-policy  OpenMP's wait policy unset (libgomp's default: an idle thread spins, then
                             sleeps) against PASSIVE (it sleeps at once; every process that loads the
                             pipeline gets it), one training alone and --concurrency trainings at once,
                             measured together: what a machine shared with another job costs
  --setting malloc           glibc's defaults (COPYSEQ_MALLOC=system) against malloc as a decoding
                             process sets it (math_pins.keep_freed_memory: freed blocks up to 32 MiB
                             reused, up to 256 MiB of free heap kept): why decoding processes keep
                             freed memory and training processes do not

Every process runs one cell, as a stage process does one thing: one mechanism (seeded, untrained
at the start) at one vocabulary size, on Gigaword-shaped pairs (benchmarks/gigaword_shaped.py):

  training   --steps fused-Adam steps of --batch pairs after 2 warm-up steps; or, with --seconds,
             steps for that long, with the tokens/s of every --window seconds (the swings)
  beam1      beam 10 over --single sources one at a time
  beam64     beam 10 over 128 sources, 64 at a time
  greedy     greedy over 128 sources, 64 at a time

(every output exactly 16 tokens, after one warm-up batch). The processes run pinned as a stage's are
(but under math-pins, where the setting is the pins), with --threads torch threads. Printed per cell:
the median over --rounds rounds (and the processes run at once) of each value, min - max, the ratio
of the second value to the first, minor page faults per step, and whether every output (each
hypothesis's ids and score, or the trained weights after --steps) is the same bits under both values.
--setting fills the other options' defaults (an option given wins):

  math-pins        every mechanism, vocabularies 1,000 / 16,000 / 50,000, emb 150 / hidden 300,
                   batch 64, training, 8 steps, 1 thread, 2 rounds (unpinned, pinned, unpinned, pinned)
  omp-wait-policy  CopyNet, vocabulary 1,000, emb 64 / hidden 128 (the default task's), batch 32,
                   training for 30 s, 2-s windows, 2 threads, alone and two at once, 1 round
  malloc           CopyNet and the pointer-generator, vocabularies 16,000 / 50,000, emb 150 /
                   hidden 300 / encoder 150 per direction (bench_vs_onmt.py's), batch 64, every cell,
                   8 training steps, 8 single sources, 1 thread, 2 rounds

    python -m benchmarks.bench_process_settings --setting malloc              # ~7 minutes on one core
    python -m benchmarks.bench_process_settings --setting omp-wait-policy     # ~4 minutes on 2 cores
    python -m benchmarks.bench_process_settings --setting math-pins --vocabs 1000 --sizes 64x128 --batch 32
"""

from __future__ import annotations

# Nothing of torch or the pipeline at the top: a child process sets its value before they load.
import argparse
import hashlib
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SCRIPT = "bench_process_settings.py"
CELLS = {  # name -> (what runs, sentences per batch; training: --batch)
    "training": ("training", 0),
    "beam1": ("beam 10, one at a time", 1),
    "beam64": ("beam 10, 64 at a time", 64),
    "greedy": ("greedy, 64 at a time", 64),
}
VALUES = {"math-pins": ("unpinned", "pinned"), "omp-wait-policy": ("unset", "PASSIVE"), "malloc": ("system", "kept")}
PRESETS = {
    "math-pins": {
        "mechanisms": None,  # every mechanism with a decoder of its own
        "vocabs": [1000, 16000, 50000],
        "sizes": "150x300",
        "encoder_hidden": 0,
        "batch": 64,
        "cells": ["training"],
        "steps": 8,
        "seconds": 0.0,
        "threads": 1,
        "rounds": 2,
        "concurrency": [1],
    },
    "omp-wait-policy": {
        "mechanisms": ["copynet"],
        "vocabs": [1000],
        "sizes": "64x128",
        "encoder_hidden": 0,
        "batch": 32,
        "cells": ["training"],
        "steps": 0,
        "seconds": 30.0,
        "threads": 2,
        "rounds": 1,
        "concurrency": [1, 2],
    },
    "malloc": {
        "mechanisms": ["copynet", "pointer_generator"],
        "vocabs": [16000, 50000],
        "sizes": "150x300",
        "encoder_hidden": 150,
        "batch": 64,
        "cells": list(CELLS),
        "steps": 8,
        "seconds": 0.0,
        "threads": 1,
        "rounds": 2,
        "concurrency": [1],
    },
}
DECODE_LEN = 16


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--setting", required=True, choices=sorted(PRESETS), help="the setting whose values are compared")
    p.add_argument("--mechanisms", nargs="+", default=None)
    p.add_argument("--vocabs", nargs="+", type=int, default=None)
    p.add_argument("--sizes", default=None, help="EMBxHIDDEN")
    p.add_argument("--encoder-hidden", type=int, default=None, help="encoder size per direction (0: = hidden)")
    p.add_argument("--batch", type=int, default=None, help="training pairs per batch")
    p.add_argument("--cells", nargs="+", default=None, choices=list(CELLS))
    p.add_argument("--steps", type=int, default=None, help="timed training steps (with --seconds 0)")
    p.add_argument("--seconds", type=float, default=None, help="train for this long instead of --steps (0: steps)")
    p.add_argument("--window", type=float, default=2.0, help="seconds per reported window (with --seconds)")
    p.add_argument("--single", type=int, default=8, help="sources decoded one at a time (beam1)")
    p.add_argument("--threads", type=int, default=None, help="torch threads per process")
    p.add_argument("--rounds", type=int, default=None, help="processes per value and cell, alternating")
    p.add_argument("--concurrency", nargs="+", type=int, default=None, help="processes at once (a row each)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--json", type=Path, default=None, help="also write the settings and every process's result")
    p.add_argument("--child", type=Path, default=None, help=argparse.SUPPRESS)
    p.add_argument("--value", default=None, help=argparse.SUPPRESS)
    p.add_argument("--barrier", type=Path, default=None, help=argparse.SUPPRESS)
    p.add_argument("--parties", type=int, default=1, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    for key, value in PRESETS[args.setting].items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    try:
        args.emb, args.hidden = (int(x) for x in args.sizes.lower().split("x"))
    except ValueError:
        print(f"{SCRIPT}: --sizes {args.sizes!r}: it must be EMBxHIDDEN, e.g. 150x300", file=sys.stderr)
        raise SystemExit(2) from None
    if not args.seconds and args.steps < 1 or min(args.rounds, *args.concurrency) < 1:
        print(f"{SCRIPT}: need --steps (or --seconds), --rounds and --concurrency of at least 1", file=sys.stderr)
        raise SystemExit(2)
    return args


# --------------------------------------------------------------------------------------------
# A child process: one value, one cell
# --------------------------------------------------------------------------------------------
def child(args) -> dict:
    """Set this process's value before torch loads, then measure one cell."""
    from pipeline.runtime import math_pins  # loading the pipeline sets OMP_WAIT_POLICY's default

    if args.setting == "omp-wait-policy" and args.value == "unset":
        os.environ.pop("OMP_WAIT_POLICY", None)  # libgomp's own default, read when torch loads it
    if args.setting != "math-pins":  # under math-pins the parent gave this process its pins, or none
        math_pins.pin_math_libraries()
    kept = math_pins.keep_freed_memory() if args.setting == "malloc" else False
    if "torch" in sys.modules:
        raise RuntimeError("torch was loaded before the setting was made")
    loaded = {  # what the libraries see when they load
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
        "pins": all(os.environ.get(k) == v for k, v in math_pins.PINS.items()),
        "kept_freed_memory": kept,
    }
    import torch

    from benchmarks.throughput import batches_for, train_steps
    from models.config import ModelConfig
    from models.registry import build_model
    from pipeline.decoding import search

    torch.set_num_threads(args.threads)
    (vocab,), (name,), (cell,) = args.vocabs, args.mechanisms, args.cells
    training = cell == "training"
    size = args.batch if training else CELLS[cell][1]
    count = (16 if args.seconds else args.steps + 2) if training else (args.single if cell == "beam1" else 2) + 1
    _, batches = batches_for(vocab, count, size, args.seed)
    torch.manual_seed(0)
    cfg = ModelConfig(
        src_vocab=vocab, tgt_vocab=vocab, emb=args.emb, hidden=args.hidden, encoder_hidden=args.encoder_hidden or None
    )
    model = build_model(name, cfg)
    cpu = torch.device("cpu")
    out = {"loaded": loaded, "torch_threads": torch.get_num_threads()}
    if training:
        optimizer = torch.optim.Adam(model.train().parameters(), lr=1e-3, fused=True)
        train_steps(model, optimizer, batches[:2], False, cpu)  # warm-up
        wait(args)
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        if args.seconds:
            windows, tokens, total, steps = [], 0, 0, 0
            start = window_start = time.perf_counter()
            while time.perf_counter() - start < args.seconds:
                n, _ = train_steps(model, optimizer, [batches[steps % len(batches)]], False, cpu)
                tokens, total, steps = tokens + n, total + n, steps + 1
                now = time.perf_counter()
                if now - window_start >= args.window:
                    windows.append(tokens / (now - window_start))
                    tokens, window_start = 0, now
            seconds, out["windows"] = time.perf_counter() - start, windows
        else:
            total, seconds = train_steps(model, optimizer, batches[2:], False, cpu)
            steps = args.steps
        out["faults"] = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults) / steps
        out.update(rate=total / seconds, steps=steps)
        weights = b"".join(p.detach().numpy().tobytes() for p in model.parameters())
        out["digest"] = hashlib.sha256(weights).hexdigest()
        return out

    model.eval()

    def decode(group: list) -> list:
        if cell == "greedy":
            return [[(h.ids, h.score) for h in search.greedy(model, b, DECODE_LEN, min_len=DECODE_LEN)] for b in group]
        found = [search.beam_search(model, b, beam_size=10, max_len=DECODE_LEN, min_len=DECODE_LEN) for b in group]
        return [[[(h.ids, h.score) for h in nbest] for nbest in nbests] for nbests in found]

    decode(batches[:1])  # warm-up: the kept weight copies
    wait(args)
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    start = time.perf_counter()
    hyps = decode(batches[1:])
    seconds = time.perf_counter() - start
    steps = DECODE_LEN * (len(batches) - 1)
    out["faults"] = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults) / steps
    out.update(rate=size * (len(batches) - 1) / seconds, steps=steps)
    out["digest"] = hashlib.sha256(json.dumps(hyps).encode()).hexdigest()
    return out


def wait(args) -> None:
    """The processes of one measurement start timing together: each says it is ready, then waits for all."""
    if args.barrier is None:
        return
    (args.barrier / str(os.getpid())).touch()
    deadline = time.time() + 600
    while len(list(args.barrier.iterdir())) < args.parties and time.time() < deadline:
        time.sleep(0.01)


# --------------------------------------------------------------------------------------------
# The parent: alternate the values, run the cells, print the table
# --------------------------------------------------------------------------------------------
def environment_of(setting: str, value: str, vendor_answer: Path | None) -> dict:
    """The environment of a child process measuring ``value`` of ``setting``."""
    from pipeline.runtime.math_pins import PINS

    drop = {*PINS, "LD_PRELOAD", "OMP_WAIT_POLICY", "COPYSEQ_MALLOC"}
    env = {k: v for k, v in os.environ.items() if k not in drop and not k.startswith("MALLOC_")}
    env.pop("GLIBC_TUNABLES", None)
    if setting == "math-pins" and value == "pinned":  # as a pinned stage process: the pins, MKL's answer first
        env.update(PINS, LD_PRELOAD=str(vendor_answer))
    elif setting == "omp-wait-policy" and value == "PASSIVE":
        env["OMP_WAIT_POLICY"] = "PASSIVE"
    elif setting == "malloc" and value == "system":
        env["COPYSEQ_MALLOC"] = "system"
    return env


def check(setting: str, value: str, result: dict) -> None:
    """Refuse a process that did not run with its value (e.g. not glibc, or MALLOC_ set by hand)."""
    loaded = result["loaded"]
    ok = {
        "math-pins": loaded["pins"] == (value == "pinned"),
        "omp-wait-policy": loaded["omp_wait_policy"] == (None if value == "unset" else value),
        "malloc": loaded["kept_freed_memory"] == (value == "kept"),
    }[setting]
    if not ok:
        raise SystemExit(f"{SCRIPT}: the {value} process did not run with that setting: {loaded}")


def run_cell(args, value: str, cell: tuple[str, int, str], parties: int, env: dict, tmp: Path) -> list[dict]:
    """``parties`` processes of one cell at once under ``value``; their results."""
    name, vocab, cell_name = cell
    barrier = Path(tempfile.mkdtemp(dir=tmp)) if parties > 1 else None
    own = ["--setting", args.setting, "--value", value, "--mechanisms", name, "--vocabs", str(vocab)]
    own += ["--cells", cell_name, "--sizes", args.sizes, "--encoder-hidden", str(args.encoder_hidden)]
    own += ["--batch", str(args.batch), "--steps", str(args.steps), "--seconds", str(args.seconds)]
    own += ["--window", str(args.window), "--single", str(args.single), "--threads", str(args.threads)]
    own += ["--seed", str(args.seed), "--parties", str(parties)] + (["--barrier", str(barrier)] if barrier else [])
    outs = [tmp / f"{value}-{i}.json" for i in range(parties)]
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "benchmarks.bench_process_settings", *own, "--child", str(out)], env=env
        )
        for out in outs
    ]
    if any(proc.wait() != 0 for proc in procs):
        raise SystemExit(f"{SCRIPT}: a {value} process of {cell} failed")
    results = [json.loads(out.read_text()) for out in outs]
    for r in results:
        check(args.setting, value, r)
    return results


def spread(values: list[float]) -> str:
    text = f"{statistics.median(values):,.1f}"
    return text + (f" ({min(values):,.0f} - {max(values):,.0f})" if len(values) > 1 else "")


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.child:
        args.child.write_text(json.dumps(child(args)))
        return
    # The parent's own imports (a child loads nothing of the pipeline before it has made its value).
    from benchmarks.throughput import own_mechanisms
    from models.registry import DISPLAY_NAMES
    from pipeline.runtime import mkl_vendor
    from pipeline.runtime.math_pins import cpu_model

    unknown = sorted(set(args.mechanisms or []) - set(own_mechanisms()))
    if unknown:
        print(f"{SCRIPT}: --mechanisms {' '.join(unknown)}: not one of {' '.join(own_mechanisms())}", file=sys.stderr)
        raise SystemExit(2)
    args.mechanisms = args.mechanisms or own_mechanisms()
    vendor_answer = mkl_vendor.build(1)  # the pins' answer to MKL's vendor check
    if vendor_answer is None and args.setting == "math-pins":
        print(f"{SCRIPT}: --setting math-pins needs a C compiler (cc) to build MKL's vendor answer", file=sys.stderr)
        raise SystemExit(2)
    values = VALUES[args.setting]
    cells = [(name, vocab, cell) for vocab in args.vocabs for name in args.mechanisms for cell in args.cells]
    results: dict[tuple, dict[str, list[dict]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for cell in cells:
                for parties in args.concurrency:
                    for value in values:
                        env = environment_of(args.setting, value, vendor_answer)
                        got = run_cell(args, value, cell, parties, env, Path(tmp))
                        results.setdefault((*cell, parties), {v: [] for v in values})[value].extend(got)
            print(f"round {r + 1} of {args.rounds} done", file=sys.stderr, flush=True)
    a, b = values
    print(
        f"# {cpu_model()}; --setting {args.setting}: {a} against {b}; emb {args.emb} / hidden {args.hidden}"
        f"{f' / encoder {args.encoder_hidden}' if args.encoder_hidden else ''}, {args.threads} thread(s) per process; "
        f"the median of {args.rounds} round(s) (min - max); decoding sentences/s, training target tokens/s; "
        "faults: minor page faults per step"
    )
    windowed = bool(args.seconds)
    print(
        f"\n| model | vocab | cell | processes at once | {a} | {b} | {b} / {a} | faults {a} -> {b} | same bits |"
        + (f" {args.window:g}-s windows {a}: min / median / max | {b} |" if windowed else "")
    )
    print("|---|---:|---|---:|---:|---:|---:|---:|---|" + ("---:|---:|" if windowed else ""))
    summary = []
    for (name, vocab, cell, parties), by_value in results.items():
        rate = {v: [x["rate"] for x in by_value[v]] for v in values}
        faults = {v: statistics.median(x["faults"] for x in by_value[v]) for v in values}
        same = (
            "n/a (timed by seconds)" if windowed else str(len({x["digest"] for v in values for x in by_value[v]}) == 1)
        )
        ratio = statistics.median(rate[b]) / statistics.median(rate[a])
        line = (
            f"| {DISPLAY_NAMES[name]} | {vocab:,} | {CELLS[cell][0]} | {parties} | {spread(rate[a])} | "
            f"{spread(rate[b])} | {ratio:.3f}x | {faults[a]:,.0f} -> {faults[b]:,.0f} | {same} |"
        )
        if windowed:
            for v in values:
                w = [x for r in by_value[v] for x in r.get("windows", [])] or rate[v]
                line += f" {min(w):,.0f} / {statistics.median(w):,.0f} / {max(w):,.0f} |"
        print(line)
        summary.append(
            {"mechanism": name, "vocab": vocab, "cell": cell, "processes": parties, "ratio": ratio, "runs": by_value}
        )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        settings = {k: v for k, v in vars(args).items() if k not in ("child", "value", "barrier", "parties")}
        args.json.write_text(json.dumps({"settings": settings, "results": summary}, indent=1, default=str))


if __name__ == "__main__":
    main()
