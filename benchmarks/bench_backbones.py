"""Training and decoding speed of small BART- and T5-shaped backbones with and without each copy head
(models/backbone_heads.py): target tokens/s, and each head's cost as a ratio to the backbone alone
measured in the same process (docs/pretrained.md has the figures).

    python benchmarks/bench_backbones.py                      # CPU, one thread
    python benchmarks/bench_backbones.py --device cuda --threads 0 --batch 64

The backbones are built from configs with fresh weights (speed does not depend on the weights): d_model
256, 3 encoder and 3 decoder layers, 4 heads, feed-forward 1024, vocabulary 16,000 by default. A batch
holds random source ids and targets that repeat source spans. Training: one teacher-forced forward,
backward and Adam step per batch, float32 (bf16 autocast on CUDA with ``--bf16``); decoding: batched
beam search (``--beam``) to ``--tgt-len`` steps through the key/value cache. Rows are measured in
rounds, every head once per round in turn, so a load that changes during the run (a shared machine)
spreads over all of them; each figure is the median over rounds.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from models.batch import Batch
from models.config import ModelConfig
from models.registry import build_model
from models.specials import BOS, EOS, PAD
from pipeline.decoding.search import beam_search

HEADS = ("backbone_lm", "backbone_pointer_generator", "backbone_copynet", "backbone_pointer_softmax")


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


def train_step_seconds(model, batch, opt, args) -> float:
    sync(args.device)
    t0 = time.perf_counter()
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=args.bf16 and args.device.startswith("cuda")):
        loss = -model(batch).sum() / batch.n_tokens
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    sync(args.device)
    return time.perf_counter() - t0


@torch.no_grad()
def decode_seconds(model, batch, args) -> float:
    sync(args.device)
    t0 = time.perf_counter()
    beam_search(model, batch, beam_size=args.beam, max_len=args.tgt_len, min_len=args.tgt_len)
    sync(args.device)
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kinds", nargs="+", default=["bart", "t5"], choices=["bart", "t5"])
    parser.add_argument("--only", nargs="+", default=list(HEADS), choices=HEADS, help="the heads measured")
    parser.add_argument("--d-model", type=int, default=256)
    parser.add_argument("--layers", type=int, default=3)
    parser.add_argument("--heads", type=int, default=4, help="attention heads per layer")
    parser.add_argument("--ffn", type=int, default=1024)
    parser.add_argument("--vocab", type=int, default=16000)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--src-len", type=int, default=48)
    parser.add_argument("--tgt-len", type=int, default=24)
    parser.add_argument("--beam", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (0: torch's default)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--bf16", action="store_true", help="bf16 autocast for training (CUDA)")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    heads = ["backbone_lm", *(h for h in HEADS if h in args.only and h != "backbone_lm")]  # the baseline first
    print(
        f"device {args.device}, threads {torch.get_num_threads()}; d_model {args.d_model}, {args.layers}+{args.layers} "
        f"layers, vocabulary {args.vocab}; batch {args.batch} x source {args.src_len} x target {args.tgt_len}; "
        f"beam {args.beam}; median of {args.rounds} rounds"
    )
    batch = make_batch(args.vocab, args.batch, args.src_len, args.tgt_len, seed=0).to(args.device)
    src_only = Batch(batch.src, batch.src_len, batch.src_ext, batch.tgt_in[:, :1], batch.tgt_out[:, :1], 0, *([[]] * 4))
    tokens = batch.n_tokens
    print("| backbone | head | training tok/s | x backbone alone | decoding tok/s | x backbone alone |")
    print("|---|---|---:|---:|---:|---:|")
    for kind in args.kinds:
        models = {h: build(kind, h, args) for h in heads}
        opts = {h: torch.optim.Adam(m.parameters(), lr=1e-4) for h, m in models.items()}
        for h, m in models.items():  # warm-up: one step and one decode each
            train_step_seconds(m.train(), batch, opts[h], args)
            decode_seconds(m.eval(), src_only, args)
        train = {h: [] for h in heads}
        decode = {h: [] for h in heads}
        for _ in range(args.rounds):
            for h, m in models.items():
                train[h].append(train_step_seconds(m.train(), batch, opts[h], args))
                decode[h].append(decode_seconds(m.eval(), src_only, args))
        train_tps = {h: tokens / statistics.median(v) for h, v in train.items()}
        decode_tps = {h: args.batch * args.tgt_len / statistics.median(v) for h, v in decode.items()}
        base_t, base_d = train_tps["backbone_lm"], decode_tps["backbone_lm"]
        for h in heads:
            print(
                f"| {kind} | {h} | {train_tps[h]:,.0f} | {train_tps[h] / base_t:.2f} | "
                f"{decode_tps[h]:,.0f} | {decode_tps[h] / base_d:.2f} |"
            )


if __name__ == "__main__":
    main()
