"""The pytest fixtures and options every test folder shares: quiet, local tool settings, ``--device``,
one torch thread, Prefect's test harness, a tiny project, and the toy project served (built once).
Helper functions are in tests/helpers.py."""

from __future__ import annotations

import os
from pathlib import Path

# Quiet and local before any test imports Prefect or MLflow (tests.helpers imports MLflow).
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("DVC_NO_ANALYTICS", "1")
# Tests never download: a backbone name that is not a local directory fails instead of reaching the hub.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

# Prefect configures logging when it is first used (logging.config.dictConfig in prefect.main), which
# closes every handler made before. Loaded here, before any test, it closes none that holds a test's
# captured stream: absl (which rouge-score imports) makes a handler on whatever sys.stderr is then, and a
# later test's first Prefect import (with -n 2 either worker may run the two in that order) closed
# pytest's own stderr capture with it, failing every later test of that worker.
import prefect.main  # noqa: E402, F401
import pytest  # noqa: E402
import torch  # noqa: E402
import yaml  # noqa: E402

from tests.helpers import SHARED_DATA, build_features_project, build_toy_project, tiny_params  # noqa: E402


def pytest_addoption(parser):
    parser.addoption(
        "--device",
        default="cpu",
        help="where the tests marked 'device' run their models and training: cpu (default), cuda or cuda:N. "
        "On a GPU: pytest --device cuda -m device",
    )


def pytest_runtest_setup(item):
    """The tests marked ``shared_data`` read the real corpora in ../shared/data: where it is absent
    (a user's clone) they skip, saying so, as one group (``-m "not shared_data"`` leaves them out)."""
    if item.get_closest_marker("shared_data") and not SHARED_DATA.is_dir():
        pytest.skip(f"needs the real corpora in {SHARED_DATA} (absent here)")


def pytest_collection_modifyitems(config, items):
    """The end-to-end ``dvc repro`` first. It takes about 10 of the suite's 27 minutes on 2 cores; with
    ``-n 2`` (``make test``) one worker runs it while the other takes the rest, and the rest is shared out
    again when either runs dry (``--dist worksteal``), instead of the longest test starting last."""
    items.sort(key=lambda item: item.path.name != "test_e2e_dvc.py")


def pytest_configure(config):
    if config.getoption("--device").startswith("cuda"):
        # Deterministic cuBLAS needs its workspace setting before the first cuBLAS call of the process.
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        # float32 means float32 in the checks: PyTorch runs cuDNN (the RNNs) in TF32 by default,
        # whose 10-bit mantissa moves scores by ~5e-4 (measured on an H100: beam search scores of
        # one example alone and in a batch then differ by 1.3e-4).
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cuda.matmul.allow_tf32 = False


@pytest.fixture(scope="session")
def device(request) -> torch.device:
    """The device of the tests marked ``device`` (``--device``); asking for CUDA without one fails
    loudly rather than testing the CPU under a CUDA label."""
    device = torch.device(request.config.getoption("--device"))
    if device.type == "cuda":
        if not torch.cuda.is_available():
            pytest.fail(f"--device {device} was asked for, but torch {torch.__version__} sees no CUDA device")
        if device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
    elif device.type != "cpu":
        pytest.fail(f"--device must be cpu, cuda or cuda:N, got {device}")
    return device


@pytest.fixture(autouse=True, scope="session")
def _one_torch_thread():
    """Tiny tensors: one thread is fastest, and robust when other jobs share the 2 CPU cores."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(autouse=True)
def _mlflow_uris_stay_with_their_test():
    """``mlflow.set_tracking_uri``/``set_registry_uri`` also write ``MLFLOW_TRACKING_URI`` /
    ``MLFLOW_REGISTRY_URI`` into ``os.environ`` (MLflow 3), so a test's store would otherwise leak into
    every later test and the subprocesses they start (a stale registry URI once sent the end-to-end
    test's registry queries to a deleted test's database)."""
    keys = ("MLFLOW_TRACKING_URI", "MLFLOW_REGISTRY_URI")
    before = {k: os.environ.get(k) for k in keys}
    yield
    for key, value in before.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


@pytest.fixture(scope="session")
def harness():
    """Prefect's test harness (one temporary server, ~22 s) shared by every flow test."""
    from prefect.testing.utilities import prefect_test_harness

    import flows  # noqa: F401  (quiet settings)

    with prefect_test_harness(server_startup_timeout=120):
        yield


@pytest.fixture
def tiny_project(tmp_path, monkeypatch) -> Path:
    """A project root in tmp_path holding a tiny params.yaml; MLflow tracks into it."""
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(tiny_params(), sort_keys=False))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    monkeypatch.chdir(tmp_path)  # MLflow puts artifacts under ./mlruns
    return tmp_path


@pytest.fixture(scope="session")
def toy_project(tmp_path_factory) -> Path:
    """The toy copy project (benchmarks.toy.build_toy_project: shards, vocabularies, CopyNet and
    RNNSearch trained for 4 epochs, params.yaml), built once per test session."""
    return build_toy_project(tmp_path_factory.mktemp("toy_project"))


@pytest.fixture(scope="session")
def features_project(tmp_path_factory) -> Path:
    """A task with a features column (tests.helpers.build_features_project: a tag says reverse or copy;
    added, prepared, its vocabularies with features.vocab, CopyNet with features trained), built once."""
    return build_features_project(tmp_path_factory.mktemp("features_project"))
