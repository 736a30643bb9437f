"""Serving a model trained with a features column: the Predictor, the pyfunc model and ``predict`` take
each text's tags beside it (tests.helpers.build_features_project: REV reverses the word, COPY copies it)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
import yaml

from pipeline.config.tasks import effective_params
from pipeline.serving import predict
from pipeline.serving.predictor import InputRejected, Predictor, ServingConfig
from pipeline.serving.pyfunc import local_model, signature
from tests.helpers import FEATURES_TASK, TASK, serving_config


def config(root: Path) -> ServingConfig:
    params = yaml.safe_load((root / "params.yaml").read_text())
    evaluate = effective_params(params, FEATURES_TASK, "copynet")["evaluate"]
    return ServingConfig.from_params(FEATURES_TASK, "copynet", params["prepare"][FEATURES_TASK], evaluate)


def paths(root: Path) -> tuple[Path, Path]:
    return root / "data/checkpoints" / FEATURES_TASK / "copynet", root / "data/vocab" / FEATURES_TASK


def test_the_predictor_follows_each_texts_tags(features_project):
    predictor = Predictor.from_checkpoint_dir(*paths(features_project), config(features_project))
    rows = predictor.predict(["gadfe", "gadfe", "gadfe", "bca"], features=["REV", " COPY ;", ["REV"], None])
    assert [r["output"] for r in rows[:3]] == ["efdag", "gadfe", "efdag"]
    assert all(r["warning"] == "" for r in rows[:3])
    assert rows[3]["output"]  # no tags: decoded all the same (the tags' mean is 0)
    odd = predictor.predict(["gadfe"], features=["PLURAL"])[0]
    assert "features ['PLURAL'] are outside the model's features vocabulary" in odd["warning"]
    with pytest.raises(InputRejected, match="2 features for 1 texts"):
        predictor.predict(["gadfe"], features=["REV", "COPY"])
    with pytest.raises(InputRejected, match="text 0: features must be a text"):
        predictor.predict(["gadfe"], features=[3])


def test_the_pyfunc_model_reads_a_features_column(features_project):
    model = local_model(*paths(features_project), config(features_project))
    frame = model.predict(pd.DataFrame({"text": ["hbc", "hbc"], "features": ["REV", "COPY"]}))
    assert frame["output"].tolist() == ["cbh", "hbc"]
    assert [c.name for c in signature(config(features_project)).inputs.inputs] == ["text", "features"]


def test_predict_reads_text_tab_features_lines(features_project, tmp_path, capsys):
    ckpt, _ = paths(features_project)
    (tmp_path / "in.txt").write_text("abcdh\tREV\nabcdh\tCOPY\n\n")
    argv = ["--checkpoint", str(ckpt), "--params", str(features_project / "params.yaml")]
    assert predict.main([*argv, "--input", str(tmp_path / "in.txt"), "--output", str(tmp_path / "out.txt")]) == 0
    assert (tmp_path / "out.txt").read_text().splitlines() == ["hdcba", "abcdh", ""]

    (tmp_path / "bad.txt").write_text("abc\tREV\tCOPY\n")
    assert predict.main([*argv, "--input", str(tmp_path / "bad.txt")]) == 2
    assert "line 1: 3 tab-separated fields; a line is text<TAB>features" in capsys.readouterr().err


def test_a_model_without_features_refuses_them(toy_project):
    predictor = Predictor.from_checkpoint_dir(
        toy_project / "data/checkpoints" / TASK / "copynet",
        toy_project / "data/vocab" / TASK,
        serving_config("copynet"),
    )
    assert predictor.predict(["a s1 b"], features=[""])[0]["output"]  # no tags: nothing to refuse
    with pytest.raises(InputRejected, match="text 0: this model takes no features"):
        predictor.predict(["a s1 b"], features=["REV"])
