"""Confidence intervals and paired tests for a comparison table, counting two noise sources.

A cell of a comparison table is a mean over training seeds of a metric on one test set; both the
seeds and the test set are samples. :class:`Bootstrap` resamples both: each replicate draws the
test set's natural groups with replacement (e.g. the 35 rules of the synthetic task, else single
examples: examples of one group are not independent) and draws the seeds with replacement, and the
metric is recomputed on the drawn data. :meth:`Bootstrap.paired` tests a row against the best row
on the very same replicates, so the variation both rows share cancels.

The metric is recomputed from per-example contributions (:class:`ExampleScores`), built with the
conventions of :mod:`pipeline.metrics.registry` so that the unweighted score is the reported
figure: percent values averaged over examples, or BLEU's sufficient statistics summed, then BLEU.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from sacrebleu.metrics import BLEU

from pipeline.metrics.registry import TEXT_METRIC_KINDS
from pipeline.metrics.rouge import METRIC_KEYS, rouge_per_summary
from pipeline.metrics.sari import sentence_sari

__all__ = [
    "ExampleScores",
    "exact_match_scores",
    "text_example_scores",
    "Interval",
    "Comparison",
    "Bootstrap",
]

# The settings of pipeline.metrics.bleu (multi-bleu.perl). sacrebleu's own paired_bootstrap is not
# used: it resamples examples only (not groups) and knows nothing of training seeds; its
# per-sentence sufficient statistics and its score-from-statistics are what we reuse.
_BLEU = BLEU(tokenize="none", smooth_method="none", force=True, lowercase=False)

# registry.text_metrics' ROUGE kinds: rouge_per_summary's arguments and the headline key of (R, P, F).
_ROUGE = {
    "rouge_f": (dict(n=(1, 2), stem=True), "f"),
    "rouge_f_chars": (dict(n=(1, 2), units="chars"), "f"),
    "rouge_recall_75": (dict(n=(1, 2), stem=True, byte_limit=75, multi_ref="pool"), "r"),
}


BLEU_STATS = 2 + 2 * 4  # sacrebleu's sufficient statistics of one sentence


@dataclass(frozen=True, eq=False)  # eq=False: arrays have no single truth value (identity equality)
class ExampleScores:
    """One system's per-example contributions to one metric on one split, and how they aggregate."""

    # "mean" (percent values, mean over examples) | "bleu" (sacrebleu sufficient statistics, summed, then BLEU)
    aggregate_kind: str
    values: np.ndarray  # (N,) for "mean"; (N, S) for "bleu"

    def __post_init__(self) -> None:
        ndim = {"mean": 1, "bleu": 2}.get(self.aggregate_kind)
        if ndim is None:
            raise ValueError(f"ExampleScores: aggregate_kind must be 'mean' or 'bleu', got {self.aggregate_kind!r}")
        if np.ndim(self.values) != ndim:
            raise ValueError(
                f"ExampleScores({self.aggregate_kind!r}): values must be {ndim}-D, got {np.shape(self.values)}"
            )
        if ndim == 2 and np.shape(self.values)[1] != BLEU_STATS:
            raise ValueError(
                f"ExampleScores('bleu'): each row must hold sacrebleu's {BLEU_STATS} statistics (hypothesis and "
                f"reference length, 4 n-gram matches, 4 totals), got {np.shape(self.values)}"
            )

    def __len__(self) -> int:
        return len(self.values)

    def score(self, weights: np.ndarray | None = None) -> float:
        """The metric over the examples, each counted ``weights[i]`` times (None: once each)."""
        w = np.ones(len(self)) if weights is None else np.asarray(weights, dtype=float)
        return float(self.scores(w[None, :])[0])

    def scores(self, weights: np.ndarray) -> np.ndarray:
        """The metric under each row of ``weights`` (R, N) of example counts -> (R,)."""
        if self.aggregate_kind == "mean":
            total = weights.sum(axis=1)  # (R,)
            return np.where(total > 0, weights @ self.values / np.where(total > 0, total, 1), 0.0)
        stats = np.rint(weights @ self.values).astype(np.int64)  # (R, S) summed statistics, exact integers
        return np.array([_BLEU._compute_score_from_stats([int(x) for x in row]).score for row in stats])


def exact_match_scores(golds: list[list[str]], nbests: list[list[list[str]]], k: int) -> dict[str, ExampleScores]:
    """Per-example top-1 and top-k exact match (0 or 100), as ``registry.exact_match``."""
    if len(golds) != len(nbests):
        raise ValueError(f"exact match: {len(golds)} references but {len(nbests)} n-best lists")
    top1 = [100.0 * (bool(nb) and nb[0] == g) for g, nb in zip(golds, nbests)]
    topk = [100.0 * (g in nb[:k]) for g, nb in zip(golds, nbests)]
    return {"top1": ExampleScores("mean", np.array(top1)), f"top{k}": ExampleScores("mean", np.array(topk))}


def _bleu_stats(hyps: Sequence[str], refs: Sequence[Sequence[str]]) -> ExampleScores:
    """sacrebleu's per-sentence statistics (N, 2 + 2 * 4): hyp length, closest ref length, matches, totals."""
    width = max((len(r) for r in refs), default=0)
    streams = [[r[k] if k < len(r) else None for r in refs] for k in range(width)]  # None: no such reference
    rows = _BLEU._extract_corpus_statistics(list(hyps), streams) if hyps else []
    return ExampleScores("bleu", np.array(rows, dtype=np.int64).reshape(len(hyps), 2 + 2 * _BLEU.max_ngram_order))


def text_example_scores(
    kind: str,
    hyps: Sequence[Sequence[str]],
    refs: Sequence[Sequence[Sequence[str]]],
    srcs: Sequence[Sequence[str]] | None = None,
    refs_raw: Sequence[Sequence[str]] | None = None,
) -> dict[str, ExampleScores]:
    """Per-example scores of every number ``registry.text_metrics(kind, ...)`` returns (same arguments)."""
    if kind not in TEXT_METRIC_KINDS:
        raise ValueError(f"text_example_scores: unknown kind {kind!r}; expected one of {TEXT_METRIC_KINDS}")
    if len(hyps) != len(refs):
        raise ValueError(f"text_example_scores({kind!r}): {len(hyps)} hypotheses but {len(refs)} reference sets")
    if any(len(r) == 0 for r in refs):
        raise ValueError(f"text_example_scores({kind!r}): an example has no reference")
    hyp_s = [" ".join(h) for h in hyps]  # the texts registry.text_metrics scores
    ref_s = [[" ".join(r) for r in rs] for rs in refs]
    if kind in _ROUGE:
        kwargs, main = _ROUGE[kind]
        if kind == "rouge_recall_75" and refs_raw is not None:
            if len(refs_raw) != len(hyps):
                raise ValueError(
                    f"text_example_scores({kind!r}): {len(hyps)} hypotheses but {len(refs_raw)} refs_raw sets"
                )
            ref_s = [list(r) for r in refs_raw]
        out = {}
        for name, rows in rouge_per_summary(hyp_s, ref_s, **kwargs).items():
            rpf = 100.0 * np.array(rows, dtype=float).reshape(len(hyps), 3)  # (N, 3) percent R, P, F
            out[name] = ExampleScores("mean", rpf[:, METRIC_KEYS.index(main)].copy())
            for i, key in enumerate(METRIC_KEYS):
                out[f"{name}_{key}"] = ExampleScores("mean", rpf[:, i].copy())
        return out
    out = {"bleu": _bleu_stats(hyp_s, ref_s)}
    if kind == "bleu_sari":
        if srcs is None or len(srcs) != len(hyps):
            got = "None" if srcs is None else len(srcs)
            raise ValueError(
                f"text_example_scores('bleu_sari'): needs srcs, one per hypothesis ({len(hyps)}), got {got}"
            )
        sari = [100.0 * sentence_sari(" ".join(s), h, r) for s, h, r in zip(srcs, hyp_s, ref_s)]
        out["sari"] = ExampleScores("mean", np.array(sari, dtype=float))
    return out


@dataclass(frozen=True)
class Interval:
    mean: float  # mean over seeds of each seed's full-data score
    sd: float | None  # sample sd over seeds (ddof=1); None with one seed
    low: float  # the (1 - level) / 2 quantile of the replicates
    high: float  # the (1 + level) / 2 quantile
    seeds: int
    replicates: np.ndarray = field(repr=False, compare=False)  # (R,)


@dataclass(frozen=True)
class Comparison:
    difference: float  # row.mean - best.mean
    low: float  # quantile interval of row.replicates - best.replicates
    high: float
    p_value: float  # two-sided: min(1, 2 * min(share of diffs <= 0, share of diffs >= 0))
    significant: bool  # p_value < 1 - level


class Bootstrap:
    """Seeded replicates of one test set (its groups drawn with replacement), shared by every row of a table."""

    def __init__(
        self, n_examples: int, groups: Sequence | None = None, resamples: int = 1000, seed: int = 0, level: float = 0.95
    ):
        if n_examples < 1 or resamples < 1 or not 0 < level < 1:
            raise ValueError(
                f"Bootstrap: needs n_examples >= 1, resamples >= 1, 0 < level < 1; got {n_examples}, {resamples}, {level}"
            )
        if groups is None:
            group_of = np.arange(n_examples)  # every example its own group
        else:
            if len(groups) != n_examples:
                raise ValueError(f"Bootstrap: {len(groups)} group labels for {n_examples} examples")
            ids = {g: i for i, g in enumerate(dict.fromkeys(groups))}  # first-appearance order: no sorting of labels
            group_of = np.array([ids[g] for g in groups])
        n_groups = int(group_of.max()) + 1
        draws = np.random.default_rng(seed).integers(0, n_groups, size=(resamples, n_groups))  # (R, G) drawn groups
        offsets = np.arange(resamples)[:, None] * n_groups
        counts = np.bincount((draws + offsets).ravel(), minlength=resamples * n_groups).reshape(resamples, n_groups)
        self.weights = counts[:, group_of].astype(float)  # (R, N) times each example is counted
        self.n_examples, self.n_groups, self.grouped = n_examples, n_groups, groups is not None
        self.resamples, self.seed, self.level = resamples, seed, level

    @property
    def unit(self) -> str:
        """What is resampled, for table notes: "35 groups" or "2100 examples"."""
        return f"{self.n_groups} groups" if self.grouped else f"{self.n_examples} examples"

    def _quantiles(self, x: np.ndarray) -> tuple[float, float]:
        tail = (1 - self.level) / 2
        low, high = np.quantile(x, [tail, 1 - tail], method="inverted_cdf")  # observed values, no interpolation
        return float(low), float(high)

    def interval(self, seeds: Sequence[ExampleScores]) -> Interval:
        """A row's mean over seeds and its interval: replicate r draws len(seeds) seeds with replacement
        (the same draws for every row with as many seeds) and averages their scores on resample r."""
        if not seeds:
            raise ValueError("Bootstrap.interval: no seeds")
        for s in seeds:
            if len(s) != self.n_examples:
                raise ValueError(f"Bootstrap.interval: a seed has {len(s)} examples, the bootstrap {self.n_examples}")
        full = np.array([s.score() for s in seeds])  # (K,) each seed's reported figure
        per_seed = np.stack([s.scores(self.weights) for s in seeds])  # (K, R)
        k = len(seeds)
        picks = np.random.default_rng([self.seed, 1]).integers(0, k, size=(self.resamples, k))  # (R, K) drawn seeds
        replicates = per_seed[picks, np.arange(self.resamples)[:, None]].mean(axis=1)  # (R,)
        low, high = self._quantiles(replicates)
        sd = float(np.std(full, ddof=1)) if k > 1 else None
        return Interval(float(full.mean()), sd, low, high, k, replicates)

    def paired(self, row: Interval, best: Interval) -> Comparison:
        """``row`` against ``best`` on the same replicates (both from this bootstrap's :meth:`interval`)."""
        if len(row.replicates) != self.resamples or len(best.replicates) != self.resamples:
            raise ValueError(
                f"Bootstrap.paired: {len(row.replicates)} and {len(best.replicates)} replicates, "
                f"the bootstrap has {self.resamples}"
            )
        diffs = row.replicates - best.replicates  # (R,)
        low, high = self._quantiles(diffs)
        p = min(1.0, 2 * min(np.mean(diffs <= 0), np.mean(diffs >= 0)))
        return Comparison(row.mean - best.mean, low, high, float(p), bool(p < 1 - self.level))
