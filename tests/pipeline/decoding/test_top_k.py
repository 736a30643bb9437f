"""Beam search's selection (pipeline.decoding.top_k): the k best of each row by (value descending,
index ascending), equal to a stable sort of the whole row, on rows built to tie."""

import pytest
import torch

import pipeline.decoding.top_k as top_k_module
from models.extended import NEG
from pipeline.decoding.top_k import CHUNK, top_k, top_k_by_sort


def _rows(kind: str, rows: int, n: int, gen: torch.Generator) -> torch.Tensor:
    if kind == "normal":
        return torch.randn(rows, n, generator=gen)
    if kind == "few values":  # ties everywhere, inside chunks and across them
        return torch.randint(0, 4, (rows, n), generator=gen).float()
    if kind == "beam start":  # the first tenth live (a beam's first row), the rest at NEG
        x = torch.full((rows, n), NEG)
        x[:, : n // 10] = torch.randn(rows, n // 10, generator=gen)
        return x
    if kind == "all NEG":  # nothing but ties: the first k indices
        return torch.full((rows, n), NEG)
    if kind == "-inf and best last":  # the best entries in the short last chunk
        x = torch.full((rows, n), float("-inf"))
        x[:, -3:] = torch.tensor([1.0, 2.0, 2.0])
        x[:, 5] = 2.0
        return x
    raise ValueError(kind)


@pytest.mark.parametrize("kind", ["normal", "few values", "beam start", "all NEG", "-inf and best last"])
@pytest.mark.parametrize("n", [4 * 10 * CHUNK, 4 * 10 * CHUNK + 37, 50_013])
@pytest.mark.parametrize("rows", [1, 3])
def test_top_k_equals_a_stable_sort_of_the_whole_row(kind, n, rows, monkeypatch):
    gen = torch.Generator().manual_seed(n + rows)
    scores = _rows(kind, rows, n, gen)
    ref_values, ref_index = top_k_by_sort(scores, 10)

    def whole_row_sort(*_):
        raise AssertionError("rows this long take the chunked path")

    monkeypatch.setattr(top_k_module, "top_k_by_sort", whole_row_sort)
    values, index = top_k(scores, 10)
    assert torch.equal(index, ref_index)
    assert torch.equal(values, ref_values)
    assert torch.equal(values, scores.gather(1, index))
    # the values are torch.topk's (only the order of ties may differ)
    assert torch.equal(values, scores.topk(10, dim=1).values)


def test_ties_go_to_the_lower_index():
    scores = torch.zeros(1, 5000)
    scores[0, [4999, 3000, 70, 7]] = 1.0
    values, index = top_k(scores, 3)
    assert index.tolist() == [[7, 70, 3000]]
    assert values.tolist() == [[1.0, 1.0, 1.0]]
    values, index = top_k(scores, 6)
    assert index.tolist() == [[7, 70, 3000, 4999, 0, 1]]


def test_short_rows_sort_whole():
    scores = torch.tensor([[0.5, 2.0, 2.0, -1.0, 3.0]])
    values, index = top_k(scores, 3)
    assert index.tolist() == [[4, 1, 2]] and values.tolist() == [[3.0, 2.0, 2.0]]
