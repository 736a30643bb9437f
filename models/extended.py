"""The extended-vocabulary maths every mechanism and the search share, in log space.

Every copy mechanism predicts over ``V + X`` ids, where ``V`` is the decoder's vocabulary and ``X``
the largest number of distinct source words outside ``V`` in the batch (each example numbers its own
OOVs from ``V`` in order of first appearance: ``pipeline.vocab.extended`` for strings,
``pipeline.vocab.encoded`` for id-encoded splits; slots beyond an example's own OOVs carry ``NEG``).

- ``extended_log_probs`` builds, and ``gold_log_probs`` reads at the gold ids only, any output
  layer's distribution log p(w) = logaddexp(gen_shift + gen[w], copy_shift + logsumexp_{j: x_j = w}
  copy[j]) (``models.seq2seq.Scores``): both merge the copy mass of every source position holding the
  same word (CopyNet eq. 6's sum over repeated source words) in log space, over the batch at once (no
  Python loop); ``pad_extended`` lifts a distribution over V to V + X.
- ``shared_normaliser``: log Z of generate and copy scores under one normaliser (CopyNet eq. 4-6),
  which ``models.seq2seq.shared_softmax`` keeps as both modes' shift (CopyNet, Read-Again, the
  backbone's CopyNet head).
- ``logsumexp`` (with a one-product backward pass) and ``logsumexp_value`` (for search and
  validation, without gradients).
"""

from __future__ import annotations

import torch

# A finite "minus infinity": exp(NEG - x) == 0 in float32, yet NEG - NEG and logaddexp(NEG, NEG)
# stay finite, so masked entries never produce NaN gradients (no log 0 anywhere).
NEG = -1e9


class _LogSumExp(torch.autograd.Function):
    """log sum exp over the last dimension, keeping the forward pass's exponentials for the backward.

    Why by hand: ``torch.logsumexp`` saves its input and recomputes exp(x - lse) in the backward pass
    (a subtraction, an exp and a product, each a pass over the (..., V) scores with a new tensor);
    over a vocabulary those passes cost as much as a third of the output layer's matrix products
    (benchmarks/bench_mechanisms.py). Here the exponentials exp(x - max) the forward pass computes
    anyway are kept (in place of the input, which is then free) and the gradient is one product,
    softmax(x) * g = exp(x - max) * (g / sum)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        shift = x.amax(-1, keepdim=True).clamp_min(NEG)  # (..., 1); a row of -inf: no NaN from inf - inf
        e = torch.sub(x, shift).exp_()  # (..., V)
        total = e.sum(-1, keepdim=True)  # (..., 1)
        ctx.save_for_backward(e, total)
        return total.log() + shift

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        e, total = ctx.saved_tensors
        return e * (grad / total)  # (..., V) softmax(x) * grad


def logsumexp(x: torch.Tensor) -> torch.Tensor:
    """log sum_v exp(x_v) over the last dimension, (..., 1), with a one-product backward pass
    (:class:`_LogSumExp`); the same value as ``torch.logsumexp(x, -1, keepdim=True)``."""
    return _LogSumExp.apply(x)


# exp(x) for x below this is a denormal or 0 in float32: the CPU's slow path (measured on an AMD EPYC,
# ATen's AVX2 exp: 72 us for 9,610 entries at -1e9 against 2.5 us for ordinary ones or at -87;
# benchmarks/bench_search_overheads.py prints them). Above it exp is a normal float (1.6e-38), which
# vanishes beside a sum that holds the row's max term, exp(0) = 1.
EXP_FLOOR = -87.0


def logsumexp_value(x: torch.Tensor) -> torch.Tensor:
    """``torch.logsumexp(x, -1)``, bit for bit, without gradients, for search and validation: the same
    operations (max, x - max, exp, sum, log, + max), except that x - max is floored at
    :data:`EXP_FLOOR` before exp, so the masked entries (NEG - max, about -1e9) do not take the CPU's
    slow path for underflowing results. The floor changes no bit of the result: every row's sum holds
    exp(0) = 1 from its own max, and terms under 1.7e-38 round away beside it (a row of -inf, which
    has no such term, is -inf as torch gives it). (..., N) -> (...)."""
    maxes = x.amax(-1, keepdim=True)  # (..., 1)
    empty = maxes.squeeze(-1) == float("-inf")  # (...) rows of -inf: no exp(0) term, the floor would show
    maxes.masked_fill_(maxes.abs() == float("inf"), 0)  # as torch.logsumexp
    total = torch.sub(x, maxes).clamp_min_(EXP_FLOOR).exp_().sum(-1)  # (...)
    return total.log_().add_(maxes.squeeze(-1)).masked_fill_(empty, float("-inf"))


def shared_normaliser(gen_scores: torch.Tensor, copy_scores: torch.Tensor) -> torch.Tensor:
    """log Z of CopyNet eq. 4: log(sum_v exp(psi_g(v)) + sum_j exp(psi_c(x_j))), (..., 1).

    gen_scores (..., V), copy_scores (..., S); computed as a logaddexp of the two logsumexps, so the
    (..., V + S) concatenation is never built."""
    return torch.logaddexp(logsumexp(gen_scores), copy_scores.logsumexp(-1, keepdim=True))


def _per_source(x: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """(B, S) per-source tensor broadcast over the leading dims of ``like`` (B, ..., S)."""
    return x.view(x.size(0), *([1] * (like.dim() - 2)), x.size(1)).expand(like.shape)


def extended_log_probs(
    gen: torch.Tensor,
    gen_shift: torch.Tensor | None,
    copy: torch.Tensor | None,
    copy_shift: torch.Tensor | None,
    src_ext: torch.Tensor | None,
    n_ext: int,
    same: torch.Tensor | None = None,
) -> torch.Tensor:
    """The whole distribution over V + X, (..., V + n_ext), of
    log p(w) = logaddexp(gen_shift + gen[w], copy_shift + logsumexp_{j: x_j = w} copy[j]),
    with gen[w] = NEG for w >= V and the logsumexp = NEG for a word not in the source.

    gen (B, ..., V), copy (B, ..., S) or None (a layer that cannot copy), shifts (B, ..., 1) (gen_shift
    None: 0),
    src_ext (B, S); ``same`` (B, S, S): ``src_ext[:, j] == src_ext[:, k]``, when the caller keeps it
    (``Seq2Seq.encode`` does, per source), else computed here. A word outside V has no generate term;
    a word outside the source no copy term.

    The copy term touches only the source words' S columns: each position's word gets the copy
    mass of every position holding that word (a logsumexp over an (S, S) word-equality mask, CopyNet
    eq. 6's sum), meets its generate term in a logaddexp, and is written back to the word's column
    (positions of one word compute and write the same value). So building the distribution costs
    one pass over the (..., V + X) scores, the generate term, whatever the mechanism; a scatter of
    the copy mass into a (..., V + X) tensor would cost several (search runs this every step).
    """
    vocab = gen.size(-1)
    # A mixture weight of exactly 0 (a switch saturated to +-inf) gives a shift of -inf; floored at NEG,
    # its words keep a finite log-probability (no log 0 anywhere), NEG + score: probability 0.
    gen_shift = None if gen_shift is None else gen_shift.clamp_min(NEG)
    copy_shift = None if copy_shift is None else copy_shift.clamp_min(NEG)
    tracked = torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (gen, gen_shift))
    if n_ext == 0:
        log_probs = gen.clone() if gen_shift is None else gen + gen_shift  # (..., V)
    elif tracked:  # autograd (stepwise teacher forcing, tests): out= below is not differentiable
        log_probs = pad_extended(gen if gen_shift is None else gen + gen_shift, n_ext)  # (..., V + X)
    else:
        log_probs = gen.new_empty((*gen.shape[:-1], vocab + n_ext))  # (..., V + X)
        if gen_shift is None:
            log_probs[..., :vocab] = gen
        else:
            torch.add(gen, gen_shift, out=log_probs[..., :vocab])
        log_probs[..., vocab:] = NEG
    if copy is None:
        return log_probs
    index = _per_source(src_ext, copy)  # (B, ..., S) the word (extended id) at each source position
    if same is None:
        same = src_ext.unsqueeze(2) == src_ext.unsqueeze(1)  # (B, S, S)
    same = same.view(src_ext.size(0), *([1] * (copy.dim() - 2)), src_ext.size(1), src_ext.size(1))
    # (B, 1.., S, S): positions j and k hold the same word
    masked = copy.unsqueeze(-2).masked_fill(~same, NEG)  # (B, ..., S, S): each position's word's copy scores
    word_copy = masked.logsumexp(-1) if tracked else logsumexp_value(masked)  # (B, ..., S) per position's word
    merged = torch.logaddexp(log_probs.gather(-1, index), word_copy + copy_shift)  # (B, ..., S)
    if not tracked:
        return log_probs.scatter_(-1, index, merged)
    # Under autograd: scatter's backward hands the word's gradient to every position written to it,
    # so only a word's first position may carry it (the others write the same value, detached); and
    # gather's backward reads log_probs, so no in-place write.
    earlier = torch.ones(same.shape[-2:], dtype=torch.bool, device=same.device).tril(-1)  # (S, S): k < j
    first = ~(same & earlier).any(-1)  # (B, 1.., S): no earlier position holds the word
    return log_probs.scatter(-1, index, torch.where(first, merged, merged.detach()))


def gold_log_probs(
    gen: torch.Tensor,
    gen_shift: torch.Tensor | None,
    copy: torch.Tensor | None,
    copy_shift: torch.Tensor | None,
    src_ext: torch.Tensor,
    src_mask: torch.Tensor,
    target: torch.Tensor,
    gen_gold: torch.Tensor | None = None,
) -> torch.Tensor:
    """``extended_log_probs(...)`` read at the gold ids only, without building it: (B, ...) for
    target (B, ...) extended ids; gen (B, ..., V), copy (B, ..., S), src_ext / src_mask (B, S).

    The generate term is a gather (or ``gen_gold``, the caller's gen[min(target, V - 1)] computed
    without reading gen: ``OutputLayer.project_gold``); the copy term a logsumexp over the source
    positions holding the gold word (NEG when there is none), so the cost is O(V + S) per token, with
    no scatter.
    """
    vocab = gen.size(-1)
    if gen_gold is None:
        gen_gold = gen.gather(-1, target.clamp(max=vocab - 1).unsqueeze(-1)).squeeze(-1)
    gen_gold = gen_gold.masked_fill(target >= vocab, NEG)  # a source OOV: no generate term
    if gen_shift is not None:
        gen_gold = gen_gold + gen_shift.squeeze(-1)
    if copy is None:
        return gen_gold
    match = (_per_source(src_ext, copy) == target.unsqueeze(-1)) & _per_source(src_mask, copy)  # (B, ..., S)
    copy_gold = copy.masked_fill(~match, NEG).logsumexp(-1).masked_fill(~match.any(-1), NEG)  # none: NEG
    return torch.logaddexp(gen_gold, copy_gold + copy_shift.squeeze(-1))


def pad_extended(log_probs: torch.Tensor, n_ext: int) -> torch.Tensor:
    """(..., V) -> (..., V + n_ext) with NEG in the extended slots (a mechanism that cannot copy)."""
    if n_ext == 0:
        return log_probs
    return torch.cat([log_probs, log_probs.new_full((*log_probs.shape[:-1], n_ext), NEG)], dim=-1)
