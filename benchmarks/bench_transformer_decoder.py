"""What CopyNet's selective read costs on the transformer decoder (``model.decoder: transformer``).

CopyNet eq. 9 feeds step t-1's copy scores into step t's input, so a parallel decoder cannot run the
target in one pass: teacher forcing steps through the key/value cache, position by position (what
``model.decoder: transformer`` does for CopyNet). The alternative, dropping the selective read on
this decoder, runs the whole target in one pass. This script trains each for a few seconds on
Gigaword-shaped batches (benchmarks/gigaword_shaped.py: Zipfian sources, half of each target
copied from its source) and prints training throughput beside the recurrent CopyNet and two
one-pass mechanisms on the same decoder:

  tok/s      target tokens (with </s>, without padding) per second of forward + backward + clip + Adam step
  ms/batch   the same, per batch
  vs GRU     tok/s relative to CopyNet on its recurrent decoder

    .venv/bin/python benchmarks/bench_transformer_decoder.py                     # ~1 min on one thread
    .venv/bin/python benchmarks/bench_transformer_decoder.py --tgt-len 30 --seconds 5
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace

import numpy as np
import torch

from benchmarks.gigaword_shaped import sample_pairs, words
from models.config import ModelConfig
from models.copynet import CopyNetOutput
from models.registry import build_model
from models.seq2seq import Seq2Seq
from pipeline.vocab.batching import collate
from pipeline.vocab.vocabulary import SPECIALS, Vocab


class NoSelectiveReadOutput(CopyNetOutput):
    """CopyNet's output layer (eq. 4-8) without the selective read of eq. 9: nothing fed back, so
    the transformer decoder runs the target in one pass. For this comparison only."""

    def __init__(self, cfg: ModelConfig):
        super().__init__(cfg)
        self.extra_input_dim = 0

    def extra_input(self, state, prev_ids):
        return None

    def feedback(self, s_t, state):
        return {}


def variants(cfg: ModelConfig) -> list[tuple[str, callable]]:
    tf = replace(cfg, decoder="transformer")
    return [
        ("CopyNet, GRU decoder (reference)", lambda: build_model("copynet", cfg)),
        ("CopyNet, transformer, selective read step by step", lambda: build_model("copynet", tf)),
        ("CopyNet, transformer, selective read dropped (one pass)", lambda: Seq2Seq(tf, NoSelectiveReadOutput(tf))),
        ("Pointer-generator + coverage, transformer (one pass)", lambda: build_model("pointer_generator", tf)),
        ("RNNSearch, transformer (one pass)", lambda: build_model("rnnsearch", tf)),
    ]


def make_batches(args) -> tuple[Vocab, list]:
    pool = words(int(args.vocab * 1.1))
    vocab = Vocab(list(SPECIALS) + pool[: args.vocab - len(SPECIALS)], [0] * len(SPECIALS) + [1] * (args.vocab - 4))
    rng = np.random.default_rng(0)
    out = []
    for _ in range(args.batches):
        src, tgt = sample_pairs(rng, args.batch, len(pool), src_len=args.src_len, tgt_len=args.tgt_len)
        out.append(
            collate([[pool[i] for i in row] for row in src], [[pool[i] for i in row] for row in tgt], vocab, vocab)
        )
    return vocab, out


def train_speed(model: Seq2Seq, batches: list, seconds: float, warmup: int) -> tuple[float, float]:
    """(target tokens / s, ms / batch) of training steps, timed for at least ``seconds``."""
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    model.train()

    def one(batch) -> int:
        gold = model(batch)  # (B, T)
        tokens = int((batch.tgt_out != 0).sum())
        loss = -gold.sum() / tokens
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
        opt.step()
        return tokens

    for i in range(warmup):
        one(batches[i % len(batches)])
    tokens = steps = 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        tokens += one(batches[steps % len(batches)])
        steps += 1
    elapsed = time.perf_counter() - start
    return tokens / elapsed, 1000 * elapsed / steps


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--emb", type=int, default=64)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--vocab", type=int, default=1000)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--batches", type=int, default=8)
    p.add_argument("--src-len", type=int, default=31)
    p.add_argument("--tgt-len", type=int, default=16)
    p.add_argument("--seconds", type=float, default=4.0)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    vocab, batches = make_batches(args)
    cfg = ModelConfig(
        src_vocab=len(vocab),
        tgt_vocab=len(vocab),
        emb=args.emb,
        hidden=args.hidden,
        decoder_layers=args.layers,
        decoder_heads=args.heads,
    )
    print(
        f"emb {args.emb}, hidden {args.hidden}, decoder layers {args.layers}, heads {args.heads}; vocab {len(vocab)}; "
        f"batch {args.batch} x src {args.src_len} / tgt {args.tgt_len}; {args.threads} thread(s), torch {torch.__version__}"
    )
    rows = []
    for label, build in variants(cfg):
        torch.manual_seed(0)
        model = build()
        speed, ms = train_speed(model, batches, args.seconds, args.warmup)
        rows.append((label, sum(p.numel() for p in model.parameters()), speed, ms))
    ref = rows[0][2]
    width = max(len(r[0]) for r in rows)
    print(f"{'model':<{width}} | {'params':>9} | {'tok/s':>8} | {'ms/batch':>8} | vs GRU")
    print(f"{'-' * width}-|-{'-' * 9}-|-{'-' * 8}-|-{'-' * 8}-|-------")
    for label, params, speed, ms in rows:
        print(f"{label:<{width}} | {params:>9,} | {speed:>8.0f} | {ms:>8.1f} | {speed / ref:5.2f}x")


if __name__ == "__main__":
    main()
