"""The pyfunc model: raw text in, the evaluate stage's prediction out; OOV copies; predict CLI; serving.

A toy project (``a X b -> b X``, as in tests/models/test_learning.py) is written in the pipeline's own
formats -- Arrow shards, vocabulary files, ``model.pt`` from :func:`pipeline.training.loop.train` -- with
CopyNet and RNNSearch trained for 4 epochs (~6 s). The test split's fillers are ``u*`` symbols in no
vocabulary, so only a copy mechanism can output them.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from tests.helpers import (
    EVALUATE,
    LONG_TEXT,
    OOV_TEXT,
    PREPARE,
    TASK,
    Server,
    local,
    serving_config,
    stop_server,
)

MECHANISMS = ("copynet", "rnnsearch")


@pytest.fixture(scope="module")
def project(toy_project) -> Path:
    return toy_project


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """A fresh SQLite MLflow store in its own directory (artifacts under its ./mlruns)."""
    root = tmp_path_factory.mktemp("mlflow_serving")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{root / 'mlflow.db'}")
        mp.chdir(root)
        yield root


@pytest.mark.parametrize("mech", MECHANISMS)
def test_pyfunc_output_equals_decode_table(project, mech) -> None:
    """Raw text through the pyfunc gives the evaluate stage's prediction for the same shard row."""
    import torch

    from pipeline.decoding.decode import decode_table
    from pipeline.decoding.settings import EvalConfig
    from pipeline.io.shards import read_split
    from pipeline.training.checkpoints import load_model
    from pipeline.vocab.vocabulary import Vocab

    table = read_split(project / "data/shards" / TASK / "test")
    src_vocab = Vocab.load(project / "data/vocab" / TASK / "src.vocab")
    model, _ = load_model(project / "data/checkpoints" / TASK / mech / "model.pt", mech, torch.device("cpu"))
    records = decode_table(model, table, src_vocab, src_vocab, EvalConfig.from_dict(EVALUATE), torch.device("cpu"))
    texts = [" ".join(src) for src in table.column("src").to_pylist()]
    frame = local(project, mech).predict(pd.DataFrame({"text": texts}))
    assert list(frame.columns) == ["output", "copied", "tokens", "warning"]
    assert [list(t) for t in frame["tokens"]] == [r["pred"] for r in records]
    assert list(frame["output"]) == [" ".join(r["pred"]) for r in records]
    assert [list(c) for c in frame["copied"]] == [r["copied"] for r in records]
    # a list of str is accepted too, and an empty text gives an empty output without decoding
    again = local(project, mech).predict(texts[:2] + [""])
    assert list(again["output"]) == list(frame["output"][:2]) + [""]


def test_replace_unk_and_ban_unk_on_a_model_that_cannot_copy(project) -> None:
    """RNNSearch emits <unk> for the unseen fillers; replace_unk puts the most attended source word
    there (here: the filler itself, so exact matches rise), ban_unk emits some vocabulary word."""
    import dataclasses

    import torch

    from pipeline.decoding.decode import decode_table
    from pipeline.decoding.settings import EvalConfig
    from pipeline.io.shards import read_split
    from pipeline.training.checkpoints import load_model
    from pipeline.vocab.vocabulary import Vocab

    table = read_split(project / "data/shards" / TASK / "test")
    vocab = Vocab.load(project / "data/vocab" / TASK / "src.vocab")
    model, _ = load_model(project / "data/checkpoints" / TASK / "rnnsearch" / "model.pt", "rnnsearch", "cpu")
    cfg = EvalConfig.from_dict(EVALUATE)

    def decode(**options):
        return decode_table(model, table, vocab, vocab, dataclasses.replace(cfg, **options), torch.device("cpu"))

    def exact(records):
        return sum(r["pred"] == r["tgt"] for r in records)

    plain, replaced, banned = decode(), decode(replace_unk=True), decode(ban_unk=True)
    assert sum(r["pred"].count("<unk>") for r in plain) >= len(plain)  # every test filler is unseen
    assert not any("<unk>" in r["pred"] for r in replaced + banned)
    for p, r in zip(plain, replaced):
        assert len(p["pred"]) == len(r["pred"])  # only the <unk> tokens changed, each to a source word
        assert all(a == b or (a == "<unk>" and b in p["src"]) for a, b in zip(p["pred"], r["pred"]))
    assert exact(plain) == 0 < exact(replaced)


def test_copynet_copies_oov_source_words_rnnsearch_cannot(project) -> None:
    from pipeline.vocab.vocabulary import Vocab

    vocab = Vocab.load(project / "data/vocab" / TASK / "tgt.vocab")
    assert all(w not in vocab for w in ("u1", "zz9", "u2"))
    copy = local(project, "copynet").predict([OOV_TEXT, "a s1 s2 b"])
    assert list(copy["output"]) == ["b u1 zz9 u2", "b s1 s2"]
    assert [list(c) for c in copy["copied"]] == [["u1", "zz9", "u2"], []]
    plain = local(project, "rnnsearch").predict([OOV_TEXT])
    tokens = list(plain["tokens"][0])
    assert list(plain["copied"][0]) == [] and all(t in vocab for t in tokens)  # it can only say <unk>


def test_exact_match_on_unseen_fillers(project) -> None:
    """Every test source's fillers are unseen: CopyNet gets (nearly) all, RNNSearch none."""
    from pipeline.io.shards import read_split

    table = read_split(project / "data/shards" / TASK / "test")
    texts = [" ".join(s) for s in table.column("src").to_pylist()]
    gold = [" ".join(t) for t in table.column("tgt").to_pylist()]
    hits = {m: sum(o == g for o, g in zip(local(project, m).predict(texts)["output"], gold)) for m in MECHANISMS}
    assert hits["copynet"] >= 18 and hits["rnnsearch"] == 0, hits


def test_logged_model_loads_and_predicts_the_same(project, store, caplog) -> None:
    import logging

    import mlflow

    from pipeline.serving.pyfunc import log_pyfunc_model

    mlflow.set_tracking_uri(os.environ["MLFLOW_TRACKING_URI"])
    mlflow.set_experiment(TASK)
    with mlflow.start_run(run_name="copynet") as run:
        pass
    start = time.perf_counter()
    uri = log_pyfunc_model(
        run.info.run_id,
        project / "data/checkpoints" / TASK / "copynet",
        project / "data/vocab" / TASK,
        serving_config("copynet"),
        input_example=[OOV_TEXT],
    )
    print(f"log_pyfunc_model: {time.perf_counter() - start:.1f}s")
    # logged as models from code (pipeline/serving/model_code.py), not an object pickled with CloudPickle
    assert not [r for r in caplog.records if "cloudpickle" in r.getMessage().lower()]
    assert caplog.handler.level <= logging.WARNING
    loaded = mlflow.pyfunc.load_model(uri)
    texts = [OOV_TEXT, "a s3 u7 s4 b", "a s1 b"]
    want = local(project, "copynet").predict(texts)
    got = loaded.predict(pd.DataFrame({"text": texts}))
    pd.testing.assert_frame_equal(got.reset_index(drop=True), want)
    # decoding params go through the signature
    greedy = loaded.predict(pd.DataFrame({"text": texts}), params={"beam_size": 1})
    pd.testing.assert_frame_equal(greedy, local(project, "copynet", beam_size=1).predict(texts))
    # the model's files: weights, vocabularies, config; its requirements are pinned
    meta = loaded.metadata
    assert meta.signature.inputs.input_names() == ["text"]
    local_dir = Path(mlflow.artifacts.download_artifacts(uri))
    reqs = (local_dir / "requirements.txt").read_text().split()
    assert "torch==2.13.0" in reqs and all("==" in r for r in reqs if not r.startswith("-"))
    config = json.loads((local_dir / "artifacts" / "serving.json").read_text())
    assert config["mechanism"] == "copynet" and config["prepare"] == PREPARE and config["beam_size"] == 3


def test_predict_cli_checkpoint(project, tmp_path, monkeypatch, capsys) -> None:
    from pipeline.serving.predict import main

    inp = tmp_path / "in.txt"
    inp.write_text(f"{OOV_TEXT}\n\na s1 s2 b\n")
    out = tmp_path / "out.txt"
    args = [
        "--checkpoint",
        str(project / "data/checkpoints" / TASK / "copynet"),
        "--params",
        str(project / "params.yaml"),
    ]
    assert main(args + ["--input", str(inp), "--output", str(out)]) == 0
    assert out.read_text().splitlines() == ["b u1 zz9 u2", "", "b s1 s2"]
    assert main(args + ["--input", str(inp), "--output", str(out), "--show-copies", "--beam", "1"]) == 0
    assert out.read_text().splitlines() == ["b [u1] [zz9] [u2]\tu1 zz9 u2", "\t", "b s1 s2\t"]
    import io

    monkeypatch.setattr(sys, "stdin", io.StringIO("a u5 b\n"))
    assert main(args) == 0
    assert capsys.readouterr().out == "b u5\n"
    capsys.readouterr()
    assert main(["--checkpoint", str(tmp_path), "--task", TASK, "--params", str(project / "params.yaml")]) == 2
    err = capsys.readouterr().err
    assert "no trained model" in err and len(err.splitlines()) == 1


# ---------------------------------------------------------------------------------------------
# `mlflow models serve`: one server for the tests below (the SIGTERM test, last, stops it)
# ---------------------------------------------------------------------------------------------
# The served model's limits: the defaults, but a 6 s deadline and long outputs allowed, so that a
# request can decode for longer than its deadline (and be stopped by SIGTERM before it).
SERVE_LIMITS = {"request_timeout_s": 6, "max_output_len": 5000}
LONG_REQUEST = ([LONG_TEXT] * 8, {"beam_size": 20, "max_len": 5000})  # minutes of decoding without a deadline


def live_processes(pgid: int) -> list[int]:
    """Pids of the process group's processes that are not zombies (from /proc)."""
    pids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            pids.append(int(stat.parent.name))
    return pids


@pytest.fixture(scope="module")
def server(project, store):
    """CopyNet logged with :data:`SERVE_LIMITS`, registered as the champion and served by
    `mlflow models serve -m models:/<task>@champion` on 127.0.0.1, in its own process group."""
    import mlflow

    from pipeline.serving.pyfunc import log_pyfunc_model
    from pipeline.tracking.registry import register, set_champion

    mlflow.set_tracking_uri(os.environ["MLFLOW_TRACKING_URI"])
    mlflow.set_experiment(TASK)
    with mlflow.start_run(run_name="copynet-serve") as run:
        pass
    uri = log_pyfunc_model(
        run.info.run_id,
        project / "data/checkpoints" / TASK / "copynet",
        project / "data/vocab" / TASK,
        serving_config("copynet", **SERVE_LIMITS),
    )
    version = register(uri, TASK, {"mechanism": "copynet"})
    set_champion(TASK, version, "serve test")

    served = Server.start(f"models:/{TASK}@champion", store)
    try:
        yield served
    finally:
        stop_server(served.proc)


@pytest.mark.slow
def test_mlflow_models_serve_champion_answers_on_localhost(project, server) -> None:
    """`mlflow models serve -m models:/<task>@champion` on 127.0.0.1 answers as the local model."""
    texts = [OOV_TEXT, "a s1 s2 b"]
    status, answer = server.invoke(texts, {"beam_size": 3})
    assert status == 200, answer
    want = local(project, "copynet").predict(texts)
    assert answer["predictions"] == [
        {"output": o, "copied": list(c), "tokens": list(t), "warning": w}
        for o, c, t, w in zip(want["output"], want["copied"], want["tokens"], want["warning"])
    ]
    first = answer["predictions"][0]
    assert (first["output"], first["copied"], first["tokens"]) == (
        "b u1 zz9 u2",
        ["u1", "zz9", "u2"],
        ["b", "u1", "zz9", "u2"],
    )
    assert first["warning"].startswith("3 of 5 source tokens (60%) are outside")  # u1 zz9 u2
    assert answer["predictions"][1]["warning"] == ""


@pytest.mark.slow
@pytest.mark.parametrize(
    ("texts", "params", "index", "reason"),
    [
        (["a s1 b"], {"beam_size": 21}, None, "beam_size=21 is over this model's limit of 20 (serving.max_beam_size)"),
        (
            ["a s1 b"],
            {"max_len": 5001},
            None,
            "max_len=5001 is over this model's limit of 5000 (serving.max_output_len)",
        ),
        (["a s1 b"] * 65, None, None, "65 texts in one request, over the limit of 64 (serving.max_inputs)"),
        (["a s1 b", "s1 " * 401], None, 1, "401 source tokens, over the limit of 400 (serving.max_src_tokens)"),
        (["x" * 2_000_000], None, 0, "2000000 characters, over the limit of 20000 (serving.max_input_chars)"),
    ],
    ids=["beam_size", "max_len", "max_inputs", "max_src_tokens", "2MB_text"],
)
def test_server_refuses_requests_over_the_limits_with_400(server, texts, params, index, reason) -> None:
    """A request over a limit is answered at once with HTTP 400 and the reason (and the row), never clamped."""
    start = time.perf_counter()
    status, body = server.invoke(texts, params)
    assert status == 400, body
    assert body["error_code"] == "INVALID_PARAMETER_VALUE"
    assert reason in body["message"], body["message"][-500:]
    assert body.get("index") == index
    assert time.perf_counter() - start < 10
    assert server.ping()


@pytest.mark.slow
def test_server_stops_a_request_at_its_deadline_with_504(server) -> None:
    """Decoding stops at request_timeout_s (6 s here, the server's own limit is 60 s) and the client is told why."""
    start = time.perf_counter()
    status, body = server.invoke(*LONG_REQUEST)
    elapsed = time.perf_counter() - start
    assert status == 504, body
    assert body["error_code"] == "DEADLINE_EXCEEDED"
    assert "took longer than its 6 s deadline (serving.request_timeout_s)" in body["message"]
    assert 5 < elapsed < 20, elapsed
    status, answer = server.invoke(["a s1 s2 b"])  # the slot is free again
    assert status == 200 and answer["predictions"][0]["output"] == "b s1 s2"


@pytest.mark.slow
def test_sigterm_stops_a_decoding_server(server) -> None:
    """SIGTERM to the server's process group while a request decodes: the decode stops (503 to its
    client, not the 504 its deadline would give) and every process exits within seconds. Last: it
    ends the module's server."""
    import threading

    answers = []
    client = threading.Thread(target=lambda: answers.append(server.invoke(*LONG_REQUEST)))
    client.start()
    time.sleep(2.0)  # the request is decoding (its deadline is 4 s away)
    assert not answers
    start = time.perf_counter()
    os.killpg(server.proc.pid, signal.SIGTERM)
    while live_processes(server.proc.pid) and time.perf_counter() - start < 30:
        server.proc.poll()  # reap the CLI process
        time.sleep(0.1)
    stopped = time.perf_counter() - start
    client.join(timeout=10)
    assert not live_processes(server.proc.pid), "the server's processes outlived SIGTERM by 30 s"
    print(f"server exited {stopped:.1f}s after SIGTERM")
    assert stopped < 3.5, stopped
    status, body = answers[0]
    assert status == 503 and "the server is shutting down" in body["message"], (status, body)
