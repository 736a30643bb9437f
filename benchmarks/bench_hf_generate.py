"""Decoding speed of a copy head as a Hugging Face model (models/hf): ``generate()`` against the project's
own search (pipeline/decoding/search.py) on the same weights, greedy and beam 4, in target tokens/s.

    python -m benchmarks.bench_hf_generate            # BART-base's shape, one CPU thread (about 3 minutes)
    python -m benchmarks.bench_hf_generate --quick    # tiny sizes: a check that it runs (seconds)

The head sits on a BART with BART-base's shape (d_model 768, 6 + 6 layers, 12 heads, feed-forward 3072,
vocabulary 50,265, BART's special ids: the id maps of models/hf/id_maps.py are exercised) and fresh
weights (speed does not depend on them), built from a config, nothing downloaded. A batch holds
``--batch`` random sources of ``--src-len`` ids, ``--oov`` positions of each a piece outside the
vocabulary (an extended id). Both searches run exactly ``--steps`` steps (minimum = maximum length:
no early </s> on random weights), so tokens/s = batch x steps / seconds. Rows are measured in rounds,
every row once per round in turn, each figure the median over ``--rounds``; the greedy outputs of the
two are compared (identical by construction) and the beam outputs counted (they part where a finished
hypothesis leaves the project's beam: docs/pretrained.md).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from models.batch import Batch
from models.hf import CopyHeadConfig, CopyHeadForConditionalGeneration
from models.specials import BOS, EOS, UNK
from pipeline.decoding.search import beam_search, greedy

BART_IDS = {"pad": 1, "unk": 3, "start": 2, "eos": 2, "bos": 0}  # facebook/bart-base's
SIZES = {
    "full": {"d_model": 768, "layers": 6, "heads": 12, "ffn": 3072, "vocab": 50265},
    "quick": {"d_model": 32, "layers": 2, "heads": 2, "ffn": 64, "vocab": 1000},
}


def bart_config(d_model: int, layers: int, heads: int, ffn: int, vocab: int) -> dict:
    return {
        "model_type": "bart",
        "vocab_size": vocab,
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
        "pad_token_id": BART_IDS["pad"],
        "bos_token_id": BART_IDS["bos"],
        "eos_token_id": BART_IDS["eos"],
        "decoder_start_token_id": BART_IDS["start"],
        "forced_eos_token_id": None,
    }


def build(head: str, sizes: dict) -> CopyHeadForConditionalGeneration:
    torch.manual_seed(0)
    config = CopyHeadConfig(backbone=bart_config(**sizes), head=head, token_ids=BART_IDS)
    return CopyHeadForConditionalGeneration(config).eval()


def inputs(model: CopyHeadForConditionalGeneration, size: int, src_len: int, oov: int, seed: int):
    """(the project's Batch, generate()'s keywords) of the same random sources, ``oov`` extended ids each."""
    vocab, vocab_size = model.config.head_vocab_size, model.config.vocab_size
    gen = torch.Generator().manual_seed(seed)
    src = torch.randint(4, vocab, (size, src_len), generator=gen)  # head ids past the specials
    src_ext = src.clone()
    for k in range(oov):
        src[:, 2 + 3 * k] = UNK
        src_ext[:, 2 + 3 * k] = vocab + k
    empty = [[] for _ in range(size)]
    steps = torch.full((size, 1), BOS)
    batch = Batch(
        src, torch.full((size,), src_len), src_ext, steps, torch.full((size, 1), EOS), oov, empty, [], empty, empty
    )
    ids = model.seq2seq.src_ids  # head id -> backbone id
    ext = torch.where(src_ext >= vocab, src_ext - vocab + vocab_size, ids[src_ext.clamp_max(vocab - 1)])
    keywords = {"input_ids": ids[src], "attention_mask": torch.ones_like(src), "src_ext_ids": ext}
    return batch, keywords


def backbone_rows(model, hyps) -> list[list[int]]:
    """The project's hypotheses in backbone ids."""
    vocab, vocab_size, ids = model.config.head_vocab_size, model.config.vocab_size, model.seq2seq.tgt_ids
    return [[int(ids[i]) if i < vocab else i - vocab + vocab_size for i in h.ids] for h in hyps]


@torch.inference_mode()
def run(model, batch, keywords, search: str, steps: int) -> tuple[float, list[list[int]], list[list[int]]]:
    """Seconds of each implementation, and both outputs (backbone ids)."""
    beam = 4 if search == "beam 4" else 1
    start = time.perf_counter()
    if beam == 1:
        ours = greedy(model.seq2seq, batch, max_len=steps, min_len=steps)
    else:
        ours = [nbest[0] for nbest in beam_search(model.seq2seq, batch, beam, max_len=steps, min_len=steps)]
    project = time.perf_counter() - start
    options = {"num_beams": beam, "length_penalty": 0.0} if beam > 1 else {}
    start = time.perf_counter()
    out = model.generate(**keywords, max_new_tokens=steps, min_new_tokens=steps, do_sample=False, **options)
    hf = time.perf_counter() - start
    return (project, hf), backbone_rows(model, ours), out[:, 1:].tolist()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes, one round: a check that it runs")
    parser.add_argument("--heads", nargs="+", default=["backbone_pointer_generator", "backbone_copynet"])
    parser.add_argument("--batch", type=int, default=8, help="sentences per search")
    parser.add_argument("--src-len", type=int, default=31, help="source ids per sentence (Gigaword's mean)")
    parser.add_argument("--steps", type=int, default=24, help="decoding steps (output tokens per sentence)")
    parser.add_argument("--oov", type=int, default=3, help="extended ids per source")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    sizes = SIZES["quick" if args.quick else "full"]
    if args.quick:
        args.batch, args.steps, args.rounds = 4, 8, 2
    torch.set_num_threads(args.threads)
    print(
        f"BART-shaped backbone {sizes}, fresh weights; batch {args.batch} x source {args.src_len} "
        f"({args.oov} extended ids each), {args.steps} steps; {args.threads} thread(s), median of {args.rounds} rounds"
    )
    models = {head: build(head, sizes) for head in args.heads}
    data = {head: inputs(model, args.batch, args.src_len, args.oov, seed=1) for head, model in models.items()}
    rows = [(head, search) for head in args.heads for search in ("greedy", "beam 4")]
    times: dict = {row: [] for row in rows}
    agree: dict = {}
    for head, search in rows:  # a warm-up of each row
        run(models[head], *data[head], search, 2)
    for _ in range(args.rounds):
        for head, search in rows:
            seconds, ours, theirs = run(models[head], *data[head], search, args.steps)
            times[head, search].append(seconds)
            agree[head, search] = sum(a == b for a, b in zip(ours, theirs))
    tokens = args.batch * args.steps
    print("| head | search | project tok/s | generate() tok/s | generate / project | same outputs |")
    print("|---|---|---:|---:|---:|---:|")
    for head, search in rows:
        project = tokens / statistics.median(t[0] for t in times[head, search])
        hf = tokens / statistics.median(t[1] for t in times[head, search])
        same = f"{agree[head, search]}/{args.batch}"
        print(f"| {head} | {search} | {project:,.0f} | {hf:,.0f} | {hf / project:.2f} | {same} |")


if __name__ == "__main__":
    main()
