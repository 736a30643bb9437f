"""Three per-step savings of search against the code before them, in one process, pinned as the
pipeline runs: ``torch.inference_mode`` instead of ``torch.no_grad`` around beam search and greedy;
the word-copy logsumexp of ``models.extended.extended_log_probs`` without the CPU's slow path for
underflowing exp (``logsumexp_value`` instead of ``torch.logsumexp``); and beam search's selection
by ``pipeline.decoding.top_k`` (the best chunks first, then a sort of their entries) instead of
``torch.topk`` over every (row, word) score. Prints sentences/s of each variant, the ratio to the
previous code, and whether every hypothesis (ids and score) is the same bit for bit (``top_k``
breaks ties by the lower index, ``torch.topk`` as its heap leaves them: the same bits unless two
candidates tie exactly).

    python -m benchmarks.bench_search_overheads               # ~8 minutes on one core
    python -m benchmarks.bench_search_overheads --profile     # where a one-sentence beam step goes (50k)

Untrained models (seeded) of CopyNet and the pointer-generator with coverage, emb 150 / hidden 300
(encoder 150 per direction, as benchmarks/bench_vs_onmt.py), Gigaword-shaped sources of 31 tokens,
every hypothesis decoded for exactly 16 steps (min_len = max_len); beam 10 one sentence at a time
and 64 at a time, greedy 64 at a time; the median of ``--rounds`` alternating rounds. Greedy takes
no top-k: its top_k column measures the same code as "before".
"""

from __future__ import annotations

from pipeline.runtime.math_pins import pin_math_libraries

pin_math_libraries()  # before torch: the pinned libraries, as every stage runs them

import argparse  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402

import models.extended as extended  # noqa: E402
from benchmarks.throughput import batches_for  # noqa: E402
from models.config import ModelConfig  # noqa: E402
from models.registry import DISPLAY_NAMES, build_model  # noqa: E402
from pipeline.decoding import search  # noqa: E402


def _torch_topk(scores: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    return scores.topk(k, dim=1)


_LSE = lambda x: torch.logsumexp(x, -1)  # noqa: E731
VARIANTS = {  # name -> (grad mode around search, the word-copy logsumexp, beam search's selection)
    "before (no_grad, torch.logsumexp, torch.topk)": (torch.no_grad, _LSE, _torch_topk),
    "inference_mode": (torch.inference_mode, _LSE, _torch_topk),
    "logsumexp_value": (torch.no_grad, extended.logsumexp_value, _torch_topk),
    "top_k": (torch.no_grad, _LSE, search.top_k),
    "all three (as shipped)": (torch.inference_mode, extended.logsumexp_value, search.top_k),
}
BEFORE = "before (no_grad, torch.logsumexp, torch.topk)"
SHIPPED = (extended.logsumexp_value, search.top_k)


def decode(kind: str, model, batches, mode, lse, select) -> tuple[float, list]:
    beam, greedy = search.beam_search.__wrapped__, search.greedy.__wrapped__  # undecorated: the mode is ours
    extended.logsumexp_value, search.top_k = lse, select
    try:
        start, out = time.perf_counter(), []
        with mode():
            for batch in batches:
                if kind == "greedy":
                    out.append([(h.ids, h.score) for h in greedy(model, batch, max_len=16, min_len=16)])
                else:
                    nbest = beam(model, batch, beam_size=10, max_len=16, min_len=16)
                    out.append([[(h.ids, h.score) for h in hyps] for hyps in nbest])
        return time.perf_counter() - start, out
    finally:
        extended.logsumexp_value, search.top_k = SHIPPED


def exp_microseconds(value: float | None, reps: int = 2000) -> float:
    """Microseconds of one ``torch.exp`` over a (10, 1, 31, 31) tensor (a beam of one sentence's
    word-equality block): standard normal entries, or every entry ``value``."""
    x = torch.randn(10, 1, 31, 31) if value is None else torch.full((10, 1, 31, 31), value)
    out = torch.empty_like(x)
    for _ in range(50):
        torch.exp(x, out=out)
    start = time.perf_counter()
    for _ in range(reps):
        torch.exp(x, out=out)
    return (time.perf_counter() - start) / reps * 1e6


def profile(vocab: int, name: str, sentences: int) -> None:
    """Where a step of beam 10 over one sentence goes, as shipped: ms per step and torch.profiler's
    operators by their own CPU time."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    torch.set_num_threads(1)
    _, single = batches_for(vocab, sentences, 1, 0)
    torch.manual_seed(0)
    cfg = ModelConfig(src_vocab=vocab, tgt_vocab=vocab, emb=150, hidden=300, encoder_hidden=150)
    model = build_model(name, cfg).eval()
    decode("beam", model, single[:1], *VARIANTS["all three (as shipped)"])  # warm-up: the packed weight
    seconds, _ = decode("beam", model, single, *VARIANTS["all three (as shipped)"])
    print(f"{DISPLAY_NAMES[name]}, vocabulary {vocab:,}, beam 10 one sentence at a time, 16 steps a sentence:")
    print(
        f"{sentences / seconds:.2f} sentences/s, {seconds / sentences / 16 * 1e3:.2f} ms a step (the encoder included)"
    )
    with torch_profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        decode("beam", model, single, *VARIANTS["all three (as shipped)"])
    # by input shape: the selection's operators (over the (1, N / 64) chunk maxima, the (1, 640)
    # candidates) apart from the same operators elsewhere in the step
    table = prof.key_averages(group_by_input_shape=True).table(
        sort_by="self_cpu_time_total", row_limit=40, max_name_column_width=28, max_shapes_column_width=60
    )
    print(table)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--vocabs", nargs="+", type=int, default=[16000, 50000])
    p.add_argument("--mechanisms", nargs="+", default=["copynet", "pointer_generator"])
    p.add_argument("--single", type=int, default=8, help="sentences decoded one at a time")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--profile", action="store_true", help="only profile a beam of one sentence, as shipped")
    args = p.parse_args(argv)
    if args.profile:
        return profile(max(args.vocabs), args.mechanisms[-1], args.single)
    torch.set_num_threads(1)
    print(f"torch {torch.__version__}, 1 thread, {torch.backends.cpu.get_cpu_capability()}")
    normal, floor, under, neg = (exp_microseconds(v) for v in (None, extended.EXP_FLOOR, -88.0, extended.NEG))
    print(f"exp over 9,610 entries: normal {normal:.1f} us, all -87 (the floor) {floor:.1f} us, ", end="")
    print(f"all -88 {under:.1f} us, all NEG {neg:.1f} us")
    print("\n| mechanism | vocab | search | " + " | ".join(VARIANTS) + " | same bits |")
    print("|---|---:|---|" + "---:|" * len(VARIANTS) + "---|")
    for vocab in args.vocabs:
        _, single = batches_for(vocab, args.single, 1, 0)
        _, batched = batches_for(vocab, 2, 64, 1)
        for name in args.mechanisms:
            torch.manual_seed(0)
            cfg = ModelConfig(src_vocab=vocab, tgt_vocab=vocab, emb=150, hidden=300, encoder_hidden=150)
            model = build_model(name, cfg).eval()
            for kind, batches, sentences in (
                ("beam 10, one at a time", single, args.single),
                ("beam 10, 64 at a time", batched, 128),
                ("greedy", batched, 128),
            ):
                decode(kind, model, batches[:1], *VARIANTS["all three (as shipped)"])  # warm-up
                seconds = {v: [] for v in VARIANTS}
                outputs = {}
                for _ in range(args.rounds):
                    for variant, (mode, lse, select) in VARIANTS.items():
                        s, outputs[variant] = decode(kind, model, batches, mode, lse, select)
                        seconds[variant].append(s)
                rate = {v: sentences / statistics.median(s) for v, s in seconds.items()}
                base = rate[BEFORE]
                same = all(out == outputs[BEFORE] for out in outputs.values())
                cells = " | ".join(f"{rate[v]:.1f} ({rate[v] / base:.3f}x)" for v in VARIANTS)
                print(f"| {DISPLAY_NAMES[name]} | {vocab:,} | {kind} | {cells} | {same} |", flush=True)


if __name__ == "__main__":
    main()
