"""Tests for the CopyNet section 5.1 synthetic rule corpus."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from collections import Counter
from dataclasses import asdict
from pathlib import Path

import pytest

from pipeline.data.corpora.copynet_rules import (
    RULE_TYPES,
    SCHEMA,
    SPLITS,
    Rule,
    RulesConfig,
    generate_examples,
    generate_rules,
    write_splits,
)
from pipeline.io.shards import read_split
from tests.helpers import REPO

SMALL = RulesConfig(n_rules=25, instances_per_rule=40, unseen_per_rule=6, seed=99)
REGULAR = re.compile(r"s(\d+)")
UNSEEN = re.compile(r"u(\d+)")


@pytest.fixture(scope="module")
def small_examples() -> dict[str, list[dict]]:
    return generate_examples(SMALL)


@pytest.fixture(scope="module")
def small_rules() -> dict[int, Rule]:
    return {r.rule_id: r for r in generate_rules(SMALL)}


def parses(pattern: tuple[str, ...], src: list[str]) -> list[dict[str, list[str]]]:
    """Every assignment of non-empty fillers to the slots that turns ``pattern`` into ``src``."""
    found: list[dict[str, list[str]]] = []

    def walk(i: int, j: int, fillers: dict[str, list[str]]) -> None:
        if i == len(pattern):
            if j == len(src):
                found.append(dict(fillers))
            return
        tok = pattern[i]
        if tok in ("x", "y"):
            for end in range(j + 1, len(src) + 1):
                fillers[tok] = src[j:end]
                walk(i + 1, end, fillers)
            fillers.pop(tok, None)
        elif j < len(src) and src[j] == tok:
            walk(i + 1, j + 1, fillers)

    walk(0, 0, {})
    return found


def substitute(pattern: tuple[str, ...], fillers: dict[str, list[str]]) -> list[str]:
    out: list[str] = []
    for tok in pattern:
        out.extend(fillers[tok] if tok in ("x", "y") else [tok])
    return out


def recover_fillers(rule: Rule, row: dict) -> dict[str, list[str]]:
    """The fillers that explain both src and tgt of ``row`` under ``rule`` (asserts one exists)."""
    candidates = [
        f
        for f in parses(rule.src_pattern, row["src"])
        if substitute(rule.tgt_pattern, f) == row["tgt"]
        and all(SMALL.min_filler <= len(v) <= SMALL.max_filler for v in f.values())
    ]
    assert candidates, f"{row['id']}: no filler assignment reproduces src and tgt"
    return candidates[0]


# --------------------------------------------------------------------------- #


# The rules and examples of SMALL as a digest, printed by a fresh interpreter.
DIGEST = """
import hashlib, json
from dataclasses import asdict
from pipeline.data.corpora.copynet_rules import RulesConfig, generate_examples, generate_rules
cfg = RulesConfig(**json.loads({cfg!r}))
blob = {{"rules": [asdict(r) for r in generate_rules(cfg)], "examples": generate_examples(cfg)}}
print(hashlib.sha256(json.dumps(blob, sort_keys=True).encode()).hexdigest())
"""


def _digest(rules: list[Rule], examples: dict[str, list[dict]]) -> str:
    blob = {"rules": [asdict(r) for r in rules], "examples": examples}
    return hashlib.sha256(json.dumps(blob, sort_keys=True).encode()).hexdigest()


def test_determinism_same_seed(small_examples) -> None:
    """The same config gives the same corpus, in this process and in fresh interpreters whose string
    hashing is salted differently (``PYTHONHASHSEED``): a draw that read ``hash()`` of a string or a
    set's iteration order would pass the in-process check and differ across the two processes (about
    0.3 s each, run side by side)."""
    assert generate_examples(SMALL) == small_examples
    assert generate_rules(SMALL) == generate_rules(SMALL)
    code = DIGEST.format(cfg=json.dumps(asdict(SMALL)))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONHASHSEED"}
    runs = [
        subprocess.Popen(
            [sys.executable, "-c", code],
            cwd=REPO,
            env={**env, "PYTHONHASHSEED": seed, "PYTHONPATH": str(REPO)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for seed in ("1", "2")
    ]
    outputs = [run.communicate(timeout=60) for run in runs]
    assert [run.returncode for run in runs] == [0, 0], [err[-2000:] for _, err in outputs]
    here = _digest(generate_rules(SMALL), small_examples)
    assert [out.strip() for out, _ in outputs] == [here, here]


def test_different_seed_differs(small_examples) -> None:
    other = generate_examples(RulesConfig(**{**asdict(SMALL), "seed": 100}))
    assert [r["src"] for r in other["train"]] != [r["src"] for r in small_examples["train"]]
    assert generate_rules(RulesConfig(**{**asdict(SMALL), "seed": 100})) != generate_rules(SMALL)


def test_instances_do_not_depend_on_n_rules(small_examples) -> None:
    fewer = generate_examples(RulesConfig(**{**asdict(SMALL), "n_rules": 5}))
    first_five = [r for r in small_examples["test"] if r["rule_id"] < 5]
    assert fewer["test"] == first_five


def test_split_counts_default_config() -> None:
    cfg = RulesConfig()
    ex = generate_examples(cfg)
    assert {k: len(v) for k, v in ex.items()} == {
        "train": 18_000,
        "valid": 2_000,
        "test": 20_000,
        "test_unseen": 4_000,
    }
    assert sum(len(ex[s]) for s in ("train", "valid", "test")) == 200 * 200
    per_rule = {s: Counter(r["rule_id"] for r in ex[s]) for s in SPLITS}
    for rule_id in range(cfg.n_rules):
        assert per_rule["train"][rule_id] + per_rule["valid"][rule_id] == 100
        assert per_rule["test"][rule_id] == 100
        assert per_rule["valid"][rule_id] == 10
        assert per_rule["test_unseen"][rule_id] == 20
    types = Counter(r.rule_type for r in generate_rules(cfg))
    assert types == {t: 40 for t in RULE_TYPES}


def test_ids_unique_and_no_duplicate_sources(small_examples) -> None:
    ids = [r["id"] for s in SPLITS for r in small_examples[s]]
    assert len(ids) == len(set(ids)) == 25 * (40 + 6)
    srcs = Counter(tuple(r["src"]) for s in SPLITS for r in small_examples[s])
    assert max(srcs.values()) == 1  # no instance leaks from train into test


def test_valid_at_least_one_per_rule() -> None:
    cfg = RulesConfig(n_rules=5, instances_per_rule=4, unseen_per_rule=0)
    ex = generate_examples(cfg)
    assert Counter(r["rule_id"] for r in ex["valid"]) == {i: 1 for i in range(5)}
    assert Counter(r["rule_id"] for r in ex["train"]) == {i: 1 for i in range(5)}
    assert Counter(r["rule_id"] for r in ex["test"]) == {i: 2 for i in range(5)}
    assert ex["test_unseen"] == []


def test_rule_types_balanced_and_shaped(small_rules) -> None:
    assert Counter(r.rule_type for r in small_rules.values()) == {t: 5 for t in RULE_TYPES}
    expected_slots = {
        "x->0": (Counter("x"), Counter()),
        "x->x": (Counter("x"), Counter("x")),
        "x->xx": (Counter("x"), Counter("xx")),
        "xy->x": (Counter("xy"), Counter("x")),
        "xy->xy": (Counter("xy"), Counter("xy")),
    }
    for rule in small_rules.values():
        assert rule.rule_type == RULE_TYPES[rule.rule_id % 5]
        src_slots = Counter(t for t in rule.src_pattern if t in ("x", "y"))
        tgt_slots = Counter(t for t in rule.tgt_pattern if t in ("x", "y"))
        assert (src_slots, tgt_slots) == expected_slots[rule.rule_type]
        regular = [t for t in rule.src_pattern + rule.tgt_pattern if t not in ("x", "y")]
        assert all(REGULAR.fullmatch(t) for t in regular)
        assert 5 <= len(regular) <= 20
        n_src = sum(t not in ("x", "y") for t in rule.src_pattern)
        assert n_src == max(2, round(0.6 * len(regular)))
        assert len(regular) - n_src >= 1
        # x and y never adjacent in the source, so the filler boundary is marked
        slot_pos = [i for i, t in enumerate(rule.src_pattern) if t in ("x", "y")]
        assert all(b - a > 1 for a, b in zip(slot_pos, slot_pos[1:]))
    assert len({r.src_pattern for r in small_rules.values()}) == len(small_rules)


def test_examples_follow_their_rule(small_examples, small_rules) -> None:
    lengths: list[int] = []
    for split in SPLITS:
        for row in small_examples[split]:
            rule = small_rules[row["rule_id"]]
            assert row["rule_type"] == rule.rule_type
            assert row["refs"] == [row["tgt"]]
            fillers = recover_fillers(rule, row)
            assert set(fillers) == set(rule.variables)
            lengths.extend(len(f) for f in fillers.values())
            symbols = [t for f in fillers.values() for t in f]
            if split == "test_unseen":
                assert all(UNSEEN.fullmatch(t) for t in symbols), row["id"]
                assert all(int(UNSEEN.fullmatch(t)[1]) < SMALL.unseen_pool for t in symbols)
            else:
                assert all(REGULAR.fullmatch(t) for t in symbols), row["id"]
    assert min(lengths) == 1 and max(lengths) == 15  # whole range is used, nothing outside


def test_no_unseen_symbols_outside_test_unseen(small_examples) -> None:
    for split in ("train", "valid", "test"):
        for row in small_examples[split]:
            for tok in row["src"] + row["tgt"]:
                m = REGULAR.fullmatch(tok)
                assert m and int(m[1]) < SMALL.vocab_size, (row["id"], tok)
    unseen_tokens = {t for r in small_examples["test_unseen"] for t in r["src"]}
    assert any(UNSEEN.fullmatch(t) for t in unseen_tokens)


def test_small_vocab_bounds() -> None:
    cfg = RulesConfig(n_rules=10, instances_per_rule=10, vocab_size=30, unseen_pool=3, unseen_per_rule=4)
    ex = generate_examples(cfg)
    for split in ("train", "valid", "test"):
        for row in ex[split]:
            assert all(int(t[1:]) < 30 for t in row["src"] + row["tgt"])
    fillers = {t for r in ex["test_unseen"] for t in r["src"] if t.startswith("u")}
    assert fillers <= {"u0", "u1", "u2"}


def test_config_from_dict() -> None:
    assert RulesConfig.from_dict({"n_rules": 3, "seed": 5}) == RulesConfig(n_rules=3, seed=5)
    with pytest.raises(ValueError, match=r"unknown RulesConfig settings \['n_rule'\]"):
        RulesConfig.from_dict({"n_rule": 3})
    with pytest.raises(ValueError, match="min_filler"):
        RulesConfig(min_filler=0)
    with pytest.raises(ValueError, match="n_rules must be int"):
        RulesConfig.from_dict({"n_rules": "200"})


def test_write_splits_byte_identical(tmp_path: Path, small_examples) -> None:
    cfg = RulesConfig(n_rules=10, instances_per_rule=20, unseen_per_rule=3, seed=3)
    m1 = write_splits(cfg, tmp_path / "a")
    m2 = write_splits(cfg, tmp_path / "b")
    assert m1 == m2
    assert set(m1) == set(SPLITS)
    for split in SPLITS:
        files = sorted(p.name for p in (tmp_path / "a" / split).iterdir())
        assert "manifest.json" in files
        for f in files:
            assert (tmp_path / "a" / split / f).read_bytes() == (tmp_path / "b" / split / f).read_bytes()
        assert m1[split]["params"] == asdict(cfg)
        assert m1[split]["rows_in"] == m1[split]["rows"]
    table = read_split(tmp_path / "a" / "train")
    assert table.schema == SCHEMA
    assert table.to_pylist() == generate_examples(cfg)["train"]
    assert m1["test"]["rows"] == 10 * 10
