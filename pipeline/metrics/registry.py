"""Evaluation metrics: exact match (CopyNet Table 1) and the text metrics each task reports.

``text_metrics`` is the one entry point the evaluate stage uses for text tasks; each ``kind`` is
the convention of the papers it is compared with (docs/paper_tasks.md):

* ``rouge_f`` -- Gigaword (Rush et al. 2015; Read-Again Table 1): full-length ROUGE-1/2/L F1 of
  ROUGE-1.5.5 with Porter stemming (``-m``), as NAMAS' ``DUC/eval.sh`` runs it
  (``ROUGE-1.5.5.pl -m -n 2 -w 1.2 -a``); one reference, so pooling does not matter.
* ``rouge_f_chars`` -- LCSTS (Hu et al. 2015; CopyNet Table 3, WEAN Table 4): the same F1 on
  characters, every non-space character one unit, no stemming.
* ``rouge_recall_75`` -- DUC2004 (Rush et al.; Read-Again Table 2): ROUGE-1/2/L recall with the
  hypothesis and every reference cut to 75 bytes and counts pooled over the 4 references
  (``ROUGE-1.5.5.pl -m -b 75 -n 4 -a``, ``-f A``).
* ``bleu_sari`` -- PWKP / TurkCorpus (WEAN Tables 1-2): corpus BLEU as multi-bleu.perl
  (``pipeline.metrics.bleu``) and SARI (``pipeline.metrics.sari``).

All ROUGE numbers are the exact mean of ROUGE-1.5.5's per-summary scores (``pipeline.metrics.rouge``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence

from pipeline.metrics.bleu import corpus_bleu
from pipeline.metrics.rouge import rouge
from pipeline.metrics.sari import corpus_sari


def exact_match(golds: list[list[str]], nbests: list[list[list[str]]], k: int) -> dict:
    """top-1 and top-k exact-match accuracy in percent; nbests[i] is ranked best first."""
    if len(golds) != len(nbests):
        raise ValueError(f"exact match: {len(golds)} references but {len(nbests)} n-best lists")
    n = len(golds)
    if n == 0:
        return {"n": 0, "top1": 0.0, f"top{k}": 0.0}
    top1 = sum(bool(nb) and nb[0] == g for g, nb in zip(golds, nbests))
    topk = sum(g in nb[:k] for g, nb in zip(golds, nbests))
    return {"n": n, "top1": 100.0 * top1 / n, f"top{k}": 100.0 * topk / n}


def exact_match_by_group(golds, nbests, groups: list[str] | None, k: int) -> dict:
    """Overall metrics plus the same per group (e.g. per rule type) under 'by_<group>'."""
    out = exact_match(golds, nbests, k)
    if groups is not None:
        index: dict[str, list[int]] = defaultdict(list)
        for i, g in enumerate(groups):
            index[g].append(i)
        out["groups"] = {
            g: exact_match([golds[i] for i in rows], [nbests[i] for i in rows], k) for g, rows in sorted(index.items())
        }
    return out


def _flatten_rouge(scores: dict, main: str) -> dict:
    """``{"rouge1": main, "rouge1_r": R, "rouge1_p": P, "rouge1_f": F, ...}`` from ``rouge()``."""
    out: dict = {}
    for name, rpf in scores.items():
        if name == "n":
            continue
        out[name] = rpf[main]
        for key, value in rpf.items():
            out[f"{name}_{key}"] = value
    return out


# One function per metric kind: (hypotheses, references per hypothesis, sources or None, raw
# references or None) -> scores. Texts are token lists joined with single spaces, the files the
# official tools would read. Adding a metric is adding an entry to TEXT_METRICS (docs/extending.md).
def rouge_f(hyps: list[str], refs: list[list[str]], srcs, refs_raw) -> dict:
    """Full-length ROUGE-1/2/L F1 with ROUGE-1.5.5's stemmer (Gigaword)."""
    return _flatten_rouge(rouge(hyps, refs, n=(1, 2), stem=True), "f")


def rouge_f_chars(hyps: list[str], refs: list[list[str]], srcs, refs_raw) -> dict:
    """ROUGE-1/2/L F1 on characters, no stemming (LCSTS)."""
    return _flatten_rouge(rouge(hyps, refs, n=(1, 2), units="chars"), "f")


def rouge_recall_75(hyps: list[str], refs: list[list[str]], srcs, refs_raw) -> dict:
    """ROUGE-1/2/L recall at 75 bytes, references pooled (DUC 2004); the cut is taken on the raw
    reference text when given (``refs_raw``)."""
    if refs_raw is not None:
        if len(refs_raw) != len(hyps):
            raise ValueError(
                f"text_metrics('rouge_recall_75'): {len(hyps)} hypotheses but {len(refs_raw)} refs_raw sets"
            )
        refs = [list(r) for r in refs_raw]
    return _flatten_rouge(rouge(hyps, refs, n=(1, 2), stem=True, byte_limit=75, multi_ref="pool"), "r")


def bleu(hyps: list[str], refs: list[list[str]], srcs, refs_raw) -> dict:
    """Corpus BLEU as multi-bleu.perl on tokenised text (Pointer Softmax 5.3, Europarl)."""
    return {"bleu": corpus_bleu(hyps, refs)}


def bleu_sari(hyps: list[str], refs: list[list[str]], srcs, refs_raw) -> dict:
    """Corpus BLEU and SARI (WEAN's simplification tables); needs the sources."""
    if srcs is None or len(srcs) != len(hyps):
        raise ValueError(
            f"text_metrics('bleu_sari'): needs srcs, one per hypothesis ({len(hyps)}), got "
            f"{'None' if srcs is None else len(srcs)}"
        )
    return {"bleu": corpus_bleu(hyps, refs), "sari": corpus_sari([" ".join(s) for s in srcs], hyps, refs)}


TEXT_METRICS: dict[str, Callable[..., dict]] = {
    "rouge_f": rouge_f,
    "rouge_f_chars": rouge_f_chars,
    "rouge_recall_75": rouge_recall_75,
    "bleu": bleu,
    "bleu_sari": bleu_sari,
}
TEXT_METRIC_KINDS = tuple(TEXT_METRICS)


def text_metrics(
    kind: str,
    hyps: Sequence[Sequence[str]],
    refs: Sequence[Sequence[Sequence[str]]],
    srcs: Sequence[Sequence[str]] | None = None,
    refs_raw: Sequence[Sequence[str]] | None = None,
) -> dict:
    """Score token-list hypotheses against token-list references with the task's convention.

    ``hyps[i]`` is a token list, ``refs[i]`` a list of reference token lists, ``srcs[i]`` the
    source tokens (``bleu_sari`` only). ``refs_raw[i]`` (``rouge_recall_75`` only) are the
    untokenised reference strings, used instead of the joined tokens when given, since the 75-byte
    cut is taken on the text as written. Returns ``{"n": N, ...}`` with scores in percent:
    ``rouge1``, ``rouge2``, ``rougeL`` (F1, or recall for ``rouge_recall_75``) plus ``_r``,
    ``_p``, ``_f`` variants; ``bleu`` and ``sari`` for ``bleu_sari``.
    """
    if kind not in TEXT_METRICS:
        raise ValueError(f"text_metrics: unknown kind {kind!r}; expected one of {TEXT_METRIC_KINDS}")
    if len(hyps) != len(refs):
        raise ValueError(f"text_metrics({kind!r}): {len(hyps)} hypotheses but {len(refs)} reference sets")
    for i, r in enumerate(refs):
        if len(r) == 0:
            raise ValueError(f"text_metrics({kind!r}): example {i} has no reference")
    hyp_s = [" ".join(h) for h in hyps]
    ref_s = [[" ".join(r) for r in rs] for rs in refs]
    return {"n": len(hyps), **TEXT_METRICS[kind](hyp_s, ref_s, srcs, refs_raw)}
