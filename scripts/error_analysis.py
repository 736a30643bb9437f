"""Error analysis behind figures in docs/results.md, run on a project directory after its pipeline run.

    python scripts/error_analysis.py lengths DIR [--rule x->xx]      # copy_rules test: accuracy by target
        length, and whether the wrong outputs are too short or too long (CopyNet Table 1 section)
    python scripts/error_analysis.py length-penalty DIR [--rule x->xx] [--penalties 0 1]
        # re-decode the valid rows of one rule type with each length penalty (beam 10, CopyNet)
    python scripts/error_analysis.py vocab-coverage DIR [--task gigaword]   # test references: share of
        tokens outside the target vocabulary, and of those, the share found in the source
DIR is a project directory (e.g. a clone made by scripts/paper_scale.sh or scripts/gigaword_curve.sh).
"""

from __future__ import annotations

import argparse
import json
from collections import Counter, defaultdict
from pathlib import Path

import torch  # noqa: E402

from pipeline.config.paths import TaskPaths  # noqa: E402
from pipeline.decoding.decode import decode_table  # noqa: E402
from pipeline.decoding.scoring import score_records  # noqa: E402
from pipeline.decoding.settings import EvalConfig  # noqa: E402
from pipeline.io.shards import read_split  # noqa: E402
from pipeline.training.checkpoints import load_model  # noqa: E402
from pipeline.vocab.vocabulary import Vocab  # noqa: E402


def lengths(root: Path, rule: str, mechanism: str) -> None:
    preds = TaskPaths("copy_rules", root).evaluation(mechanism) / "predictions" / "test.jsonl"
    rows = [r for r in map(json.loads, preds.open(encoding="utf-8")) if r["rule_type"] == rule]
    by_len: dict[int, list[int]] = defaultdict(lambda: [0, 0])
    for r in rows:
        bucket = min(len(r["tgt"]) // 8, 4)
        by_len[bucket][0] += r["pred"] == r["tgt"]
        by_len[bucket][1] += 1
    for b, (right, n) in sorted(by_len.items()):
        print(f"{rule} target length {8 * b}-{8 * b + 7}: {100 * right / n:.1f}% of {n}")
    wrong = [r for r in rows if r["pred"] != r["tgt"]]
    kinds = Counter(
        "too short"
        if len(r["pred"]) < len(r["tgt"])
        else "too long"
        if len(r["pred"]) > len(r["tgt"])
        else "same length"
        for r in wrong
    )
    print(f"{rule} errors: {len(wrong)} of {len(rows)}: {dict(kinds)}")


def length_penalty(root: Path, rule: str, mechanism: str, penalties: list[float]) -> None:
    torch.set_num_threads(1)
    paths = TaskPaths("copy_rules", root)
    vocabs = (Vocab.load(paths.vocab / "src.vocab"), Vocab.load(paths.vocab / "tgt.vocab"))
    model, _ = load_model(paths.checkpoints(mechanism) / "model.pt", mechanism, torch.device("cpu"), vocabs)
    table = read_split(paths.split("valid"))
    table = table.take([i for i, r in enumerate(table.column("rule_type").to_pylist()) if r == rule])
    for lp in penalties:
        cfg = EvalConfig(beam_size=10, max_len=50, length_penalty=lp, batch_size=100, group_by="rule_type")
        recs = decode_table(model, table, *vocabs, cfg, torch.device("cpu"))
        m = score_records(recs, cfg, "valid")
        short = sum(len(r["pred"]) < len(r["tgt"]) for r in recs if r["pred"] != r["tgt"])
        print(
            f"valid {rule} (n={m['n']}) length_penalty {lp}: top1 {m['top1']:.2f}, top10 {m['top10']:.2f}, too short {short}"
        )


def vocab_coverage(root: Path, task: str) -> None:
    paths = TaskPaths(task, root)
    vocab = Vocab.load(paths.vocab / "tgt.vocab")
    test = read_split(paths.split("test")).to_pydict()
    tokens = [w for tgt in test["tgt"] for w in tgt]
    outside = [w in set(src) for tgt, src in zip(test["tgt"], test["src"]) for w in tgt if w not in vocab]
    print(
        f"{task} test references: {len(tokens)} tokens, {100 * len(outside) / len(tokens):.1f}% outside the target vocabulary ({len(vocab)} words); of those, {100 * sum(outside) / max(len(outside), 1):.1f}% appear in the source"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("what", choices=["lengths", "length-penalty", "vocab-coverage"])
    ap.add_argument("root", type=Path)
    ap.add_argument("--rule", default="x->xx")
    ap.add_argument("--mechanism", default="copynet")
    ap.add_argument("--penalties", type=float, nargs="+", default=[0.0, 1.0])
    ap.add_argument("--task", default="gigaword")
    args = ap.parse_args()
    if args.what == "lengths":
        lengths(args.root, args.rule, args.mechanism)
    elif args.what == "length-penalty":
        length_penalty(args.root, args.rule, args.mechanism, args.penalties)
    else:
        vocab_coverage(args.root, args.task)


if __name__ == "__main__":
    main()
