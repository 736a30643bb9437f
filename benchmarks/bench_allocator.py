"""glibc's malloc as the pipeline sets it in a process that decodes (``math_pins.keep_freed_memory``:
freed blocks up to 32 MiB reused, up to 256 MiB of free heap kept; the evaluate stage, predict, the
server) against glibc's own defaults (``COPYSEQ_MALLOC=system``): decoding sentences/s, and training
tokens/s under the same setting (the reason training processes keep the defaults), page faults per
step, and whether every output is the same bit for bit.

    python -m benchmarks.bench_allocator                       # ~7 minutes on one core
    python -m benchmarks.bench_allocator --vocabs 50000 --cells greedy

The allocator is set once per process (glibc cannot go back to its adaptive default), so the two
settings run in fresh processes, alternately (kept, system, kept, system, ...; ``--rounds`` each),
every process pinned as a stage is (the math pins and MKL's vendor answer), one thread, and each
process does one thing, as an evaluate stage or a server decodes with one search setting: one model
(CopyNet or the pointer-generator with coverage, seeded; emb 150, hidden 300, encoder 150 per
direction, as benchmarks/bench_vs_onmt.py) and one cell: beam 10 one sentence at a time, beam 10 or
greedy 64 at a time (Gigaword-shaped sources, every output 16 tokens, after one warm-up batch), or
``--steps`` training steps of 64 pairs (after 2). Printed: the median of the rounds, the ratio
kept / defaults, minor page faults per decoding or training step, and whether every hypothesis (ids
and score) or the trained weights are the same under both settings.
"""

from __future__ import annotations

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

CELLS = {  # name -> (what runs, sentences per batch)
    "beam1": ("beam 10, one at a time", 1),
    "beam64": ("beam 10, 64 at a time", 64),
    "greedy": ("greedy, 64 at a time", 64),
    "training": ("training", 64),
}


def child(args: argparse.Namespace) -> dict:
    """One model, one cell, in this fresh process: {"rate": units/s, "faults": per step, "digest"}."""
    from pipeline.runtime.math_pins import keep_freed_memory, pin_math_libraries

    pin_math_libraries()
    kept = keep_freed_memory()  # as pin_entry_point sets it in a decoding process (not under COPYSEQ_MALLOC=system)
    import torch

    from benchmarks.bench_training import batches_for, train_steps
    from models.config import ModelConfig
    from models.registry import build_model
    from pipeline.decoding import search

    torch.set_num_threads(1)
    (vocab,), (name,), (cell,) = args.vocabs, args.mechanisms, args.cells
    size = CELLS[cell][1]
    _, batches = batches_for(vocab, {"beam1": args.single, "training": args.steps}.get(cell, 2) + 1, size, 1)
    torch.manual_seed(0)
    cfg = ModelConfig(src_vocab=vocab, tgt_vocab=vocab, emb=150, hidden=300, encoder_hidden=150)
    model = build_model(name, cfg)
    digest = hashlib.sha256()
    if cell == "training":
        optimizer = torch.optim.Adam(model.train().parameters(), lr=1e-3, fused=True)
        train_steps(model, optimizer, batches[:1], False, torch.device("cpu"))  # warm-up
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        tokens, seconds = train_steps(model, optimizer, batches[1:], False, torch.device("cpu"))
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
        digest.update(b"".join(p.detach().numpy().tobytes() for p in model.parameters()))
        return {"rate": tokens / seconds, "faults": faults / args.steps, "digest": digest.hexdigest(), "kept": kept}
    model.eval()

    def decode(batches: list) -> list:
        if cell == "greedy":
            return [[(h.ids, h.score) for h in search.greedy(model, b, 16, min_len=16)] for b in batches]
        found = [search.beam_search(model, b, beam_size=10, max_len=16, min_len=16) for b in batches]
        return [[[(h.ids, h.score) for h in nbest] for nbest in nbests] for nbests in found]

    decode(batches[:1])  # warm-up: the kept weight copies
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    start = time.perf_counter()
    hyps = decode(batches[1:])
    seconds = time.perf_counter() - start
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
    digest.update(json.dumps(hyps).encode())
    sentences = size * (len(batches) - 1)
    per_step = faults / (16 * (len(batches) - 1))
    return {"rate": sentences / seconds, "faults": per_step, "digest": digest.hexdigest(), "kept": kept}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--vocabs", nargs="+", type=int, default=[16000, 50000])
    p.add_argument("--mechanisms", nargs="+", default=["copynet", "pointer_generator"])
    p.add_argument("--cells", nargs="+", default=list(CELLS), choices=list(CELLS))
    p.add_argument("--steps", type=int, default=8, help="timed training steps of 64 pairs")
    p.add_argument("--single", type=int, default=8, help="sentences decoded one at a time")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--child", type=Path, default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        args.child.write_text(json.dumps(child(args)))
        return
    from pipeline.runtime.math_pins import cpu_model

    settings = ("kept", "system")
    runs: dict[tuple, dict[str, list[dict]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "cell.json"
        for i in range(args.rounds):
            for vocab in args.vocabs:
                for name in args.mechanisms:
                    for cell in args.cells:
                        for setting in settings:
                            env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
                            env.pop("COPYSEQ_MALLOC", None)
                            if setting == "system":
                                env["COPYSEQ_MALLOC"] = "system"
                            own = ["--vocabs", str(vocab), "--mechanisms", name, "--cells", cell]
                            own += ["--steps", str(args.steps), "--single", str(args.single), "--child", str(out)]
                            subprocess.run(
                                [sys.executable, "-m", "benchmarks.bench_allocator", *own], env=env, check=True
                            )
                            result = json.loads(out.read_text())
                            if result["kept"] != (setting == "kept"):  # e.g. not glibc, or MALLOC_ set by hand
                                raise SystemExit(f"the {setting} process did not run with that setting: {result}")
                            runs.setdefault((name, vocab, cell), {s: [] for s in settings})[setting].append(result)
            print(f"round {i + 1} done", file=sys.stderr, flush=True)
    print(f"{cpu_model()}, 1 thread, pinned; median of {args.rounds} processes per setting, one cell each")
    print("units: decoding sentences/s, training target tokens/s; faults: minor page faults per step\n")
    print(
        "| model | vocab | cell | glibc defaults | kept (shipped) | kept / defaults | faults defaults -> kept | same bits |"
    )
    print("|---|---:|---|---:|---:|---:|---:|---|")
    for (name, vocab, cell), r in runs.items():
        rate = {s: statistics.median(x["rate"] for x in r[s]) for s in settings}
        faults = {s: statistics.median(x["faults"] for x in r[s]) for s in settings}
        same = len({x["digest"] for s in settings for x in r[s]}) == 1
        print(
            f"| {name} | {vocab:,} | {CELLS[cell][0]} | {rate['system']:,.1f} | {rate['kept']:,.1f} | "
            f"{rate['kept'] / rate['system']:.3f}x | {faults['system']:,.0f} -> {faults['kept']:,.0f} | {same} |"
        )


if __name__ == "__main__":
    main()
