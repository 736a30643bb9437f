"""The k best entries of each row, best first, ties to the lower index: beam search's selection.

Why not ``torch.topk``: on the CPU it copies every (value, index) pair of a row into a buffer and
partial-sorts it, one row at a time, so a beam of one sentence pays that for 10 x 50,000 scores each
step (0.9 ms of a 7.5 ms step at 50,000 words; benchmarks/bench_search_overheads.py), and the order
it gives tied entries is whatever its heap leaves (not documented). Here:

1. the row is cut into chunks of ``CHUNK`` entries and each chunk's max taken (one vectorised pass);
2. the k chunks with the best maxima are chosen, ties to the lower chunk (a ``topk`` over the
   N / CHUNK maxima gives the k-th best max; the chunks above it, then the first tied ones);
3. those k * CHUNK candidates are sorted by value, stably, and the first k kept.

Exact, not approximate: every entry of the true k best lies in a chosen chunk (if one lay in a chunk
not chosen, the k chosen chunks' maxima would be k entries before it, by value or, tied, by index).
So the result is the k best by (value descending, index ascending), on every machine the same, and
equal to a stable sort of the whole row (:func:`top_k_by_sort`, the reference the tests compare).
"""

from __future__ import annotations

import torch

CHUNK = 64  # entries per chunk: the candidates are k * CHUNK (640 for a beam of 10)


def top_k(scores: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(values (R, k), indices (R, k)) of the k best entries of each row of ``scores`` (R, N), best
    first, ties to the lower index. Needs k <= N; no NaN (search scores have none)."""
    rows, n = scores.shape
    if n < 4 * k * CHUNK:  # a short row: sorting it whole is as cheap
        return top_k_by_sort(scores, k)
    whole = n - n % CHUNK  # entries in full chunks; the rest (< CHUNK) form a last, short chunk
    maxima = scores[:, :whole].unflatten(1, (whole // CHUNK, CHUNK)).amax(-1)  # (R, C) per chunk
    if whole < n:
        maxima = torch.cat([maxima, scores[:, whole:].amax(-1, keepdim=True)], dim=1)  # (R, C + 1)
    kth = maxima.topk(k, dim=1).values[:, -1:]  # (R, 1) the k-th best chunk max (a value: no tie rule)
    above = maxima > kth  # (R, C) fewer than k of them
    tied = maxima == kth
    chosen = above | (tied & (tied.cumsum(1) <= k - above.sum(1, keepdim=True)))  # exactly k a row
    chunk = chosen.nonzero()[:, 1].view(rows, k)  # (R, k) ascending chunk ids
    index = (chunk.unsqueeze(-1) * CHUNK + torch.arange(CHUNK, device=scores.device)).view(rows, -1)  # (R, kC)
    values = scores.gather(1, index.clamp(max=n - 1))  # (R, kC) in ascending index order
    if whole < n:  # the short chunk's positions past the row: last in every order, never among the k
        values.masked_fill_(index >= n, float("-inf"))
    order = values.sort(dim=1, descending=True, stable=True).indices[:, :k]  # (R, k)
    return values.gather(1, order), index.gather(1, order)


def top_k_by_sort(scores: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The same as :func:`top_k` by a stable sort of every row: the reference, and short rows."""
    values, index = scores.sort(dim=1, descending=True, stable=True)
    return values[:, :k].contiguous(), index[:, :k].contiguous()
