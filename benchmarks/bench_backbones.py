"""Training and decoding speed of BART- and T5-shaped backbones with and without each copy head
(models/backbone_heads.py): target tokens/s, and each head's cost as a ratio to the backbone alone
measured in the same process (docs/pretrained.md has the figures); peak GPU memory, MFLOP/token and
the fraction of the device's bf16 peak reached.

    python benchmarks/bench_backbones.py                      # CPU, one thread
    python benchmarks/bench_backbones.py --device cuda --threads 0 --batch 64
    python -m benchmarks.bench_backbones --preset bart-base --device cuda --threads 0 --precisions fp32 bf16 \
        --batch 64 --max-tokens 16000 --skip-decode --json out/backbones_bart_base.json   # ~1 min on an H100

The backbones are built from configs with fresh weights (speed does not depend on the weights).
``--preset`` sets the defaults (an option given on the command line wins):

  small      d_model 256, 3 encoder and 3 decoder layers, 4 heads, feed-forward 1024, vocabulary
             16,000; BART and T5; batch 16 x source 48 x target 24; 1 warm-up step, 5 rounds
  bart-base  BART-base's shape: d_model 768, 6 + 6 layers, 12 heads, feed-forward 3072, vocabulary
             50,265; BART only; Gigaword's shape as bench_mechanisms.py (source 31, target 9 + </s>);
             batch 64 and a 16,000-token budget (390 sentences); 2 warm-up steps, 5 rounds

A batch holds random source ids and targets that repeat source spans (``--tgt-len`` words, then
</s>). Batchings: ``--batch`` sentences, and with ``--max-tokens N`` a token budget too, N // (source
+ target + 1) sentences (bench_mechanisms.py's budget for the same shape; the header prints it).
Precisions (``--precisions``): fp32, and bf16 = autocast as train.amp (``--bf16`` is
``--precisions bf16``); decoding runs in the row's precision too. Training: one teacher-forced
forward, backward and Adam step per batch (fused Adam on CUDA); decoding: batched beam search
(``--beam``) to ``--tgt-len`` steps through the key/value cache (``--skip-decode``: training only).
Rows are measured in rounds, every head once per round in turn, so a load that changes during the run
(a shared machine) spreads over all of them; each figure is the median over rounds. ``--threads``:
1 on the CPU by default, torch's default on CUDA (the backbones are built on the CPU). Per row also:

  peak MiB      the head's own weights, gradients and Adam state plus the most its training step
                allocated above what was resident before it (torch.cuda.max_memory_allocated after
                reset_peak_memory_stats, less the other heads' models, which stay on the device);
                NaN on the CPU
  MFLOP/token   benchmarks.throughput.mflop_per_token (FlopCounterMode, one float32 forward + backward
                of the batch on a copy of the model, as bench_mechanisms.py counts), once per head and batching
  TFLOP/s       MFLOP/token x training tokens/s; % bf16 peak: that over the bf16 peak, measured at the
                start as bench_mechanisms.py does on CUDA (bf16_peak_tflops) or ``--peak-tflops``

``--json PATH``: the environment (device, torch, CUDA, driver, the bf16 peak) and every row,
rewritten after every group of rows; ``--deadline-s``: skip what is left after that many seconds.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import time
from pathlib import Path

import torch

from benchmarks.throughput import device_or_exit, environment, mflop_per_token, peak_environment
from models.batch import Batch
from models.config import ModelConfig
from models.registry import build_model
from models.specials import BOS, EOS, PAD
from pipeline.decoding.search import beam_search
from pipeline.runtime.device import autocast

HEADS = ("backbone_lm", "backbone_pointer_generator", "backbone_copynet", "backbone_pointer_softmax")
PRESETS = {
    "small": {
        "kinds": ["bart", "t5"],
        "d_model": 256,
        "layers": 3,
        "heads": 4,
        "ffn": 1024,
        "vocab": 16000,
        "batch": 16,
        "max_tokens": 0,
        "src_len": 48,
        "tgt_len": 24,
        "warmup": 1,
        "rounds": 5,
    },
    "bart-base": {
        "kinds": ["bart"],
        "d_model": 768,
        "layers": 6,
        "heads": 12,
        "ffn": 3072,
        "vocab": 50265,
        "batch": 64,
        "max_tokens": 16000,
        "src_len": 31,
        "tgt_len": 9,
        "warmup": 2,
        "rounds": 5,
    },
}


def backbone_config(kind: str, d_model: int, layers: int, heads: int, ffn: int) -> dict:
    ids = {"pad_token_id": PAD, "eos_token_id": EOS, "decoder_start_token_id": BOS}
    if kind == "t5":
        return {
            "model_type": "t5",
            "d_model": d_model,
            "d_kv": d_model // heads,
            "d_ff": ffn,
            "num_layers": layers,
            "num_decoder_layers": layers,
            "num_heads": heads,
            "dropout_rate": 0.0,
            **ids,
        }
    return {
        "model_type": "bart",
        "d_model": d_model,
        "encoder_layers": layers,
        "decoder_layers": layers,
        "encoder_attention_heads": heads,
        "decoder_attention_heads": heads,
        "encoder_ffn_dim": ffn,
        "decoder_ffn_dim": ffn,
        "max_position_embeddings": 1024,
        "dropout": 0.0,
        "attention_dropout": 0.0,
        "bos_token_id": BOS,
        "forced_eos_token_id": None,
        **ids,
    }


def make_batch(vocab: int, size: int, src_len: int, tgt_len: int, seed: int) -> Batch:
    """Random sources; each target alternates copied source spans and random words, then </s>."""
    gen = torch.Generator().manual_seed(seed)
    src = torch.randint(4, vocab, (size, src_len), generator=gen)
    tgt = torch.randint(4, vocab, (size, tgt_len), generator=gen)
    for b in range(size):
        for start in range(0, tgt_len, 8):
            j = int(torch.randint(0, src_len - 4, (1,), generator=gen))
            tgt[b, start : start + 4] = src[b, j : j + 4][: tgt_len - start]
    tgt_in = torch.cat([torch.full((size, 1), BOS), tgt], dim=1)
    tgt_out = torch.cat([tgt, torch.full((size, 1), EOS)], dim=1)
    empty = [[] for _ in range(size)]
    return Batch(
        src,
        torch.full((size,), src_len),
        src.clone(),
        tgt_in,
        tgt_out,
        0,
        empty,
        [str(i) for i in range(size)],
        empty,
        empty,
    )


def build(kind: str, head: str, args) -> torch.nn.Module:
    torch.manual_seed(0)
    config = backbone_config(kind, args.d_model, args.layers, args.heads, args.ffn)
    cfg = ModelConfig(src_vocab=args.vocab, tgt_vocab=args.vocab, options={"backbone_config": config})
    return build_model(head, cfg).to(args.device)


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def train_step_seconds(model, batch, opt, args, precision: str = "fp32") -> tuple[float, float]:
    """(seconds, bytes allocated on CUDA at the step's peak above what was allocated before it; 0 elsewhere)."""
    cuda = args.device.startswith("cuda")
    sync(args.device)
    if cuda:
        before = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    with autocast(torch.device(args.device), "bf16" if precision == "bf16" else "off"):
        loss = -model(batch).sum() / batch.n_tokens
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    sync(args.device)
    seconds = time.perf_counter() - t0
    return seconds, (torch.cuda.max_memory_allocated() - before) if cuda else 0.0


@torch.no_grad()
def decode_seconds(model, batch, args, precision: str = "fp32") -> float:
    sync(args.device)
    t0 = time.perf_counter()
    with autocast(torch.device(args.device), "bf16" if precision == "bf16" else "off"):
        beam_search(model, batch, beam_size=args.beam, max_len=args.tgt_len, min_len=args.tgt_len)
    sync(args.device)
    return time.perf_counter() - t0


def resident_bytes(model: torch.nn.Module, opt: torch.optim.Optimizer) -> int:
    """What a model holds between steps: its weights, their gradients and the optimizer's state."""
    tensors = {}
    for param in model.parameters():
        for t in (param, param.grad):
            if t is not None:
                tensors[t.data_ptr()] = t.nbytes
    for state in opt.state.values():
        for t in state.values():
            if torch.is_tensor(t):
                tensors[t.data_ptr()] = t.nbytes
    return sum(tensors.values())


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="small", choices=sorted(PRESETS), help="the defaults below")
    parser.add_argument("--kinds", nargs="+", default=None, choices=["bart", "t5"])
    parser.add_argument("--only", nargs="+", default=list(HEADS), choices=HEADS, help="the heads measured")
    parser.add_argument("--d-model", type=int, default=None)
    parser.add_argument("--layers", type=int, default=None)
    parser.add_argument("--heads", type=int, default=None, help="attention heads per layer")
    parser.add_argument("--ffn", type=int, default=None)
    parser.add_argument("--vocab", type=int, default=None)
    parser.add_argument("--batch", type=int, default=None, help="sentences per batch")
    parser.add_argument(
        "--max-tokens", type=int, default=None, help="also a token budget: N // (src + tgt + 1) sentences (0: none)"
    )
    parser.add_argument("--src-len", type=int, default=None)
    parser.add_argument("--tgt-len", type=int, default=None, help="target words (</s> comes on top)")
    parser.add_argument("--beam", type=int, default=4)
    parser.add_argument("--warmup", type=int, default=None, help="warm-up steps (and decodes) per head and row")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch CPU threads (0: torch's default; default: 1 on the CPU, 0 on CUDA)",
    )
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--precisions", nargs="+", default=None, choices=["fp32", "bf16"])
    parser.add_argument("--bf16", action="store_true", help="the same as --precisions bf16")
    parser.add_argument("--skip-decode", action="store_true", help="time training only")
    parser.add_argument(
        "--peak-tflops", type=float, default=None, help="the bf16 peak (TFLOP/s) of %% bf16 peak (default: measured)"
    )
    parser.add_argument("--deadline-s", type=float, default=None, help="skip what is left after this many seconds")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    for key, value in PRESETS[args.preset].items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.threads is None:
        args.threads = 0 if args.device.startswith("cuda") else 1
    if args.precisions is None:
        args.precisions = ["bf16"] if args.bf16 else ["fp32"]
    elif args.bf16:
        parser.error("--bf16 is --precisions bf16: give one of them")
    return args


COLUMNS = (
    "| backbone | head | precision | batch | training tok/s | x backbone alone | decoding tok/s | x backbone alone "
    "| peak MiB | MFLOP/token | TFLOP/s | % bf16 peak |\n|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"
)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    device = device_or_exit(args.device, "bench_backbones.py")  # no such device here: one line, exit 2
    args.device = str(device)
    if args.threads:
        torch.set_num_threads(args.threads)
    started = time.perf_counter()
    cuda = device.type == "cuda"
    heads = ["backbone_lm", *(h for h in HEADS if h in args.only and h != "backbone_lm")]  # the baseline first
    env = {**environment(device), **peak_environment(device, args.peak_tflops)}
    peak = env["bf16_peak_tflops"]
    batchings = [(f"{args.batch} sent", args.batch)] if args.batch else []
    if args.max_tokens:
        per_batch = args.max_tokens // (args.src_len + args.tgt_len + 1)
        batchings.append((f"{args.max_tokens / 1000:g}k tok ({per_batch} sent)", per_batch))
    print(
        f"device {args.device}, threads {torch.get_num_threads()}; d_model {args.d_model}, {args.layers}+{args.layers} "
        f"layers, vocabulary {args.vocab}; batch {args.batch} x source {args.src_len} x target {args.tgt_len}; "
        f"beam {args.beam}; median of {args.rounds} rounds"
    )
    print(
        f"preset {args.preset}; precisions {' '.join(args.precisions)}; batchings "
        + ", ".join(f"{name} = {n} sentences x {args.src_len + args.tgt_len + 1} positions" for name, n in batchings)
        + f"; {args.warmup} warm-up step(s); {env.get('device')}; bf16 peak {peak:.2f} TFLOP/s ({env['bf16_peak_source']})",
        flush=True,
    )
    data = {"settings": {k: str(v) for k, v in vars(args).items()}, "environment": env, "rows": []}

    def write() -> None:
        if args.json:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps(data, indent=1, default=str))

    late: list[bool] = []  # said once

    def out_of_time() -> bool:
        if not late and args.deadline_s is not None and time.perf_counter() - started > args.deadline_s:
            late.append(True)
            print(f"(deadline of {args.deadline_s:.0f} s reached: the rest is skipped)", flush=True)
        return bool(late)

    write()
    print(COLUMNS, flush=True)
    for kind in args.kinds:
        if out_of_time():
            break
        models = {h: build(kind, h, args) for h in heads}
        fused = {"fused": True} if cuda else {}
        opts = {h: torch.optim.Adam(m.parameters(), lr=1e-4, **fused) for h, m in models.items()}
        flops: dict[tuple[str, str], float] = {}
        for precision, (b_name, size) in itertools.product(args.precisions, batchings):
            if out_of_time():
                break
            batch = make_batch(args.vocab, size, args.src_len, args.tgt_len, seed=0).to(args.device)
            src_only = Batch(
                batch.src, batch.src_len, batch.src_ext, batch.tgt_in[:, :1], batch.tgt_out[:, :1], 0, *([[]] * 4)
            )
            for h, m in models.items():  # warm-up
                for _ in range(args.warmup):
                    train_step_seconds(m.train(), batch, opts[h], args, precision)
                    if not args.skip_decode:
                        decode_seconds(m.eval(), src_only, args, precision)
            train = {h: [] for h in heads}
            decode = {h: [] for h in heads}
            above = dict.fromkeys(heads, 0.0)
            for r in range(args.rounds):
                if r and out_of_time():
                    break
                for h, m in models.items():
                    seconds, extra = train_step_seconds(m.train(), batch, opts[h], args, precision)
                    train[h].append(seconds)
                    above[h] = max(above[h], extra)
                    if not args.skip_decode:
                        decode[h].append(decode_seconds(m.eval(), src_only, args, precision))
            for h, m in models.items():  # FLOPs once per head and batching, after (outside) the timed steps
                if (h, b_name) not in flops:
                    flops[h, b_name] = mflop_per_token(m, batch, device)
            nan = float("nan")
            train_tps = {h: batch.n_tokens / statistics.median(v) for h, v in train.items()}
            decode_tps = {h: size * args.tgt_len / statistics.median(v) if v else nan for h, v in decode.items()}
            base_t, base_d = train_tps["backbone_lm"], decode_tps["backbone_lm"]
            for h in heads:
                row = {
                    "kind": kind,
                    "head": h,
                    "precision": precision,
                    "batching": b_name,
                    "sentences": size,
                    "rounds": len(train[h]),
                    "train_tok_s": train_tps[h],
                    "train_ratio": train_tps[h] / base_t,
                    "ms_step": 1000 * statistics.median(train[h]),
                    "decode_tok_s": decode_tps[h],
                    "decode_ratio": decode_tps[h] / base_d,
                    "peak_mib": (resident_bytes(models[h], opts[h]) + above[h]) / 2**20 if cuda else nan,
                    "mflop_token": flops[h, b_name],
                }
                row["tflops"] = row["mflop_token"] * 1e6 * row["train_tok_s"] / 1e12
                row["pct_peak"] = 100 * row["tflops"] / peak
                row["elapsed_s"] = time.perf_counter() - started
                data["rows"].append(row)
                print(
                    f"| {kind} | {h} | {precision} | {b_name} | {row['train_tok_s']:,.0f} | {row['train_ratio']:.2f} | "
                    f"{row['decode_tok_s']:,.0f} | {row['decode_ratio']:.2f} | {row['peak_mib']:,.0f} | "
                    f"{row['mflop_token']:,.1f} | {row['tflops']:.3g} | {row['pct_peak']:.3g} |",
                    flush=True,
                )
            write()
        del models, opts
        if cuda:
            torch.cuda.empty_cache()
    print(f"\n(total {time.perf_counter() - started:.0f} s)", flush=True)


if __name__ == "__main__":
    main()
