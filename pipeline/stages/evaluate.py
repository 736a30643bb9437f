"""evaluate@<task>-<mechanism>: beam search on the test splits, their metrics, the heat map, and the
model registered (``flows/evaluate.py`` runs :func:`run` as a Prefect flow).

Writes predictions (JSONL per split), metrics.json (read by DVC; each split with its ``copy``
analysis of the outputs and references, :mod:`pipeline.metrics.copy_analysis`) and a CopyNet
Figure 3-style heat map; logs the same metrics dict, the scored splits as dataset inputs and the
files to the mechanism's MLflow run (the training's, found through run.json:
:mod:`pipeline.tracking.handoff`), and registers the model as an MLflow pyfunc (raw text in, output
text out) under the task's registered model.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from pipeline.config.backbones import row_vocab_dir
from pipeline.config.params import load_params, project_root, section
from pipeline.config.paths import TaskPaths
from pipeline.config.rows import stage_params
from pipeline.config.tasks import selection_metric
from pipeline.config.variants import resolve
from pipeline.data.corpora.raw_input import accepts_raw_text, detokenize
from pipeline.decoding.decode import copy_trace, decode_table, decode_words
from pipeline.decoding.scoring import score_records
from pipeline.decoding.settings import EvalConfig
from pipeline.io.files import write_json_atomic, write_jsonl_atomic
from pipeline.io.shards import first_rows, read_split
from pipeline.reporting.plots import copy_heatmap
from pipeline.runtime.device import compute_settings, nondeterministic_ops_named, resolve_device
from pipeline.serving.predictor import ServingConfig
from pipeline.serving.pyfunc import log_pyfunc_model
from pipeline.tracking.handoff import RunRecord
from pipeline.tracking.registry import metric_tags, register
from pipeline.tracking.runs import RunLogger, git_commit, task_manifests
from pipeline.tracking.settings import TrackingConfig
from pipeline.training.averaging import write_average
from pipeline.training.checkpoints import load_model
from pipeline.vocab.tokenizer import RECORD, BackboneTokenizer
from pipeline.vocab.vocabulary import Vocab, load_features_vocab


def evaluate_split(
    model,
    paths: TaskPaths,
    mechanism: str,
    split: str,
    vocabs: tuple[Vocab, Vocab],
    cfg: EvalConfig,
    device,
    tokenizer: BackboneTokenizer | None = None,
    seed: str | None = None,
) -> dict:
    """Decode one split (its first ``max_examples`` rows), write its predictions; its metrics.
    ``tokenizer``: a row on a pretrained backbone decodes its pieces and is scored on the output text's
    words (the copy analysis against the task's own word vocabulary, as every row)."""
    start = time.perf_counter()
    table = first_rows(read_split(paths.split(split)), cfg.max_examples)
    if tokenizer is not None:
        records = decode_words(model, table, tokenizer, cfg, device, desc=f"{mechanism} {split}")
        vocabs = (Vocab.load(paths.vocab / "src.vocab"), Vocab.load(paths.vocab / "tgt.vocab"))
    else:
        features = load_features_vocab(paths.vocab)
        records = decode_table(model, table, *vocabs, cfg, device, desc=f"{mechanism} {split}", features_vocab=features)
    seconds = time.perf_counter() - start
    print(
        f"{paths.task}/{mechanism}/{split}: decoded {len(records)} examples in {seconds:.1f}s "
        f"({len(records) / max(seconds, 1e-9):.1f} sentences/s, beam {cfg.beam_size})"
    )
    write_jsonl_atomic(paths.predictions(mechanism, split, seed), records)
    return score_records(records, cfg, split, tgt_vocab=vocabs[1])


def extra_seeds(paths: TaskPaths, mechanism: str) -> list[str]:
    """The row's other trained seeds (train.seeds > 1): the folders the train stage wrote under its
    checkpoint folder's ``seeds/``, in seed order."""
    folder = paths.checkpoints(mechanism) / "seeds"
    found = [p.name for p in folder.iterdir() if (p / "model.pt").is_file()] if folder.is_dir() else []
    return sorted(found, key=int)


def headline(metrics: dict) -> dict:
    """The numbers of a split's metrics that a seed's figure keeps (not the groups or copy analysis)."""
    return {k: v for k, v in metrics.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


def scored_model(paths: TaskPaths, mechanism: str, cfg: EvalConfig, device, vocabs, seed: str | None = None):
    """``(training run id, model, its checkpoint folder)`` of the row's first seed (``seed`` None) or of
    another of its seeds: the trained model.pt (checked against the hash its training recorded), or with
    ``evaluate.average_last`` K the mean of that training's last K step checkpoints, written under its
    train state (``averaged/model.pt``): what is scored, and registered when it is the row's choice."""
    trained, state, scored = seed_folders(paths, mechanism, cfg, seed)
    run_id, sha = RunRecord.of(state).training_run()
    model, _ = load_model(trained / "model.pt", mechanism, device, vocabs, sha256=sha)
    if scored != trained:
        write_average(trained, cfg.average_last, scored / "model.pt")
        model, _ = load_model(scored / "model.pt", mechanism, device, vocabs)
    return run_id, model, scored


def seed_folders(paths: TaskPaths, mechanism: str, cfg: EvalConfig, seed: str | None) -> tuple[Path, Path, Path]:
    """A seed's checkpoint folder, its train state folder and the folder of the model.pt that is scored
    (the checkpoint's, or ``averaged`` under the train state with ``evaluate.average_last``)."""
    sub = Path("seeds", seed) if seed else Path()
    trained, state = paths.checkpoints(mechanism) / sub, paths.train_state(mechanism) / sub
    return trained, state, state / "averaged" if cfg.average_last else trained


def evaluate_seeds(
    paths: TaskPaths, mechanism: str, params: dict, splits: list[str], first: dict, vocabs, cfg, device, tokenizer
) -> dict:
    """Every other seed's model scored as the first (its predictions beside the first's); ``first``'s
    splits gain ``seeds``: each seed's headline figures, the first's included. Each seed's figures go to
    its own MLflow run (nested in the row's). The metrics by split."""
    seeds = extra_seeds(paths, mechanism)
    if not seeds:
        return first
    first_seed = str(section(params, "train").get("seed", 1234))
    per_seed = {split: {first_seed: headline(first[split])} for split in splits}
    experiment = TrackingConfig.from_params(params).experiment(paths.task)
    for seed in seeds:
        run_id, model, _ = scored_model(paths, mechanism, cfg, device, vocabs, seed)
        scored = {s: evaluate_split(model, paths, mechanism, s, vocabs, cfg, device, tokenizer, seed) for s in splits}
        for split in splits:
            per_seed[split][seed] = headline(scored[split])
        with RunLogger(experiment, f"{mechanism} seed {seed}", run_id) as run_:
            run_.metrics({s: headline(m) for s, m in scored.items()})
    return {split: {**first[split], "seeds": per_seed[split]} for split in splits}


def registered_seed(params: dict, task: str, metrics: dict) -> str:
    """The seed whose model the row registers: the first (``train.seed``), or with ``train.seeds`` > 1
    the one with the best figure of the task's champion metric on validation (the earliest on a tie),
    so the registry, and the champion chosen from it, holds each row's best model by validation."""
    first = str(section(params, "train").get("seed", 1234))
    split, key, higher = selection_metric(params, task)
    best, best_value = first, None
    for seed, figures in ((metrics.get(split) or {}).get("seeds") or {}).items():  # the first seed first
        value = figures.get(key)
        if value is not None and (best_value is None or (value > best_value if higher else value < best_value)):
            best, best_value = seed, value
    return best


def copy_summary(copy: dict) -> str:
    """One line of a split's copy analysis: outputs against references."""
    out, ref = copy["outputs"], copy["references"]

    def num(v, unit: str = "%") -> str:
        return "-" if v is None else f"{v:.1f}{unit}"

    oov = (
        f"reference OOV recall {num(out['oov_recall'])} of {ref['oov_tokens']} tokens"
        if ref["oov_tokens"]
        else "no reference token outside the target vocabulary"
    )
    return (
        f"copied {num(out['copied'])} (references {num(ref['copied'])}), "
        f"novel 2-grams {num(out['novel_2gram'])} ({num(ref['novel_2gram'])}), "
        f"repeated 3-grams {num(out['repeated_3gram'])} ({num(ref['repeated_3gram'])}), "
        f"{oov}, length {num(out['length'], '')} ({num(ref['length'], '')})"
    )


def heatmap(
    model,
    paths: TaskPaths,
    mechanism: str,
    vocabs: tuple[Vocab, Vocab],
    cfg: EvalConfig,
    device,
    tokenizer: BackboneTokenizer | None = None,
) -> Path:
    """CopyNet Figure 3 for the first row of ``cfg.heatmap.split`` whose columns match ``cfg.heatmap.match``
    (a row on a backbone: over its pieces)."""
    where = cfg.heatmap
    split = where.split or cfg.splits[0]
    table = read_split(paths.split(split))
    match = dict(where.match)
    rows = table.select(list(match)).to_pydict()
    matches = [i for i in range(table.num_rows) if all(rows[c][i] == v for c, v in match.items())]
    row = matches[0] if matches else 0
    if tokenizer is not None:
        table, row = tokenizer.piece_table(table.slice(row, 1)), 0
    trace = copy_trace(model, table, row, *vocabs, cfg.max_len, device, load_features_vocab(paths.vocab))
    out = paths.evaluation(mechanism) / "heatmap.png"
    copy_heatmap(trace, out, f"{mechanism} on {paths.task}/{split} (row {row}): {trace['kind']}")
    return out


def serving_config(paths: TaskPaths, mechanism: str, params: dict) -> ServingConfig:
    """What the registered model will be served with; built (and its limits checked against the
    evaluate settings) before anything is decoded, so a model that could not be served is refused
    before any output is written."""
    prepare = params["prepare"][paths.task]
    return ServingConfig.from_params(paths.task, mechanism, prepare, params["evaluate"], params.get("serving"))


def register_model(
    run,
    paths: TaskPaths,
    mechanism: str,
    params: dict,
    metrics: dict,
    split: str,
    checkpoint: Path,
    serving: ServingConfig,
    seed: str,
) -> str:
    """Log the model (``checkpoint``/model.pt, trained with ``seed``) as an MLflow pyfunc (raw text in, output
    text out) and register it as a new version of the task's model, tagged with its metrics and data
    hashes (compare picks the champion)."""
    task_name = paths.task
    prepare = params["prepare"][task_name]
    subword = paths.shards / "subword.model" if prepare.get("subword") else None
    example = None  # a corpus whose reader refuses raw text for these settings gets no input example
    if accepts_raw_text(prepare):
        first_src = read_split(paths.split(split)).column("src")[0].as_py()
        example = [detokenize(first_src, prepare, subword)]
    vocab_dir = row_vocab_dir(paths.vocab, params.get("model"), resolve(params, mechanism).mechanism)
    uri = log_pyfunc_model(run.run_id, checkpoint, vocab_dir, serving, input_example=example, subword_model=subword)
    data = {f"data.{s}.content_sha256": m["content_sha256"] for s, m in task_manifests(paths.shards).items()}
    return register(
        uri,
        task_name,
        {
            "mechanism": mechanism,
            "base_mechanism": resolve(params, mechanism).mechanism,  # a variant's base (else the mechanism)
            "run_id": run.run_id,
            "seed": seed,
            "git_commit": git_commit(paths.root),
            **data,
            **metric_tags(metrics),
        },
        prefix=TrackingConfig.from_params(params).registry_prefix,
    )


def run(task_name: str, mechanism: str, params_path: str | None = None, step: Callable = lambda fn: fn) -> dict:
    """The stage; ``step`` wraps its units of work (the flow makes them Prefect tasks). The metrics by split."""
    params = stage_params(load_params(params_path), task_name, mechanism)  # data/settings/<task>/<row>.json
    cfg = EvalConfig.from_params(params)
    paths = TaskPaths(task_name, project_root(params_path))
    serving = serving_config(paths, mechanism, params)  # checked before any decoding
    device = resolve_device(cfg.device, setting="evaluate.device")  # one line if this machine lacks it
    compute = compute_settings(cfg.threads, cfg.deterministic)  # recorded on the run below
    # A row on a pretrained backbone decodes with that backbone's tokenizer vocabulary (the vocab stage's).
    vocab_dir = row_vocab_dir(paths.vocab, params.get("model"), resolve(params, mechanism).mechanism)
    vocabs = (Vocab.load(vocab_dir / "src.vocab"), Vocab.load(vocab_dir / "tgt.vocab"))
    tokenizer = BackboneTokenizer.load(vocab_dir) if (vocab_dir / RECORD).is_file() else None
    run_id, model, checkpoint = scored_model(paths, mechanism, cfg, device, vocabs)  # (or its last K's mean)
    splits = [s for s in cfg.splits if s not in cfg.optional_splits or paths.split(s).is_dir()]
    skipped = {s: {"skipped": f"no shards at {paths.split(s)} (optional split)"} for s in cfg.splits if s not in splits}
    selection, _, _ = selection_metric(params, task_name)
    if selection not in splits:  # the split the champion is chosen on is always scored
        splits.append(selection)
    with nondeterministic_ops_named(device, "evaluate.deterministic"):
        metrics = {
            split: step(evaluate_split)(model, paths, mechanism, split, vocabs, cfg, device, tokenizer)
            for split in splits
        }
        metrics = evaluate_seeds(paths, mechanism, params, splits, metrics, vocabs, cfg, device, tokenizer)
    write_json_atomic(paths.evaluation(mechanism) / "metrics.json", {**metrics, **skipped})
    plot = step(heatmap)(model, paths, mechanism, vocabs, cfg, device, tokenizer)

    with RunLogger(TrackingConfig.from_params(params).experiment(task_name), mechanism, run_id) as run_:
        run_.metrics(metrics)
        scored = {s: {"rows_scored": str(metrics[s]["n"])} for s in splits}
        run_.datasets(task_name, {s: paths.split(s) for s in splits}, stage="evaluate", tags=scored)
        run_.tags({f"evaluate.compute.{k}": str(v) for k, v in compute.items()})
        run_.artifact(plot)
        run_.artifact(paths.evaluation(mechanism) / "metrics.json")
        for split in splits:
            run_.artifact(paths.predictions(mechanism, split), "predictions")
        seed = registered_seed(params, task_name, metrics)
        registered_checkpoint, registered_metrics = checkpoint, metrics
        if seed in extra_seeds(paths, mechanism):  # not the first seed: that seed's model (as scored) and figures
            registered_checkpoint = seed_folders(paths, mechanism, cfg, seed)[2]
            registered_metrics = {s: m["seeds"][seed] for s, m in metrics.items()}
        version = register_model(
            run_, paths, mechanism, params, registered_metrics, splits[0], registered_checkpoint, serving, seed
        )
        run_.tags({"registered_version": version, "registered_seed": seed})
    for split, m in metrics.items():
        shown = ", ".join(f"{k} {v:.2f}" for k, v in m.items() if isinstance(v, float))
        if "seeds" in m:
            shown += f" (first seed; {len(m['seeds'])} seeds; registered: seed {seed})"
        print(f"{task_name}/{mechanism}/{split}: {shown} (n={m['n']})")
        print(f"{task_name}/{mechanism}/{split}: {copy_summary(m['copy'])}")
    for split, m in skipped.items():
        print(f"{task_name}/{mechanism}/{split}: {m['skipped']}")
    return metrics
