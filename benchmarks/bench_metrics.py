"""Summaries per second: pipeline.metrics.rouge (ROUGE-1.5.5 port) vs rouge-score, 2,000 headline pairs, one process.

Run: ``python benchmarks/bench_metrics.py``. Both score ROUGE-1/2/L with stemming on one
reference; the pairs are random headline-length strings from a fixed vocabulary (seed 0).
"""

from __future__ import annotations

import argparse
import random
import time

from rouge_score import rouge_scorer

from pipeline.metrics.rouge import rouge


def _pairs(n: int, seed: int = 0) -> tuple[list[str], list[list[str]]]:
    rng = random.Random(seed)
    vocab = (
        "police stocks fell rallied government agreements women children ran running hurricane "
        "leaders meets talks president oil prices surge record ## percent the of in on to a for"
    ).split()
    make = lambda: " ".join(rng.choice(vocab) for _ in range(rng.randint(6, 14)))  # noqa: E731
    return [make() for _ in range(n)], [[make()] for _ in range(n)]


def main(n: int = 2000) -> None:
    hyps, refs = _pairs(n)
    t0 = time.perf_counter()
    ours = rouge(hyps, refs, n=(1, 2), stem=True)
    t_ours = time.perf_counter() - t0
    scorer = rouge_scorer.RougeScorer(["rouge1", "rouge2", "rougeL"], use_stemmer=True)
    t0 = time.perf_counter()
    theirs = [scorer.score(r[0], h) for h, r in zip(hyps, refs)]
    t_rs = time.perf_counter() - t0
    r1_rs = 100 * sum(s["rouge1"].fmeasure for s in theirs) / n
    print(f"{n} pairs, ROUGE-1/2/L with stemming")
    print(f"pipeline.metrics.rouge : {n / t_ours:9.0f} summaries/s   R-1 F {ours['rouge1']['f']:.3f}")
    print(f"rouge-score    : {n / t_rs:9.0f} summaries/s   R-1 F {r1_rs:.3f}")
    print(f"speed ratio ours / rouge-score: {t_rs / t_ours:.2f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=2000, help="headline pairs scored by each (default 2000)")
    main(parser.parse_args().pairs)
