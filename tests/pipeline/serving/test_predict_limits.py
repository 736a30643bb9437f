"""Serving limits, the mostly-unknown warning, the decoding deadline and clean `predict` errors.

The toy project of tests/pipeline/serving/test_serving.py (CopyNet on ``a X b -> b X``); the pyfunc is built from its
files (:func:`tests.test_serving.local`), `predict` runs in-process (``main``) and once as a command.
The real server's answers (HTTP 400, 504, SIGTERM) are in tests/pipeline/serving/test_serving.py.
"""

from __future__ import annotations

import io
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from tests.helpers import LONG_TEXT, OOV_TEXT, REPO, TASK, local, serving_config

# Small limits, so that the inputs over them stay small.
LIMITS = {"max_inputs": 3, "max_input_chars": 60, "max_src_tokens": 6, "max_beam_size": 4, "max_output_len": 20}


@pytest.fixture(scope="module")
def project(toy_project) -> Path:
    return toy_project


def checkpoint(project: Path, mech: str = "copynet") -> Path:
    return project / "data/checkpoints" / TASK / mech


# ---------------------------------------------------------------------------------------------
# The pyfunc (what `mlflow models serve` calls)
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("texts", "params", "index", "reason"),
    [
        (["a s1 b"], {"beam_size": 5}, None, "beam_size=5 is over this model's limit of 4 (serving.max_beam_size)"),
        (["a s1 b"], {"max_len": 21}, None, "max_len=21 is over this model's limit of 20 (serving.max_output_len)"),
        (["a s1 b"], {"beam_size": 0}, None, "beam_size must be an integer >= 1, got 0"),
        (["a s1 b"] * 4, None, None, "4 texts in one request, over the limit of 3 (serving.max_inputs)"),
        (["a s1 b", "a " + "s1" * 40 + " b"], None, 1, "84 characters, over the limit of 60 (serving.max_input_chars)"),
        (["a s1 s2 s3 s4 s5 b"], None, 0, "7 source tokens, over the limit of 6 (serving.max_src_tokens)"),
        ([None], None, 0, "is NoneType, not str"),
    ],
    ids=["beam_size", "max_len", "beam_size_0", "max_inputs", "max_input_chars", "max_src_tokens", "not_str"],
)
def test_pyfunc_refuses_each_limit_with_its_reason(project, texts, params, index, reason) -> None:
    from pipeline.serving.pyfunc_common import ServingException

    model = local(project, "copynet", **LIMITS)
    with pytest.raises(ServingException) as info:
        model.predict(texts, params)
    err = info.value
    assert reason in err.message
    assert err.error_code == "INVALID_PARAMETER_VALUE" and err.get_http_status_code() == 400
    assert err.index == index
    assert ('"index"' in err.serialize_as_json()) == (index is not None)  # the row, for HTTP clients
    # at the limits themselves, the same request is answered
    ok = model.predict(["a s1 s2 s3 s4 b"] * 3, {"beam_size": 4, "max_len": 20})
    assert list(ok["output"]) == ["b s1 s2 s3 s4"] * 3


def test_serving_config_checks_its_limits() -> None:
    from pipeline.serving.predictor import ServingConfig

    with pytest.raises(ValueError, match="serving.max_beams is not a setting \\(did you mean max_beam_size\\?\\)"):
        ServingConfig.from_params(TASK, "copynet", {"reader": "copynet_rules"}, {}, {"max_beams": 3})
    with pytest.raises(ValueError, match="beam_size=10 is over the serving limit serving.max_beam_size=4"):
        ServingConfig.from_params(TASK, "copynet", {"reader": "copynet_rules"}, {"beam_size": 10}, LIMITS)
    with pytest.raises(ValueError, match="serving.max_src_tokens is 0: must be >= 1; serving.request_timeout_s is -1"):
        serving_config("copynet", max_src_tokens=0, request_timeout_s=-1)
    with pytest.raises(ValueError, match="serving.unknown_warning is 1.5: must be <= 1"):
        serving_config("copynet", unknown_warning=1.5)
    # a serving.json saved before the limits existed: default limits, caps at least its own defaults
    old = ServingConfig.from_dict({"task": TASK, "mechanism": "copynet", "prepare": {}, "beam_size": 50})
    assert (old.max_beam_size, old.max_output_len, old.max_src_tokens) == (50, 200, 400)
    # the repository's params.yaml: every serving key is known and valid
    from pipeline.config.params import load_params

    params = load_params()
    config = ServingConfig.from_params(
        TASK, "copynet", {"reader": "copynet_rules"}, params["evaluate"], params["serving"]
    )
    assert config.max_src_tokens == params["serving"]["max_src_tokens"]


def test_mostly_unknown_inputs_carry_a_warning(project) -> None:
    texts = ["zz1 zz2 zz3", "a s1 s2 b", OOV_TEXT, "这是 中文 文本", "a u1 s2 b", ""]
    frame = local(project, "copynet").predict(texts)
    warnings = list(frame["warning"])
    assert warnings[0].startswith("3 of 3 source tokens (100%) are outside the model's vocabulary")
    assert "the output is likely unreliable" in warnings[0]
    assert warnings[1] == ""
    assert warnings[2].startswith("3 of 5 source tokens (60%)")
    assert warnings[3].startswith("3 of 3 source tokens (100%)")  # another language
    assert warnings[4] == ""  # 1 of 4: at most half unknown
    assert warnings[5] == ""  # empty input: nothing to judge
    assert list(frame["output"])[1] == "b s1 s2"  # a warning does not stop decoding
    never = local(project, "copynet", unknown_warning=1.0).predict(texts)
    assert list(never["warning"]) == [""] * len(texts)


# ---------------------------------------------------------------------------------------------
# The deadline, the stop event and the decoding slots
# ---------------------------------------------------------------------------------------------
def test_search_deadline_and_stop(project) -> None:
    """beam_search/greedy/decode_table: a passed deadline raises DecodeTimeout (a TimeoutError), a set
    stop event DecodeCancelled; without them the result is unchanged."""
    from pipeline.decoding.search import DecodeCancelled, DecodeTimeout, beam_search, greedy
    from pipeline.training.checkpoints import load_model
    from pipeline.vocab.batching import collate
    from pipeline.vocab.vocabulary import Vocab

    vocab = Vocab.load(project / "data/vocab" / TASK / "src.vocab")
    model, _ = load_model(checkpoint(project) / "model.pt", "copynet")
    batch = collate([["a", "s1", "s2", "b"]], [["b", "s1", "s2"]], vocab, vocab)
    plain = beam_search(model, batch, 3, 12)
    far = time.monotonic() + 60
    assert [h.ids for h in beam_search(model, batch, 3, 12, deadline=far, stop=threading.Event())[0]] == [
        h.ids for h in plain[0]
    ]
    assert greedy(model, batch, 12, deadline=far)[0].ids == greedy(model, batch, 12)[0].ids
    with pytest.raises(DecodeTimeout, match="deadline passed") as info:
        beam_search(model, batch, 3, 12, deadline=time.monotonic() - 1)
    assert isinstance(info.value, TimeoutError)
    stop = threading.Event()
    stop.set()
    with pytest.raises(DecodeCancelled):
        greedy(model, batch, 12, stop=stop)
    # between steps: a deadline that passes during decoding stops it there
    long = collate([LONG_TEXT.split()], [["b"]], vocab, vocab)
    start = time.perf_counter()
    with pytest.raises(DecodeTimeout, match="at step [1-9]"):
        beam_search(model, long, 4, 100_000, deadline=time.monotonic() + 0.3)
    assert time.perf_counter() - start < 2


def test_pyfunc_stops_at_the_request_deadline_with_504(project) -> None:
    from pipeline.decoding.search import DecodeTimeout
    from pipeline.serving.pyfunc_common import ServingException

    model = local(project, "copynet", request_timeout_s=0.5, max_output_len=100_000)
    start = time.perf_counter()
    with pytest.raises(ServingException) as info:
        model.predict([LONG_TEXT] * 2, {"beam_size": 4, "max_len": 100_000})
    assert time.perf_counter() - start < 3
    err = info.value
    assert err.error_code == "DEADLINE_EXCEEDED" and err.get_http_status_code() == 504
    assert "took longer than its 0.5 s deadline (serving.request_timeout_s)" in err.message
    assert isinstance(err.__cause__, DecodeTimeout)
    # the Predictor itself: the deadline given, or request_timeout_s from now
    predictor = model.python_model.predictor
    with pytest.raises(DecodeTimeout):
        predictor.predict([LONG_TEXT], 4, 100_000, deadline=time.monotonic() + 0.2)
    assert predictor.predict(["a s1 b"])[0]["output"] == "b s1"  # the slot was given back


def test_stop_event_and_busy_slots_answer_503(project) -> None:
    from pipeline.serving.pyfunc_common import ServingException

    model = local(project, "copynet", request_timeout_s=0.4, max_output_len=100_000)
    predictor = model.python_model.predictor
    # all decoding slots taken (max_concurrent 1): the request waits until its deadline, then 503
    assert predictor._slots.acquire(timeout=1)
    try:
        with pytest.raises(ServingException, match="the server is busy: 1 decoding\\(s\\) at a time") as info:
            model.predict(["a s1 b"])
        assert info.value.get_http_status_code() == 503
    finally:
        predictor._slots.release()
    # the stop event (SIGTERM to the server) ends a running decode at its next step
    slow = local(project, "copynet", request_timeout_s=60, max_output_len=100_000)
    timer = threading.Timer(0.3, slow.python_model.predictor.stop.set)
    timer.start()
    start = time.perf_counter()
    with pytest.raises(ServingException, match="the server is shutting down") as info:
        slow.predict([LONG_TEXT] * 2, {"beam_size": 4, "max_len": 100_000})
    assert info.value.get_http_status_code() == 503
    assert time.perf_counter() - start < 3
    timer.join()


def test_stop_on_signals_and_on_server_exit() -> None:
    """The server's stop event: set by our signal handler (which then runs the one it replaced), and
    by the watcher once the handler in place belongs to a server object whose should_exit is True
    (uvicorn.Server.handle_exit, installed after the model was loaded)."""
    import signal

    from pipeline.serving.pyfunc_common import stop_on_server_exit, stop_on_signals

    calls = []
    before = signal.signal(signal.SIGUSR1, lambda signum, frame: calls.append(signum))
    try:
        event = threading.Event()
        assert stop_on_signals(event, (signal.SIGUSR1,))
        signal.raise_signal(signal.SIGUSR1)
        assert event.is_set() and calls == [signal.SIGUSR1]
    finally:
        signal.signal(signal.SIGUSR1, before)

    class FakeServer:  # uvicorn.Server's shutdown flag and handler
        should_exit = False

        def handle_exit(self, signum, frame) -> None:
            self.should_exit = True

    server, event = FakeServer(), threading.Event()
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        stop_on_server_exit(event, interval_s=0.02)
        signal.signal(signal.SIGTERM, server.handle_exit)  # the server replaces our handler ...
        time.sleep(0.1)
        assert not event.is_set()
        server.should_exit = True  # ... and is told to stop
        assert event.wait(2)
    finally:
        event.set()
        for sig, handler in before.items():
            signal.signal(sig, handler)


# ---------------------------------------------------------------------------------------------
# predict
# ---------------------------------------------------------------------------------------------
def limited_params(project: Path, tmp_path: Path, **serving) -> Path:
    """The toy project's params with a ``serving`` section (LIMITS unless given), in tmp_path."""
    params = yaml.safe_load((project / "params.yaml").read_text())
    params["serving"] = serving or LIMITS
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(params))
    return path


def predict_args(project: Path, params: Path, *extra: str, mech: str = "copynet") -> list[str]:
    vocab = project / "data/vocab" / TASK
    return ["--checkpoint", str(checkpoint(project, mech)), "--task", TASK, "--params", str(params)] + [
        "--vocab",
        str(vocab),
        *extra,
    ]


def run_predict(args: list[str], capsys) -> tuple[int, str, str]:
    from pipeline.serving.predict import main

    capsys.readouterr()
    code = main(args)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize(
    ("lines", "extra", "message"),
    [
        (["a s1 b", "a s1 s2 s3 s4 s5 b"], [], "line 2: 7 source tokens, over the limit of 6 (serving.max_src_tokens)"),
        (["a " + "s1" * 40 + " b"], [], "line 1: 84 characters, over the limit of 60 (serving.max_input_chars)"),
        (["a s1 b"], ["--beam", "5"], "--beam 5 is over this model's limit of 4 (serving.max_beam_size)"),
        (["a s1 b"], ["--max-len", "21"], "--max-len 21 is over this model's limit of 20 (serving.max_output_len)"),
    ],
    ids=["max_src_tokens", "max_input_chars", "beam", "max_len"],
)
def test_predict_refuses_a_line_over_a_limit(project, tmp_path, capsys, lines, extra, message) -> None:
    inp, out = tmp_path / "in.txt", tmp_path / "out.txt"
    inp.write_text("\n".join(lines) + "\n")
    args = predict_args(project, limited_params(project, tmp_path), "--input", str(inp), "--output", str(out), *extra)
    code, _, err = run_predict(args, capsys)
    assert code == 2
    assert err == f"copyseq predict: error: {message}\n"
    assert not out.exists()  # nothing written


def test_predict_decodes_more_lines_than_max_inputs_in_chunks_and_warns(project, tmp_path, capsys) -> None:
    lines = ["a s1 b", "zz1 zz2", "a s2 s3 b", "", "a s4 b", "a u1 u2 u3 b", "a s5 s6 b"]
    inp = tmp_path / "in.txt"
    inp.write_text("\n".join(lines) + "\n")
    code, out, err = run_predict(predict_args(project, limited_params(project, tmp_path), "--input", str(inp)), capsys)
    assert code == 0
    assert out.splitlines() == list(local(project, "copynet").predict(lines)["output"])
    assert out.splitlines()[2] == "b s2 s3"
    warned = [line for line in err.splitlines() if line.startswith("copyseq predict: warning: ")]
    assert [w.split(":")[2].strip() for w in warned] == ["line 2", "line 6"]  # max_inputs 3: lines 4-6 a chunk
    assert "2 of 2 source tokens (100%) are outside the model's vocabulary" in warned[0]


def test_predict_stops_at_the_deadline(project, tmp_path, capsys) -> None:
    params = limited_params(project, tmp_path, request_timeout_s=0.5, max_output_len=100_000)
    inp = tmp_path / "in.txt"
    inp.write_text(f"a s1 b\n{LONG_TEXT}\n")
    start = time.perf_counter()
    code, out, err = run_predict(predict_args(project, params, "--input", str(inp), "--max-len", "100000"), capsys)
    assert code == 2 and out == ""
    assert err.startswith("copyseq predict: error: lines 1-2: decoding stopped: the request took longer than its 0.5 s")
    assert len(err.splitlines()) == 1
    assert time.perf_counter() - start < 10


def test_predict_names_the_line_that_is_not_utf8(project, tmp_path, monkeypatch, capsys) -> None:
    params = limited_params(project, tmp_path)
    inp = tmp_path / "in.txt"
    inp.write_bytes(b"a s1 b\n\xef\xbb\xbfok\na \xff\xfe b\n")
    code, out, err = run_predict(predict_args(project, params, "--input", str(inp)), capsys)
    assert (code, out) == (2, "")
    assert err == "copyseq predict: error: line 3: not valid UTF-8 (byte 0xff at byte 3)\n"
    # stdin as bytes (a real process's sys.stdin.buffer) and as text holding surrogate escapes
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"a s1 b\n\xc3(\n")))
    code, _, err = run_predict(predict_args(project, params), capsys)
    assert (code, err) == (2, "copyseq predict: error: line 2: not valid UTF-8 (byte 0xc3 at byte 1)\n")
    monkeypatch.setattr(sys, "stdin", io.StringIO("a \udcff b\n"))
    code, _, err = run_predict(predict_args(project, params), capsys)
    assert (code, err) == (2, "copyseq predict: error: line 1: not valid UTF-8 (undecodable byte at character 3)\n")
    # a UTF-8 byte-order mark on the first line is not part of the text
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO("\ufeffa s1 b\n".encode())))
    assert run_predict(predict_args(project, params), capsys)[:2] == (0, "b s1\n")


def test_predict_wrong_mechanism_or_vocabulary_is_a_clean_error(project, tmp_path, capsys) -> None:
    from pipeline.vocab.vocabulary import Vocab

    params = limited_params(project, tmp_path)
    inp = tmp_path / "in.txt"
    inp.write_text("a s1 b\n")
    code, out, err = run_predict(predict_args(project, params, "--input", str(inp), "--mechanism", "rnnsearch"), capsys)
    assert (code, out) == (2, "")
    assert err.startswith("copyseq predict: error: ") and "is a copynet model, not rnnsearch" in err
    assert len(err.splitlines()) == 1
    vocab = Vocab.load(project / "data/vocab" / TASK / "src.vocab")
    for name, itos in (
        ("bigger", vocab.itos + ["zz_new"]),
        ("reordered", vocab.itos[:4] + [vocab.itos[5], vocab.itos[4]] + vocab.itos[6:]),
    ):
        other = tmp_path / name
        other.mkdir()
        for side in ("src", "tgt"):
            Vocab(itos, [1] * len(itos)).save(other / f"{side}.vocab")
        args = predict_args(project, params, "--input", str(inp))
        args[args.index("--vocab") + 1] = str(other)
        code, out, err = run_predict(args, capsys)
        assert (code, out) == (2, ""), name
        assert "was trained with a src vocabulary of" in err and len(err.splitlines()) == 1, err
        assert ("size" if name == "bigger" else "order or words") in err


def test_predict_command_exits_2_without_a_traceback(project, tmp_path) -> None:
    """The installed command on real stdin: invalid UTF-8 is one line on stderr and exit code 2."""
    params = limited_params(project, tmp_path)
    proc = subprocess.run(
        [sys.executable, "-m", "pipeline.serving.predict", *predict_args(project, params)],
        input=b"a s1 b\n\x80abc\n",
        capture_output=True,
        timeout=120,
        cwd=REPO,
    )
    assert proc.returncode == 2
    assert proc.stderr.decode().strip().splitlines() == [
        "copyseq predict: error: line 2: not valid UTF-8 (byte 0x80 at byte 1)"
    ]
    assert proc.stdout == b""
