"""The prepare flow on a real Dask cluster (``parallel.task_runner: dask``, ``parallel.dask_address``):
a ``dask scheduler`` and two ``dask worker`` processes started by the test on loopback
(benchmarks/loopback_cluster.py), as one starts them on a cluster's machines. The shards are those
of the local runner, also when a worker is killed mid-way (its chunks run again on the other)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
import yaml

from benchmarks.loopback_cluster import LoopbackCluster
from benchmarks.support_qa import write_corpus

pytest.importorskip("prefect_dask", reason="optional extra [dask] not installed")  # `make test` installs it

CORPUS = "qa"
PAIRS = 2000  # 1,600 train / 200 valid / 200 test
CHUNK = 100  # 20 chunks: 20 Prefect tasks on the cluster


def _params(raw: Path, runner: str, address: str | None) -> dict:
    return {
        "tasks": {CORPUS: str(raw)},
        "prepare": {
            CORPUS: {
                "reader": "parallel",
                "train_file": "train.tsv",
                "valid_file": "valid.tsv",
                "test_file": "test.tsv",
                "src_col": "question",
                "tgt_col": "answer",
                "tokenizer": "moses",  # CPU-bound chunks, as the cluster is for
                "chunk_size": CHUNK,
            }
        },
        "parallel": {"task_runner": runner, "workers": 1 if runner == "local" else 2, "dask_address": address},
    }


def _prepare(root: Path, raw: Path, runner: str, address: str | None = None) -> dict:
    from flows.prepare import prepare_corpus

    root.mkdir(parents=True)
    (root / "params.yaml").write_text(yaml.safe_dump(_params(raw, runner, address)))
    started = time.monotonic()
    manifests = prepare_corpus(CORPUS, str(root / "params.yaml"))
    print(f"prepare, {runner} runner: {time.monotonic() - started:.1f} s")
    return {s: (m["rows_in"], m["rows"], m["rows_quarantined"], m["content_sha256"]) for s, m in manifests.items()}


class Watcher(threading.Thread):
    """Polls the scheduler every 10 ms: which workers ever ran a task; with ``kill``, SIGKILLs that
    worker the first time it is running one after another task has finished (mid-way)."""

    def __init__(self, cluster: LoopbackCluster, kill: str | None = None) -> None:
        super().__init__(daemon=True)
        self.cluster, self.kill = cluster, kill
        self.busy: set[str] = set()
        self.killed_with: list = []  # the task keys the killed worker was running
        self.done = threading.Event()

    def run(self) -> None:
        from distributed import Client

        with Client(self.cluster.address, timeout=60) as client:
            names = {addr: w["name"] for addr, w in client.scheduler_info(n_workers=-1)["workers"].items()}
            finished = 0
            while not self.done.is_set():
                for addr, keys in client.processing().items():
                    if keys:
                        self.busy.add(names.get(addr, addr))
                        if self.kill == names.get(addr) and not self.killed_with and finished:
                            self.cluster.kill_worker(self.kill)
                            self.killed_with = list(keys)
                finished = finished or client.run_on_scheduler(
                    lambda dask_scheduler: sum(ts.state == "memory" for ts in dask_scheduler.tasks.values())
                )
                time.sleep(0.01)


@pytest.fixture(scope="module")
def raw(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("qa_raw")
    write_corpus(out, PAIRS, seed=3)
    return out


def test_a_dask_cluster_gives_the_local_runner_s_shards_and_survives_a_killed_worker(harness, raw, tmp_path):
    local = _prepare(tmp_path / "local", raw, "local")
    assert local["train"][0] == PAIRS - 2 * (PAIRS // 10) and local["train"][1] > 1500

    with LoopbackCluster(2, tmp_path / "cluster", cwd=Path(__file__).resolve().parents[2]) as cluster:
        watcher = Watcher(cluster)
        watcher.start()
        try:
            on_dask = _prepare(tmp_path / "dask", raw, "dask", cluster.address)
        finally:
            watcher.done.set()
            watcher.join()
        assert on_dask == local
        assert watcher.busy == {"worker-0", "worker-1"}  # both workers ran chunks

        killer = Watcher(cluster, kill="worker-1")
        killer.start()
        try:
            after_kill = _prepare(tmp_path / "dask_killed", raw, "dask", cluster.address)
        finally:
            killer.done.set()
            killer.join()
        assert killer.killed_with, "worker-1 was never caught running a chunk after the first one finished"
        assert cluster.workers["worker-1"].poll() is not None  # dead; its chunks ran again on worker-0
        assert after_kill == local
