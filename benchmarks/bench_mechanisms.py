"""Throughput of each mechanism in models.MECHANISMS (each with its own default options): training and decoding.

Synthetic batches shaped like the CopyNet rule data (pipeline.data.corpora.copynet_rules with a small
RulesConfig and its 1,000-symbol alphabet). For every mechanism, a fresh model is trained for
``--steps`` timed Adam steps (after ``--warmup`` untimed ones), then ``--decode-examples`` examples
are decoded with greedy search, batched beam search, and beam search one example at a time.
Prints a table (and optionally writes JSON); no assertions.

    .venv/bin/python benchmarks/bench_mechanisms.py                # defaults: ~2-3 min on 2 CPU cores
    .venv/bin/python benchmarks/bench_mechanisms.py --device cuda --steps 50 --decode-examples 256
    .venv/bin/python benchmarks/bench_mechanisms.py --mechanisms copynet pointer_generator \
        --decoders recurrent transformer --emb 64 --hidden 128 --threads 1   # both decoders (benchmarks/decoders.py)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import sys
import time
from pathlib import Path

import torch

from benchmarks.decoders import add_decoder_args, decoder_sizes, label  # noqa: E402
from benchmarks.decoders import rows as decoder_rows  # noqa: E402
from models.config import ModelConfig  # noqa: E402
from models.extended import NEG  # noqa: E402
from models.registry import MECHANISMS, build_model, runs_on_backbone  # noqa: E402
from pipeline.data.corpora.copynet_rules import RulesConfig, generate_examples, regular_symbol  # noqa: E402
from pipeline.decoding.search import beam_search, greedy  # noqa: E402
from pipeline.runtime.device import autocast, resolve_device
from pipeline.training.loop import nll_loss  # noqa: E402
from pipeline.vocab.batching import collate  # noqa: E402
from pipeline.vocab.vocabulary import EOS, SPECIALS, Vocab  # noqa: E402


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    own = [m for m in MECHANISMS if not runs_on_backbone(m)]  # backbone_*: benchmarks/bench_backbones.py
    p.add_argument("--mechanisms", nargs="+", default=own, choices=own)
    p.add_argument("--emb", type=int, default=150)
    p.add_argument("--hidden", type=int, default=300)
    p.add_argument("--batch", type=int, default=64, help="training batch and decoding batch size")
    p.add_argument("--steps", type=int, default=60, help="timed training steps per mechanism")
    p.add_argument("--warmup", type=int, default=2, help="untimed training steps first")
    p.add_argument("--decode-examples", type=int, default=256, help="examples decoded by greedy and batched beam")
    p.add_argument(
        "--single-examples",
        type=int,
        default=None,
        help="examples decoded one at a time (default: min(decode-examples, 64))",
    )
    p.add_argument("--beam", type=int, default=10)
    p.add_argument(
        "--decode-len",
        type=int,
        default=16,
        help="decode every hypothesis for exactly this many steps (</s> blocked until then), so "
        "figures compare across mechanisms however far training got; 0: free decoding, "
        "stopping at </s> or --max-len",
    )
    p.add_argument("--max-len", type=int, default=40, help="length limit of free decoding (--decode-len 0)")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    p.add_argument("--device", default="auto", help="auto (CUDA when present) | cpu | cuda | cuda:N")
    p.add_argument("--no-amp", action="store_true", help="no bf16 autocast on CUDA (train.py uses it)")
    p.add_argument("--seed", type=int, default=1234)
    add_decoder_args(p)
    p.add_argument("--json", type=Path, default=None, help="also write the results here")
    return p.parse_args(argv)


# --------------------------------------------------------------------------------------------
# Data
# --------------------------------------------------------------------------------------------
def rule_data(seed: int) -> tuple[list[tuple[list[str], list[str]]], list[tuple[list[str], list[str]]], Vocab]:
    """Training pairs and decoding pairs (half in-vocabulary test, half unseen-filler test)."""
    cfg = RulesConfig(n_rules=60, instances_per_rule=40, vocab_size=1000, unseen_per_rule=8, seed=seed)
    ex = generate_examples(cfg)
    pairs = lambda split: [(r["src"], r["tgt"]) for r in ex[split]]
    train = pairs("train")
    test, unseen = pairs("test"), pairs("test_unseen")
    rng = random.Random(seed)
    rng.shuffle(test)
    rng.shuffle(unseen)
    decode = [p for pair in zip(test, unseen) for p in pair]  # alternate seen / unseen fillers
    symbols = [regular_symbol(i) for i in range(cfg.vocab_size)]
    vocab = Vocab(list(SPECIALS) + symbols, [0] * len(SPECIALS) + [1] * len(symbols))
    return train, decode, vocab


def make_batch(pairs, vocab: Vocab, device: torch.device):
    return collate([s for s, _ in pairs], [t for _, t in pairs], vocab, vocab).to(device)


# --------------------------------------------------------------------------------------------
# Timing
# --------------------------------------------------------------------------------------------
def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn, device: torch.device) -> tuple[float, object]:
    sync(device)
    t0 = time.perf_counter()
    out = fn()
    sync(device)
    return time.perf_counter() - t0, out


class NoEarlyEos:
    """Greedy search through this wrapper never emits </s>: it runs exactly max_len steps."""

    def __init__(self, model):
        self.model = model

    def encode(self, batch):
        return self.model.encode(batch)

    def step(self, state, prev_ids):
        log_probs, state = self.model.step(state, prev_ids)
        return log_probs.masked_fill(self.eos_mask(log_probs), NEG), state

    @staticmethod
    def eos_mask(log_probs):
        mask = torch.zeros(log_probs.size(1), dtype=torch.bool, device=log_probs.device)
        mask[EOS] = True
        return mask


def bench_mechanism(
    name: str, args, train_pairs, decode_pairs, vocab: Vocab, device: torch.device, decoder: str = "recurrent"
) -> dict:
    use_amp = not args.no_amp

    def amp():
        return autocast(device) if use_amp else torch.autocast(device_type=device.type, enabled=False)

    torch.manual_seed(args.seed)
    rng = random.Random(f"{args.seed}/{name}")
    cfg = ModelConfig(
        src_vocab=len(vocab), tgt_vocab=len(vocab), emb=args.emb, hidden=args.hidden, **decoder_sizes(decoder, args)
    )
    model = build_model(name, cfg).to(device)
    n_params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    # Batches are collated and moved to the device up front: only the model work is timed.
    batches = [make_batch(rng.sample(train_pairs, args.batch), vocab, device) for _ in range(args.warmup + args.steps)]

    def train_step(batch) -> int:
        with amp():
            loss, n = nll_loss(model, batch)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
        opt.step()
        return n

    model.train()
    for batch in batches[: args.warmup]:
        train_step(batch)
    sync(device)
    tokens, t0 = 0, time.perf_counter()
    for batch in batches[args.warmup :]:
        tokens += train_step(batch)
    sync(device)
    train_s = time.perf_counter() - t0

    model.eval()
    dec = decode_pairs[: args.decode_examples]
    dec_batches = [make_batch(dec[i : i + args.batch], vocab, device) for i in range(0, len(dec), args.batch)]
    n_single = min(len(dec), args.single_examples if args.single_examples is not None else 64)
    singles = [make_batch([p], vocab, device) for p in dec[:n_single]]

    if args.decode_len:  # fixed length: min_len = max_len for beam, </s> masked for greedy
        greedy_model, max_len, min_len = NoEarlyEos(model), args.decode_len, args.decode_len
    else:
        greedy_model, max_len, min_len = model, args.max_len, 0

    def run_greedy():
        return [h for b in dec_batches for h in greedy(greedy_model, b, max_len=max_len)]

    def beam(b):
        return beam_search(model, b, beam_size=args.beam, max_len=max_len, min_len=min_len)

    def run_beam():
        return [hs[0] for b in dec_batches for hs in beam(b)]

    def run_single():
        return [beam(b)[0][0] for b in singles]

    with torch.no_grad(), amp():
        greedy(greedy_model, dec_batches[0], max_len=max_len)  # warm-up (allocator, kernels)
        beam(singles[0])
        greedy_s, g_hyps = timed(run_greedy, device)
        beam_s, b_hyps = timed(run_beam, device)
        single_s, s_hyps = timed(run_single, device)

    # Same first examples decoded batched and alone: how often the best hypothesis agrees (bf16 or
    # float reduction order can flip near-ties; on a CPU in float32 it is normally 1.0).
    agree = sum(b.ids == s.ids for b, s in zip(b_hyps, s_hyps)) / max(len(s_hyps), 1)
    beam_sps = len(dec) / beam_s
    single_sps = n_single / single_s
    return {
        "mechanism": name,
        "decoder": decoder,
        "display_name": label(name, decoder),
        "parameters": n_params,
        "train_steps": args.steps,
        "train_target_tokens": tokens,
        "train_seconds": train_s,
        "train_tokens_per_s": tokens / train_s,
        "train_steps_per_s": args.steps / train_s,
        "decode_examples": len(dec),
        "greedy_sents_per_s": len(dec) / greedy_s,
        "greedy_mean_len": statistics.mean(len(h.ids) for h in g_hyps),
        "beam_sents_per_s": beam_sps,
        "beam_mean_len": statistics.mean(len(h.ids) for h in b_hyps),
        "single_examples": n_single,
        "single_beam_sents_per_s": single_sps,
        "batched_over_single": beam_sps / single_sps,
        "batched_single_top1_agreement": agree,
    }


def print_table(rows: list[dict], args, header: dict) -> None:
    print(
        f"device {header['device']} ({header['device_name']}), torch {header['torch']}, "
        f"threads {header['threads']}, amp {header['amp']}, load avg {header['loadavg']}"
    )
    print(
        f"model emb {args.emb} hidden {args.hidden}; vocab {header['vocab']}; train batch {args.batch}, "
        f"{args.steps} timed steps after {args.warmup} warm-up; decode {header['decode_examples']} examples "
        f"(batch {args.batch}, {header['decode_mode']}), one-at-a-time on {header['single_examples']}"
    )
    print(
        f"data: src len mean {header['src_len_mean']:.1f} (max {header['src_len_max']}), "
        f"tgt len mean {header['tgt_len_mean']:.1f} (max {header['tgt_len_max']})"
    )
    cols = [
        ("mechanism", "display_name", "{:<10}"),
        ("params", "parameters", "{:>10,}"),
        ("train tok/s", "train_tokens_per_s", "{:>12,.0f}"),
        ("greedy sent/s", "greedy_sents_per_s", "{:>14,.1f}"),
        (f"beam{args.beam} batched sent/s", "beam_sents_per_s", "{:>22,.1f}"),
        (f"beam{args.beam} 1-at-a-time sent/s", "single_beam_sents_per_s", "{:>26,.2f}"),
        ("batched/single", "batched_over_single", "{:>14,.1f}x"),
        ("greedy len", "greedy_mean_len", "{:>10,.1f}"),
        ("top1 agree", "batched_single_top1_agreement", "{:>10,.2f}"),
    ]
    widths = [len(fmt.format(rows[0][key])) if rows else len(title) for title, key, fmt in cols]
    widths = [max(w, len(title)) for w, (title, _, _) in zip(widths, cols)]
    print("  ".join(title.rjust(w) if i else title.ljust(w) for i, ((title, _, _), w) in enumerate(zip(cols, widths))))
    for r in rows:
        cells = [fmt.format(r[key]) for _, key, fmt in cols]
        print("  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths))))


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = resolve_device(args.device)
    train_pairs, decode_pairs, vocab = rule_data(args.seed)
    dec = decode_pairs[: args.decode_examples]
    header = {
        "device": str(device),
        "device_name": torch.cuda.get_device_name(device)
        if device.type == "cuda"
        else platform.processor() or platform.machine(),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "cpu_count": os.cpu_count(),
        "amp": device.type == "cuda" and not args.no_amp,
        "loadavg": " ".join(f"{x:.2f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "n/a",
        "vocab": len(vocab),
        "decode_mode": (
            f"exactly {args.decode_len} steps per hypothesis"
            if args.decode_len
            else f"free, stop at </s> or {args.max_len} steps"
        ),
        "train_examples": len(train_pairs),
        "decode_examples": len(dec),
        "single_examples": min(len(dec), args.single_examples if args.single_examples is not None else 64),
        "src_len_mean": statistics.mean(len(s) for s, _ in train_pairs),
        "src_len_max": max(len(s) for s, _ in train_pairs),
        "tgt_len_mean": statistics.mean(len(t) for _, t in train_pairs),
        "tgt_len_max": max(len(t) for _, t in train_pairs),
    }
    results = []
    t_all = time.perf_counter()
    for name, decoder in decoder_rows(args.mechanisms, args.decoders):
        t0 = time.perf_counter()
        results.append(bench_mechanism(name, args, train_pairs, decode_pairs, vocab, device, decoder))
        print(f"[{label(name, decoder)} done in {time.perf_counter() - t0:.1f}s]", file=sys.stderr, flush=True)
    header["total_seconds"] = time.perf_counter() - t_all
    print_table(results, args, header)
    print(f"total {header['total_seconds']:.1f}s")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(
            json.dumps(
                {
                    "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
                    "environment": header,
                    "results": results,
                },
                indent=2,
            )
            + "\n"
        )
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
