"""The same params give the same metrics: a tiny task trained and evaluated twice, each time in a
fresh process with the default run's compute settings (fixed thread count, deterministic kernels),
ends with identical metrics and identical weights."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

from tests.conftest import REPO

RUN = textwrap.dedent("""
    import hashlib, json, sys
    from pathlib import Path
    import torch
    from models.config import ModelConfig
    from pipeline.corpora.copynet_rules import SCHEMA, RulesConfig, generate_examples
    from pipeline.evaluate import EvalConfig, decode_table, score_records
    from pipeline.train import TrainConfig, build_seeded_model, compute_settings, train
    from tests.conftest import encoded_task
    import pyarrow as pa

    root = Path(sys.argv[1])
    splits = generate_examples(RulesConfig(n_rules=4, instances_per_rule=10, unseen_per_rule=1, max_filler=3))
    encoded, src, tgt = encoded_task(root, {k: splits[k] for k in ("train", "valid")}, schema=SCHEMA)
    out = {}
    for mechanism in ("copynet", "pointer_generator"):
        cfg = ModelConfig(src_vocab=len(src), tgt_vocab=len(tgt), emb=12, hidden=16, dropout=0.1)
        model = build_seeded_model(mechanism, cfg, 5)
        train_cfg = TrainConfig(epochs=3, batch_size=8, lr=0.01, threads=1, deterministic=True)
        history = train(model, encoded["train"], encoded["valid"], train_cfg, root / mechanism,
                        model_config=vars(cfg), progress=False)
        ev = EvalConfig(beam_size=3, max_len=20, group_by="rule_type", threads=1, deterministic=True)
        compute_settings(ev.threads, ev.deterministic)
        records = decode_table(model.eval(), pa.Table.from_pylist(splits["test"], schema=SCHEMA), src, tgt, ev,
                               torch.device("cpu"))
        weights = hashlib.sha256(b"".join(t.numpy().tobytes() for t in model.state_dict().values())).hexdigest()
        out[mechanism] = {"metrics": score_records(records, ev), "history": history, "weights": weights}
    print(json.dumps(out, sort_keys=True))
""")


def _run(tmp_path, name: str) -> dict:
    script = tmp_path / "run.py"
    script.write_text(RUN)
    proc = subprocess.run(
        [sys.executable, str(script), str(tmp_path / name)],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_same_params_give_identical_metrics_in_fresh_processes(tmp_path):
    first, second = _run(tmp_path, "a"), _run(tmp_path, "b")
    for mechanism in ("copynet", "pointer_generator"):
        a, b = first[mechanism], second[mechanism]
        assert a["weights"] == b["weights"], mechanism
        assert a["metrics"] == b["metrics"], mechanism  # exact, not approximately
        drop = {"tokens_per_s"}  # wall-clock figures differ; every loss must not
        assert [{k: v for k, v in r.items() if k not in drop} for r in a["history"]] == [
            {k: v for k, v in r.items() if k not in drop} for r in b["history"]
        ]
        assert a["metrics"]["n"] > 0 and a["history"][-1]["valid_loss"] < a["history"][0]["valid_loss"]
