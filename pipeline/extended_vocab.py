"""The extended vocabulary: the one place that maps source OOVs to ids ``V .. V+X-1`` and back.

Every copy mechanism predicts over ``V + X`` ids, where ``V`` is the decoder's vocabulary and
``X`` the largest number of distinct source words outside ``V`` in the batch (each example
numbers its own OOVs from ``V`` in order of first appearance; slots beyond an example's own
OOVs are impossible for it and carry log-probability ``NEG``).

Two halves:
- per example (collation, plain Python over one example's tokens): ``extend_example`` gives the
  source in extended ids and the target in extended ids; ``ext_ids_to_tokens`` maps back.
- per batch (torch, no Python loop over the batch): ``scatter_logsumexp`` merges the copy mass of
  every source position holding the same word into that word's slot (CopyNet eq. 6), in log
  space; ``mix_scores`` builds the log-distribution of generate and copy scores under one shared
  normaliser (CopyNet eq. 4-6); ``pad_extended`` lifts a plain softmax to the extended size.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from pipeline.vocab import EOS, PAD, UNK, Vocab

# A finite "minus infinity": exp(NEG - x) == 0 in float32, yet NEG - NEG and logaddexp(NEG, NEG)
# stay finite, so masked entries never produce NaN gradients (no log 0 anywhere).
NEG = -1e9


@dataclass(frozen=True)
class ExtendedExample:
    src_ext: list[int]  # source tokens as decoder ids, OOVs as V + k
    tgt_ext: list[int]  # target tokens as decoder ids; OOVs found in the source as V + k, else UNK
    oovs: list[str]  # oovs[k] is the word with extended id V + k


def extend_example(src: list[str], tgt: list[str] | None, tgt_vocab: Vocab) -> ExtendedExample:
    """Number one example's source OOVs (w.r.t. the decoder vocabulary) from ``len(tgt_vocab)``."""
    size = len(tgt_vocab)
    oov_ids: dict[str, int] = {}
    src_ext = []
    for tok in src:
        i = tgt_vocab.stoi.get(tok)
        if i is None:
            i = oov_ids.setdefault(tok, size + len(oov_ids))
        src_ext.append(i)
    tgt_ext = []
    for tok in tgt or ():
        i = tgt_vocab.stoi.get(tok)
        tgt_ext.append(i if i is not None else oov_ids.get(tok, UNK))
    return ExtendedExample(src_ext, tgt_ext, list(oov_ids))


def ext_ids_to_tokens(ids: list[int], oovs: list[str], tgt_vocab: Vocab) -> list[str]:
    """Map extended ids back to words, stopping at ``</s>``; ``<pad>`` is skipped."""
    size = len(tgt_vocab)
    out = []
    for i in ids:
        if i == EOS:
            break
        if i == PAD:
            continue
        if i >= size:
            k = i - size
            out.append(oovs[k] if k < len(oovs) else tgt_vocab.itos[UNK])
        else:
            out.append(tgt_vocab.itos[i])
    return out


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


def mix_scores(
    gen_scores: torch.Tensor, copy_scores: torch.Tensor, src_ext: torch.Tensor, n_ext: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generate and copy scores under one shared normaliser (CopyNet eq. 4-6).

    gen_scores: (B, V) psi_g, impossible words already at NEG; copy_scores: (B, S) psi_c, padding
    at NEG; src_ext: (B, S) extended id of each source position. Returns
    ``(log p(y) over V + n_ext, log p(x_j, c) per source position)`` where
    Z = sum_v exp(psi_g(v)) + sum_j exp(psi_c(x_j)). Words only in the source have generate
    probability 0 (eq. 5) because their slots are >= V; copy mass of repeated words is summed.
    """
    log_z = torch.logsumexp(torch.cat([gen_scores, copy_scores], dim=1), dim=1, keepdim=True)  # (B, 1)
    vocab = gen_scores.size(1)
    gen_ext = pad_extended(gen_scores, n_ext)  # (B, V + X)
    copy_ext = scatter_logsumexp(copy_scores, src_ext, vocab + n_ext)  # (B, V + X)
    log_probs = torch.logaddexp(gen_ext, copy_ext) - log_z
    return log_probs, copy_scores - log_z


def pad_extended(log_probs: torch.Tensor, n_ext: int) -> torch.Tensor:
    """(B, V) -> (B, V + n_ext) with NEG in the extended slots (a mechanism that cannot copy)."""
    if n_ext == 0:
        return log_probs
    return torch.cat([log_probs, log_probs.new_full((log_probs.size(0), n_ext), NEG)], dim=1)
