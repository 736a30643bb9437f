"""Each row's settings file (pipeline/config/rows.py): what the stages read, and a change to one row
changes that row's file alone (the DVC side of it: tests/test_e2e_dvc.py, `dvc status` after edits)."""

from __future__ import annotations

import json

import pytest
import yaml

from pipeline.config.params import load_params
from pipeline.config.rows import row_params, settings_files, stage_params, write
from pipeline.config.tasks import deep_merge, effective_params

TRANSFORMER_ROWS = ["copynet_transformer", "pointer_generator_transformer"]  # declared; not in make repro's rows
PARAMS = load_params()
PARAMS["mechanisms"] = [*PARAMS["mechanisms"], *(r for r in TRANSFORMER_ROWS if r not in PARAMS["mechanisms"])]
ROWS = PARAMS["mechanisms"]


@pytest.mark.parametrize("row", ROWS)
def test_a_row_s_stage_reads_the_same_sections_as_from_the_whole_file(row):
    whole, alone = effective_params(PARAMS, "copy_rules", row), stage_params(PARAMS, "copy_rules", row)
    for name in ("vocab", "train", "evaluate", "serving", "tracking", "data"):
        assert alone[name] == whole[name], name
    base = alone["variants"][row]["mechanism"] if row in PARAMS["variants"] else row
    shared = {k: v for k, v in whole["model"].items() if not isinstance(v, dict) or k == base}
    assert alone["model"] == shared  # the other mechanisms' options left out
    assert alone["prepare"]["copy_rules"] == PARAMS["prepare"]["copy_rules"]
    assert alone["task_settings"]["copy_rules"]["champion"] == "valid.top1"
    assert stage_params(alone, "copy_rules", row) == alone  # the row's file read again: the same


def changed(edit: str) -> set[str]:
    """The settings files whose content an edit of params.yaml changes."""
    before = settings_files(PARAMS)
    after = settings_files(deep_merge(PARAMS, yaml.safe_load(edit)))
    assert set(before) == set(after)
    return {path.stem for path in before if before[path] != after[path]}


def test_one_row_s_settings_change_that_row_s_file_alone():
    assert changed("task_settings: {copy_rules: {mechanisms: {copynet: {train: {epochs: 3}}}}}") == {"copynet"}
    assert changed("variants: {copynet_transformer: {model: {decoder_layers: 3}}}") == {"copynet_transformer"}
    # the base's entry reaches its variant too (the variant is the base under other settings)
    assert changed("task_settings: {copy_rules: {mechanisms: {pointer_generator: {train: {lr: 0.01}}}}}") == {
        "pointer_generator",
        "pointer_generator_transformer",
    }
    assert changed("model: {wean: {score: dot}}") == {"wean"}  # a mechanism's own options


def test_shared_settings_change_every_row_and_the_vocab_only_what_it_reads():
    assert changed("train: {clip: 1.0}") == set(ROWS)
    assert changed("train: {lr: 0.003}") == set()  # copy_rules sets its own lr: no row reads the shared one
    assert changed("vocab: {min_count: 2}") == {"vocab", *ROWS}  # the rows carry the merged sections
    assert changed("task_settings: {copy_rules: {compare: {topk: 5}}}") == set()  # the compare stage's own


def test_the_settings_stage_writes_one_file_per_row_and_drops_the_rows_no_longer_listed(tmp_path):
    params = dict(PARAMS, mechanisms=["copynet", "encdec"])
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params), encoding="utf-8")
    stale = tmp_path / "data" / "settings" / "copy_rules" / "wean.json"
    stale.parent.mkdir(parents=True)
    stale.write_text("{}")
    written = write(str(tmp_path / "params.yaml"))
    assert sorted(p.name for p in written) == ["copynet.json", "encdec.json", "vocab.json"]
    assert not stale.exists()
    on_disk = json.loads((tmp_path / "data" / "settings" / "copy_rules" / "copynet.json").read_text())
    assert on_disk == json.loads(json.dumps(row_params(params, "copy_rules", "copynet")))
