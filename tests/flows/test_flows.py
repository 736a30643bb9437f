"""Every stage's Prefect flow, run in-process under Prefect's test harness on a tiny project."""

from __future__ import annotations

import json

import pytest

from pipeline.runtime.math_pins import cpu_model

pytestmark = pytest.mark.slow


def test_all_flows_end_to_end(harness, tiny_project):
    from flows.compare import compare_flow
    from flows.evaluate import evaluate_flow
    from flows.prepare import prepare_corpus
    from flows.train import train_flow
    from flows.vocab import vocab_flow
    from pipeline.io.shards import read_manifest
    from pipeline.metrics.copy_analysis import copy_analysis
    from pipeline.vocab.vocabulary import Vocab

    params = str(tiny_project / "params.yaml")
    manifests = prepare_corpus("copy_rules", params)
    # 5 rules x 8 instances: 4 train (1 valid carved out) and 4 test per rule; 2 unseen per rule.
    assert {s: m["rows"] for s, m in manifests.items()} == {"train": 15, "valid": 5, "test": 20, "test_unseen": 10}
    assert read_manifest(tiny_project / "data/shards/copy_rules/train")["rows_in"] == 15

    sizes = vocab_flow("copy_rules", params)
    vocab_lines = (tiny_project / "data/vocab/copy_rules/src.vocab").read_text().splitlines()
    assert len(vocab_lines) == sizes["src"] and vocab_lines[0] == "<pad>\t0"

    for mech in ("rnnsearch", "copynet"):
        last = train_flow("copy_rules", mech, params)
        assert last["epoch"] == 2 and last["valid_loss"] > 0
        ckpt = tiny_project / f"data/checkpoints/copy_rules/{mech}"
        state = tiny_project / f"data/train_state/copy_rules/{mech}"
        assert sorted(p.name for p in ckpt.iterdir()) == ["history.json", "model.pt"]  # the DVC output
        assert (state / "last.pt").exists() and json.loads((state / "run.json").read_text())["completed"]
        curve = (tiny_project / f"data/plots/learning_curves/copy_rules/{mech}.csv").read_text().splitlines()
        assert curve[0].startswith("step,epoch,") and len(curve) == 4  # header, step 0, 2 epochs

        metrics = evaluate_flow("copy_rules", mech, params)
        on_disk = json.loads((tiny_project / f"data/eval/runs/copy_rules/{mech}/metrics.json").read_text())
        assert on_disk == metrics
        assert metrics["test"]["n"] == 20 and metrics["test_unseen"]["n"] == 10
        assert 0.0 <= metrics["test"]["top1"] <= metrics["test"]["top10"] <= 100.0
        preds = (tiny_project / f"data/eval/runs/copy_rules/{mech}/predictions/test.jsonl").read_text().splitlines()
        assert len(preds) == 20 and len(json.loads(preds[0])["nbest"]) == 3
        # each split's copy analysis: the best outputs and the references against the sources read
        records = [json.loads(line) for line in preds]
        tgt_vocab = Vocab.load(tiny_project / "data/vocab/copy_rules/tgt.vocab")
        refs = [r.get("refs") or [r["tgt"]] for r in records]
        by_hand = copy_analysis([r["pred"] for r in records], refs, [r["src"] for r in records], tgt_vocab)
        assert metrics["test"]["copy"] == by_hand
        assert metrics["test"]["copy"]["references"]["count"] == 20  # one reference per example
        assert set(metrics["test_unseen"]["copy"]) == {"outputs", "references"}

    import yaml

    p = yaml.safe_load((tiny_project / "params.yaml").read_text())
    p["mechanisms"] = ["rnnsearch", "copynet"]
    (tiny_project / "params.yaml").write_text(yaml.safe_dump(p))
    tables = compare_flow(params)
    text = tables["copy_rules"]
    assert "| RNNSearch (ours) |" in text and "| CopyNet (paper) | 97.3 | 93.7 | 98.3 | 68.2 | 77.5 |" in text
    assert (tiny_project / "data/eval/comparison/copy_rules.png").stat().st_size > 1000

    # The same runs are in MLflow: one run per mechanism holding train and test metrics.
    import mlflow

    runs = mlflow.search_runs(experiment_names=["copy_rules"])
    by_name = {r["tags.mlflow.runName"]: r for _, r in runs.iterrows()}
    for mech in ("rnnsearch", "copynet"):
        m = json.loads((tiny_project / f"data/eval/runs/copy_rules/{mech}/metrics.json").read_text())
        assert by_name[mech]["metrics.test.top1"] == pytest.approx(m["test"]["top1"])
        assert by_name[mech]["metrics.valid_loss"] > 0
        copied = m["test"]["copy"]["outputs"]["copied"]
        assert by_name[mech]["metrics.test.copy.outputs.copied"] == pytest.approx(copied)
        # the run's dataset inputs: every split it read, the digest from the shard manifest's content hash
        inputs = mlflow.MlflowClient().get_run(by_name[mech]["run_id"]).inputs.dataset_inputs
        seen = {i.dataset.name: i for i in inputs}
        assert sorted(seen) == ["copy_rules/test", "copy_rules/test_unseen", "copy_rules/train", "copy_rules/valid"]
        for split, manifest in manifests.items():
            ds = seen[f"copy_rules/{split}"].dataset
            assert ds.digest == manifest["content_sha256"][:16]
            assert json.loads(ds.profile)["content_sha256"] == manifest["content_sha256"]
            assert json.loads(ds.profile)["num_rows"] == manifest["rows"]
            assert json.loads(ds.source)["uri"] == str((tiny_project / f"data/shards/copy_rules/{split}").resolve())
        contexts = {n: {t.key: t.value for t in i.tags}["mlflow.data.context"] for n, i in seen.items()}
        assert contexts == {
            "copy_rules/train": "training",
            "copy_rules/valid": "validation",
            "copy_rules/test": "evaluation",
            "copy_rules/test_unseen": "evaluation",
        }
        # What decided the run's arithmetic (pipeline.runtime.math_pins): this test process imported torch
        # before any pinning, and the tags say so rather than claim it pinned.
        for stage in ("train", "evaluate"):
            assert by_name[mech][f"tags.{stage}.compute.cpu"] == cpu_model()
            assert by_name[mech][f"tags.{stage}.compute.math_pinned"] == "false"
            assert by_name[mech][f"tags.{stage}.compute.threads"] == "1"  # tiny_params' fixed count
    # The experiment opens on runs (a model-training experiment), and the pipeline's parent run
    # holds the comparison: a metric per mechanism and split, the table and the chart.
    client = mlflow.MlflowClient()
    experiment = client.get_experiment_by_name("copy_rules")
    assert experiment.tags["mlflow.experimentKind"] == "custom_model_development"
    [parent] = [r for _, r in runs.iterrows() if r["tags.kind"] == "pipeline"]
    cn = json.loads((tiny_project / "data/eval/runs/copy_rules/copynet/metrics.json").read_text())
    assert parent["metrics.copynet.test.top1"] == pytest.approx(cn["test"]["top1"])
    assert parent["metrics.rnnsearch.test_unseen.top1"] >= 0 and parent["status"] == "FINISHED"
    # ... and the copy analysis: each mechanism's outputs, the references once
    assert parent["metrics.copynet.test.copy.copied"] == pytest.approx(cn["test"]["copy"]["outputs"]["copied"])
    refs_novel = cn["test"]["copy"]["references"]["novel_2gram"]
    assert parent["metrics.references.test.copy.novel_2gram"] == pytest.approx(refs_novel)
    assert "## test (20 examples): copy analysis" in text and "| References | " in text
    names = {a.path for a in client.list_artifacts(parent["run_id"])}
    assert {"copy_rules.md", "copy_rules.png", "copy_rules.csv"} <= names
    assert all(by_name[m]["tags.mlflow.parentRunId"] == parent["run_id"] for m in ("rnnsearch", "copynet"))
    # ... and the experiment's description, the first line of its page, ranks the mechanisms on the
    # reported split with the tables' intervals (bold: the best and those not significantly worse).
    cells = json.loads((tiny_project / "data/eval/intervals/copy_rules.json").read_text())["test"]["cells"]["top1"]
    first_line = experiment.tags["mlflow.note.content"].splitlines()[0]
    ranked = sorted([("RNNSearch", "rnnsearch"), ("CopyNet", "copynet")], key=lambda x: -cells[x[1]]["mean"])

    def shown(row: str) -> str:
        c = cells[row]
        mean = f"{c['mean']:.1f}" if c["significant"] else f"**{c['mean']:.1f}**"
        return f"{mean} [{c['low']:.1f}, {c['high']:.1f}]"

    assert first_line == f"test top1: {ranked[0][0]} {shown(ranked[0][1])} · {ranked[1][0]} {shown(ranked[1][1])}"
    assert cells["copynet"]["mean"] == pytest.approx(cn["test"]["top1"])
    assert "| CopyNet (paper) | 97.3 |" in experiment.tags["mlflow.note.content"]

    # compare.lead adds a model-free row scored on the same test rows: the first N source tokens
    p["task_settings"]["copy_rules"].setdefault("compare", {})["lead"] = [3]
    (tiny_project / "params.yaml").write_text(yaml.safe_dump(p))
    text = compare_flow(params)["copy_rules"]
    assert "| Lead-3 (first 3 source tokens) (ours) |" in text
    every = json.loads((tiny_project / "data/eval/comparison/copy_rules.metrics.json").read_text())
    assert set(every) == {"rnnsearch", "copynet", "lead3"} and every["copynet"] == cn
    from pipeline.io.shards import read_split

    test = read_split(tiny_project / "data/shards/copy_rules/test").to_pylist()
    by_hand = 100 * sum(r["src"][:3] == r["tgt"] for r in test) / len(test)
    assert every["lead3"]["test"]["top1"] == pytest.approx(by_hand) and every["lead3"]["test"]["n"] == 20


_FAILED_ONCE: set[int] = set()


def _flaky_double(chunk: list[int]) -> list[int]:
    """Fails the first time it sees a chunk starting with 3 (a transient failure), then works."""
    if chunk[0] == 3 and 3 not in _FAILED_ONCE:
        _FAILED_ONCE.add(3)
        raise OSError("transient")
    return [2 * x for x in chunk]


def test_prefect_map_orders_results_and_retries_a_failed_chunk(harness):
    from prefect import flow

    from flows.prepare import prefect_map
    from pipeline.io.parallel import chunked

    @flow
    def mapped() -> list[list[int]]:
        return list(prefect_map(workers=2, local_pool=False)(_flaky_double, chunked(range(10), 3)))

    assert mapped() == [[0, 2, 4], [6, 8, 10], [12, 14, 16], [18]]
    assert _FAILED_ONCE == {3}  # the chunk failed once and its retry succeeded


def test_a_stage_failing_on_bad_input_prints_one_message_last_and_exits_2(harness, tmp_path, monkeypatch, capfd):
    """A data error inside the prepare flow (a CSV with an open quote) ends in one line naming the
    file and line, printed last, exit code 2: no traceback of Prefect's around it (any other failure
    keeps its traceback); a settings error found before the flow, and an input file that is gone, likewise."""
    import sys

    import yaml

    import flows
    from flows.prepare import __doc__ as doc
    from flows.prepare import prepare_corpus

    raw = tmp_path / "data" / "raw" / "qa"
    raw.mkdir(parents=True)
    rows = [f"question {i},answer {i}" for i in range(20)]
    (raw / "all.csv").write_text("question,answer\n" + "\n".join(rows) + '\n"open quote,x\n')
    settings = {"reader": "parallel", "train_file": ".", "valid_fraction": 0.2, "test_fraction": 0.2,
                "src_col": "question", "tgt_col": "answer"}  # fmt: skip
    params = {"tasks": {"qa": "data/raw/qa/all.csv"}, "prepare": {"qa": settings}, "parallel": {"workers": 1}}
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    cases = [
        ({}, "all.csv:22: malformed CSV (unexpected end of data): check the quoting of this record"),
        ({"valid_fraction": 1.5}, "prepare.qa: parallel valid_fraction must be a number in [0, 1), got 1.5"),
        ({"subword": {"vocab_size": 0}}, "prepare.qa.subword.vocab_size must be an integer >= 260, got 0"),
        ({"train_file": "gone.csv"}, f"missing input file(s): {raw / 'all.csv' / 'gone.csv'}"),  # a file gone since
    ]
    for change, message in cases:
        params["prepare"]["qa"] = {**settings, **change}
        (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
        monkeypatch.setattr(sys, "argv", ["prepare", "--corpus", "qa", "--params", str(tmp_path / "params.yaml")])
        with pytest.raises(SystemExit) as exit_:
            flows.cli(prepare_corpus, doc, "corpus")
        assert exit_.value.code == 2
        err = capfd.readouterr().err
        assert "Traceback" not in err and err.count(message) == 1, err
        assert err.rstrip("\n").splitlines()[-1] == f"error: {err.split('error: ', 1)[1].strip()}"
        assert not (tmp_path / "data" / "shards" / "qa").exists()  # nothing written
