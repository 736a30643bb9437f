"""Greedy and batched beam search in numpy over an exported model's steps (onnxruntime), by the rules
of :mod:`pipeline.decoding.search`, so an n-best list here equals PyTorch's for the same scores.

The rules, each as :func:`pipeline.decoding.search.beam_search` applies it:

- every example's beam starts as one live row (the others at NEG), and the encoder's state is
  repeated for each of the k rows; after each step the k best (row, word) candidates of an example
  survive, ties to the lower index (the earlier row, then the lower word id: a stable sort,
  :func:`top_k`), and only the *recurrent* state is reordered (the source side is the same for the
  rows of one example);
- a finished row (it emitted ``</s>``) continues with ``<pad>`` only, at cost 0, so it stays in the
  beam; the search ends when every row is finished or after ``max_len`` steps;
- ``min_len``: no ``</s>`` before that many tokens; ``ban_unk``: never ``<unk>``; ``block_ngram`` n:
  a word that would repeat an n-gram of the row's history is forbidden (:func:`block_ngrams`);
- the final ranking divides each row's score (the sum of its log-probabilities) by the GNMT length
  penalty ((5 + |y|) / 6) ** alpha; rows below NEG / 2 (an impossible word was needed) are dropped;
- ``keep_attention``: each hypothesis carries its attention weights per output step (for
  ``replace_unk``), following its row back through the beam.

Scores are float32 throughout, as the PyTorch search keeps them, and every sum is done in the same
order. No torch: only numpy and the stepper's own runtime (:class:`pipeline.serving.onnx_model.OnnxModel`).
"""

from __future__ import annotations

import threading
from typing import Protocol

import numpy as np

from models.specials import BOS, EOS, PAD, UNK
from pipeline.decoding.outcomes import (  # noqa: F401  (the exceptions: re-exported for the runtime's callers)
    DecodeCancelled,
    DecodeInterrupted,
    DecodeTimeout,
    Hypothesis,
    check_interrupt,
)

NEG = np.float32(-1e9)  # models.extended.NEG: a finite "minus infinity"


class Stepper(Protocol):
    """What the search drives (:class:`pipeline.serving.onnx_model.OnnxModel`)."""

    static_keys: frozenset[str]

    def encode(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]: ...

    def step(self, state: dict, prev_ids: np.ndarray, n_ext: int) -> tuple[np.ndarray, dict]: ...


CHUNK = 64  # pipeline.decoding.top_k's chunk size


def top_k(scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """(values (R, k), indices (R, k)): the k best entries of each row, best first, ties to the lower
    index: the order of a stable descending sort, found as :func:`pipeline.decoding.top_k.top_k` finds
    it (the k chunks of 64 entries with the best maxima, ties to the lower chunk, hold the k best
    entries; only their k * 64 candidates are sorted). A row shorter than 4 * k * 64 is sorted whole."""
    rows, n = scores.shape
    if n < 4 * k * CHUNK:
        return top_k_by_sort(scores, k)
    whole = n - n % CHUNK
    maxima = scores[:, :whole].reshape(rows, whole // CHUNK, CHUNK).max(axis=2)  # (R, C)
    if whole < n:
        maxima = np.concatenate([maxima, scores[:, whole:].max(axis=1, keepdims=True)], axis=1)  # (R, C + 1)
    kth = -np.partition(-maxima, k - 1, axis=1)[:, k - 1 : k]  # (R, 1) the k-th best chunk max
    above = maxima > kth
    tied = maxima == kth
    chosen = above | (tied & (np.cumsum(tied, axis=1) <= k - above.sum(axis=1, keepdims=True)))  # k a row
    chunk = np.nonzero(chosen)[1].reshape(rows, k)  # (R, k) ascending
    index = (chunk[:, :, None] * CHUNK + np.arange(CHUNK)).reshape(rows, -1)  # (R, k * 64) ascending
    values = np.take_along_axis(scores, np.minimum(index, n - 1), axis=1)
    if whole < n:  # the short chunk's positions past the row: never among the k
        values[index >= n] = -np.inf
    order = np.argsort(-values, axis=1, kind="stable")[:, :k]
    return np.take_along_axis(values, order, axis=1), np.take_along_axis(index, order, axis=1)


def top_k_by_sort(scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The same by a stable sort of every row (:func:`pipeline.decoding.top_k.top_k_by_sort`)."""
    order = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    return np.take_along_axis(scores, order, axis=1), order


def block_ngrams(log_probs: np.ndarray, history: np.ndarray, n: int) -> np.ndarray:
    """Forbid (NEG) each word that would repeat an n-gram already in the row's history (R, t); as the
    PyTorch search, when any row has such a word the ``<pad>`` column of every row is set to NEG too."""
    t = history.shape[1]
    if n <= 0 or t < n:
        return log_probs
    prefix = history[:, t - n + 1 :]  # (R, n-1)
    windows = np.lib.stride_tricks.sliding_window_view(history, n, axis=1)  # (R, t-n+1, n)
    seen = (windows[:, :, :-1] == prefix[:, None, :]).all(axis=2)  # (R, W)
    if not seen.any():
        return log_probs
    banned = np.where(seen, windows[:, :, -1], PAD)  # (R, W)
    out = log_probs.copy()
    np.put_along_axis(out, banned, NEG, axis=1)
    return out


def length_penalty(lengths: np.ndarray, alpha: float) -> np.ndarray:
    """GNMT: ((5 + |y|) / 6) ** alpha in float32 (alpha 0: 1)."""
    return ((np.float32(5.0) + lengths.astype(np.float32)) / np.float32(6.0)) ** np.float32(alpha)


def _repeat(state: dict, k: int) -> dict:
    return {key: np.repeat(v, k, axis=0) for key, v in state.items()}


def _reorder(state: dict, index: np.ndarray, skip: frozenset[str]) -> dict:
    return {key: v if key in skip else v[index] for key, v in state.items()}


def beam_search(
    model: Stepper,
    batch: dict[str, np.ndarray],
    n_ext: int,
    beam_size: int = 10,
    max_len: int = 50,
    min_len: int = 0,
    alpha: float = 0.0,
    block_ngram: int = 0,
    deadline: float | None = None,
    stop: threading.Event | None = None,
    ban_unk: bool = False,
    keep_attention: bool = False,
) -> list[list[Hypothesis]]:
    """Top ``beam_size`` hypotheses per example, best first (the module docstring's rules).
    ``batch``: the encoder's inputs (``src`` (B, S) ...); ``n_ext``: the batch's OOV slots."""
    check_interrupt(deadline, stop)
    bsz, k = batch["src"].shape[0], beam_size
    static = model.static_keys
    state = _repeat(model.encode(batch), k)
    scores = np.full((bsz, k), NEG, np.float32)
    scores[:, 0] = 0.0
    scores = scores.reshape(-1)  # (B*K,)
    prev = np.full(bsz * k, BOS, np.int64)
    history = np.empty((bsz * k, 0), np.int64)
    finished = np.zeros(bsz * k, bool)
    lengths = np.zeros(bsz * k, np.int64)
    base = (np.arange(bsz) * k)[:, None]  # (B, 1)
    attention: list[np.ndarray] = []
    origins: list[np.ndarray] = []
    for t in range(max_len):
        check_interrupt(deadline, stop, t)
        log_probs, updates = model.step(state, prev, n_ext)  # (B*K, V+X)
        state = {**state, **updates}
        if t < min_len:
            log_probs[:, EOS] = NEG
        if ban_unk:
            log_probs[:, UNK] = NEG
        if keep_attention and "attn" in updates:
            attention.append(updates["attn"])  # (B*K, S)
        log_probs = block_ngrams(log_probs, history, block_ngram)
        if finished.any():
            log_probs[finished] = NEG
            log_probs[finished, PAD] = 0.0
        vocab = log_probs.shape[1]
        total = np.add(log_probs, scores[:, None], out=log_probs).reshape(bsz, k * vocab)  # float32, in place
        top_scores, top_idx = top_k(total, k)  # (B, K)
        origin = (base + top_idx // vocab).reshape(-1)  # (B*K,)
        token = (top_idx % vocab).reshape(-1)
        state = _reorder(state, origin, static)
        was_finished = finished[origin]
        lengths = lengths[origin] + (~was_finished)
        finished = was_finished | (token == EOS)
        history = np.concatenate([history[origin], token[:, None]], axis=1)
        scores, prev = top_scores.reshape(-1), token
        origins.append(origin)
        if finished.all():
            break
    rank = scores / length_penalty(lengths, alpha)
    traces = _attention_paths(attention, origins) if attention else None  # (B*K, T, S)
    out = []
    hist, final, ranked = history.tolist(), scores.tolist(), rank.tolist()
    for b in range(bsz):
        hyps = []
        for r in range(b * k, (b + 1) * k):
            if final[r] > NEG / 2:
                ids = [i for i in hist[r] if i != PAD]
                trace = None if traces is None else {"attn": traces[r, : len(ids)]}
                hyps.append(Hypothesis(ids, final[r], ranked[r], trace))
        out.append(sorted(hyps, key=lambda h: -h.rank_score))
    return out


def _attention_paths(attention: list[np.ndarray], origins: list[np.ndarray]) -> np.ndarray:
    """Each final row's attention at every step, following it back through the beam: (B*K, T, S)."""
    rows = np.arange(origins[-1].size)
    steps = []
    for t in range(len(origins) - 1, -1, -1):
        rows = origins[t][rows]
        steps.append(attention[t][rows])
    return np.stack(steps[::-1], axis=1)


def greedy(
    model: Stepper,
    batch: dict[str, np.ndarray],
    n_ext: int,
    max_len: int = 50,
    deadline: float | None = None,
    stop: threading.Event | None = None,
    ban_unk: bool = False,
    min_len: int = 0,
) -> list[Hypothesis]:
    """Argmax decoding (:func:`pipeline.decoding.search.greedy`): the first best word each step."""
    check_interrupt(deadline, stop)
    size = batch["src"].shape[0]
    state = model.encode(batch)
    prev = np.full(size, BOS, np.int64)
    finished = np.zeros(size, bool)
    scores = np.zeros(size, np.float32)
    steps = []
    for t in range(max_len):
        check_interrupt(deadline, stop, t)
        log_probs, updates = model.step(state, prev, n_ext)
        state = {**state, **updates}
        if t < min_len:
            log_probs[:, EOS] = NEG
        if ban_unk:
            log_probs[:, UNK] = NEG
        token = log_probs.argmax(axis=1)  # the first maximum, as torch.max
        best = log_probs[np.arange(size), token]
        token = np.where(finished, PAD, token)
        scores = scores + np.where(finished, np.float32(0.0), best)
        steps.append(token)
        finished = finished | (token == EOS)
        prev = token
        if finished.all():
            break
    ids, final = np.stack(steps, axis=1).tolist(), scores.tolist()
    return [Hypothesis([i for i in ids[b] if i != PAD], final[b], final[b]) for b in range(size)]
