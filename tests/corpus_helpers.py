"""Helpers shared by the corpus reader tests (tests/test_pointers.py, tests/test_hostile_inputs.py)."""

from __future__ import annotations


class StubTagger:
    """A picklable test tagger: capitalised words are PERSON, the rest O."""

    def __call__(self, batch):
        return [["PERSON" if w[:1].isupper() else "O" for w in words] for words in batch]
