"""The GPU figures of docs/training.md in one run: training throughput and memory for every mechanism,
the compiled recurrence against the eager one, and decoding speed, on Gigaword-shaped data.

Sections (``--sections``, in this order; each row is printed and written to ``--json`` as soon as it
is measured, so a run stopped early keeps what it measured; ``--deadline-s`` skips what is left):

  train    every mechanism x decoder (``--decoders``: each mechanism's own recurrent one, and the
           Transformer decoder for those whose declaration accepts it, ``--decoder-layers`` x
           ``--decoder-heads``, d_model = hidden, as bench_training.py; every one but Read-Again) x
           target vocabulary (``--vocabs``) x size (``--sizes`` EMBxHIDDEN: 150x300
           is CopyNet 5.1's, 512x512 the gigaword ``paper`` preset's) x precision (``--amp``: off =
           float32, bf16 = autocast as train.amp) x batching (``--batch`` sentences, and a token budget
           ``--max-tokens`` as train.max_tokens: padded source + target positions, batched by
           pipeline.vocab.batching.token_batches). Two-phase teacher forcing (the training engine's); with
           ``--stepwise``, the one-step-at-a-time reference too at the first size and batching.
           Figures: target tokens/s of forward + backward + clip + fused Adam step (as
           bench_training.py), ms per step, peak memory allocated on the device (weights, Adam
           state and activations: torch.cuda.max_memory_allocated from before the model is built),
           MFLOP/token (bench_training.flops_per_token: matrix-multiply FLOPs of one float32 forward +
           backward of the batching's first batch, per target token, counted once per mechanism,
           decoder, vocabulary, size and batching on a copy of the model, outside the timed steps;
           cuDNN is off while counting, because FlopCounterMode has no formula for its fused RNN
           kernels; stepwise rows reuse the two-phase count), the achieved TFLOP/s (MFLOP/token x
           tokens/s) and that as a percentage of the bf16 peak.
  compile  ``Seq2Seq.compile_recurrence`` (train.compile) against eager for ``--compile-mechanisms``
           (recurrent decoder) at the largest vocabulary, first size, bf16, batch ``--batch``: tokens/s
           of both, the compile time (the first steps), and the relative difference of the first
           batch's loss.
  decode   every mechanism and decoder at the largest vocabulary and first size: sentences/s of
           greedy and of batched beam search (``--beam``), ``--decode-batch`` sources of 31 tokens at a time, every
           hypothesis decoded for exactly ``--decode-len`` steps (bench_mechanisms.py's fixed
           length: an untrained model would otherwise stop at random lengths), float32 as the
           evaluate stage decodes, and bf16 autocast.

The bf16 peak, the denominator of "% bf16 peak": measured once at the start (bf16_peak_tflops: the
median of 10 products of random bf16 matrices, 8192^3 on CUDA timed with CUDA events, 1024^3 on the
CPU), or ``--peak-tflops`` (e.g. a datasheet figure); both are in the header and the JSON environment.

    python benchmarks/bench_device.py --json out/device.json            # a GPU: every section and decoder, ~5 min on an H100
    python benchmarks/bench_device.py --device cpu --vocabs 1000 --sizes 32x48 --steps 2 --sections train decode
    python -m benchmarks.bench_device --sections train --decoders transformer --batch 64 --max-tokens 16000 \
        --warmup 2 --steps 6 --json out/device_transformer.json    # the Transformer-decoder rows (~1.5 min, H100)

The models are untrained (random init, seeded); these are throughput figures of the implementation.
"""

from __future__ import annotations

import argparse
import copy
import json
import platform
import statistics
import subprocess
import time
from pathlib import Path

import numpy as np
import torch

from benchmarks.bench_mechanisms import NoEarlyEos  # noqa: E402
from benchmarks.bench_training import _sync, batches_for, flops_per_token, train_steps  # noqa: E402
from benchmarks.decoders import DECODERS, add_decoder_args, decoder_sizes, label  # noqa: E402
from benchmarks.decoders import rows as decoder_rows  # noqa: E402
from benchmarks.gigaword_shaped import SRC_LEN, TGT_LEN  # noqa: E402
from models.config import ModelConfig  # noqa: E402
from models.registry import MECHANISMS, build_model, runs_on_backbone  # noqa: E402
from pipeline.decoding.search import beam_search, greedy  # noqa: E402
from pipeline.runtime.device import autocast, resolve_device  # noqa: E402
from pipeline.vocab.batching import token_batches  # noqa: E402

SECTIONS = ("train", "compile", "decode")


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    p.add_argument("--sections", nargs="+", default=list(SECTIONS), choices=SECTIONS)
    own = [m for m in MECHANISMS if not runs_on_backbone(m)]  # backbone_*: benchmarks/bench_backbones.py
    p.add_argument("--mechanisms", nargs="+", default=own, choices=own)
    add_decoder_args(p)
    p.set_defaults(decoders=list(DECODERS))
    p.add_argument("--vocabs", nargs="+", type=int, default=[16000, 50000])
    p.add_argument("--sizes", nargs="+", default=["150x300", "512x512"], help="EMBxHIDDEN")
    p.add_argument("--amp", nargs="+", default=["off", "bf16"], choices=["off", "bf16"])
    p.add_argument("--batch", type=int, default=64, help="sentences per batch")
    p.add_argument("--max-tokens", type=int, default=16000, help="token budget per batch (0: no budget rows)")
    p.add_argument("--steps", type=int, default=10, help="timed optimizer steps per configuration")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--stepwise", action="store_true", help="also time stepwise teacher forcing (first size)")
    p.add_argument("--compile-mechanisms", nargs="+", default=["copynet", "pointer_generator"])
    p.add_argument("--decode-examples", type=int, default=512)
    p.add_argument("--decode-batch", type=int, default=64)
    p.add_argument("--decode-len", type=int, default=10)
    p.add_argument("--beam", type=int, default=10)
    p.add_argument("--device", default="cuda")
    p.add_argument(
        "--peak-tflops", type=float, default=None, help="the bf16 peak (TFLOP/s) of %% bf16 peak (default: measured)"
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--deadline-s", type=float, default=None, help="skip what is left after this many seconds")
    p.add_argument("--json", type=Path, default=None)
    return p.parse_args(argv)


def size_pair(text: str) -> tuple[int, int]:
    emb, hidden = text.lower().split("x")
    return int(emb), int(hidden)


def environment(device: torch.device) -> dict:
    env = {"torch": torch.__version__, "python": platform.python_version(), "cpu": platform.processor()}
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        env.update(
            device=props.name,
            memory_gib=round(props.total_memory / 2**30, 1),
            sms=props.multi_processor_count,
            cuda=torch.version.cuda,
            cudnn=torch.backends.cudnn.version(),
        )
        try:
            env["driver"] = subprocess.run(
                ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                timeout=30,
            ).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            env["driver"] = "unknown"
    else:
        env.update(device="cpu", threads=torch.get_num_threads())
    return env


class Report:
    """Rows printed as Markdown as they come, and the whole run rewritten to ``--json`` after each."""

    def __init__(self, path: Path | None, settings: dict, env: dict):
        self.path, self.data = path, {"settings": settings, "environment": env, "rows": []}
        self.started = time.perf_counter()
        self.headers: set[str] = set()

    def add(self, section: str, row: dict, columns: list[tuple[str, str, str]]) -> None:
        if section not in self.headers:
            self.headers.add(section)
            print(f"\n## {section}\n| " + " | ".join(c[0] for c in columns) + " |", flush=True)
            print("|" + "|".join("---" if c[2] == "s" else "---:" for c in columns) + "|", flush=True)
        print("| " + " | ".join(format(row[key], fmt) for _, key, fmt in columns) + " |", flush=True)
        self.data["rows"].append({"section": section, **row, "elapsed_s": time.perf_counter() - self.started})
        if self.path:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.path.write_text(json.dumps(self.data, indent=1, default=str))


def model_for(
    name: str, vocab: int, emb: int, hidden: int, seed: int, decoder: str = "recurrent", args=None
) -> torch.nn.Module:
    """Mechanism ``name`` on ``decoder`` (``args``: the Transformer decoder's sizes, benchmarks/decoders.py)."""
    torch.manual_seed(seed)
    sizes = decoder_sizes(decoder, args) if decoder != "recurrent" else {}
    return build_model(name, ModelConfig(src_vocab=vocab, tgt_vocab=vocab, emb=emb, hidden=hidden, **sizes))


def budget_batches(vocab_size: int, n: int, max_tokens: int, seed: int) -> tuple[int, list]:
    """n batches of the token budget: Gigaword-shaped rows have 31 + 10 padded positions, so
    pipeline.vocab.batching.token_batches packs max_tokens // 41 sentences into each."""
    lengths = np.full(4096, SRC_LEN), np.full(4096, TGT_LEN + 1)
    per_batch = len(token_batches(*lengths, batch_size=10**9, max_tokens=max_tokens, shuffle=False)[0])
    return per_batch, batches_for(vocab_size, n, per_batch, seed)[1]


def peak_mib(device: torch.device) -> float:
    return torch.cuda.max_memory_allocated(device) / 2**20 if device.type == "cuda" else float("nan")


def bf16_peak_tflops(device: torch.device, n: int | None = None, warmup: int = 5, reps: int = 10) -> float:
    """The device's measured bf16 matrix-product throughput, TFLOP/s: the median of ``reps`` products of
    two random n x n bf16 matrices (n = 8192 on CUDA, 1024 elsewhere so a CPU dry run stays quick),
    after ``warmup`` of them, each timed alone (CUDA events on a GPU, the wall clock elsewhere)."""
    n = n or (8192 if device.type == "cuda" else 1024)
    a, b = (torch.randn(n, n, device=device, dtype=torch.bfloat16) for _ in range(2))
    for _ in range(warmup):
        a @ b
    _sync(device)
    seconds = []
    for _ in range(reps):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            a @ b
            end.record()
            end.synchronize()
            seconds.append(start.elapsed_time(end) / 1e3)
        else:
            t0 = time.perf_counter()
            a @ b
            seconds.append(time.perf_counter() - t0)
    del a, b
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return 2 * n**3 / statistics.median(seconds) / 1e12


def peak_environment(device: torch.device, override: float | None) -> dict:
    """The bf16 peak of "% bf16 peak" for the header and the JSON environment: always measured
    (bf16_peak_tflops), used unless ``override`` (``--peak-tflops``) is given."""
    n = 8192 if device.type == "cuda" else 1024
    measured = float(f"{bf16_peak_tflops(device, n):.4g}")
    return {
        "bf16_peak_measured_tflops": measured,
        "bf16_peak_tflops": override if override else measured,
        "bf16_peak_source": "--peak-tflops" if override else f"measured (median of 10 bf16 {n}^3 products)",
    }


def mflop_per_token(model: torch.nn.Module, batch, device: torch.device) -> float:
    """bench_training.flops_per_token (FlopCounterMode: one float32 forward + backward of ``batch``,
    per target token) on a copy of ``model`` on ``device``, in MFLOP. cuDNN is off while counting:
    FlopCounterMode has no formula for its fused RNN kernels (they would count zero); without it the
    recurrences run as the mm/addmm products that the CPU counts."""
    with torch.backends.cudnn.flags(enabled=False):
        flops = flops_per_token(copy.deepcopy(model).to(device).train(), batch)
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return flops / 1e6


def flop_figures(mflop: float, tok_s: float, peak_tflops: float) -> dict:
    """MFLOP/token, the achieved TFLOP/s (MFLOP/token x tokens/s) and its percentage of the bf16 peak."""
    tflops = mflop * 1e6 * tok_s / 1e12
    return {"mflop_token": mflop, "tflops": tflops, "pct_peak": 100 * tflops / peak_tflops}


def time_training(model, batches: list, args, device: torch.device, amp: str, stepwise: bool = False) -> dict:
    model = model.to(device).train()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, fused=device.type in ("cpu", "cuda"))
    warm, timed = batches[: args.warmup], batches[args.warmup :]
    start = time.perf_counter()
    train_steps(model, optimizer, warm, stepwise, device, amp)
    warm_s = time.perf_counter() - start
    tokens, seconds = train_steps(model, optimizer, timed, stepwise, device, amp)
    return {"tok_s": tokens / seconds, "ms_step": 1000 * seconds / len(timed), "warmup_s": warm_s}


TRAIN_COLUMNS = [
    ("mechanism", "display", "s"),
    ("vocab", "vocab", ",d"),
    ("emb/hidden", "size", "s"),
    ("precision", "precision", "s"),
    ("batch", "batching", "s"),
    ("teacher forcing", "mode", "s"),
    ("target tok/s", "tok_s", ",.0f"),
    ("ms/step", "ms_step", ".1f"),
    ("peak MiB", "peak_mib", ",.0f"),
    ("MFLOP/token", "mflop_token", ",.1f"),
    ("TFLOP/s", "tflops", ".3g"),
    ("% bf16 peak", "pct_peak", ".3g"),
]


def section_train(args, device: torch.device, report: Report, out_of_time) -> None:
    sizes = [size_pair(s) for s in args.sizes]
    n = args.warmup + args.steps
    for vocab_size in args.vocabs:
        batchings = [(f"{args.batch} sent", batches_for(vocab_size, n, args.batch, args.seed)[1])]
        if args.max_tokens:
            per_batch, batches = budget_batches(vocab_size, n, args.max_tokens, args.seed)
            batchings.append((f"{args.max_tokens // 1000}k tok ({per_batch} sent)", batches))
        batchings = [(name, [b.to(device) for b in batches]) for name, batches in batchings]
        for emb, hidden in sizes:
            for name, decoder in decoder_rows(args.mechanisms, args.decoders):
                if out_of_time():
                    return
                base = model_for(name, vocab_size, emb, hidden, args.seed, decoder, args)
                mflop = [mflop_per_token(base, batches[0], device) for _, batches in batchings]
                for amp in args.amp:
                    for b_index, (batching, batches) in enumerate(batchings):
                        modes = ["two-phase"]
                        if args.stepwise and (emb, hidden) == sizes[0] and b_index == 0:
                            modes.append("stepwise")
                        for mode in modes:
                            if out_of_time():
                                return
                            if device.type == "cuda":
                                torch.cuda.empty_cache()
                                torch.cuda.reset_peak_memory_stats(device)
                            row = time_training(copy.deepcopy(base), batches, args, device, amp, mode == "stepwise")
                            row.update(
                                mechanism=name,
                                decoder=decoder,
                                display=label(name, decoder),
                                vocab=vocab_size,
                                size=f"{emb}/{hidden}",
                                precision="bf16" if amp == "bf16" else "fp32",
                                batching=batching,
                                mode=mode,
                                peak_mib=peak_mib(device),
                                **flop_figures(mflop[b_index], row["tok_s"], args.bf16_peak_tflops),
                            )
                            report.add("train", row, TRAIN_COLUMNS)


COMPILE_COLUMNS = [
    ("mechanism", "display", "s"),
    ("eager tok/s", "eager_tok_s", ",.0f"),
    ("compiled tok/s", "compiled_tok_s", ",.0f"),
    ("compiled / eager", "speedup", ".2f"),
    ("compile s", "compile_s", ".1f"),
    ("loss rel. diff", "loss_rel_diff", ".1e"),
]


def section_compile(args, device: torch.device, report: Report, out_of_time) -> None:
    vocab_size, (emb, hidden) = max(args.vocabs), size_pair(args.sizes[0])
    batches = [b.to(device) for b in batches_for(vocab_size, args.warmup + args.steps, args.batch, args.seed)[1]]
    for name in args.compile_mechanisms:
        if out_of_time():
            return
        torch._dynamo.reset()  # compiled code is cached per function: start each mechanism afresh
        base = model_for(name, vocab_size, emb, hidden, args.seed).to(device).train()
        eager, compiled = copy.deepcopy(base), copy.deepcopy(base).compile_recurrence()
        with torch.no_grad(), autocast(device, "bf16"):
            ref, got = eager(batches[0]), compiled(batches[0])  # compiles the forward
        loss_diff = float((got.sum() - ref.sum()).abs() / ref.sum().abs())
        eager_row = time_training(eager, batches, args, device, "bf16")
        compiled_row = time_training(compiled, batches, args, device, "bf16")  # warm-up compiles the backward
        report.add(
            "compile",
            {
                "mechanism": name,
                "display": label(name, "recurrent"),
                "vocab": vocab_size,
                "size": f"{emb}/{hidden}",
                "eager_tok_s": eager_row["tok_s"],
                "compiled_tok_s": compiled_row["tok_s"],
                "speedup": compiled_row["tok_s"] / eager_row["tok_s"],
                "compile_s": compiled_row["warmup_s"],
                "loss_rel_diff": loss_diff,
            },
            COMPILE_COLUMNS,
        )


DECODE_COLUMNS = [
    ("mechanism", "display", "s"),
    ("precision", "precision", "s"),
    ("greedy sent/s", "greedy_sent_s", ",.0f"),
    ("beam sent/s", "beam_sent_s", ",.0f"),
    ("beam ms/batch", "beam_ms_batch", ".1f"),
]


def section_decode(args, device: torch.device, report: Report, out_of_time) -> None:
    vocab_size, (emb, hidden) = max(args.vocabs), size_pair(args.sizes[0])
    n_batches = max(1, args.decode_examples // args.decode_batch)
    batches = [b.to(device) for b in batches_for(vocab_size, n_batches, args.decode_batch, args.seed + 1)[1]]
    for name, decoder in decoder_rows(args.mechanisms, args.decoders):
        model = model_for(name, vocab_size, emb, hidden, args.seed, decoder, args).to(device).eval()
        for amp in args.amp:
            if out_of_time():
                return
            with autocast(device, amp):
                greedy(NoEarlyEos(model), batches[0], max_len=args.decode_len)  # warm-up
                beam_search(model, batches[0], beam_size=args.beam, max_len=2)
                _sync(device)
                start = time.perf_counter()
                for b in batches:
                    greedy(NoEarlyEos(model), b, max_len=args.decode_len)
                _sync(device)
                greedy_s = time.perf_counter() - start
                start = time.perf_counter()
                for b in batches:
                    beam_search(model, b, beam_size=args.beam, max_len=args.decode_len, min_len=args.decode_len)
                _sync(device)
                beam_s = time.perf_counter() - start
            n = n_batches * args.decode_batch
            report.add(
                "decode",
                {
                    "mechanism": name,
                    "decoder": decoder,
                    "display": label(name, decoder),
                    "vocab": vocab_size,
                    "size": f"{emb}/{hidden}",
                    "precision": "bf16" if amp == "bf16" else "fp32",
                    "beam": args.beam,
                    "decode_len": args.decode_len,
                    "greedy_sent_s": n / greedy_s,
                    "beam_sent_s": n / beam_s,
                    "beam_ms_batch": 1000 * beam_s / n_batches,
                },
                DECODE_COLUMNS,
            )


def main(argv=None) -> None:
    args = parse_args(argv)
    device = resolve_device(args.device)
    started = time.perf_counter()

    def out_of_time() -> bool:
        late = args.deadline_s is not None and time.perf_counter() - started > args.deadline_s
        if late:
            print(f"(deadline of {args.deadline_s:.0f} s reached: the rest is skipped)", flush=True)
        return late

    env = {**environment(device), **peak_environment(device, args.peak_tflops)}
    args.bf16_peak_tflops = env["bf16_peak_tflops"]
    print("# " + ", ".join(f"{k} {v}" for k, v in env.items()), flush=True)
    report = Report(args.json, {k: str(v) for k, v in vars(args).items()}, env)
    for section in args.sections:
        {"train": section_train, "compile": section_compile, "decode": section_decode}[section](
            args, device, report, out_of_time
        )
    print(f"\n(total {time.perf_counter() - started:.0f} s)", flush=True)


if __name__ == "__main__":
    main()
