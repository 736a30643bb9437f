"""Screenshot the MLflow UI's page of a task's experiment, as a new user opens it, for the docs.

Starts `mlflow server` on 127.0.0.1 over the given store, opens the experiment page in headless
Chromium (Debian's `chromium` package; install it with `apt-get install chromium`), saves a PNG
and stops the server. Not part of CI.

    .venv/bin/python scripts/mlflow_screenshot.py --out docs/img/mlflow_copy_rules_experiment.png
    .venv/bin/python scripts/mlflow_screenshot.py --run-of pipeline --size 1600,1100 \
        --out docs/img/mlflow_copy_rules_pipeline_run.png   # the image in docs/tracking.md
    .venv/bin/python scripts/mlflow_screenshot.py --tracking-uri sqlite:////path/to/mlflow.db --run-of copynet
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CHROMIUM_FLAGS = [  # headless, and no connection attempts beyond the loopback page
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_healthy(url: str, seconds: float = 120) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"{url}/health", timeout=2)
            return
        except OSError:
            time.sleep(0.5)
    raise TimeoutError(f"mlflow server at {url} did not answer within {seconds:.0f} s")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--tracking-uri", default=f"sqlite:///{REPO / 'mlflow.db'}")
    p.add_argument("--experiment", default="copy_rules")
    p.add_argument(
        "--run-of", default=None, help="screenshot this mechanism's run page (or 'pipeline': the parent run's)"
    )
    p.add_argument("--out", type=Path, default=REPO / "docs" / "img" / "mlflow_experiment.png")
    p.add_argument("--size", default="1600,1000", help="window width,height")
    p.add_argument("--wait-ms", type=int, default=20000, help="virtual time Chromium gives the page to render")
    args = p.parse_args(argv)
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        sys.exit("chromium not found: apt-get install chromium")

    import mlflow

    client = mlflow.MlflowClient(args.tracking_uri)
    experiment = client.get_experiment_by_name(args.experiment)
    if experiment is None:
        sys.exit(f"no experiment {args.experiment!r} in {args.tracking_uri}")
    path = f"#/experiments/{experiment.experiment_id}"
    query = "?workflowType=machine_learning"  # the UI's Model training mode (its default is GenAI)
    if args.run_of:
        which = "tags.kind = 'pipeline'" if args.run_of == "pipeline" else f"tags.mechanism = '{args.run_of}'"
        runs = client.search_runs([experiment.experiment_id], which, max_results=1)
        if not runs:
            sys.exit(f"no run of {args.run_of!r} in {args.experiment}")
        path += f"/runs/{runs[0].info.run_id}"

    port = free_port()
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false", "MLFLOW_DISABLE_TELEMETRY": "true"}
    server = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
         "--backend-store-uri", args.tracking_uri],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    try:
        url = f"http://127.0.0.1:{port}"
        wait_healthy(url)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="chromium-") as profile:
            subprocess.run(
                [chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", f"--window-size={args.size}",
                 f"--virtual-time-budget={args.wait_ms}", f"--screenshot={args.out}", f"{url}/{path}{query}"],
                check=True, capture_output=True, timeout=300,
            )  # fmt: skip
        print(f"{args.out}: {url}/{path}")
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=60)


if __name__ == "__main__":
    main()
