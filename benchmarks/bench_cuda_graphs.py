"""``train.cuda_graphs`` against eager teacher forcing on a GPU: training tokens/s of the recurrent
mechanisms whose decoder steps through the target (models/graphed.py), in the same process.

Two batchings (docs/training.md, "On a GPU"):
  64 sent   64 Gigaword-shaped sentences a batch (sources of 31 tokens, targets of 9 + ``</s>``), one
            shape, padded to the buckets (32 x 40 source, 12 target positions) for the graphs;
  16k tok   a token budget of ``--max-tokens`` padded positions, batched by
            pipeline.vocab.batching.token_batches over sentences of varied lengths (sources 10-60,
            targets 3-24 tokens, about Gigaword's spread), so batch shapes vary; the graphs see them
            bucketed (models.graphed.bucket_shape) and capture one graph per bucket.

Per configuration: a warm-up pass over every batch (the graphed model captures its graphs there:
``capture s``, ``graphs``), then ``--passes`` timed passes over the same batches, eager and graphed
alternating, each step = forward, backward, gradient clipping and a fused Adam step, as
pipeline.training.loop's step (the graphed one pads its batch inside the timed step, as the loop
does). ``loss rel. diff``: the first batch's loss, graphed against eager, from the same weights
(float32 with TF32 off: the padded shapes change only cuBLAS's summation order). Both models start
from the same weights.

    python benchmarks/bench_cuda_graphs.py --json out/graphs.json          # a GPU, ~2 minutes on an H100
"""

from __future__ import annotations

import argparse
import copy
import json
import platform
import time
from pathlib import Path

import numpy as np
import torch

from benchmarks.gigaword_shaped import SRC_LEN, TGT_LEN, sample_pairs, words
from models.config import ModelConfig
from models.graphed import bucket_shape
from models.registry import DISPLAY_NAMES, build_model
from pipeline.runtime.device import autocast
from pipeline.vocab.batching import collate, token_batches
from pipeline.vocab.vocabulary import SPECIALS, Vocab


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--mechanisms", nargs="+", default=["rnnsearch", "copynet", "pointer_generator", "read_again"])
    p.add_argument(
        "--decoder", default="recurrent", choices=["recurrent", "transformer"], help="transformer: only CopyNet steps"
    )
    p.add_argument("--vocab", type=int, default=50000)
    p.add_argument("--emb", type=int, default=150)
    p.add_argument("--hidden", type=int, default=300)
    p.add_argument("--amp", nargs="+", default=["off", "bf16"], choices=["off", "bf16"])
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--max-tokens", type=int, default=16000)
    p.add_argument("--batches", type=int, default=12, help="batches per batching (the timed pass goes over them)")
    p.add_argument("--passes", type=int, default=2, help="timed passes over the batches, per model")
    p.add_argument("--device", default="cuda")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--deadline-s", type=float, default=None)
    p.add_argument("--json", type=Path, default=None)
    return p.parse_args(argv)


def vocabulary(size: int) -> tuple[Vocab, list[str]]:
    pool = words(int(size * 1.1))  # words past the V - 4 most frequent are OOV: copied
    return Vocab(list(SPECIALS) + pool[: size - len(SPECIALS)], [0] * len(SPECIALS) + [1] * (size - 4)), pool


def fixed_batches(vocab: Vocab, pool: list[str], n: int, size: int, rng) -> list:
    out = []
    for _ in range(n):
        src, tgt = sample_pairs(rng, size, len(pool), src_len=SRC_LEN, tgt_len=TGT_LEN)
        out.append(collate([[pool[i] for i in r] for r in src], [[pool[i] for i in r] for r in tgt], vocab, vocab))
    return out


def budget_batches(vocab: Vocab, pool: list[str], n: int, max_tokens: int, rng) -> list:
    """n token-budget batches over sentences of varied lengths (token_batches, shuffled)."""
    rows = max(4096, 2 * n * max_tokens // 40)
    src_len = np.clip(rng.normal(SRC_LEN, 9, rows).round(), 10, 60).astype(int)
    tgt_len = np.clip(rng.normal(TGT_LEN, 3.5, rows).round(), 3, 24).astype(int)
    groups = token_batches(src_len, tgt_len + 1, batch_size=10**6, max_tokens=max_tokens, shuffle=True, seed=1)
    out = []
    for rows_of in groups[:n]:
        srcs, tgts = [], []
        for r in rows_of:
            src, tgt = sample_pairs(rng, 1, len(pool), src_len=int(src_len[r]), tgt_len=int(tgt_len[r]))
            srcs.append([pool[i] for i in src[0]])
            tgts.append([pool[i] for i in tgt[0]])
        out.append(collate(srcs, tgts, vocab, vocab))
    return out


def step(model, optimizer, batch, device, amp: str, graphed: bool) -> float:
    if graphed:
        batch = batch.padded(*bucket_shape(batch))
    with autocast(device, amp, cache=False):
        gold = model(batch)  # (B, T)
    loss = -gold.sum() / batch.n_tokens
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
    optimizer.step()
    return loss


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed_pass(model, optimizer, batches, device, amp, graphed) -> float:
    sync(device)
    start = time.perf_counter()
    for batch in batches:
        step(model, optimizer, batch, device, amp, graphed)
    sync(device)
    return time.perf_counter() - start


def first_loss_difference(base, batch, device) -> float:
    """Relative difference of the first batch's float32 loss, graphed against eager, same weights."""
    allow = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        values = []
        for graphed in (False, True):
            model = copy.deepcopy(base).to(device).train()
            for module in model.modules():
                if isinstance(module, torch.nn.Dropout):
                    module.p = 0.0
            if graphed:
                model.graph_recurrence()
            torch.manual_seed(0)
            b = batch.padded(*bucket_shape(batch)) if graphed else batch
            values.append(float(-model(b).detach().sum() / batch.n_tokens))
        return abs(values[1] - values[0]) / abs(values[0])
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = allow


def main(argv=None) -> None:
    args = parse_args(argv)
    device = torch.device(args.device)
    started = time.perf_counter()
    name = torch.cuda.get_device_properties(device).name if device.type == "cuda" else "cpu (no graphs: a smoke run)"
    env = {"device": name, "torch": torch.__version__, "cuda": torch.version.cuda, "python": platform.python_version()}
    print(
        f"# {env['device']}, torch {env['torch']} (CUDA {env['cuda']}), vocab {args.vocab}, "
        f"{args.emb}/{args.hidden}, {args.decoder} decoder"
    )
    vocab, pool = vocabulary(args.vocab)
    rng = np.random.default_rng(args.seed)
    batchings = {
        f"{args.batch} sent": fixed_batches(vocab, pool, args.batches, args.batch, rng),
        f"{args.max_tokens // 1000}k tok": budget_batches(vocab, pool, args.batches, args.max_tokens, rng),
    }
    for label, batches in batchings.items():
        shapes = {tuple(b.src.shape) + (b.tgt_in.size(1),) for b in batches}
        buckets = {bucket_shape(b) for b in batches}
        print(f"# {label}: {len(batches)} batches, {len(shapes)} shapes (B, S, T), {len(buckets)} buckets")
    batchings = {k: [b.to(device) for b in v] for k, v in batchings.items()}
    rows = []
    print(
        "\n| mechanism | batching | precision | eager tok/s | graphed tok/s | graphed / eager | eager ms/step "
        "| graphed ms/step | graphs | capture s | loss rel. diff | peak MiB eager | peak MiB graphed |"
    )
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name in args.mechanisms:
        torch.manual_seed(args.seed)
        sizes = (
            {"decoder": "transformer", "decoder_layers": 2, "decoder_heads": 4} if args.decoder == "transformer" else {}
        )
        cfg = ModelConfig(src_vocab=args.vocab, tgt_vocab=args.vocab, emb=args.emb, hidden=args.hidden, **sizes)
        base = build_model(name, cfg)
        for label, batches in batchings.items():
            diff = first_loss_difference(base, batches[0], device)
            for amp in args.amp:
                if args.deadline_s and time.perf_counter() - started > args.deadline_s:
                    print("# deadline reached: the rest skipped")
                    return
                models, optims, peaks, seconds = {}, {}, {}, {True: 0.0, False: 0.0}
                for graphed in (False, True):
                    if device.type == "cuda":
                        torch.cuda.empty_cache()
                        torch.cuda.reset_peak_memory_stats(device)
                    model = copy.deepcopy(base).to(device).train()
                    if graphed:
                        model.graph_recurrence()
                    opt = torch.optim.Adam(model.parameters(), lr=1e-4, fused=True)
                    warm = timed_pass(model, opt, batches, device, amp, graphed)  # captures the graphs
                    models[graphed], optims[graphed] = model, opt
                    peaks[graphed] = (
                        torch.cuda.max_memory_allocated(device) / 2**20 if device.type == "cuda" else float("nan")
                    )
                    if graphed:
                        capture = model.__dict__["_graphed"].capture_seconds
                        graphs = len(model.__dict__["_graphed"].graphs)
                        warm_graphed = warm
                for _ in range(args.passes):
                    for graphed in (False, True):
                        seconds[graphed] += timed_pass(models[graphed], optims[graphed], batches, device, amp, graphed)
                tokens = args.passes * sum(b.n_tokens for b in batches)
                steps = args.passes * len(batches)
                row = {
                    "mechanism": name,
                    "batching": label,
                    "precision": "bf16" if amp == "bf16" else "fp32",
                    "eager_tok_s": tokens / seconds[False],
                    "graphed_tok_s": tokens / seconds[True],
                    "ratio": seconds[False] / seconds[True],
                    "eager_ms_step": 1000 * seconds[False] / steps,
                    "graphed_ms_step": 1000 * seconds[True] / steps,
                    "graphs": graphs,
                    "capture_s": capture,
                    "warmup_pass_graphed_s": warm_graphed,
                    "loss_rel_diff": diff,
                    "peak_mib_eager": peaks[False],
                    "peak_mib_graphed": peaks[True],
                }
                rows.append(row)
                print(
                    f"| {DISPLAY_NAMES[name]} | {label} | {row['precision']} | {row['eager_tok_s']:,.0f} | "
                    f"{row['graphed_tok_s']:,.0f} | {row['ratio']:.2f} | {row['eager_ms_step']:.1f} | "
                    f"{row['graphed_ms_step']:.1f} | {graphs} | {capture:.1f} | {diff:.1e} | "
                    f"{peaks[False]:,.0f} | {peaks[True]:,.0f} |",
                    flush=True,
                )
                if args.json:
                    args.json.parent.mkdir(parents=True, exist_ok=True)
                    args.json.write_text(
                        json.dumps({"environment": env, "settings": vars(args), "rows": rows}, indent=1, default=str)
                    )
                del models, optims


if __name__ == "__main__":
    main()
