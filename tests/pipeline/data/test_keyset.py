"""KeySet (pipeline/data/corpora/keyset.py) answers exactly as a Python set, across merges, in 8 bytes a key."""

import random

import pytest

from pipeline.data.corpora.common import pair_key
from pipeline.data.corpora.keyset import KeySet


def test_same_answers_as_a_python_set_across_merges():
    rng = random.Random(0)
    keys = [rng.getrandbits(64).to_bytes(8, "little") for _ in range(3_000)]
    stream = keys + rng.sample(keys, 1_500)  # every second key comes back later
    rng.shuffle(stream)
    ours, reference = KeySet(pending_limit=97), set()  # a small limit: ~30 merges on the way
    for key in stream:
        assert (key in ours) == (key in reference)
        assert ours.add(key) == (key not in reference)  # True exactly when new
        reference.add(key)
        assert len(ours) == len(reference)
    assert all(k in ours for k in keys)
    absent = [rng.getrandbits(64).to_bytes(8, "little") for _ in range(1_000)]
    assert not any(k in ours for k in absent if k not in reference)


def test_extreme_values_and_pair_keys():
    ours = KeySet(pending_limit=2)
    for key in (b"\x00" * 8, b"\xff" * 8, pair_key(["a"], ["b"]), pair_key(["a", "b"])):
        assert key not in ours
        assert ours.add(key)
        assert not ours.add(key)  # a second add changes nothing
        assert key in ours
    assert len(ours) == 4
    assert pair_key(["a"], ["c"]) not in ours


def test_eight_bytes_a_key_once_merged():
    ours = KeySet(pending_limit=1_000)
    for i in range(10_000):
        ours.add(i.to_bytes(8, "little"))
    assert len(ours) == 10_000 and ours.nbytes == 8 * 10_000


def test_refuses_keys_of_another_length():
    with pytest.raises(ValueError, match="8-byte keys, got 4"):
        KeySet().add(b"abcd")
