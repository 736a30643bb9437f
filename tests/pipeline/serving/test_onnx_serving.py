"""The exported model served: the registered champion exported with ``--log`` (its ONNX twin logged into
the champion's run and registered as ``<task>_onnx`` with the same alias), loaded with
``mlflow.pyfunc.load_model`` (also where torch cannot be imported), answers as the PyTorch pyfunc:
the same outputs, params, refusals and HTTP statuses; ``predict --runtime onnx`` with the twin's
URI; the torch-free settings and limits equal the PyTorch predictor's.

The toy project's CopyNet (trained 4 epochs on ``a X b -> b X``, tests/conftest.py) in a SQLite store
of this module's own.
"""

from __future__ import annotations

import dataclasses
import io
import json
import sys
from pathlib import Path

import pandas as pd
import pytest

from tests.helpers import OOV_TEXT, TASK, local, serving_config
from tests.pipeline.serving.test_onnx_export import run_without_torch

TEXTS = [OOV_TEXT, "a s3 u7 s4 b", "a s1 b", "", "a u3 u3 s9 b"]
TWIN = f"models:/{TASK}_onnx@champion"


@pytest.fixture(scope="module")
def store(toy_project, tmp_path_factory):
    """The toy CopyNet logged, registered as version 1 of the task's model with the alias champion,
    then exported with ``--log``: (project, store root, export directory)."""
    import mlflow

    from pipeline.serving.export import main as export_main
    from pipeline.serving.pyfunc import log_pyfunc_model
    from pipeline.tracking.registry import register

    root = tmp_path_factory.mktemp("onnx_store")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{root / 'mlflow.db'}")
        mp.chdir(root)
        mlflow.set_tracking_uri(f"sqlite:///{root / 'mlflow.db'}")
        mlflow.set_experiment(TASK)
        with mlflow.start_run(run_name="copynet") as run:
            pass
        uri = log_pyfunc_model(
            run.info.run_id,
            toy_project / "data/checkpoints" / TASK / "copynet",
            toy_project / "data/vocab" / TASK,
            serving_config("copynet"),
            input_example=[OOV_TEXT],
        )
        version = register(uri, TASK, {"mechanism": "copynet", "run_id": run.info.run_id})
        mlflow.MlflowClient().set_registered_model_alias(TASK, "champion", version)
        out = root / "export"
        assert export_main(["--model", f"models:/{TASK}@champion", "--out", str(out), "--log"]) == 0
        yield toy_project, root, out, run.info.run_id


def test_the_twin_is_registered_with_the_alias_and_logged_in_the_champion_run(store) -> None:
    import mlflow

    _, _, out, run_id = store
    client = mlflow.MlflowClient()
    twin = client.get_model_version_by_alias(f"{TASK}_onnx", "champion")
    assert twin.run_id == run_id  # the champion's run holds both models
    assert twin.tags["runtime"] == "onnx" and twin.tags["source_version"] == "1" and twin.tags["mechanism"] == "copynet"
    assert {"sha256.encoder.onnx", "sha256.step.onnx", "sha256.tgt.vocab"} <= set(twin.tags)
    assert str(client.get_model_version_by_alias(TASK, "champion").version) == "1"  # the task's model is untouched
    assert [str(v.version) for v in client.search_model_versions(f"name='{TASK}'")] == ["1"]
    info = mlflow.models.get_model_info(TWIN)
    assert info.saved_input_example_info is not None  # the source model's example, decoded once at logging
    assert info.metadata["runtime"] == "onnx" and "torch" not in " ".join(
        Path(mlflow.artifacts.download_artifacts(TWIN + "/requirements.txt")).read_text().split()
    )


def test_loaded_twin_predicts_as_the_pytorch_pyfunc(store) -> None:
    import mlflow

    project, _, _, _ = store
    loaded = mlflow.pyfunc.load_model(TWIN)
    want = local(project, "copynet").predict(pd.DataFrame({"text": TEXTS}))
    got = loaded.predict(pd.DataFrame({"text": TEXTS}))
    pd.testing.assert_frame_equal(got.reset_index(drop=True), want)
    assert list(got["output"])[:3] == ["b u1 zz9 u2", "b s3 u7 s4", "b s1"]  # copies the unseen fillers
    beam1 = loaded.predict(pd.DataFrame({"text": TEXTS}), params={"beam_size": 1, "max_len": 3})
    pd.testing.assert_frame_equal(beam1, local(project, "copynet", beam_size=1, max_len=3).predict(TEXTS))


@pytest.mark.parametrize(
    ("texts", "params"),
    [
        (["a s1 b"], {"beam_size": 21}),
        (["a s1 b"] * 65, None),
        (["a s1 b", "a " + "s1 " * 400 + "b"], None),
    ],
    ids=["beam_size", "max_inputs", "max_src_tokens"],
)
def test_refusals_equal_the_pytorch_pyfunc(store, texts, params) -> None:
    import mlflow
    from mlflow.exceptions import MlflowException

    project, _, _, _ = store
    with pytest.raises(MlflowException) as torch_err:
        local(project, "copynet").predict(pd.DataFrame({"text": texts}), params)
    with pytest.raises(MlflowException) as onnx_err:
        mlflow.pyfunc.load_model(TWIN).predict(pd.DataFrame({"text": texts}), params)
    assert onnx_err.value.message == torch_err.value.message
    assert onnx_err.value.get_http_status_code() == torch_err.value.get_http_status_code() == 400


def test_predict_runtime_onnx_with_the_registered_twin(store, monkeypatch, capsys) -> None:
    from pipeline.serving.predict import main

    text = f"{OOV_TEXT}\n\na s1 s2 b\n"
    monkeypatch.setattr(sys, "stdin", io.StringIO(text))
    assert main(["--model", f"models:/{TASK}@champion", "--show-copies"]) == 0
    want = capsys.readouterr().out
    monkeypatch.setattr(sys, "stdin", io.StringIO(text))
    assert main(["--runtime", "onnx", "--model", TWIN, "--show-copies"]) == 0
    assert capsys.readouterr().out == want == "b [u1] [zz9] [u2]\tu1 zz9 u2\n\t\nb s1 s2\t\n"
    monkeypatch.setattr(sys, "stdin", io.StringIO(text))
    assert main(["--runtime", "onnx", "--model", f"models:/{TASK}@champion"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        f"copyseq predict: error: models:/{TASK}@champion is a PyTorch model; its ONNX twin (copyseq export "
        f"--model models:/{TASK}@champion --out DIR --log) is {TWIN}"
    )


def test_predict_threads_sets_the_registered_twins_sessions(store, monkeypatch, capsys) -> None:
    """``--threads`` reaches a registered ONNX model's onnxruntime sessions (through MLflow's
    model_config) as it reaches an export directory's, and changes no output."""
    from pipeline.serving import onnx_pyfunc
    from pipeline.serving.predict import main

    def session_threads(model) -> list[int]:
        onnx = model.unwrap_python_model().predictor.model
        return [s.get_session_options().intra_op_num_threads for s in (onnx.encoder, onnx.decoder)]

    assert session_threads(onnx_pyfunc.load_model(TWIN, 1)) == [1, 1]
    assert session_threads(onnx_pyfunc.load_model(TWIN)) == [0, 0]  # onnxruntime's default
    text = f"{OOV_TEXT}\na s1 s2 b\n"
    monkeypatch.setattr(sys, "stdin", io.StringIO(text))
    assert main(["--runtime", "onnx", "--model", TWIN]) == 0
    want = capsys.readouterr().out
    monkeypatch.setattr(sys, "stdin", io.StringIO(text))
    assert main(["--runtime", "onnx", "--model", TWIN, "--threads", "1"]) == 0
    assert capsys.readouterr().out == want


def test_the_twin_loads_and_predicts_where_torch_cannot_be_imported(store, tmp_path) -> None:
    project, _, _, _ = store
    code = (
        "import json, sys, mlflow, pandas\n"
        f"model = mlflow.pyfunc.load_model({TWIN!r})\n"
        f"print(json.dumps(list(model.predict(pandas.DataFrame({{'text': {TEXTS!r}}}))['output'])))\n"
        "assert 'torch' not in sys.modules\n"
    )
    proc = run_without_torch(tmp_path, ["-c", code])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == list(local(project, "copynet").predict(TEXTS)["output"])


# ---------------------------------------------------------------------------------------------
# The limits: the same refusals from both predictors
# ---------------------------------------------------------------------------------------------
def test_request_checks_equal_the_pytorch_predictor(store) -> None:
    from pipeline.serving.limits import ServingConfig
    from pipeline.serving.onnx_predictor import OnnxPredictor

    project, _, out, _ = store
    limits = {"max_inputs": 3, "max_input_chars": 60, "max_src_tokens": 6, "max_beam_size": 4, "max_output_len": 20}
    torch_predictor = local(project, "copynet", **limits).python_model.predictor
    config = ServingConfig.from_dict({**dataclasses.asdict(torch_predictor.config)})
    onnx_predictor = OnnxPredictor(out, config=config, verify=False)
    cases = [
        lambda p: p.check_params(5, None),
        lambda p: p.check_params(None, 0),
        lambda p: p.check_params(True, None),
        lambda p: p.check_inputs(["a s1 b"] * 4),
        lambda p: p.check_inputs(["a s1 b", "a " + "s1" * 40 + " b"]),
        lambda p: p.check_inputs(["a s1 s2 s3 s4 s5 b"]),
        lambda p: p.check_features(0, "V;PST"),
        lambda p: p.tokenizer("yes"),
    ]
    for case in cases:
        with pytest.raises(ValueError) as want:
            case(torch_predictor)
        with pytest.raises(ValueError) as got:
            case(onnx_predictor)
        assert (str(got.value), got.value.index) == (str(want.value), want.value.index)
    texts = ["zz1 zz2 zz3 b", "a s1 b"]
    assert [onnx_predictor.unknown_warning(t.split()) for t in texts] == [
        torch_predictor.unknown_warning(t.split()) for t in texts
    ]
