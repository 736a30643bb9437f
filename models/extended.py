"""The extended-vocabulary maths every mechanism and the search share, in log space.

Every copy mechanism predicts over ``V + X`` ids, where ``V`` is the decoder's vocabulary and ``X``
the largest number of distinct source words outside ``V`` in the batch (each example numbers its own
OOVs from ``V`` in order of first appearance: ``pipeline.vocab.extended`` for strings,
``pipeline.vocab.encoded`` for id-encoded splits; slots beyond an example's own OOVs carry ``NEG``).

- ``scatter_logsumexp`` merges the copy mass of every source position holding the same word into
  that word's slot (CopyNet eq. 6), in log space, with scatter operations (no Python loop over the
  batch); ``pad_extended`` lifts a distribution over V to V + X.
- ``shared_normaliser`` / ``mix_scores``: generate and copy scores under one normaliser (CopyNet
  eq. 4-6).
- ``extended_log_probs`` builds, and ``gold_log_probs`` reads at the gold ids only, any output
  layer's distribution log p(w) = logaddexp(gen_shift + gen[w], copy_shift + logsumexp_{j: x_j = w}
  copy[j]) (``models.seq2seq.Scores``).
"""

from __future__ import annotations

import torch

# A finite "minus infinity": exp(NEG - x) == 0 in float32, yet NEG - NEG and logaddexp(NEG, NEG)
# stay finite, so masked entries never produce NaN gradients (no log 0 anywhere).
NEG = -1e9


def scatter_logsumexp(scores: torch.Tensor, index: torch.Tensor, size: int) -> torch.Tensor:
    """log sum_{j: index[b, j] = v} exp(scores[b, j]) for every slot v, computed in log space.

    scores: (B, S) float, masked entries already at NEG; index: (B, S) long in [0, size).
    Returns (B, size); empty slots get NEG. Implements the sum over repeated source words of
    CopyNet eq. 6 with scatter operations, never a Python loop over the batch.
    """
    bsz = scores.size(0)
    # Per-slot max, detached: the result does not depend on the shift, only its stability does.
    shift = scores.new_full((bsz, size), NEG)
    shift = shift.scatter_reduce(1, index, scores.detach(), reduce="amax", include_self=True)
    summed = scores.new_zeros((bsz, size)).scatter_add(1, index, (scores - shift.gather(1, index)).exp())
    # A filled slot has summed >= 1 (its max term is exp(0)); an empty slot has 0 and keeps NEG.
    return shift + summed.clamp_min(1.0).log()


def shared_normaliser(gen_scores: torch.Tensor, copy_scores: torch.Tensor) -> torch.Tensor:
    """log Z of CopyNet eq. 4: log(sum_v exp(psi_g(v)) + sum_j exp(psi_c(x_j))), (..., 1).

    gen_scores (..., V), copy_scores (..., S); computed as a logaddexp of the two logsumexps, so the
    (..., V + S) concatenation is never built."""
    return torch.logaddexp(gen_scores.logsumexp(-1, keepdim=True), copy_scores.logsumexp(-1, keepdim=True))


def mix_scores(
    gen_scores: torch.Tensor, copy_scores: torch.Tensor, src_ext: torch.Tensor, n_ext: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generate and copy scores under one shared normaliser (CopyNet eq. 4-6), one step.

    gen_scores: (B, V) psi_g, impossible words already at NEG; copy_scores: (B, S) psi_c, padding
    at NEG; src_ext: (B, S) extended id of each source position. Returns
    ``(log p(y) over V + n_ext, log p(x_j, c) per source position)`` where
    Z = sum_v exp(psi_g(v)) + sum_j exp(psi_c(x_j)). Words only in the source have generate
    probability 0 (eq. 5) because their slots are >= V; copy mass of repeated words is summed.
    """
    log_z = shared_normaliser(gen_scores, copy_scores)  # (B, 1)
    log_probs = extended_log_probs(gen_scores, -log_z, copy_scores, -log_z, src_ext, n_ext)
    return log_probs, copy_scores - log_z


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
) -> torch.Tensor:
    """The whole distribution over V + X, (..., V + n_ext), of
    log p(w) = logaddexp(gen_shift + gen[w], copy_shift + logsumexp_{j: x_j = w} copy[j]),
    with gen[w] = NEG for w >= V and the logsumexp = NEG for a word not in the source.

    gen (B, ..., V), copy (B, ..., S) or None (a layer that cannot copy), shifts (B, ..., 1) (gen_shift
    None: 0),
    src_ext (B, S). A word outside V has no generate term; a word outside the source no copy term.
    """
    log_probs = pad_extended(gen, n_ext)  # (..., V + X)
    if gen_shift is not None:
        log_probs = log_probs + gen_shift
    if copy is None:
        return log_probs
    size = log_probs.size(-1)
    flat_index = _per_source(src_ext, copy).reshape(-1, copy.size(-1))  # (N, S)
    copy_ext = scatter_logsumexp(copy.reshape(-1, copy.size(-1)), flat_index, size).view(log_probs.shape)
    return torch.logaddexp(log_probs, copy_ext + copy_shift)


def gold_log_probs(
    gen: torch.Tensor,
    gen_shift: torch.Tensor | None,
    copy: torch.Tensor | None,
    copy_shift: torch.Tensor | None,
    src_ext: torch.Tensor,
    src_mask: torch.Tensor,
    target: torch.Tensor,
) -> torch.Tensor:
    """``extended_log_probs(...)`` read at the gold ids only, without building it: (B, ...) for
    target (B, ...) extended ids; gen (B, ..., V), copy (B, ..., S), src_ext / src_mask (B, S).

    The generate term is a gather; the copy term a logsumexp over the source positions holding the
    gold word (NEG when there is none), so the cost is O(V + S) per token, with no scatter.
    """
    vocab = gen.size(-1)
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
