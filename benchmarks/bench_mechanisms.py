"""Throughput of the project's mechanisms: training target tokens/s and decoding sentences/s, on the CPU
or a GPU, for every mechanism of models.MECHANISMS (each with its own default options) on its own
recurrent decoder and on the Transformer decoder. One script for every such figure; the options say
what varies, and every combination is a row:

  --sections     train: timed optimizer steps; decode: greedy, batched beam and one-at-a-time beam
                 search of untrained models, every hypothesis exactly --decode-len steps long
  --data         rules: CopyNet's rule task (60 rules x 40 instances, the 1,000-symbol alphabet;
                 vocabulary 1,004 ids; sources of 19 tokens on average, up to 40); gigaword:
                 Gigaword-shaped pairs (benchmarks/gigaword_shaped.py: --src-len 31 / --tgt-len 9
                 tokens, Zipfian words, half of each target copied from its source) at each of
                 --vocabs V (words past the V - 4 most frequent are out of vocabulary: copied)
  --mechanisms   registry names, and copynet_no_selective_read: CopyNet without eq. 9's selective
                 read (what keeping it costs on the Transformer decoder, where it forces teacher
                 forcing through the key/value cache one position at a time; a benchmark row only)
  --decoders     recurrent, transformer (--decoder-layers x --decoder-heads, d_model = hidden)
  --sizes        EMBxHIDDEN, one row each (150x300: CopyNet 5.1's sizes; 512x512: the gigaword
                 `paper` preset's)
  --amp          precisions: off (float32), bf16 (autocast, as train.amp), auto (bf16 on CUDA only)
  --batch, --max-tokens   batchings: --batch sentences, and a token budget of --max-tokens padded
                 positions (as train.max_tokens; gigaword only), of fixed-shape pairs or, with
                 --budget-lengths varied, of sources of 10-60 and targets of 3-24 tokens (several
                 batch shapes)
  --modes        how a training step runs; the modes are timed from the same weights on the same
                 batches, in --rounds alternating blocks (a drift in machine speed hits all):
                   two-phase  the training engine: the recurrence, then the output layer on all
                              B x T positions at once
                   stepwise   the output layer once per target position (Seq2Seq.step), the
                              reference two-phase is tested against
                   compiled   train.compile: the recurrence's step and the output layer compiled
                   graphed    train.cuda_graphs: the recurrence replayed from CUDA graphs, each
                              batch padded to its shape bucket in the timed step (on the CPU the
                              arm runs eagerly: a smoke run)

Training figures, per row: target tokens (with </s>, without padding) per second of forward +
backward + clipping at 5 + fused Adam step, on batches collated and moved to the device before
timing, after --warmup steps (with `graphed`: a warm-up pass over every batch, which captures the
graphs); the ratio to the first mode; ms per step; the warm-up's seconds (compiling and capturing
included); peak device memory (torch.cuda.max_memory_allocated after the mode's warm-up: weights,
Adam state, activations); MFLOP/token (matrix-multiply FLOPs of one float32 forward + backward of
the first batch, torch.utils.flop_counter, cuDNN off while counting); TFLOP/s (MFLOP/token x
tokens/s) and its share of the peak: on the CPU the float32 matrix-product speed at --threads (the
best of 1024^3 and the output layer's own shape, measured in the same run), on CUDA the bf16 peak
(8192^3), or --peak-tflops. compiled and graphed also give the relative difference of the first
batch's float32 loss (TF32 off) against eager from the same weights; graphed the graphs captured
and their capture seconds.

Decoding figures, per row: sentences/s of greedy and of beam search (--beam) over --decode-examples
sources in batches of --decode-batch, and of the beam one source at a time over the first
--single-examples; their ratio; ms per beam batch; the mean greedy length; and the share of the
one-at-a-time sources whose best hypothesis is the same batched and alone (1.0 expected in
float32). Every hypothesis is decoded for exactly --decode-len steps (min_len = max_len), so
untrained models of different mechanisms do the same work; --decode-len 0 decodes freely.

    python -m benchmarks.bench_mechanisms                       # every mechanism, rule data, train + decode
    python -m benchmarks.bench_mechanisms --data gigaword --vocabs 1000 16000 50000 --sections train \\
        --modes stepwise two-phase                              # near the hardware limit? (one thread)
    python -m benchmarks.bench_mechanisms --device cuda --data gigaword --amp off bf16 --max-tokens 16000
    python -m benchmarks.bench_mechanisms --data gigaword --sections train --steps 3 --warmup 1 \\
        --vocabs 1000 --sizes 16x24 --batch 8 --mechanisms copynet   # a smoke run (seconds)

The header gives the device, torch, the threads, the peak and the load average; --json PATH writes
the settings, the environment and every row, rewritten after each; --deadline-s skips what is left.
"""

from __future__ import annotations

import os

os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")  # as flows/__init__.py sets it for the pipeline

import argparse  # noqa: E402
import copy  # noqa: E402
import random  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402

from benchmarks.throughput import (  # noqa: E402
    VARIANTS,
    Report,
    add_decoder_args,
    batches_for,
    budget_sentences,
    build_row_model,
    collate_pairs,
    decoder_sizes,
    device_or_exit,
    environment,
    gemm_tflops,
    gigaword_pairs,
    label,
    mflop_per_token,
    own_mechanisms,
    peak_environment,
    rows,
    rule_data,
    size_pair,
    sync,
    train_steps,
    varied_budget_batches,
)
from models.graphed import bucket_shape  # noqa: E402
from pipeline.decoding.search import beam_search, greedy  # noqa: E402
from pipeline.runtime.device import autocast  # noqa: E402

SCRIPT = "bench_mechanisms.py"
SECTIONS = ("train", "decode")
MODES = ("two-phase", "stepwise", "compiled", "graphed")
CHECKED = ("compiled", "graphed")  # modes whose first loss is compared with eager's


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    p.add_argument("--sections", nargs="+", default=list(SECTIONS), choices=SECTIONS)
    names = own_mechanisms() + list(VARIANTS)
    p.add_argument(
        "--mechanisms", nargs="+", default=own_mechanisms(), choices=names, metavar="NAME", help=" ".join(names)
    )
    add_decoder_args(p)
    p.add_argument("--data", default="rules", choices=["rules", "gigaword"])
    p.add_argument("--vocabs", nargs="+", type=int, default=None, help="gigaword: vocabulary sizes (default 16000)")
    p.add_argument("--src-len", type=int, default=31, help="gigaword: source tokens")
    p.add_argument("--tgt-len", type=int, default=9, help="gigaword: target tokens (</s> comes on top)")
    p.add_argument("--sizes", nargs="+", default=["150x300"], help="EMBxHIDDEN, a row each")
    p.add_argument("--amp", nargs="+", default=["auto"], choices=["auto", "off", "bf16"], help="a row each")
    p.add_argument("--batch", type=int, default=64, help="sentences per training batch")
    p.add_argument("--max-tokens", type=int, default=0, help="gigaword: also a token-budget batching (0: none)")
    p.add_argument("--budget-lengths", default="fixed", choices=["fixed", "varied"])
    p.add_argument("--modes", nargs="+", default=["two-phase"], choices=MODES, help="the first is the baseline")
    p.add_argument("--steps", type=int, default=20, help="timed training steps per mode")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps per mode first")
    p.add_argument("--rounds", type=int, default=2, help="alternating timed blocks the steps are cut into")
    p.add_argument("--batches", type=int, default=0, help="distinct training batches, cycled (0: one per step)")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument(
        "--clock",
        choices=["wall", "cpu"],
        default="wall",
        help="cpu: this process's CPU seconds (time.process_time), which other jobs on a loaded machine "
        "change far less than the wall clock; with --threads 1",
    )
    p.add_argument("--decode-examples", type=int, default=256)
    p.add_argument("--decode-batch", type=int, default=64)
    p.add_argument("--single-examples", type=int, default=64, help="decoded one at a time too (0: none)")
    p.add_argument("--beam", type=int, default=10)
    p.add_argument("--decode-len", type=int, default=16, help="steps of every hypothesis (0: free decoding)")
    p.add_argument("--max-len", type=int, default=40, help="length limit of free decoding")
    p.add_argument("--device", default="auto", help="auto (CUDA when present) | cpu | cuda | cuda:N")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: 1 on the CPU, 0 on CUDA)")
    p.add_argument("--peak-tflops", type=float, default=None, help="the peak of %% peak (default: measured)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--deadline-s", type=float, default=None, help="skip what is left after this many seconds")
    p.add_argument("--json", type=Path, default=None, help="also write the settings and rows here")
    args = p.parse_args(argv)
    wrong = []
    if args.data == "rules":
        if args.vocabs or args.max_tokens:
            wrong.append("--vocabs and --max-tokens are for --data gigaword (the rule task has 1,004 ids)")
    elif not args.vocabs:
        args.vocabs = [16000]
    for text in args.sizes:
        try:
            size_pair(text)
        except ValueError:
            wrong.append(f"--sizes {text!r}: it must be EMBxHIDDEN, e.g. 150x300")
    if min(args.steps, args.rounds) < 1 or args.warmup < 0 or args.steps < args.rounds:
        wrong.append(
            f"--steps {args.steps} / --rounds {args.rounds} / --warmup {args.warmup}: need steps >= rounds >= 1"
        )
    if len(set(args.modes)) < len(args.modes):
        wrong.append(f"--modes {' '.join(args.modes)}: each mode once")
    if wrong:
        print(f"{SCRIPT}: {'; '.join(wrong)}", file=sys.stderr)
        raise SystemExit(2)
    return args


# --------------------------------------------------------------------------------------------
# Training
# --------------------------------------------------------------------------------------------
def training_batchings(args, vocab_size: int | None, device: torch.device) -> tuple[int, list[tuple[str, list]]]:
    """(vocabulary size, [(batching name, batches on the device)]) of one vocabulary."""
    n = args.batches or args.steps
    if args.data == "rules":
        train_pairs, _, vocab = rule_data(args.seed)
        rng = random.Random(args.seed)
        batches = [collate_pairs(rng.sample(train_pairs, args.batch), vocab) for _ in range(n)]
        batchings = [(f"{args.batch} sent", batches)]
    else:
        vocab, batches = batches_for(vocab_size, n, args.batch, args.seed, args.src_len, args.tgt_len)
        batchings = [(f"{args.batch} sent", batches)]
        if args.max_tokens:
            budget = f"{args.max_tokens / 1000:g}k tok"
            if args.budget_lengths == "varied":
                batchings.append(
                    (budget + " (varied)", varied_budget_batches(vocab_size, n, args.max_tokens, args.seed))
                )
            else:
                per_batch = budget_sentences(args.max_tokens, args.src_len, args.tgt_len)
                sized = batches_for(vocab_size, n, per_batch, args.seed, args.src_len, args.tgt_len)[1]
                batchings.append((f"{budget} ({per_batch} sent)", sized))
    return len(vocab), [(name, [b.to(device) for b in batches]) for name, batches in batchings]


def prepare(mode: str, base, device: torch.device, lr: float):
    model = copy.deepcopy(base).to(device).train()
    if mode == "compiled":
        model.compile_recurrence()
    elif mode == "graphed":
        model.graph_recurrence()
    return model, torch.optim.Adam(model.parameters(), lr=lr, fused=device.type in ("cpu", "cuda"))


def first_loss_difference(base, batch, mode: str, device: torch.device) -> float:
    """Relative difference of the first batch's float32 loss (TF32 off), ``mode`` against eager, from
    the same weights, on copies of ``base``."""
    allow = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        values = []
        for arm in ("two-phase", mode):
            model, _ = prepare(arm, base, device, 0.0)
            padded = batch.padded(*bucket_shape(batch)) if arm == "graphed" else batch
            torch.manual_seed(0)
            values.append(float(-model(padded).detach().sum() / batch.n_tokens))
        return abs(values[1] - values[0]) / abs(values[0])
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = allow


def time_modes(base, batches: list, args, device: torch.device, amp: str) -> dict[str, dict]:
    """Every mode from copies of ``base``: a warm-up each, then the timed steps in alternating blocks."""
    graphs = "graphed" in args.modes
    options = {"amp": amp, "bucketed": False, "cache": not graphs}  # the same autocast for every mode
    warm = [batches[i % len(batches)] for i in range(max(args.warmup, len(batches) if graphs else 0))]
    arms = {}
    for mode in args.modes:
        if device.type == "cuda":
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(device)
        model, opt = prepare(mode, base, device, args.lr)
        mode_options = {**options, "bucketed": mode == "graphed"}
        start = time.perf_counter()
        train_steps(model, opt, warm, mode == "stepwise", device, **mode_options)
        arms[mode] = {
            "model": model,
            "opt": opt,
            "options": mode_options,
            "warmup_s": time.perf_counter() - start,
            "peak_mib": torch.cuda.max_memory_allocated(device) / 2**20 if device.type == "cuda" else None,
            "tokens": 0,
            "seconds": 0.0,
        }
    cuts = [args.steps * r // args.rounds for r in range(args.rounds + 1)]
    for lo, hi in zip(cuts, cuts[1:]):
        block = [batches[i % len(batches)] for i in range(lo, hi)]
        for mode, arm in arms.items():
            tokens, seconds = train_steps(
                arm["model"], arm["opt"], block, mode == "stepwise", device, clock=args.clock, **arm["options"]
            )
            arm["tokens"] += tokens
            arm["seconds"] += seconds
    out = {}
    for mode, arm in arms.items():
        row = {
            "mode": mode,
            "tok_s": arm["tokens"] / arm["seconds"],
            "ms_step": 1000 * arm["seconds"] / args.steps,
            "warmup_s": arm["warmup_s"],
            "peak_mib": arm["peak_mib"],
            "tokens": arm["tokens"],
            "seconds": arm["seconds"],
        }
        if mode == "graphed":
            graphed = arm["model"].__dict__["_graphed"]
            row.update(graphs=len(graphed.graphs), capture_s=graphed.capture_seconds)
        out[mode] = row
    first = out[args.modes[0]]["tok_s"]
    for row in out.values():
        row["x_first"] = row["tok_s"] / first
    return out


def train_columns(args) -> list[tuple[str, str, str]]:
    columns = [
        ("mechanism", "display", "s"),
        ("vocab", "vocab", ",d"),
        ("emb/hidden", "size", "s"),
        ("precision", "precision", "s"),
        ("batch", "batching", "s"),
        ("mode", "mode", "s"),
        ("params", "parameters", ",d"),
        ("target tok/s", "tok_s", ",.0f"),
        (f"/ {args.modes[0]}", "x_first", ".2f"),
        ("ms/step", "ms_step", ",.1f"),
        ("warm-up s", "warmup_s", ".1f"),
        ("peak MiB", "peak_mib", ",.0f"),
        ("MFLOP/token", "mflop_token", ",.1f"),
        ("TFLOP/s", "tflops", ".3g"),
        ("% peak", "pct_peak", ".3g"),
    ]
    if set(CHECKED) & set(args.modes):
        columns.append(("loss rel. diff", "loss_rel_diff", ".1e"))
    if "graphed" in args.modes:
        columns += [("graphs", "graphs", "d"), ("capture s", "capture_s", ".1f")]
    return columns


def section_train(args, device: torch.device, report: Report, out_of_time) -> None:
    columns = train_columns(args)
    peaks: dict[tuple, float] = {}
    for vocab_size in args.vocabs or [None]:
        vocab, batchings = training_batchings(args, vocab_size, device)
        for emb, hidden in map(size_pair, args.sizes):
            for name, decoder in rows(args.mechanisms, args.decoders):
                if out_of_time():
                    return
                if "compiled" in args.modes:
                    torch._dynamo.reset()  # compiled code is cached per function: start each row afresh
                base = build_row_model(name, vocab, emb, hidden, args.seed, decoder_sizes(decoder, args))
                params = sum(p.numel() for p in base.parameters())
                for batching, batches in batchings:
                    mflop = mflop_per_token(base, batches[0], device)
                    peak = peak_of(args, device, (batches[0].tgt_out.numel(), hidden, vocab), peaks)
                    checked: dict[str, float] = {}  # per batching, after the first precision's timing
                    for amp in args.amp:
                        if out_of_time():
                            return
                        timed_rows = time_modes(base, batches, args, device, amp)
                        for mode in [m for m in args.modes if m in CHECKED and m not in checked]:
                            checked[mode] = first_loss_difference(base, batches[0], mode, device)
                        for row in timed_rows.values():
                            tflops = mflop * 1e6 * row["tok_s"] / 1e12
                            row.update(
                                mechanism=name,
                                decoder=decoder,
                                display=label(name, decoder),
                                vocab=vocab,
                                size=f"{emb}/{hidden}",
                                precision=precision(amp, device),
                                batching=batching,
                                parameters=params,
                                mflop_token=mflop,
                                tflops=tflops,
                                peak_tflops=peak,
                                pct_peak=100 * tflops / peak,
                                loss_rel_diff=checked.get(row["mode"]),
                            )
                            report.add("train", row, columns)


def peak_of(args, device: torch.device, shape: tuple[int, int, int], measured: dict) -> float:
    """The TFLOP/s of "% peak": --peak-tflops; on CUDA the bf16 peak measured at the start; on the CPU
    the float32 product speed, the best of 1024^3 and the output layer's ``shape`` (measured once)."""
    if args.peak_tflops or device.type == "cuda":
        return args.peak_tflops or args.bf16_peak_tflops
    if shape not in measured:
        measured[shape] = gemm_tflops(device, [(1024, 1024, 1024), shape])
    return measured[shape]


def precision(amp: str, device: torch.device) -> str:
    return "bf16" if amp == "bf16" or (amp == "auto" and device.type == "cuda") else "fp32"


# --------------------------------------------------------------------------------------------
# Decoding
# --------------------------------------------------------------------------------------------
def decoding_sources(args, vocab_size: int | None) -> tuple[int, list, list]:
    """(vocabulary size, batches of --decode-batch, single-source batches) of one vocabulary."""
    if args.data == "rules":
        _, pairs, vocab = rule_data(args.seed)
        pairs = pairs[: args.decode_examples]
    else:
        groups = -(-args.decode_examples // args.decode_batch)
        vocab, grouped = gigaword_pairs(
            vocab_size, groups, args.decode_batch, args.seed + 1, args.src_len, args.tgt_len
        )
        pairs = [p for g in grouped for p in g][: args.decode_examples]
    batches = [collate_pairs(pairs[i : i + args.decode_batch], vocab) for i in range(0, len(pairs), args.decode_batch)]
    singles = [collate_pairs([p], vocab) for p in pairs[: args.single_examples]]
    return len(vocab), batches, singles


def timed(fn, device: torch.device) -> tuple[float, list]:
    sync(device)
    start = time.perf_counter()
    out = fn()
    sync(device)
    return time.perf_counter() - start, out


def time_decoding(model, batches: list, singles: list, args, device: torch.device, amp: str) -> dict:
    max_len, min_len = (args.decode_len, args.decode_len) if args.decode_len else (args.max_len, 0)

    def run_greedy(group):
        return [h for b in group for h in greedy(model, b, max_len=max_len, min_len=min_len)]

    def run_beam(group):
        return [
            hyps[0]
            for b in group
            for hyps in beam_search(model, b, beam_size=args.beam, max_len=max_len, min_len=min_len)
        ]

    with autocast(device, amp):
        run_greedy(batches[:1])  # warm-up (allocator, kernels, the kept weight copies)
        beam_search(model, batches[0], beam_size=args.beam, max_len=2)
        if singles:
            run_beam(singles[:1])
        greedy_s, greedy_hyps = timed(lambda: run_greedy(batches), device)
        beam_s, beam_hyps = timed(lambda: run_beam(batches), device)
        single_s, single_hyps = timed(lambda: run_beam(singles), device) if singles else (None, [])
    n = sum(b.src.size(0) for b in batches)
    row = {
        "decode_examples": n,
        "greedy_sent_s": n / greedy_s,
        "beam_sent_s": n / beam_s,
        "beam_ms_batch": 1000 * beam_s / len(batches),
        "greedy_len": statistics.mean(len(h.ids) for h in greedy_hyps),
        "single_examples": len(singles),
    }
    if singles:
        row["single_sent_s"] = len(singles) / single_s
        row["batched_over_single"] = row["beam_sent_s"] / row["single_sent_s"]
        row["top1_agree"] = sum(b.ids == s.ids for b, s in zip(beam_hyps, single_hyps)) / len(singles)
    return row


def decode_columns(args) -> list[tuple[str, str, str]]:
    return [
        ("mechanism", "display", "s"),
        ("vocab", "vocab", ",d"),
        ("emb/hidden", "size", "s"),
        ("precision", "precision", "s"),
        ("params", "parameters", ",d"),
        ("greedy sent/s", "greedy_sent_s", ",.1f"),
        (f"beam {args.beam} sent/s", "beam_sent_s", ",.1f"),
        (f"beam {args.beam} one at a time sent/s", "single_sent_s", ",.2f"),
        ("batched / single", "batched_over_single", ".2f"),
        ("beam ms/batch", "beam_ms_batch", ",.1f"),
        ("greedy len", "greedy_len", ".1f"),
        ("top1 agree", "top1_agree", ".2f"),
    ]


def section_decode(args, device: torch.device, report: Report, out_of_time) -> None:
    columns = decode_columns(args)
    for vocab_size in args.vocabs or [None]:
        vocab, batches, singles = decoding_sources(args, vocab_size)
        batches, singles = [b.to(device) for b in batches], [b.to(device) for b in singles]
        for emb, hidden in map(size_pair, args.sizes):
            for name, decoder in rows(args.mechanisms, args.decoders):
                model = build_row_model(name, vocab, emb, hidden, args.seed, decoder_sizes(decoder, args))
                model = model.to(device).eval()
                for amp in args.amp:
                    if out_of_time():
                        return
                    row = time_decoding(model, batches, singles, args, device, amp)
                    row.update(
                        mechanism=name,
                        decoder=decoder,
                        display=label(name, decoder),
                        vocab=vocab,
                        size=f"{emb}/{hidden}",
                        precision=precision(amp, device),
                        parameters=sum(p.numel() for p in model.parameters()),
                        beam=args.beam,
                        decode_len=args.decode_len,
                    )
                    report.add("decode", row, columns)


# --------------------------------------------------------------------------------------------
def main(argv=None) -> int:
    args = parse_args(argv)
    device = device_or_exit(args.device, SCRIPT)
    threads = args.threads if args.threads is not None else (0 if device.type == "cuda" else 1)
    if threads:
        torch.set_num_threads(threads)
    started = time.perf_counter()

    late: list[bool] = []  # said once

    def out_of_time() -> bool:
        if not late and args.deadline_s is not None and time.perf_counter() - started > args.deadline_s:
            late.append(True)
            print(f"(deadline of {args.deadline_s:.0f} s reached: the rest is skipped)", flush=True)
        return bool(late)

    env = environment(device)
    if device.type == "cuda":
        env.update(peak_environment(device, args.peak_tflops))
        args.bf16_peak_tflops = env["bf16_peak_tflops"]
        env["peak"] = f"bf16 {args.bf16_peak_tflops:.4g} TFLOP/s ({env['bf16_peak_source']})"
    else:
        env["peak"] = (
            f"{args.peak_tflops} TFLOP/s (--peak-tflops)"
            if args.peak_tflops
            else f"float32 matrix products at {torch.get_num_threads()} thread(s), measured per row shape"
        )
    env["load_avg"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    env["data"] = (
        "CopyNet rule task, 1,004 ids"
        if args.data == "rules"
        else f"Gigaword-shaped, {args.src_len} source / {args.tgt_len} target tokens"
    )
    if device.type == "cpu" and "graphed" in args.modes:
        env["note"] = "graphed on the CPU: no graphs, the arm runs eagerly (a smoke run)"
    print("# " + ", ".join(f"{k} {v}" for k, v in env.items()), flush=True)
    report = Report(args.json, {k: str(v) for k, v in vars(args).items()}, env)
    for section in args.sections:
        {"train": section_train, "decode": section_decode}[section](args, device, report, out_of_time)
    print(f"\n(total {time.perf_counter() - started:.0f} s)", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
