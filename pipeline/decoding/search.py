"""Greedy and batched beam search over the extended vocabulary, for every mechanism.

Both drive ``model.encode(batch)`` and ``model.step(state, prev_ids) -> (log_probs_ext, state)``.
Beam search keeps finished hypotheses in the beam (a finished row may only extend with <pad>
at cost 0), so with a beam as wide as the number of prefixes it is exhaustive: the tests check
it against brute-force enumeration. Each step keeps the k best (row, word) candidates, ties to the
lower index (:mod:`pipeline.decoding.top_k`). Options: min/max length, GNMT length penalty for the final
ranking, n-gram blocking, ``ban_unk`` (``<unk>`` is never emitted: the search takes the best other
word, a copy among them; OpenNMT-py's ``--ban_unk_token``), ``keep_attention`` (each hypothesis
carries its attention weights per output step, for ``replace_unk``). ``deadline`` (a ``time.monotonic()`` value) and ``stop`` (an event) are
checked before every decoding step: past the deadline the search raises :class:`DecodeTimeout`,
once ``stop`` is set :class:`DecodeCancelled` (a server that is told to stop, a client gone).
Neither given, the search runs as before.
"""

from __future__ import annotations

import threading

import torch

from models.extended import NEG
from pipeline.decoding.outcomes import (  # noqa: F401  (the exceptions: re-exported for the search's callers)
    DecodeCancelled,
    DecodeInterrupted,
    DecodeTimeout,
    Hypothesis,
    check_interrupt,
)
from pipeline.decoding.top_k import top_k
from pipeline.vocab.vocabulary import BOS, EOS, PAD, UNK


def reorder_state(state: dict, index: torch.Tensor, skip: frozenset[str] = frozenset()) -> dict:
    """Select rows of every batch-first tensor in the decoder state, except the keys in ``skip``."""
    return {k: v.index_select(0, index) if torch.is_tensor(v) and k not in skip else v for k, v in state.items()}


def _length_penalty(length: torch.Tensor, alpha: float) -> torch.Tensor:
    """GNMT (Wu et al. 2016): ((5 + |y|) / 6) ** alpha; alpha = 0 gives plain log-probability."""
    return ((5.0 + length.float()) / 6.0) ** alpha


def _block_ngrams(log_probs: torch.Tensor, history: torch.Tensor, n: int) -> torch.Tensor:
    """Forbid tokens that would repeat an n-gram already in the hypothesis. history: (R, t)."""
    t = history.size(1)
    if n <= 0 or t < n:
        return log_probs
    prefix = history[:, t - n + 1 :]  # (R, n-1) the last n-1 tokens
    windows = history.unfold(1, n, 1)  # (R, t-n+1, n) every n-gram so far
    seen = (windows[:, :, :-1] == prefix.unsqueeze(1)).all(dim=2)  # (R, W): n-gram starts like prefix
    banned = torch.where(seen, windows[:, :, -1], torch.full_like(windows[:, :, -1], PAD))  # (R, W)
    return log_probs.scatter(1, banned, NEG) if seen.any() else log_probs


# inference_mode, not no_grad: no version counters or autograd bookkeeping on the few hundred small
# operations of a step (3-8% of a beam of one sentence, measured; the same outputs).
@torch.inference_mode()
def beam_search(
    model,
    batch,
    beam_size: int = 10,
    max_len: int = 50,
    min_len: int = 0,
    length_penalty: float = 0.0,
    block_ngram: int = 0,
    deadline: float | None = None,
    stop: threading.Event | None = None,
    ban_unk: bool = False,
    keep_attention: bool = False,
) -> list[list[Hypothesis]]:
    """Top ``beam_size`` hypotheses per example, best first. All examples decode at once.
    ``deadline``/``stop``: see the module docstring (checked before the encoder and each step).
    ``keep_attention``: each hypothesis's ``trace["attn"]`` (its length, S), when the model attends."""
    check_interrupt(deadline, stop)
    device = batch.src.device
    bsz, k = batch.size, beam_size
    state = reorder_state(model.encode(batch), torch.arange(bsz, device=device).repeat_interleave(k))
    static = getattr(model, "static_state_keys", frozenset())
    scores = torch.full((bsz, k), NEG, device=device)
    scores[:, 0] = 0.0  # only the first beam is live at the start: no duplicate hypotheses
    scores = scores.view(-1)  # (B*K,)
    prev = torch.full((bsz * k,), BOS, dtype=torch.long, device=device)
    history = torch.empty((bsz * k, 0), dtype=torch.long, device=device)
    finished = torch.zeros(bsz * k, dtype=torch.bool, device=device)
    lengths = torch.zeros(bsz * k, dtype=torch.long, device=device)
    base = (torch.arange(bsz, device=device) * k).unsqueeze(1)  # (B, 1)
    attention: list[torch.Tensor] = []  # per step (B*K, S), rows of the beam before that step's reorder
    origins: list[torch.Tensor] = []  # per step (B*K,): the row each survivor came from

    for t in range(max_len):
        check_interrupt(deadline, stop, t)
        log_probs, state = model.step(state, prev)  # (B*K, V+X)
        log_probs = log_probs.float()
        if t < min_len:
            log_probs[:, EOS] = NEG
        if ban_unk:
            log_probs[:, UNK] = NEG
        if keep_attention and "attn" in state:
            attention.append(state["attn"].float())  # (B*K, S) a_t of each row
        log_probs = _block_ngrams(log_probs, history, block_ngram)
        # A finished hypothesis continues only with <pad>, at no cost. In place, on the finished rows
        # only: a (B*K, V+X) mask and a where would be two more passes over the scores every step.
        done = finished.nonzero().squeeze(1)  # (D,)
        if done.numel():
            log_probs.index_fill_(0, done, NEG)
            log_probs[done, PAD] = 0.0
        vocab = log_probs.size(1)
        total = log_probs.add_(scores.unsqueeze(1)).view(bsz, k * vocab)  # (B, K*V), in place
        top_scores, top_idx = top_k(total, k)  # (B, K), ties to the lower index (row, then word)
        origin = (base + top_idx // vocab).view(-1)  # (B*K,) source row of each survivor
        token = (top_idx % vocab).view(-1)  # (B*K,)
        state = reorder_state(state, origin, static)  # source-side tensors stay: same example
        was_finished = finished.index_select(0, origin)
        lengths = lengths.index_select(0, origin) + (~was_finished).long()
        finished = was_finished | (token == EOS)
        history = torch.cat([history.index_select(0, origin), token.unsqueeze(1)], dim=1)
        scores, prev = top_scores.view(-1), token
        origins.append(origin)
        if bool(finished.all()):
            break

    rank = scores / _length_penalty(lengths, length_penalty)
    traces = _attention_paths(attention, origins) if attention else None  # (B*K, T, S)
    out: list[list[Hypothesis]] = []
    # One copy to the host for all rows (on a GPU, reading them one by one would wait B x K times).
    hist, final, ranked = history.tolist(), scores.tolist(), rank.tolist()
    traces = traces.cpu() if traces is not None else None
    for b in range(bsz):
        rows = range(b * k, (b + 1) * k)
        # Rows below NEG/2 used an impossible token (only when fewer than K candidates exist).
        hyps = [
            Hypothesis(
                ids := [i for i in hist[r] if i != PAD],
                final[r],
                ranked[r],
                None if traces is None else {"attn": traces[r, : len(ids)]},
            )
            for r in rows
            if final[r] > NEG / 2
        ]
        out.append(sorted(hyps, key=lambda h: -h.rank_score))
    return out


def _attention_paths(attention: list[torch.Tensor], origins: list[torch.Tensor]) -> torch.Tensor:
    """The attention of each final beam row at every step, following the row back through the beam:
    step t's weights of the row that survivor r descends from. (B*K, T, S)."""
    rows = torch.arange(origins[-1].numel(), device=origins[-1].device)  # final rows
    steps = []
    for t in range(len(origins) - 1, -1, -1):
        rows = origins[t].index_select(0, rows)  # the row (before step t's reorder) each descends from
        steps.append(attention[t].index_select(0, rows))  # (B*K, S)
    return torch.stack(steps[::-1], dim=1)


@torch.inference_mode()
def greedy(
    model,
    batch,
    max_len: int = 50,
    trace_keys: tuple[str, ...] = (),
    deadline: float | None = None,
    stop: threading.Event | None = None,
    ban_unk: bool = False,
    min_len: int = 0,
) -> list[Hypothesis]:
    """Argmax decoding; ``trace_keys`` records state tensors per step (e.g. 'copy_logp', 'attn');
    ``deadline``/``stop`` as for :func:`beam_search`; ``min_len``: no </s> before that many tokens
    (as :func:`beam_search`)."""
    check_interrupt(deadline, stop)
    device = batch.src.device
    state = model.encode(batch)
    prev = torch.full((batch.size,), BOS, dtype=torch.long, device=device)
    finished = torch.zeros(batch.size, dtype=torch.bool, device=device)
    scores = torch.zeros(batch.size, device=device)
    steps, traces = [], {key: [] for key in trace_keys}
    for t in range(max_len):
        check_interrupt(deadline, stop, t)
        log_probs, state = model.step(state, prev)
        log_probs = log_probs.float()
        if t < min_len:
            log_probs[:, EOS] = NEG
        if ban_unk:
            log_probs[:, UNK] = NEG
        best_lp, token = log_probs.max(dim=1)
        token = token.masked_fill(finished, PAD)
        scores = scores + best_lp.masked_fill(finished, 0.0)
        for key in trace_keys:
            if key in state:
                traces[key].append(state[key].float().cpu())
        steps.append(token)
        finished = finished | (token == EOS)
        prev = token
        if bool(finished.all()):
            break
    ids, final = torch.stack(steps, dim=1).tolist(), scores.tolist()  # one copy to the host each
    out = []
    for b in range(batch.size):
        seq = [i for i in ids[b] if i != PAD]
        trace = {key: torch.stack([step[b] for step in traces[key]])[: len(seq)] for key in trace_keys if traces[key]}
        out.append(Hypothesis(seq, final[b], final[b], trace or None))
    return out
