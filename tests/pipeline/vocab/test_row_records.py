"""The vocab stage's per-row records (``data/vocab/<task>/rows/<row>.json``), which the train and
evaluate stages depend on instead of the whole vocabulary folder: each lists the sha256 of exactly the
files its row reads, so a backbone new to the task changes no other row's record (and DVC reruns no
other row), while a change to the word vocabulary changes every record. On the tiny copy task with
tiny BART and T5 backbones made by the test; nothing is fetched (HF_HUB_OFFLINE)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from pipeline.config.backbones import backbone_vocab_dir
from pipeline.data.prepare import prepare_job, write_job
from pipeline.io.files import sha256_file
from pipeline.stages import vocab
from pipeline.vocab.tiny_backbone import make_tiny_backbone, shard_texts

TASK = "copy_rules"


@pytest.fixture(autouse=True)
def _offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def set_rows(project: Path, rows: list[str], **vocab_settings) -> str:
    """params.yaml of ``project`` with ``rows`` as its mechanisms (and the vocab settings given)."""
    path = project / "params.yaml"
    params = yaml.safe_load(path.read_text())
    params["mechanisms"] = rows
    params["vocab"].update(vocab_settings)
    for kind in ("bart", "t5"):
        for row in (f"copynet_{kind}", f"pointer_generator_{kind}"):
            params["variants"][row]["model"]["backbone"] = str(project / f"backbones/tiny_{kind}")
    path.write_text(yaml.safe_dump(params, sort_keys=False))
    return str(path)


def records(project: Path) -> dict[str, bytes]:
    return {p.stem: p.read_bytes() for p in sorted((project / "data/vocab" / TASK / "rows").glob("*.json"))}


def test_each_row_records_what_it_reads_and_a_new_backbone_changes_no_other_rows_record(tiny_project):
    params_path = set_rows(tiny_project, ["encdec", "copynet"])
    write_job(prepare_job(TASK, params_path), lambda fn, chunks: map(fn, chunks))
    train = tiny_project / "data/shards" / TASK / "train"
    texts = shard_texts(train, ("src",)) + shard_texts(train, ("tgt",))
    for kind in ("bart", "t5"):
        make_tiny_backbone(kind, texts, tiny_project / f"backbones/tiny_{kind}", d_model=16, layers=1, vocab_size=300)
    folder = tiny_project / "data/vocab" / TASK

    vocab.run(TASK, params_path)
    words = records(tiny_project)
    assert set(words) == {"encdec", "copynet"} and words["encdec"] == words["copynet"]
    record = json.loads(words["encdec"])
    assert record["backbone"] is None
    # every file of the word vocabulary and its encoded splits, each with its own sha256, and nothing else
    expected = sorted(
        p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file() and "rows" not in p.parts
    )
    assert sorted(record["files"]) == expected
    assert {"src.vocab", "tgt.vocab", "ids/train/manifest.json", "ids/valid/part-00000.arrow"} <= set(expected)
    assert all(sha256_file(folder / name) == digest for name, digest in record["files"].items())

    # A row on BART, then another on T5: each new backbone leaves the earlier rows' records as they were.
    vocab.run(TASK, set_rows(tiny_project, ["encdec", "copynet", "pointer_generator_bart"]))
    with_bart = records(tiny_project)
    assert {row: with_bart[row] for row in words} == words
    bart = json.loads(with_bart["pointer_generator_bart"])
    bart_dir = backbone_vocab_dir(folder, bart["backbone"]).relative_to(folder).as_posix()
    assert bart["backbone"] == str(tiny_project / "backbones/tiny_bart")
    assert {n: d for n, d in bart["files"].items() if not n.startswith("backbones/")} == record["files"]
    assert {n.split("/")[0] for n in bart["files"]} == {"src.vocab", "tgt.vocab", "ids", "backbones"}
    assert all(n.startswith(f"{bart_dir}/") for n in bart["files"] if n.startswith("backbones/"))
    assert f"{bart_dir}/backbone.json" in bart["files"] and f"{bart_dir}/ids/train/manifest.json" in bart["files"]

    vocab.run(TASK, set_rows(tiny_project, ["encdec", "copynet", "pointer_generator_bart", "copynet_t5"]))
    with_t5 = records(tiny_project)
    assert {row: with_t5[row] for row in with_bart} == with_bart
    assert json.loads(with_t5["copynet_t5"])["backbone"] == str(tiny_project / "backbones/tiny_t5")

    # A second row on BART shares the first one's record; a row dropped leaves no record behind.
    vocab.run(TASK, set_rows(tiny_project, ["encdec", "pointer_generator_bart", "copynet_bart"]))
    after = records(tiny_project)
    assert set(after) == {"encdec", "pointer_generator_bart", "copynet_bart"}
    assert after["copynet_bart"] == after["pointer_generator_bart"] == with_bart["pointer_generator_bart"]
    assert not backbone_vocab_dir(folder, str(tiny_project / "backbones/tiny_t5")).exists()

    # A change to the word vocabulary changes every row's record, the backbone rows' too.
    vocab.run(TASK, set_rows(tiny_project, ["encdec", "pointer_generator_bart", "copynet_bart"], min_count=2))
    changed = records(tiny_project)
    assert all(changed[row] != after[row] for row in after)
