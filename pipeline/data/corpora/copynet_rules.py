"""CopyNet's synthetic rule-transformation data (Gu et al. 2016, section 5.1).

Each *rule* maps a source pattern to a target pattern. Patterns are made of
regular symbols ``s0 .. s{vocab_size-1}`` and variable slots ``x`` (and ``y``)::

    s12 s7 y s803 x s44 s9  ->  x s803 y s61          (an "xy->xy" rule)

An *instance* replaces every slot with a random filler subsequence (1-15
regular symbols); the same filler replaces every occurrence of that slot on
both sides. The task is to learn the transformation from instances.

There are five rule types (``RULE_TYPES``), assigned round-robin so they are
balanced. Per rule, ``instances_per_rule`` instances are split 50/50 into
train/test as in the paper, a valid split is carved from the train part, and
a ``test_unseen`` split (our addition, in the spirit of CopyNet's DS-II)
fills the slots only with symbols ``u0 .. u{unseen_pool-1}`` that never occur
in train/valid/test -- copying what was never seen.

Everything is drawn from ``random.Random`` streams seeded by strings derived
from ``RulesConfig.seed`` (one stream for the rules, one per rule for its
instances, one per rule for its unseen instances), so the same config gives
byte-identical shards and a rule's instances do not depend on ``n_rules``.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from pipeline.config.validation import check_numeric_config, dataclass_from_dict
from pipeline.io.shards import ShardWriter, make_schema

RULE_TYPES: tuple[str, ...] = ("x->0", "x->x", "x->xx", "xy->x", "xy->xy")
SPLITS: tuple[str, ...] = ("train", "valid", "test", "test_unseen")
VARIABLES: tuple[str, ...] = ("x", "y")

SCHEMA: pa.Schema = make_schema([pa.field("rule_id", pa.int32()), pa.field("rule_type", pa.string())])
# The test set's natural groups for a comparison's bootstrap: the instances of one rule are not
# independent examples (a model that learned the rule gets them all), so rules are resampled.
RESAMPLE_BY = "rule_id"

# Slots on each side of a rule, by rule type.
_SOURCE_SLOTS: dict[str, tuple[str, ...]] = {
    "x->0": ("x",),
    "x->x": ("x",),
    "x->xx": ("x",),
    "xy->x": ("x", "y"),
    "xy->xy": ("x", "y"),
}
_TARGET_SLOTS: dict[str, tuple[str, ...]] = {
    "x->0": (),
    "x->x": ("x",),
    "x->xx": ("x", "x"),
    "xy->x": ("x",),
    "xy->xy": ("x", "y"),
}

# Give up drawing distinct instances / rules after this many tries per item.
_MAX_TRIES_PER_ITEM = 100


@dataclass(frozen=True)
class RulesConfig:
    """Parameters of the synthetic corpus (defaults follow the paper where it says)."""

    n_rules: int = 200
    instances_per_rule: int = 200
    vocab_size: int = 1000
    min_symbols: int = 5
    max_symbols: int = 20
    min_filler: int = 1
    max_filler: int = 15
    train_fraction: float = 0.5
    valid_fraction: float = 0.1
    unseen_per_rule: int = 20
    unseen_pool: int = 200
    seed: int = 1234

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RulesConfig:
        """Build from a params dict; unknown keys are an error (typos must not pass silently)."""
        return dataclass_from_dict(cls, d)

    def __post_init__(self) -> None:
        check_numeric_config(
            self,
            lambda: [
                (self.n_rules >= 1, "n_rules >= 1"),
                (self.instances_per_rule >= 2, "instances_per_rule >= 2"),
                (3 <= self.min_symbols <= self.max_symbols, "3 <= min_symbols <= max_symbols"),
                (self.vocab_size >= self.max_symbols, "vocab_size >= max_symbols"),
                (1 <= self.min_filler <= self.max_filler, "1 <= min_filler <= max_filler"),
                (0.0 < self.train_fraction < 1.0, "0 < train_fraction < 1"),
                (0.0 <= self.valid_fraction < 1.0, "0 <= valid_fraction < 1"),
                (self.unseen_per_rule >= 0, "unseen_per_rule >= 0"),
                (self.unseen_pool >= 1, "unseen_pool >= 1"),
            ],
        )


@dataclass(frozen=True)
class Rule:
    """One transformation rule; ``"x"``/``"y"`` in a pattern mark variable slots."""

    rule_id: int
    rule_type: str
    src_pattern: tuple[str, ...]
    tgt_pattern: tuple[str, ...]

    @property
    def variables(self) -> tuple[str, ...]:
        """The slots this rule's source contains, in canonical order (``x`` then ``y``)."""
        return _SOURCE_SLOTS[self.rule_type]


def regular_symbol(i: int) -> str:
    """Name of regular symbol ``i`` (never equal to a slot name)."""
    return f"s{i}"


def unseen_symbol(i: int) -> str:
    """Name of reserved symbol ``i``, used only by ``test_unseen`` fillers."""
    return f"u{i}"


def fill(pattern: Sequence[str], fillers: dict[str, Sequence[str]]) -> list[str]:
    """Substitute each slot in ``pattern`` by its filler sequence."""
    out: list[str] = []
    for tok in pattern:
        if tok in VARIABLES:
            out.extend(fillers[tok])
        else:
            out.append(tok)
    return out


# --------------------------------------------------------------------------- #
# Rules
# --------------------------------------------------------------------------- #


def _place_slots(rng: random.Random, symbols: list[str], slots: tuple[str, ...], separate: bool) -> tuple[str, ...]:
    """Insert ``slots`` at distinct random positions among ``symbols`` (order kept).

    With ``separate`` no two slots are adjacent, so in a source like
    ``... x s5 y ...`` the boundary between the two fillers is always marked.
    """
    length = len(symbols) + len(slots)
    while True:
        positions = sorted(rng.sample(range(length), len(slots)))
        if not separate or all(b - a > 1 for a, b in zip(positions, positions[1:])):
            break
    order = list(slots)
    rng.shuffle(order)  # which slot lands where (y may come before x)
    slot_at = dict(zip(positions, order))
    regular = iter(symbols)
    return tuple(slot_at[i] if i in slot_at else next(regular) for i in range(length))


def _draw_rule(rng: random.Random, cfg: RulesConfig, rule_id: int) -> Rule:
    rule_type = RULE_TYPES[rule_id % len(RULE_TYPES)]
    n = rng.randint(cfg.min_symbols, cfg.max_symbols)
    n_src = max(2, round(0.6 * n))
    n_tgt = max(1, n - n_src)
    n_src = n - n_tgt
    symbols = [regular_symbol(i) for i in rng.sample(range(cfg.vocab_size), n)]
    src = _place_slots(rng, symbols[:n_src], _SOURCE_SLOTS[rule_type], separate=True)
    tgt = _place_slots(rng, symbols[n_src:], _TARGET_SLOTS[rule_type], separate=False)
    return Rule(rule_id, rule_type, src, tgt)


def generate_rules(cfg: RulesConfig) -> list[Rule]:
    """Draw ``cfg.n_rules`` rules with pairwise distinct source patterns."""
    rng = random.Random(f"copynet-rules/{cfg.seed}/rules")
    rules: list[Rule] = []
    seen: set[tuple[str, ...]] = set()
    for rule_id in range(cfg.n_rules):
        for _ in range(_MAX_TRIES_PER_ITEM):
            rule = _draw_rule(rng, cfg, rule_id)
            if rule.src_pattern not in seen:
                break
        else:
            raise ValueError(f"could not draw a rule with a new source pattern (rule {rule_id})")
        seen.add(rule.src_pattern)
        rules.append(rule)
    return rules


# --------------------------------------------------------------------------- #
# Instances and splits
# --------------------------------------------------------------------------- #


def _draw_instances(
    rng: random.Random, cfg: RulesConfig, rule: Rule, count: int, alphabet: list[str]
) -> list[tuple[list[str], list[str]]]:
    """``count`` (src, tgt) instances of ``rule`` with distinct sources, fillers from ``alphabet``."""
    out: list[tuple[list[str], list[str]]] = []
    seen: set[tuple[str, ...]] = set()
    for _ in range(count * _MAX_TRIES_PER_ITEM):
        if len(out) == count:
            break
        fillers = {v: rng.choices(alphabet, k=rng.randint(cfg.min_filler, cfg.max_filler)) for v in rule.variables}
        src = fill(rule.src_pattern, fillers)
        key = tuple(src)
        if key in seen:  # a duplicate would leak between train and test
            continue
        seen.add(key)
        out.append((src, fill(rule.tgt_pattern, fillers)))
    if len(out) < count:
        raise ValueError(
            f"rule {rule.rule_id}: could not draw {count} distinct instances "
            f"(filler lengths {cfg.min_filler}..{cfg.max_filler}, alphabet of {len(alphabet)})"
        )
    return out


def split_sizes(cfg: RulesConfig) -> dict[str, int]:
    """Per-rule number of instances in each split (rounding half up)."""
    n_train_part = math.floor(cfg.instances_per_rule * cfg.train_fraction + 0.5)
    n_train_part = min(max(n_train_part, 1), cfg.instances_per_rule - 1)
    n_valid = math.floor(n_train_part * cfg.valid_fraction + 0.5)
    if n_train_part >= 2:
        n_valid = min(max(n_valid, 1), n_train_part - 1)
    else:
        n_valid = 0
    return {
        "train": n_train_part - n_valid,
        "valid": n_valid,
        "test": cfg.instances_per_rule - n_train_part,
        "test_unseen": cfg.unseen_per_rule,
    }


def _row(rule: Rule, k: int, src: list[str], tgt: list[str]) -> dict:
    return {
        "id": f"r{rule.rule_id}-i{k}",
        "src": src,
        "tgt": tgt,
        "refs": [list(tgt)],
        "rule_id": rule.rule_id,
        "rule_type": rule.rule_type,
    }


def generate_examples(cfg: RulesConfig) -> dict[str, list[dict]]:
    """All rows, keyed by split (``SPLITS``), in rule order then instance order.

    Instance ``k`` of a rule goes to valid for the first ``n_valid`` instances,
    then train, then test (instances are i.i.d., so this is a random split).
    ``test_unseen`` instances continue the numbering (``k >= instances_per_rule``),
    so ids are unique across all splits.
    """
    sizes = split_sizes(cfg)
    seen_alphabet = [regular_symbol(i) for i in range(cfg.vocab_size)]
    unseen_alphabet = [unseen_symbol(i) for i in range(cfg.unseen_pool)]
    out: dict[str, list[dict]] = {split: [] for split in SPLITS}
    for rule in generate_rules(cfg):
        rng = random.Random(f"copynet-rules/{cfg.seed}/instances/{rule.rule_id}")
        seen = _draw_instances(rng, cfg, rule, cfg.instances_per_rule, seen_alphabet)
        bounds = {
            "valid": (0, sizes["valid"]),
            "train": (sizes["valid"], sizes["valid"] + sizes["train"]),
            "test": (sizes["valid"] + sizes["train"], cfg.instances_per_rule),
        }
        for split, (lo, hi) in bounds.items():
            out[split].extend(_row(rule, k, *seen[k]) for k in range(lo, hi))

        rng = random.Random(f"copynet-rules/{cfg.seed}/unseen/{rule.rule_id}")
        unseen = _draw_instances(rng, cfg, rule, cfg.unseen_per_rule, unseen_alphabet)
        out["test_unseen"].extend(
            _row(rule, cfg.instances_per_rule + j, src, tgt) for j, (src, tgt) in enumerate(unseen)
        )
    return out


Config = RulesConfig  # the name every reader in pipeline/data/corpora exposes


def write_splits(cfg: RulesConfig, out_root: Path, map_chunks=None) -> dict[str, dict]:
    """Write every split to ``out_root/<split>/`` as shards; return the manifests by split.

    ``map_chunks`` is the readers' parallel-map hook; generating a few MB needs none.
    """
    out_root = Path(out_root)
    manifests: dict[str, dict] = {}
    for split, rows in generate_examples(cfg).items():
        with ShardWriter(out_root / split, SCHEMA, params=asdict(cfg)) as writer:
            writer.write(rows)
        manifests[split] = writer.close()
    return manifests


# --------------------------------------------------------------------------- #
# Raw text (serving, predict: pipeline.data.corpora.raw_input)
# --------------------------------------------------------------------------- #


def source_tokenizer(settings: dict, pretokenized: bool) -> Callable[[str], list[str]]:
    """Raw text -> source tokens: a whitespace split (the generated symbols ``s12 u3 w7`` ...);
    ``pretokenized`` changes nothing."""
    return str.split
