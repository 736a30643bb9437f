"""Tags as a features column or pasted into the source: test exact match, tags in the outputs, wall time.

A generated character-level task in the shape of morphological inflection: a word of 3-7 letters and
tags that combine, applied in this order: one order tag (``REV`` reverses the word, ``COPY`` keeps
it, ``ROT`` moves its first letter to the end); ``DBL``, when present, doubles the last letter; at
most one suffix tag (``PST`` / ``PL`` / ``PRG`` append ``ed`` / ``s`` / ``ing``); ``NEG``, when
present, prefixes ``un``. 48 tag sets: ``s e a l`` with ``REV;DBL;PRG`` -> ``l a e s s i n g``.
Every word is a lemma drawn once, with ``--tags-per-lemma`` different tag sets; the valid and test
lemmas never occur in train, and every training size shares the same valid and test rows.

The same rows become two tasks per training size, added, prepared and given vocabularies by the
project's own code (``python -m pipeline.data.tasks add``, the prepare job, the vocab stage) in a
scratch project:

- ``features``: the tags in a features column (``--features-col tags``): the model embeds them and
  conditions the decoder on them (its start, and its input at every step); they are never copy
  candidates.
- ``pasted``: the tags pasted before the characters as source tokens (``REV DBL PRG s e a l``),
  which the encoder reads and the copy mechanism can copy into the output.

Both use the whitespace tokenizer on space-separated characters, so the characters are the same
tokens in both; only where the tags go differs. Each (size, mechanism, condition, seed) is one
:class:`pipeline.training.job.TrainJob` at the task's settings with the sizes below, its checkpoint
chosen on the validation split only (``train.select_by: auto``: for exact match, the greedy
validation exact match), then decoded once on test with beam search
(:func:`pipeline.decoding.decode.decode_table`). Reported: test top-1 exact match, mean over seeds
with a 95% bootstrap interval that resamples lemmas and seeds (:class:`pipeline.metrics.bootstrap.Bootstrap`),
the paired difference features - pasted on the same replicates, the share of test outputs (best
hypothesis; any hypothesis of the n-best) holding a tag token, the first epoch whose validation
exact match reaches 95, and the wall time of training and of decoding. Prints a markdown table and
writes every figure (with each run's validation curve and per-example results) to ``--json``.

    .venv/bin/python scripts/features_vs_tags.py --json docs/experiments/features/features_vs_tags.json

``--conditions features`` runs one condition only; ``--recorded PATH`` adds the runs of an earlier JSON
of this script (same settings, so the same rows) to the table, its ``features`` runs renamed
``--recorded-label`` (e.g. the figures of an earlier model), and pairs every condition with them too:

    .venv/bin/python scripts/features_vs_tags.py --conditions features \
        --recorded docs/experiments/features/features_vs_tags.json --recorded-label "features, start only"

Runs on one thread (``--threads``) with the math libraries pinned as the pipeline's stages are;
about 8 minutes with the defaults (7.5 measured on a 2-core machine shared with other work).
"""

from __future__ import annotations

from pipeline.runtime.math_pins import pin_math_libraries  # noqa: E402  (before torch loads)

pin_math_libraries()

import argparse  # noqa: E402
import contextlib  # noqa: E402
import io  # noqa: E402
import json  # noqa: E402
import random  # noqa: E402
import shutil  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

from pipeline.config.params import REPO_ROOT, load_params  # noqa: E402
from pipeline.config.paths import TaskPaths  # noqa: E402
from pipeline.config.tasks import effective_params  # noqa: E402
from pipeline.data import tasks  # noqa: E402
from pipeline.data.prepare import prepare_job, write_job  # noqa: E402
from pipeline.decoding.decode import decode_table  # noqa: E402
from pipeline.decoding.settings import EvalConfig  # noqa: E402
from pipeline.decoding.validation import job_scorer  # noqa: E402
from pipeline.io.parallel import serial_map  # noqa: E402
from pipeline.io.shards import read_split  # noqa: E402
from pipeline.metrics.bootstrap import Bootstrap, ExampleScores, exact_match_scores  # noqa: E402
from pipeline.runtime.device import compute_settings  # noqa: E402
from pipeline.stages import vocab as vocab_stage  # noqa: E402
from pipeline.training.checkpoints import load_model  # noqa: E402
from pipeline.training.job import TrainJob  # noqa: E402

LETTERS = "abcdefghijklmnop"
# The rule, applied in this order. Exactly one order tag; then optionally DBL; at most one suffix tag
# and optionally the prefix tag NEG. 3 x 2 x 4 x 2 = 48 tag sets.
ORDER = {
    "REV": lambda w: w[::-1],  # reversed
    "COPY": lambda w: w,  # kept
    "ROT": lambda w: w[1:] + w[:1],  # the first letter moved to the end
}
DOUBLE = "DBL"  # the last letter doubled
SUFFIXES = {"PST": "ed", "PL": "s", "PRG": "ing", None: ""}
PREFIX = ("NEG", "un")
TAGS = {*ORDER, DOUBLE, *(s for s in SUFFIXES if s), PREFIX[0]}
TAG_SETS = [
    [order, *([DOUBLE] if double else []), *([suffix] if suffix else []), *([PREFIX[0]] if neg else [])]
    for order in ORDER
    for double in (False, True)
    for suffix in SUFFIXES
    for neg in (False, True)
]
CONDITIONS = ("features", "pasted")


def inflect(word: str, tags: list[str]) -> str:
    """The output the tags ask of ``word`` (the task's rule)."""
    out = ORDER[tags[0]](word)
    if DOUBLE in tags:
        out += out[-1]
    out += "".join(SUFFIXES[t] for t in tags if t in SUFFIXES)
    return (PREFIX[1] if PREFIX[0] in tags else "") + out


def lemmas(counts: dict[str, int], seed: int) -> dict[str, list[str]]:
    """Distinct words of 3-7 letters, ``counts[split]`` of them per split, no word in two splits."""
    rng, seen, out = random.Random(seed), set(), {}
    for split, n in counts.items():
        words = []
        while len(words) < n:
            word = "".join(rng.choice(LETTERS) for _ in range(rng.randint(3, 7)))
            if word not in seen:
                seen.add(word)
                words.append(word)
        out[split] = words
    return out


def rows(words: list[str], per_lemma: int, rng: random.Random) -> list[tuple[str, list[str], str]]:
    """(word, tags, output) for ``per_lemma`` different tag sets of every word."""
    return [(w, tags, inflect(w, tags)) for w in words for tags in rng.sample(TAG_SETS, per_lemma)]


def write_tsv(path: Path, examples: list[tuple[str, list[str], str]], condition: str) -> None:
    """Space-separated characters; the tags in their own column, or as tokens before the characters."""
    lines = ["src\ttags\ttgt"] if condition == "features" else ["src\ttgt"]
    for word, tags, out in examples:
        chars, target = " ".join(word), " ".join(out)
        if condition == "features":
            lines.append(f"{chars}\t{';'.join(tags)}\t{target}")
        else:
            lines.append(f"{' '.join(tags)} {chars}\t{target}")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def task_name(condition: str, train_lemmas: int) -> str:
    return f"{condition}_{train_lemmas}"


def make_project(root: Path, args: argparse.Namespace) -> str:
    """A scratch project (a copy of params.yaml) holding both tasks at every training size, prepared and
    with vocabularies. The smaller training sets are the first lemmas of the largest; valid and test
    are the same rows for every task."""
    params_path = root / "params.yaml"
    shutil.copy(REPO_ROOT / "params.yaml", params_path)
    largest = max(args.train_lemmas)
    words = lemmas({"valid": args.valid_lemmas, "test": args.test_lemmas, "train": largest}, args.data_seed)
    rng = random.Random(args.data_seed + 1)
    data = {split: rows(ws, args.tags_per_lemma, rng) for split, ws in words.items()}  # train: lemma by lemma
    for n in args.train_lemmas:
        splits = {"train": data["train"][: n * args.tags_per_lemma], "valid": data["valid"], "test": data["test"]}
        for condition in CONDITIONS:
            name = task_name(condition, n)
            raw = root / "data" / "raw" / name
            for split, examples in splits.items():
                write_tsv(raw / f"{split}.tsv", examples, condition)
            argv = ["--params", str(params_path), "add", name, "--src-col", "src", "--tgt-col", "tgt"]
            argv += [arg for split in splits for arg in (f"--{split}", str(raw / f"{split}.tsv"))]
            argv += ["--tokenizer", "whitespace", "--metric", "exact_match", "--max-len", str(args.max_len)]
            if condition == "features":
                argv += ["--features-col", "tags"]
            with contextlib.redirect_stdout(io.StringIO()):  # add / vocab print their next steps
                if tasks.main(argv) != 0:
                    raise SystemExit(f"error: scripts/features_vs_tags.py: adding task {name} failed")
                write_job(prepare_job(name, str(params_path)), serial_map)
                vocab_stage.run(name, str(params_path))
    return str(params_path)


def settings(raw: dict, task: str, mechanism: str, epochs: int, args: argparse.Namespace) -> dict:
    """The task's effective params with this experiment's sizes, epochs, thread count and search."""
    params = effective_params(raw, task, mechanism)
    params["model"] = {**params["model"], "emb": args.emb, "hidden": args.hidden}
    params["train"] = {
        **params["train"],
        "epochs": epochs,
        "batch_size": args.batch_size,
        "lr": args.lr,
        "threads": args.threads,
        "device": "cpu",
        "select_by": "auto",  # exact match: chosen by the validation metric, as the pipeline does
        "patience": None,
        "max_steps": None,
    }
    params["evaluate"] = {
        **params["evaluate"],
        "beam_size": args.beam,
        "topk": args.beam,
        "threads": args.threads,
        "device": "cpu",
        "max_examples": None,
    }
    return params


def one_run(params_path: str, size: int, condition: str, mechanism: str, seed: int, args) -> dict:
    """Train one seed (checkpoint chosen on valid), decode test once; per-example figures."""
    raw = load_params(params_path)
    task = task_name(condition, size)
    epochs = args.epochs[args.train_lemmas.index(size)]
    params = settings(raw, task, mechanism, epochs, args)
    paths = TaskPaths(task, Path(params_path).parent)
    job = TrainJob(paths, mechanism, params)
    ckpt = paths.checkpoints(mechanism) / str(seed)
    started = time.perf_counter()
    history = job.run(checkpoints=ckpt, score_valid=job_scorer(job), seed=seed)
    train_s = time.perf_counter() - started
    model, saved = load_model(ckpt / "model.pt", job.base, "cpu")  # saved: the chosen validation's record
    ev = EvalConfig.from_params(params)
    compute_settings(ev.threads, ev.deterministic)
    started = time.perf_counter()
    records = decode_table(
        model.eval(),
        read_split(paths.split("test")),
        job.src_vocab,
        job.tgt_vocab,
        ev,
        torch.device("cpu"),
        features_vocab=job.features_vocab,
    )
    decode_s = time.perf_counter() - started
    metric = next(k for k in history[-1] if k.startswith("valid_top1"))  # valid_top1_greedy
    return {
        "train_lemmas": size,
        "train_examples": len(job.splits["train"]),
        "epochs": epochs,
        "mechanism": mechanism,
        "condition": condition,
        "seed": seed,
        "train_seconds": round(train_s, 1),
        "decode_seconds": round(decode_s, 1),
        "chosen_epoch": saved["epoch"],
        metric: saved[metric],
        "valid_curve": [round(r[metric], 2) for r in history],  # greedy valid exact match per epoch, 0: untrained
        "lemmas": ["".join(t for t in r["src"] if t not in TAGS) for r in records],  # (N,) the bootstrap's groups
        "correct": [r["pred"] == r["tgt"] for r in records],
        "tag_in_best": [bool(set(r["pred"]) & TAGS) for r in records],
        "tag_in_nbest": [any(set(h) & TAGS for h in r["nbest"]) for r in records],
        "golds": [r["tgt"] for r in records],
        "nbests": [r["nbest"] for r in records],
    }


def first_epoch(curve: list[float], level: float) -> int | None:
    """The first epoch whose validation exact match reaches ``level`` (None: none does)."""
    return next((epoch for epoch, value in enumerate(curve) if value >= level), None)


def top1_scores(run: dict) -> ExampleScores:
    """Test top-1 exact match per example of one run (a recorded run keeps only its ``correct`` flags)."""
    if "nbests" in run:
        return exact_match_scores(run["golds"], run["nbests"], 1)["top1"]
    return ExampleScores("mean", 100.0 * np.array(run["correct"], dtype=float))  # 0 or 100, as exact_match_scores


def summarise(runs: list[dict], conditions: list[str], args: argparse.Namespace) -> list[dict]:
    """One row per (training size, mechanism, condition): exact match with its interval, tag shares,
    times; and, on the same bootstrap replicates, the paired difference of each condition but
    ``pasted`` against ``pasted`` and against every condition after it."""
    groups = next(r["lemmas"] for r in runs if "lemmas" in r)
    boot = Bootstrap(len(groups), groups=groups, resamples=args.resamples, seed=0)
    table = []
    for size in args.train_lemmas:
        for mechanism in args.mechanisms:
            intervals, rows = {}, {}
            for condition in conditions:
                mine = [
                    r
                    for r in runs
                    if (r["train_lemmas"], r["mechanism"], r["condition"]) == (size, mechanism, condition)
                ]
                if any(r.get("lemmas", groups) != groups or len(r["correct"]) != len(groups) for r in mine):
                    raise RuntimeError("the test rows differ between runs: the bootstrap would pair other examples")
                scores = [top1_scores(r) for r in mine]
                iv = intervals[condition] = boot.interval(scores)
                outputs = len(groups) * len(mine)
                rows[condition] = {
                    "train_lemmas": size,
                    "train_examples": mine[0]["train_examples"],
                    "epochs": mine[0]["epochs"],
                    "mechanism": mechanism,
                    "condition": condition,
                    "seeds": [r["seed"] for r in mine],
                    "exact_match": round(iv.mean, 2),
                    "sd_over_seeds": None if iv.sd is None else round(iv.sd, 2),
                    "ci95": [round(iv.low, 2), round(iv.high, 2)],
                    "per_seed": [round(x.score(), 2) for x in scores],
                    "tag_in_best_percent": round(100 * sum(sum(r["tag_in_best"]) for r in mine) / outputs, 2),
                    "tag_in_nbest_percent": round(100 * sum(sum(r["tag_in_nbest"]) for r in mine) / outputs, 2),
                    "train_seconds_mean": round(sum(r["train_seconds"] for r in mine) / len(mine), 1),
                    "decode_seconds_mean": round(sum(r["decode_seconds"] for r in mine) / len(mine), 1),
                    "chosen_epochs": [r["chosen_epoch"] for r in mine],
                    "first_epoch_valid_95": [first_epoch(r["valid_curve"], 95.0) for r in mine],
                }
                table.append(rows[condition])
            for i, condition in enumerate(conditions):
                others = [c for c in conditions[i + 1 :] if c != "pasted"]  # every pair once, pasted last
                if condition != "pasted":
                    others.append("pasted")
                for other in others:
                    diff = boot.paired(intervals[condition], intervals[other])
                    rows[condition].setdefault("minus", {})[other] = {
                        "difference": round(diff.difference, 2),
                        "ci95": [round(diff.low, 2), round(diff.high, 2)],
                        "p_value": round(diff.p_value, 4),
                    }
    return table


NAMES = {"copynet": "CopyNet", "pointer_generator": "pointer-generator"}  # the table's names


def markdown(table: list[dict], n_test: int, n_lemmas: int, beam: int, resamples: int) -> str:
    """The table of the experiment's page."""
    lines = [
        "| train examples (epochs) | mechanism | tags | test exact match [95% CI] | per seed "
        f"| difference [95% CI], p | outputs with a tag: best / any of {beam}-best "
        "| first epoch valid >= 95, per seed | train s | test decode s |",
        "|---|---|---|---:|---|---:|---:|---|---:|---:|",
    ]
    for row in table:
        parts = []
        for other, diff in row.get("minus", {}).items():  # p 0: no replicate crossed zero, p < 2 / resamples
            p = f"p < {2 / resamples:.3f}" if diff["p_value"] == 0 else f"p {diff['p_value']:.3f}"
            parts.append(f"- {other}: {diff['difference']:+.2f} [{diff['ci95'][0]:+.2f}, {diff['ci95'][1]:+.2f}], {p}")
        d = "<br>".join(parts)
        lines.append(
            f"| {row['train_examples']} ({row['epochs']}) | {NAMES.get(row['mechanism'], row['mechanism'])} | "
            f"{row['condition']} | {row['exact_match']:.2f} [{row['ci95'][0]:.2f}, {row['ci95'][1]:.2f}] | "
            f"{' / '.join(f'{x:.1f}' for x in row['per_seed'])} | {d} | "
            f"{row['tag_in_best_percent']:.2f}% / {row['tag_in_nbest_percent']:.2f}% | "
            f"{' / '.join('-' if e is None else str(e) for e in row['first_epoch_valid_95'])} | "
            f"{row['train_seconds_mean']:.0f} | {row['decode_seconds_mean']:.1f} |"
        )
    lines.append(f"\n{n_test} test examples of {n_lemmas} lemmas (the bootstrap resamples lemmas).")
    return "\n".join(lines)


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--mechanisms", nargs="+", default=["copynet", "pointer_generator"])
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    p.add_argument(
        "--train-lemmas", type=int, nargs="+", default=[150, 1000], help="training sizes, in lemmas (one task each)"
    )
    p.add_argument("--epochs", type=int, nargs="+", default=[30, 20], help="epochs, one per --train-lemmas")
    p.add_argument("--valid-lemmas", type=int, default=150)
    p.add_argument("--test-lemmas", type=int, default=300)
    p.add_argument("--tags-per-lemma", type=int, default=2, help=f"different tag sets per lemma (of {len(TAG_SETS)})")
    p.add_argument("--data-seed", type=int, default=0)
    p.add_argument("--emb", type=int, default=32)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=0.003)
    p.add_argument("--beam", type=int, default=5)
    p.add_argument("--max-len", type=int, default=20, help="longest output decoded (the longest target is 13)")
    p.add_argument("--resamples", type=int, default=1000)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--conditions", nargs="+", choices=CONDITIONS, default=list(CONDITIONS), help="where the tags go")
    p.add_argument(
        "--recorded", type=Path, default=None, help="an earlier --json of this script whose runs join the table"
    )
    p.add_argument("--recorded-label", default="features, recorded", help="the name of its features runs")
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args(argv)
    if args.recorded_label in CONDITIONS:
        p.error(f"--recorded-label must differ from {list(CONDITIONS)}, got {args.recorded_label!r}")
    for name in ("valid_lemmas", "test_lemmas", "beam", "threads", "resamples", "emb", "hidden", "batch_size"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if min(args.train_lemmas) < 1 or min(args.epochs) < 1 or len(set(args.train_lemmas)) != len(args.train_lemmas):
        p.error(
            f"--train-lemmas and --epochs must be distinct sizes >= 1 and epochs >= 1, got {args.train_lemmas}, {args.epochs}"
        )
    if len(args.epochs) != len(args.train_lemmas):
        p.error(f"--epochs needs one value per --train-lemmas ({len(args.train_lemmas)}), got {len(args.epochs)}")
    if not 1 <= args.tags_per_lemma <= len(TAG_SETS):
        p.error(f"--tags-per-lemma must be within 1..{len(TAG_SETS)}, got {args.tags_per_lemma}")
    return args


SAME_ROWS = ("mechanisms", "seeds", "train_lemmas", "epochs", "valid_lemmas", "test_lemmas", "tags_per_lemma")
SAME_ROWS += ("data_seed", "emb", "hidden", "batch_size", "lr", "beam", "max_len")  # what the figures depend on


def recorded_runs(args: argparse.Namespace) -> list[dict]:
    """The runs of ``--recorded`` for the conditions not run now, its ``features`` renamed ``--recorded-label``
    (unless runs of that name are there already); per-example flags back to booleans. Its settings must
    be this run's (the same rows and models)."""
    if args.recorded is None:
        return []
    where = f"scripts/features_vs_tags.py: --recorded {args.recorded}"
    try:
        report = json.loads(args.recorded.read_text(encoding="utf-8"))
        old = report["settings"]
        runs = report["runs"]
    except (OSError, ValueError, KeyError) as err:
        print(f"error: {where}: not a JSON this script wrote ({err})", file=sys.stderr)
        raise SystemExit(2) from None
    differ = [k for k in SAME_ROWS if old.get(k) != getattr(args, k)]
    if differ:
        print(f"error: {where}: its settings differ from this run's in {', '.join(differ)}", file=sys.stderr)
        raise SystemExit(2)
    # A JSON written with --recorded already holds runs under the label: its features runs are newer ones.
    labelled = any(run["condition"] == args.recorded_label for run in runs)
    out = []
    for run in runs:
        if run["condition"] == "features" and not labelled:
            run = {**run, "condition": args.recorded_label}
        if run["condition"] in args.conditions or run["condition"] not in (args.recorded_label, *CONDITIONS):
            continue  # run again now, or a label this run does not show
        out.append({**run, **{k: [c == "1" for c in run[k]] for k in ("correct", "tag_in_best", "tag_in_nbest")}})
    return out


def main(argv=None) -> int:
    args = parse_args(argv)
    recorded = recorded_runs(args)
    torch.set_num_threads(args.threads)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="features_vs_tags_") as tmp:
        params_path = make_project(Path(tmp), args)
        prepared_s = time.perf_counter() - started
        runs = []
        for size in args.train_lemmas:
            for mechanism in args.mechanisms:
                for seed in args.seeds:
                    for condition in args.conditions:
                        run = one_run(params_path, size, condition, mechanism, seed, args)
                        runs.append(run)
                        right = 100 * sum(run["correct"]) / len(run["correct"])
                        print(
                            f"{size} lemmas, {mechanism}, {condition}, seed {seed}: test exact match {right:.2f}, "
                            f"epoch {run['chosen_epoch']} of {run['epochs']}, train {run['train_seconds']:.0f} s",
                            file=sys.stderr,
                            flush=True,
                        )
    conditions = [
        c for c in ("features", args.recorded_label, "pasted") if any(r["condition"] == c for r in runs + recorded)
    ]
    table = summarise(runs + recorded, conditions, args)
    n_test, n_lemmas = len(runs[0]["lemmas"]), len(set(runs[0]["lemmas"]))
    print(markdown(table, n_test, n_lemmas, args.beam, args.resamples))
    total_s = time.perf_counter() - started
    if args.json:
        settings_out = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items() if k != "json"}
        per_run = [{k: v for k, v in r.items() if k not in {"golds", "nbests", "lemmas"}} for r in runs]
        per_run += [dict(r) for r in recorded]
        for r in per_run:  # per-example booleans as a string of 0/1 in test row order: the JSON stays short
            for key in ("correct", "tag_in_best", "tag_in_nbest"):
                r[key] = "".join("1" if x else "0" for x in r[key])
        report = {
            "settings": settings_out,
            "test_examples": n_test,
            "test_lemmas": n_lemmas,
            "prepare_seconds": round(prepared_s, 1),
            "total_seconds": round(total_s, 1),
            "torch": torch.__version__,
            "rows": table,
            "runs": per_run,
        }
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
