"""Training throughput per mechanism: stepwise teacher forcing (the output layer once per target
position, through ``Seq2Seq.step``) against two-phase teacher forcing (the recurrence first, then the
output layer on all B x T positions at once), at several target vocabulary sizes, with the fraction
of the machine's measured GEMM throughput each reaches.

For every vocabulary size V: Gigaword-shaped batches (benchmarks/gigaword_shaped.py: sources of 31
tokens, targets of 9, Zipfian words, half of each target copied from its source; words beyond the
V - 4 most frequent are out of vocabulary, so the extended vocabulary is in play), then for every
mechanism two identically seeded models, one per mode, trained on the same batches with Adam
(fused, as pipeline.training.loop), gradient clipping at 5; timed blocks of the two modes alternate, so a
drift in machine speed hits both. Figures:

  tok/s            target tokens (with </s>, without padding) per second of forward + backward +
                   clip + optimizer step
  MFLOP/token      matrix-multiply FLOPs (torch.utils.flop_counter: mm, addmm, bmm, the RNN cells'
                   products) of one forward + backward, per target token
  GEMM GFLOP/s     the best single-thread float32 matrix product measured in the same run (1024^3 and
                   the output layer's own (B*T, H) x (H, V) shape)
  limit            GEMM GFLOP/s / MFLOP per token: the tokens/s if every FLOP ran at GEMM speed
  % limit          tok/s / limit

    .venv/bin/python benchmarks/bench_training.py                       # 1k, 16k, 50k; ~10 min, 1 thread
    .venv/bin/python benchmarks/bench_training.py --vocabs 16000 --mechanisms copynet pointer_generator
    .venv/bin/python benchmarks/bench_training.py --device cuda --threads 0 --steps 20   # a GPU (bf16 autocast)
    .venv/bin/python benchmarks/bench_training.py --math-pins compare --vocabs 1000 --emb 64 --hidden 128 --batch 32 \
        --threads 1 --clock cpu --steps 16     # on a shared machine: CPU seconds, not the wall clock
    .venv/bin/python benchmarks/bench_training.py --vocabs 16000 50000 --mechanisms copynet pointer_generator \
        --decoders recurrent transformer      # Transformer-decoder rows beside the recurrent ones

``--decoders``: a row per mechanism and decoder (benchmarks/decoders.py; Read-Again has no Transformer
row). On the Transformer decoder "stepwise" is ``Seq2Seq.step`` through the key/value cache, as
search runs it, and "two-phase" the one parallel pass (CopyNet's teacher forcing steps there too:
its selective read feeds each step's copy scores to the next, docs/design.md).

``--math-pins compare``: the cost of pipeline.runtime.math_pins. The same measurement in four fresh
processes, alternately without and with the pins (off, on, off, on: the variables in their
environment and MKL's vendor answer preloaded, as a stage process has them; the libraries read
them once, at load), each process timing every mechanism; then each mechanism's two-phase tokens/s
without and with the pins (the mean of its two processes) and their ratio.
"""

from __future__ import annotations

import os

os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")  # as flows/__init__.py sets it for the pipeline

import argparse  # noqa: E402
import copy  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

from benchmarks.decoders import add_decoder_args, decoder_sizes, label  # noqa: E402
from benchmarks.decoders import rows as decoder_rows  # noqa: E402
from benchmarks.gigaword_shaped import sample_pairs, words  # noqa: E402
from models.config import ModelConfig  # noqa: E402
from models.registry import MECHANISMS, build_model, runs_on_backbone  # noqa: E402
from pipeline.runtime import mkl_vendor  # noqa: E402
from pipeline.runtime.device import autocast, resolve_device  # noqa: E402
from pipeline.runtime.math_pins import PINS, cpu_model  # noqa: E402
from pipeline.vocab.batching import collate  # noqa: E402
from pipeline.vocab.vocabulary import SPECIALS, Vocab  # noqa: E402


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    own = [m for m in MECHANISMS if not runs_on_backbone(m)]  # backbone_*: benchmarks/bench_backbones.py
    p.add_argument("--mechanisms", nargs="+", default=own, choices=own)
    p.add_argument(
        "--vocabs", nargs="+", type=int, default=[1000, 16000, 50000], help="target (and source) vocabulary sizes"
    )
    p.add_argument("--emb", type=int, default=150)
    p.add_argument("--hidden", type=int, default=300)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--steps", type=int, default=8, help="timed steps per mode (two alternating blocks)")
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (0: torch's default)")
    p.add_argument("--device", default="cpu", help="cpu | cuda | auto")
    p.add_argument("--seed", type=int, default=0)
    add_decoder_args(p)
    p.add_argument("--json", type=Path, default=None, help="also write the results here")
    p.add_argument(
        "--clock",
        choices=["wall", "cpu"],
        default="wall",
        help="cpu: seconds of this process's CPU time (time.process_time), which other jobs on a loaded "
        "machine change far less than the wall clock; use with --threads 1",
    )
    p.add_argument(
        "--math-pins",
        choices=["as-is", "compare"],
        default="as-is",
        help="compare: tokens/s without and with pipeline.runtime.math_pins.PINS, in alternating fresh processes",
    )
    return p.parse_args(argv)


def compare_math_pins(argv: list[str], args: argparse.Namespace) -> None:
    """Run this benchmark in fresh processes without / with the pins (off, on, off, on) and print
    each mechanism's two-phase tokens/s both ways and the ratio."""
    import subprocess
    import tempfile

    rest = [a for i, a in enumerate(argv) if a != "--math-pins" and (i == 0 or argv[i - 1] != "--math-pins")]
    rates: dict[tuple[str, str, int], dict[str, list[float]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        vendor_answer = mkl_vendor.build(1)  # the pins' answer to MKL's vendor check (math_pins)
        if vendor_answer is None:
            raise SystemExit("--math-pins compare needs a C compiler (cc) to build MKL's vendor answer")
        for i, pinned in enumerate((False, True, False, True)):
            env = {k: v for k, v in os.environ.items() if k not in {*PINS, "LD_PRELOAD"}}
            if pinned:  # as a pinned stage process: the variables, and the answer loaded before torch
                env.update(PINS, LD_PRELOAD=str(vendor_answer))
            out = Path(tmp) / f"{i}.json"
            subprocess.run([sys.executable, __file__, *rest, "--json", str(out)], env=env, check=True)
            for row in json.loads(out.read_text())["results"]:
                key = (row["mechanism"], row["decoder"], row["vocab"])
                rates.setdefault(key, {"off": [], "on": []})["on" if pinned else "off"].append(row["two_phase_tok_s"])
    print(f"\n## math pins: {' '.join(f'{k}={v}' for k, v in PINS.items())} ({cpu_model()})")
    print(
        "| mechanism | vocabulary | two-phase tok/s unpinned | pinned | pinned / unpinned |\n|---|---:|---:|---:|---:|"
    )
    summary = []
    for (name, decoder, vocab), r in rates.items():
        off, on = sum(r["off"]) / len(r["off"]), sum(r["on"]) / len(r["on"])
        summary.append(
            {
                "mechanism": name,
                "decoder": decoder,
                "vocab": vocab,
                "unpinned_tok_s": off,
                "pinned_tok_s": on,
                "ratio": on / off,
            }
        )
        print(f"| {label(name, decoder)} | {vocab:,} | {off:,.0f} | {on:,.0f} | {on / off:.2f} |")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(
            json.dumps({"settings": vars(args), "pins": PINS, "results": summary}, indent=2, default=str)
        )


def batches_for(vocab_size: int, n: int, batch: int, seed: int) -> tuple[Vocab, list]:
    """n collated Gigaword-shaped batches; words past the V - 4 most frequent are OOV."""
    pool = words(int(vocab_size * 1.1))
    vocab = Vocab(list(SPECIALS) + pool[: vocab_size - len(SPECIALS)], [0] * len(SPECIALS) + [1] * (vocab_size - 4))
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        src, tgt = sample_pairs(rng, batch, len(pool))
        out.append(
            collate([[pool[i] for i in row] for row in src], [[pool[i] for i in row] for row in tgt], vocab, vocab)
        )
    return vocab, out


def gemm_gflops(device: torch.device, shapes: list[tuple[int, int, int]]) -> float:
    """Best float32 matrix-product throughput over the shapes, GFLOP/s."""
    best = 0.0
    for m, k, n in shapes:
        a, b = torch.randn(m, k, device=device), torch.randn(k, n, device=device)
        for _ in range(2):
            a @ b
        reps = 5
        _sync(device)
        start = time.perf_counter()
        for _ in range(reps):
            a @ b
        _sync(device)
        best = max(best, 2 * m * k * n * reps / (time.perf_counter() - start) / 1e9)
    return best


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}


def train_steps(
    model, optimizer, batches, stepwise: bool, device: torch.device, amp: str = "auto", clock: str = "wall"
) -> tuple[int, float]:
    """(target tokens, seconds) of one optimizer step per batch (``amp`` as train.amp; ``clock``:
    wall-clock or this process's CPU seconds)."""
    now = CLOCKS[clock]
    tokens = 0
    _sync(device)
    start = now()
    for batch in batches:
        with autocast(device, amp):
            gold = model(batch, stepwise=stepwise)
        n = batch.n_tokens
        loss = -gold.sum() / n
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
        optimizer.step()
        tokens += n
    _sync(device)
    return tokens, now() - start


def flops_per_token(model, batch) -> float:
    counter = FlopCounterMode(display=False)
    with counter:
        (-model(batch).sum()).backward()
    model.zero_grad(set_to_none=True)
    return counter.get_total_flops() / batch.n_tokens


def bench_mechanism(
    name: str, vocab: Vocab, batches: list, args, device: torch.device, decoder: str = "recurrent"
) -> dict:
    cfg = ModelConfig(
        src_vocab=len(vocab), tgt_vocab=len(vocab), emb=args.emb, hidden=args.hidden, **decoder_sizes(decoder, args)
    )
    torch.manual_seed(args.seed)
    base = build_model(name, cfg).to(device).train()
    models = {mode: copy.deepcopy(base) for mode in ("stepwise", "two_phase")}
    optims = {mode: torch.optim.Adam(m.parameters(), lr=1e-3, fused=True) for mode, m in models.items()}
    warm, timed = batches[: args.warmup], batches[args.warmup :]
    half = len(timed) // 2
    totals = {mode: [0, 0.0] for mode in models}
    for mode in models:
        train_steps(models[mode], optims[mode], warm, mode == "stepwise", device)
    for block in (timed[:half], timed[half:]):  # alternate: stepwise, two-phase, stepwise, two-phase
        for mode in models:
            tokens, seconds = train_steps(
                models[mode], optims[mode], block, mode == "stepwise", device, clock=args.clock
            )
            totals[mode][0] += tokens
            totals[mode][1] += seconds
    flops = flops_per_token(copy.deepcopy(base), timed[0])
    rate = {mode: tokens / seconds for mode, (tokens, seconds) in totals.items()}
    return {
        "mechanism": name,
        "decoder": decoder,
        "vocab": len(vocab),
        "mflop_per_token": flops / 1e6,
        "stepwise_tok_s": rate["stepwise"],
        "two_phase_tok_s": rate["two_phase"],
        "speedup": rate["two_phase"] / rate["stepwise"],
        "seconds": {m: s for m, (_, s) in totals.items()},
        "tokens": {m: t for m, (t, _) in totals.items()},
    }


def main(argv=None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    if args.math_pins == "compare":
        return compare_math_pins(argv, args)
    device = resolve_device(args.device)
    if args.threads:
        torch.set_num_threads(args.threads)
    header = {
        "device": str(device) if device.type == "cpu" else torch.cuda.get_device_name(device),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "cpu": platform.processor() or platform.machine(),
        "emb": args.emb,
        "hidden": args.hidden,
        "batch": args.batch,
        "decoders": "/".join(args.decoders),
        **(
            {"decoder_layers": args.decoder_layers, "decoder_heads": args.decoder_heads}
            if "transformer" in args.decoders
            else {}
        ),
        "load_avg": os.getloadavg()[0],
        "thp": os.environ.get("THP_MEM_ALLOC_ENABLE"),
    }
    print("# " + ", ".join(f"{k} {v}" for k, v in header.items()), flush=True)
    results = []
    for size in args.vocabs:
        vocab, batches = batches_for(size, args.warmup + args.steps, args.batch, args.seed)
        gemm = gemm_gflops(device, [(1024, 1024, 1024), (args.batch * 10, args.hidden, size)])
        print(
            f"\n## target vocabulary {size}: GEMM {gemm:.1f} GFLOP/s (float32, best of 1024^3 and "
            f"{args.batch * 10}x{args.hidden}x{size})",
            flush=True,
        )
        print(
            "| mechanism | MFLOP/token | limit tok/s | stepwise tok/s | two-phase tok/s | two-phase / stepwise "
            "| stepwise % limit | two-phase % limit |\n|---|---:|---:|---:|---:|---:|---:|---:|",
            flush=True,
        )
        for name, decoder in decoder_rows(args.mechanisms, args.decoders):
            row = bench_mechanism(name, vocab, batches, args, device, decoder)
            row["gemm_gflops"] = gemm
            row["limit_tok_s"] = gemm * 1e9 / (row["mflop_per_token"] * 1e6)
            for mode in ("stepwise", "two_phase"):
                row[f"{mode}_fraction"] = row[f"{mode}_tok_s"] / row["limit_tok_s"]
            results.append(row)
            print(
                f"| {label(name, decoder)} | {row['mflop_per_token']:.1f} | {row['limit_tok_s']:.0f} | "
                f"{row['stepwise_tok_s']:.0f} | {row['two_phase_tok_s']:.0f} | {row['speedup']:.2f}x | "
                f"{100 * row['stepwise_fraction']:.0f}% | {100 * row['two_phase_fraction']:.0f}% |",
                flush=True,
            )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(
            json.dumps(
                {"settings": {**vars(args), "json": str(args.json)}, "environment": header, "results": results},
                indent=2,
                default=str,
            )
        )


if __name__ == "__main__":
    main()
