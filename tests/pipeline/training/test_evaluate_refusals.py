"""The evaluate stage refuses settings it cannot honour before it decodes anything: no metrics,
predictions or heat map are written for a model it would then refuse to register."""

from __future__ import annotations

import shutil

import pytest
import yaml

from benchmarks.toy import TASK
from pipeline.config.validation import SettingsError
from pipeline.stages import evaluate


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"serving": {"max_output_len": 8}}, "evaluate.max_len=12 is over the serving limit serving.max_output_len=8"),
        ({"serving": {"max_beam_size": 2}}, "evaluate.beam_size=3 is over the serving limit serving.max_beam_size=2"),
        ({"evaluate": {"max_len": 0}}, "evaluate.max_len is 0: must be >= 1"),
        ({"evaluate": {"beam_size": "abc"}}, "evaluate.beam_size is 'abc': must be an integer"),
        ({"evaluate": {"ban_unk": "maybe"}}, "evaluate.ban_unk is 'maybe': must be true or false"),
    ],
)
def test_evaluate_refuses_before_decoding(toy_project, tmp_path, change, message):
    root = tmp_path / "toy"
    shutil.copytree(toy_project, root)
    params = yaml.safe_load((root / "params.yaml").read_text())
    for section, values in change.items():
        params[section] = {**(params.get(section) or {}), **values}
    (root / "params.yaml").write_text(yaml.safe_dump(params))
    with pytest.raises(SettingsError, match=message.replace("(", r"\(").replace(")", r"\)")):
        evaluate.run(TASK, "rnnsearch", str(root / "params.yaml"))
    assert not (root / "data" / "eval").exists()  # no metrics, predictions or heat map
