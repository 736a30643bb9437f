"""Loopback load test of `mlflow models serve` with the copyseq pyfunc model: bounded memory and a
server that keeps answering under concurrent load and hostile requests (benchmarks/README.md).

Serves a toy CopyNet (trained in a few seconds as tests/pipeline/serving/test_serving.py's toy project, logged,
registered and made champion in a temporary MLflow store) or ``--model URI`` (from
``MLFLOW_TRACKING_URI``) on 127.0.0.1, then:

1. ``--requests`` ordinary requests (1-4 texts each) from ``--concurrency`` client threads;
2. hostile requests, one at a time: 2 MB as one text, 2 MB as 20,000 short texts, ``beam_size``
   100,000, and (unless ``--no-worst``) the largest request within the limits (``max_inputs`` texts of
   ``max_src_tokens`` tokens at ``max_beam_size`` and ``max_output_len``), which runs into the deadline;
3. whether the server still answers (``/ping`` and one ordinary request).

Prints status codes, p50/p95 latency per phase, and the server's peak RSS (the sum over its process
tree, sampled from /proc every 50 ms). Loopback only; nothing leaves the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import mlflow

from benchmarks.toy import (
    EVALUATE,
    PREPARE,
    TASK,
    build_toy_project,
    free_port,
    start_mlflow_server,
    stop_server,
)
from pipeline.config.params import load_params
from pipeline.serving.predictor import ServingConfig
from pipeline.serving.pyfunc import log_pyfunc_model
from pipeline.tracking.registry import register, set_champion

REPO = Path(__file__).resolve().parents[1]


# ---------------------------------------------------------------------------------------------
# The server's memory, from /proc
# ---------------------------------------------------------------------------------------------
def process_tree(root: int) -> list[int]:
    """``root`` and its descendants (from the parent pids in /proc/*/stat)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(stat.parent.name))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo += children.get(pid, [])
    return out


def tree_rss(root: int) -> int:
    """Resident memory of ``root``'s process tree, in bytes."""
    total = 0
    for pid in process_tree(root):
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024
        except OSError:
            pass
    return total


class RssSampler(threading.Thread):
    """Samples :func:`tree_rss` every ``interval_s``: ``peak`` over the whole run, and a window
    peak that :meth:`window` returns and restarts."""

    def __init__(self, root: int, interval_s: float = 0.05) -> None:
        super().__init__(daemon=True)
        self.root, self.interval_s, self.done = root, interval_s, threading.Event()
        self.peak = self._window = 0

    def sample(self) -> int:
        rss = tree_rss(self.root)
        self.peak, self._window = max(self.peak, rss), max(self._window, rss)
        return rss

    def run(self) -> None:
        while not self.done.wait(self.interval_s):
            self.sample()

    def window(self) -> int:
        """The peak since the last call, in bytes."""
        self.sample()
        peak, self._window = self._window, 0
        return peak


# ---------------------------------------------------------------------------------------------
# The model and the server
# ---------------------------------------------------------------------------------------------
def toy_champion(root: Path, limits: dict) -> str:
    """Train the toy project under ``root``, log CopyNet with ``limits`` (params['serving']),
    register it and make it the champion; returns the model URI to serve."""
    build_toy_project(root)
    mlflow.set_experiment(TASK)
    with mlflow.start_run(run_name="copynet-bench") as run:
        pass
    config = ServingConfig.from_params(TASK, "copynet", PREPARE, EVALUATE, limits)
    uri = log_pyfunc_model(
        run.info.run_id, root / "data/checkpoints" / TASK / "copynet", root / "data/vocab" / TASK, config
    )
    set_champion(TASK, register(uri, TASK, {"mechanism": "copynet"}), "bench_serving")
    return f"models:/{TASK}@champion"


def start_server(uri: str, port: int, cwd: Path, log: Path) -> subprocess.Popen:
    with open(log, "wb") as out:
        return start_mlflow_server(uri, port, cwd, out)


def ping(base: str) -> bool:
    try:
        with urllib.request.urlopen(f"{base}/ping", timeout=5) as r:
            return r.status == 200
    except OSError:
        return False


def invoke(base: str, texts: list[str], params: dict | None = None, timeout: float = 120) -> tuple[int, float, str]:
    """POST /invocations: ``(status, seconds, the first 200 characters of an error message)``;
    status 0: no HTTP answer (connection refused or reset, client timeout)."""
    body = {"dataframe_split": {"columns": ["text"], "data": [[t] for t in texts]}}
    if params:
        body["params"] = params
    data = json.dumps(body).encode()
    req = urllib.request.Request(f"{base}/invocations", data=data, headers={"Content-Type": "application/json"})
    start = time.perf_counter()
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            r.read()
            return r.status, time.perf_counter() - start, ""
    except urllib.error.HTTPError as err:
        raw = err.read().decode(errors="replace")
        try:
            message = json.loads(raw).get("message", raw)
        except ValueError:
            message = raw
        return err.code, time.perf_counter() - start, message.split("Error: ")[-1][:200]
    except OSError as err:
        return 0, time.perf_counter() - start, f"{type(err).__name__}: {err}"[:200]


def ordinary_texts(rng: random.Random) -> list[str]:
    """1-4 texts of the toy copy task (a, fillers, b), some fillers out of vocabulary."""
    texts = []
    for _ in range(rng.randint(1, 4)):
        fillers = [f"{rng.choice('su')}{rng.randrange(50)}" for _ in range(rng.randint(2, 6))]
        texts.append(" ".join(["a", *fillers, "b"]))
    return texts


def percentile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1] if len(values) > 1 else values[0]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", help="serve this MLflow model URI (default: a toy CopyNet trained here)")
    parser.add_argument("--requests", type=int, default=500, help="ordinary requests (default 500)")
    parser.add_argument("--concurrency", type=int, default=50, help="client threads (default 50)")
    parser.add_argument("--big-mb", type=float, default=2.0, help="size of the hostile requests in MB (default 2)")
    parser.add_argument("--no-worst", action="store_true", help="skip the largest request within the limits")
    parser.add_argument("--rss-limit-gb", type=float, default=2.0, help="the target: peak RSS under this")
    parser.add_argument(
        "--limits",
        default="{}",
        help="the toy model's serving limits over params.yaml's, JSON: '{\"max_concurrent\": 2}'",
    )
    parser.add_argument("--json", help="also write the figures here")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    limits = {**load_params()["serving"], **json.loads(args.limits)}
    here = Path.cwd()
    json_path = Path(args.json).resolve() if args.json else None

    with tempfile.TemporaryDirectory(prefix="bench-serving-") as tmp:
        tmp = Path(tmp)
        if args.model:
            uri, cwd = args.model, Path.cwd()
        else:
            os.environ.setdefault("MLFLOW_TRACKING_URI", f"sqlite:///{tmp / 'mlflow.db'}")
            os.chdir(tmp)  # MLflow writes artifacts under ./mlruns
            start = time.perf_counter()
            uri, cwd = toy_champion(tmp / "toy", limits), tmp
            print(f"toy model trained and registered in {time.perf_counter() - start:.1f}s")
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        proc = start_server(uri, port, cwd, tmp / "server.log")
        sampler = RssSampler(proc.pid)
        report: dict = {"model": uri, "limits": limits, "concurrency": args.concurrency, "requests": args.requests}
        report["phases"] = {}
        try:
            start = time.perf_counter()
            while not ping(base):
                if proc.poll() is not None or time.perf_counter() - start > 300:
                    print((tmp / "server.log").read_text()[-3000:])
                    raise SystemExit("the server did not come up")
                time.sleep(0.5)
            sampler.start()
            report["ready_s"] = round(time.perf_counter() - start, 1)
            report["rss_idle_mb"] = round(tree_rss(proc.pid) / 2**20)
            print(f"server ready in {report['ready_s']}s, RSS {report['rss_idle_mb']} MB ({uri})")

            rng = random.Random(args.seed)
            bodies = [ordinary_texts(rng) for _ in range(args.requests)]
            start = time.perf_counter()
            with ThreadPoolExecutor(args.concurrency) as pool:
                results = list(pool.map(lambda texts: invoke(base, texts), bodies))
            phases = {"ordinary": (results, time.perf_counter() - start)}

            size = int(args.big_mb * 2**20)
            hostile = {
                f"{args.big_mb:g} MB in one text": (["s1 " * (size // 3)], None),
                f"{args.big_mb:g} MB as 20,000 texts": (["a " + "s1 " * (size // 20_000 // 3) + "b"] * 20_000, None),
                "beam_size 100,000": (["a s1 s2 b"], {"beam_size": 100_000}),
            }
            if not args.no_worst:  # --model: the limits of params.yaml, maybe not the model's own
                long = " ".join(["a"] + [f"s{i % 50}" for i in range(limits["max_src_tokens"] - 2)] + ["b"])
                hostile["largest within the limits"] = (
                    [long] * limits["max_inputs"],
                    {"beam_size": limits["max_beam_size"], "max_len": limits["max_output_len"]},
                )
            report["peak_rss_mb_ordinary"] = round(sampler.window() / 2**20)
            for name, (texts, params) in hostile.items():
                start = time.perf_counter()
                result = invoke(base, texts, params)
                phases[name] = ([result], time.perf_counter() - start)
                report.setdefault("peak_rss_mb_hostile", {})[name] = round(sampler.window() / 2**20)

            after = invoke(base, ["a s1 s2 b"])
            report["answers_after"] = ping(base) and after[0] == 200
            sampler.sample()
        finally:
            sampler.done.set()
            stop_server(proc)
            os.chdir(here)
        report["peak_rss_mb"] = round(sampler.peak / 2**20)

        print(f"\n{'phase':<30} {'requests':>8} {'status codes':<28} {'p50 s':>7} {'p95 s':>7} {'wall s':>7}")
        for name, (results, wall) in phases.items():
            codes = Counter(status for status, _, _ in results)
            latencies = [seconds for _, seconds, _ in results]
            shown = ", ".join(f"{code}: {n}" for code, n in sorted(codes.items()))
            p50, p95 = percentile(latencies, 50), percentile(latencies, 95)
            print(f"{name:<30} {len(results):>8} {shown:<28} {p50:>7.2f} {p95:>7.2f} {wall:>7.1f}")
            messages = sorted({m for _, _, m in results if m})
            for message in messages[:3]:
                print(f"{'':<30} -> {message}")
            report["phases"][name] = {
                "status_codes": dict(codes),
                "p50_s": round(p50, 3),
                "p95_s": round(p95, 3),
                "wall_s": round(wall, 2),
                "messages": messages[:3],
            }
        ok = report["peak_rss_mb"] < args.rss_limit_gb * 1024 and report["answers_after"]
        print(f"\npeak server RSS (process tree): {report['peak_rss_mb']} MB overall; idle {report['rss_idle_mb']} MB")
        print(f"  during the ordinary requests: {report['peak_rss_mb_ordinary']} MB")
        for name, mb in report["peak_rss_mb_hostile"].items():
            print(f"  during {name}: {mb} MB")
        print(
            f"target < {args.rss_limit_gb:g} GB: {'met' if ok else 'MISSED'}; "
            f"the server answers afterwards: {'yes' if report['answers_after'] else 'NO'}"
        )
        if json_path:
            json_path.write_text(json.dumps(report, indent=2) + "\n")
        return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
