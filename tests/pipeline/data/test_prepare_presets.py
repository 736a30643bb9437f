"""The corpus presets in params.yaml, run through the prepare flow on ../shared/data (skipped when absent)."""

from __future__ import annotations

import pytest
import yaml

from tests.helpers import REPO, shared_path

pytestmark = pytest.mark.slow

# preset -> (raw input under ../shared/data, expected rows per split, expected quarantine reasons per split)
RAW_CNA_SAMPLE = (  # the same raw sample read as gigaword (sgml) and as gigaword_unk_pointers: the same counts
    "gigaword_raw_cna_sample",
    {"train": 1045, "valid": 56, "test": 67},
    {
        "train": {
            "non_story": 257,
            "bad_headline_word": 343,
            "no_overlap": 27,
            "tgt_length": 19,
            "src_length": 3,
            "no_period": 2,
            "duplicate_pair": 5,
            "src_in_test": 2,
            "src_in_valid": 2,
        },
        "valid": {"bad_headline_word": 20, "non_story": 18},
        "test": {"non_story": 14},
    },
)

PRESETS = {
    "wikismall": ("pwkp_wikismall", {"valid": 205, "test": 100}, {}),
    "wikilarge": ("wikilarge_zhang_lapata", {"valid": 992, "test": 359}, {}),
    "turkcorpus": ("turkcorpus", {"valid": 2000, "test": 359}, {}),
    "lcsts_char": (
        "",
        {"train": 8371, "valid": 974, "test": 364},
        {"train": {"duplicate_pair": 168, "src_in_valid": 47}},
    ),
    "lcsts_word": (
        "",
        {"train": 8371, "valid": 974, "test": 364},
        {"train": {"duplicate_pair": 168, "src_in_valid": 47}},
    ),
    "europarl_en_fr": (
        "",
        {"train": 2512, "valid": 3003, "test": 3003},
        {"train": {"longer_than_max_len": 463, "duplicate_pair": 19, "empty_tgt": 6}},
    ),
    "gigaword": ("", {"train": 20213, "test": 1451, "valid": 587}, {"train": {}}),  # gigaword_train_20k is deduplicated
    "gigaword_raw": RAW_CNA_SAMPLE,
    "gigaword_unk_pointers": RAW_CNA_SAMPLE,
    "duc2003": ("duc2003_task1/duc2003", {"test": 587}, {}),
    "ewsew": (
        "",
        {"train": 33309, "valid": 2000, "test": 359},
        {"train": {"duplicate_pair": 69, "src_in_test": 33, "src_in_valid": 127}},
    ),
}


@pytest.mark.shared_data
@pytest.mark.parametrize("name", sorted(PRESETS))
def test_preset_on_shared_data(name, harness, tmp_path):
    from flows.prepare import prepare_corpus

    folder, rows, reasons = PRESETS[name]
    raw = shared_path(folder) if folder else shared_path()
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    params["tasks"] = {name: str(raw)}
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))

    manifests = prepare_corpus(name, str(tmp_path / "params.yaml"))
    assert {s: m["rows"] for s, m in manifests.items()} == rows
    for split, m in manifests.items():
        assert m["rows_in"] == m["rows"] + m["rows_quarantined"]
        assert m["quarantine_reasons"] == reasons.get(split, {})
        assert (tmp_path / "data/shards" / name / split / "manifest.json").is_file()


def test_subword_option_retokenises_with_a_model_trained_on_train(harness, tmp_path):
    """`subword:` in any corpus's settings: sentencepiece pieces in the shards, model beside them."""
    from flows.prepare import prepare_corpus
    from pipeline.data.text.subword import SentencePieceTokenizer
    from pipeline.io.shards import read_split

    params = yaml.safe_load((REPO / "params.yaml").read_text())
    params["tasks"] = {"wikismall": str(REPO / "tests/fixtures/simplification/wikismall")}
    params["prepare"]["wikismall"].update(
        splits=["train", "valid", "test"],
        subword={"vocab_size": 300, "hard_vocab_limit": False, "drop_columns": ["entities"]},
    )
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    manifests = prepare_corpus("wikismall", str(tmp_path / "params.yaml"))

    root = tmp_path / "data/shards/wikismall"
    tok = SentencePieceTokenizer(root / "subword.model")
    test = read_split(root / "test").to_pylist()
    raw = REPO / "tests/fixtures/simplification/wikismall/PWKP_108016.tag.80.aner.ori.test.src"
    first = raw.read_text(encoding="utf-8").splitlines()[0]
    assert tok.decode(test[0]["src"]) == first  # pieces decode back to the original sentence
    assert any(p.startswith("\u2581") for p in test[0]["src"])  # and they are sentencepiece pieces
    assert set(manifests) == {"train", "valid", "test"}
    assert not any(p.name.startswith(".") for p in root.parent.iterdir())  # no temp dirs left


def test_dask_task_runner_gives_the_same_shards(harness, tmp_path):
    """`parallel.task_runner: dask` (extra [dask]) maps the chunks on a local Dask cluster; same output."""
    pytest.importorskip("prefect_dask", reason="optional extra [dask] not installed")
    from flows.prepare import prepare_corpus

    fixture = REPO / "tests/fixtures/simplification/wikismall"
    outputs = {}
    for runner in ("local", "dask"):
        root = tmp_path / runner
        root.mkdir()
        params = yaml.safe_load((REPO / "params.yaml").read_text())
        params["tasks"] = {"wikismall": str(fixture)}
        params["prepare"]["wikismall"].update(splits=["train", "valid", "test"], chunk_size=2)
        params["parallel"] = {"task_runner": runner, "workers": 2, "dask_address": None}
        (root / "params.yaml").write_text(yaml.safe_dump(params))
        manifests = prepare_corpus("wikismall", str(root / "params.yaml"))
        outputs[runner] = {s: (m["rows"], m["content_sha256"]) for s, m in manifests.items()}
    assert outputs["dask"] == outputs["local"] and outputs["local"]["train"][0] > 2
