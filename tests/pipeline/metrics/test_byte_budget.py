"""pipeline.metrics.byte_budget: the outputs' UTF-8 bytes against DUC's 75-byte cut."""

from __future__ import annotations

from pipeline.metrics.byte_budget import byte_budget, text_bytes


def test_utf8_bytes_of_the_joined_tokens_and_the_share_under_the_budget():
    assert text_bytes("héllo world") == 12  # é is two bytes: the unit ROUGE-1.5.5 -b cuts in
    hyps = [["héllo", "world"], ["x" * 74], ["y" * 75], ["z" * 80]]  # 12, 74, 75, 80 bytes
    assert byte_budget(hyps) == {"output_bytes": 60.25, "outputs_under_budget": 50.0}  # 12 and 74 are under 75
    refs = [[" Leading space counts", "Two"], ["a" * 75]]  # 21, 3, 75 bytes
    got = byte_budget(hyps[:2], refs)
    assert got == {"output_bytes": 43.0, "outputs_under_budget": 100.0, "ref_bytes": 33.0, "refs_under_budget": 200 / 3}
    assert byte_budget([]) == {"output_bytes": 0.0, "outputs_under_budget": 0.0}
