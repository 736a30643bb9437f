"""onnxruntime's usage telemetry stays off in every process that loads the pipeline: its PyPI build
queues events (and a device id) under ~/.cache/Microsoft/DeveloperTools/.onnxruntime for upload unless
ORT_DISABLE_TELEMETRY is set before it starts."""

from __future__ import annotations

import os
import pwd
import sqlite3
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
QUEUE = Path(pwd.getpwuid(os.getuid()).pw_dir) / ".cache/Microsoft/DeveloperTools/.onnxruntime/onnxruntime.db"

SESSION = """
import sys
import {module}
import numpy as np, onnxruntime
from onnx import TensorProto, helper
graph = helper.make_graph(
    [helper.make_node("Relu", ["x"], ["y"])], "g",
    [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
)
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
assert session.run(None, {{"x": np.array([-1.0], dtype=np.float32)}})[0].tolist() == [0.0]
import os; print(os.environ.get("ORT_DISABLE_TELEMETRY"))
"""


def queued_events() -> int | None:
    if not QUEUE.is_file():
        return None
    with sqlite3.connect(f"file:{QUEUE}?mode=ro", uri=True) as db:
        return db.execute("select count(*) from events").fetchone()[0]


def run_session(module: str) -> str:
    env = {k: v for k, v in os.environ.items() if k != "ORT_DISABLE_TELEMETRY"}
    proc = subprocess.run(
        [sys.executable, "-c", SESSION.format(module=module)], capture_output=True, text=True, env=env, cwd=REPO
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout.strip()


def test_a_process_that_loads_the_pipeline_queues_no_telemetry():
    before = queued_events()
    assert run_session("pipeline.serving.onnx_model") == "1"  # set before onnxruntime loads
    assert queued_events() == before  # nothing queued (and no queue created where there was none)
