"""`dvc repro` end to end on a tiny params file, in a temporary copy of the repository."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from models.registry import DISPLAY_NAMES
from pipeline.config.variants import display_names
from pipeline.data.corpora.copynet_rules import regular_symbol
from pipeline.vocab.tiny_backbone import make_tiny_backbone
from tests.helpers import free_port, repository_copy, tiny_params

pytestmark = pytest.mark.slow


def run(cmd: list[str], cwd: Path, env: dict, timeout: int = 600) -> str:
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{' '.join(cmd)} failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    return proc.stdout + proc.stderr


# One pretrained-backbone row (every stage again costs about a minute per row here); every head and the
# backbone alone on each family go through the stages in tests/pipeline/training/test_backbone_stages.py.
BACKBONE_ROWS = {"pointer_generator_bart": "backbone_pointer_generator"}


def e2e_params(backbone: Path) -> dict:
    """The tiny params plus a pretrained-backbone row on a tiny BART-shaped backbone (fresh weights, a
    tokenizer trained on the task's own symbols)."""
    params = tiny_params()
    for name in BACKBONE_ROWS:
        params["variants"][name]["model"]["backbone"] = str(backbone)
    params["mechanisms"] = [*params["mechanisms"], *BACKBONE_ROWS]
    return params


@pytest.fixture(scope="module")
def repo_copy(tmp_path_factory) -> tuple[Path, dict, dict]:
    root = tmp_path_factory.mktemp("e2e")
    texts = [" ".join(regular_symbol(i) for i in range(k, 1000, 7)) for k in range(7)]  # s0 .. s999, no u*
    backbone = make_tiny_backbone("bart", texts, root / "tiny_bart", d_model=32, layers=2, heads=2, vocab_size=300)
    # a row added later, on a backbone new to the task
    make_tiny_backbone("t5", texts, root / "tiny_t5", d_model=16, layers=1, heads=2, vocab_size=300)
    params = e2e_params(backbone)
    return root / "repo", {**repository_copy(root / "repo", params), "HF_HUB_OFFLINE": "1"}, params


def changed_stages(repo: Path, env: dict) -> set[str]:
    out = run(["dvc", "status", "--json"], repo, env)
    return set(json.loads(out[out.index("{") :]))


def mechanism_runs(repo: Path, env: dict, mechanism: str) -> list[str]:
    """The ids of the MLflow runs of ``mechanism`` in the task's experiment (the store ``env`` names)."""
    query = f"""
import json
from mlflow import MlflowClient
c = MlflowClient()
runs = c.search_runs([c.get_experiment_by_name("copy_rules").experiment_id], "tags.mechanism = '{mechanism}'")
print(json.dumps([r.info.run_id for r in runs]))
"""
    return json.loads(run([sys.executable, "-c", query], repo, env).strip().splitlines()[-1])


def test_dvc_repro_end_to_end(repo_copy):
    repo, env, params_used = repo_copy
    out = run(["scripts/with_prefect_server.sh", "dvc", "repro"], repo, env, timeout=1200)

    mechs = tuple(params_used["mechanisms"])  # every mechanism of the default params, the variants, the backbone rows
    assert {"encdec", "rnnsearch", "copynet", "pointer_softmax", "wean", "read_again", "pointer_generator"} <= set(
        mechs
    )
    variants = {"copynet_transformer": "copynet", "pointer_generator_transformer": "pointer_generator"}
    assert set(variants) <= set(mechs)  # rows of their own: stage names with underscores in the matrix
    ran = set(re.findall(r"Running stage '([^']+)'", out))
    assert {f"{stage}@copy_rules-{v}" for stage in ("train", "evaluate") for v in variants} <= ran
    for split in ("train", "valid", "test", "test_unseen"):
        manifest = json.loads((repo / f"data/shards/copy_rules/{split}/manifest.json").read_text())
        assert manifest["rows"] > 0 and (repo / f"data/shards/copy_rules/{split}/part-00000.arrow").exists()
    for mech in mechs:
        assert (repo / f"data/checkpoints/copy_rules/{mech}/model.pt").exists()
        metrics = json.loads((repo / f"data/eval/runs/copy_rules/{mech}/metrics.json").read_text())
        assert metrics["test"]["n"] == 20
        assert (repo / f"data/eval/runs/copy_rules/{mech}/heatmap.png").exists()
    table = (repo / "data/eval/comparison/copy_rules.md").read_text()
    display = {**DISPLAY_NAMES, **display_names(params_used, DISPLAY_NAMES)}
    assert all(f"| {display[m]} (ours) |" in table for m in mechs)
    assert "| CopyNet (Transformer decoder) (ours) |" in table and "| CopyNet (paper) |" in table
    assert "Transformer decoder) (paper)" not in table  # the papers' rows are the bases' only
    for variant, base in variants.items():  # model.pt names the base (built) and the variant (the row)
        ckpt = torch.load(repo / f"data/checkpoints/copy_rules/{variant}/model.pt", weights_only=True)
        assert (ckpt["mechanism"], ckpt["variant"], ckpt["model_config"]["decoder"]) == (base, variant, "transformer")
    assert (repo / "data/eval/comparison/copy_rules.png").exists()
    # The backbone rows: the vocab stage recorded the tokenizer (and its hash) and encoded the splits in
    # its pieces; model.pt records the backbone's config, so it loads without the backbone's directory.
    record = json.loads(next((repo / "data/vocab/copy_rules/backbones").glob("*/backbone.json")).read_text())
    assert record["backbone"] == params_used["variants"]["pointer_generator_bart"]["model"]["backbone"]
    assert len(record["tokenizer_sha256"]) == 64
    for row, base in BACKBONE_ROWS.items():
        ckpt = torch.load(repo / f"data/checkpoints/copy_rules/{row}/model.pt", weights_only=True)
        assert (ckpt["mechanism"], ckpt["variant"]) == (base, row)
        assert ckpt["model_config"]["options"]["backbone_config"]["model_type"] == "bart"
        unseen = json.loads((repo / f"data/eval/runs/copy_rules/{row}/metrics.json").read_text())["test_unseen"]
        assert unseen["n"] > 0

    # MLflow: one experiment, one parent run, a child per mechanism; every model registered, and the
    # champion alias on the version with the best validation top-1 (the task's champion metric).
    check = """
import json, mlflow
from mlflow import MlflowClient
c = MlflowClient()
exp = c.get_experiment_by_name("copy_rules")
runs = c.search_runs([exp.experiment_id])
children = {r.data.tags.get("mechanism"): r.data.tags.get("mlflow.parentRunId") for r in runs
            if r.data.tags.get("mechanism")}
bases = {r.data.tags["mechanism"]: r.data.tags.get("base_mechanism") for r in runs if r.data.tags.get("mechanism")}
champ = c.get_model_version_by_alias("copy_rules", "champion")
versions = c.search_model_versions("name='copy_rules'")
registered = {v.tags.get("mechanism"): v.tags.get("base_mechanism") for v in versions}
print(json.dumps({"children": children, "champion": champ.tags["mechanism"], "n_versions": len(versions),
                  "commit": champ.tags.get("git_commit"), "bases": bases, "registered": registered}))
"""
    info = json.loads(run([sys.executable, "-c", check], repo, env).strip().splitlines()[-1])
    assert set(info["children"]) == set(mechs) and len(set(info["children"].values())) == 1
    assert None not in info["children"].values()
    assert info["n_versions"] == len(mechs)
    expected_bases = {m: {**variants, **BACKBONE_ROWS}.get(m, m) for m in mechs}
    assert info["bases"] == expected_bases and info["registered"] == expected_bases
    top1 = {
        m: json.loads((repo / f"data/eval/runs/copy_rules/{m}/metrics.json").read_text())["valid"]["top1"]
        for m in mechs
    }
    assert top1[info["champion"]] == max(top1.values())
    assert "models:/copy_rules@champion" in table

    # The predict command answers raw text with a checkpoint directly, a variant's too (its model.pt
    # says what to build), as its evaluate stage did.
    for mech in ("copynet", "copynet_transformer", "pointer_generator_bart"):
        src = (repo / f"data/eval/runs/copy_rules/{mech}/predictions/test.jsonl").read_text().splitlines()[0]
        line = " ".join(json.loads(src)["src"])
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "pipeline.serving.predict",
                "--checkpoint",
                f"data/checkpoints/copy_rules/{mech}",
                "--task",
                "copy_rules",
            ],
            input=line + "\n",
            cwd=repo,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert proc.stdout.strip() == " ".join(json.loads(src)["pred"])

    # A second repro has nothing to do.
    assert changed_stages(repo, env) == set()
    out = run(["dvc", "repro"], repo, env)
    assert "Running stage" not in out

    # Commit the run (dvc.lock, metrics and curves are git-tracked; data goes to the DVC cache).
    run(["git", "add", "-A"], repo, env)
    run(["git", "commit", "-qm", "repro"], repo, env)

    # Every stage again with the same inputs: every output the same bytes, so dvc.lock, the metrics
    # files, the learning curves and the comparison are unchanged and git has nothing to commit
    # (run ids, registry versions and tokens/s live in MLflow and the untracked train state).
    out = run(["scripts/with_prefect_server.sh", "dvc", "repro", "-f"], repo, env, timeout=1200)
    assert len(re.findall(r"Running stage '([^']+)'", out)) == 1 + 1 + 1 + 2 * len(mechs) + 1
    assert run(["git", "status", "--porcelain"], repo, env).strip() == ""

    # The default remote (a directory beside the repository) moves prepared data between machines.
    run(["dvc", "push"], repo, env)
    manifest = (repo / "data/shards/copy_rules/test/manifest.json").read_text()
    shutil.rmtree(repo / "data/shards/copy_rules")
    shutil.rmtree(repo / ".dvc/cache")
    run(["dvc", "pull"], repo, env)
    assert (repo / "data/shards/copy_rules/test/manifest.json").read_text() == manifest
    assert (repo.parent / "copyseq-dvc-remote").is_dir()

    # Changing train.* rewrites every row's settings file (the settings stage), which makes every row's
    # train and evaluate stages stale, and nothing else: not prepare, vocab or compare.
    params = yaml.safe_load((repo / "params.yaml").read_text())
    params["train"]["epochs"] = 1
    (repo / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    assert changed_stages(repo, env) == {"settings"}
    run(["dvc", "repro", "settings"], repo, env)
    assert changed_stages(repo, env) == {f"{stage}@copy_rules-{m}" for stage in ("train", "evaluate") for m in mechs}
    run(["git", "checkout", "params.yaml", "dvc.lock", "data/settings"], repo, env)
    assert changed_stages(repo, env) == set()

    # One row's settings (task_settings.<task>.mechanisms.<row>) rerun that row alone, and the comparison
    # (a mechanism's entry also reaches its variants, a variant's only itself).
    params = yaml.safe_load((repo / "params.yaml").read_text())
    entries = params["task_settings"]["copy_rules"].setdefault("mechanisms", {})
    entries.setdefault("wean", {}).setdefault("train", {})["epochs"] = 1
    entries.setdefault("copynet_transformer", {}).setdefault("train", {})["epochs"] = 1
    (repo / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    run(["dvc", "repro", "settings"], repo, env)
    rows = ("wean", "copynet_transformer")
    assert changed_stages(repo, env) == {f"{s}@copy_rules-{r}" for s in ("train", "evaluate") for r in rows} | {
        "compare"
    }
    run(["git", "checkout", "params.yaml", "dvc.lock", "data/settings"], repo, env)
    assert changed_stages(repo, env) == set()

    # A row on a backbone new to the task: the vocab stage reruns (it writes that backbone's folder), and
    # of the trained rows none, as each row depends on the record of what it reads there, not on the folder.
    params = yaml.safe_load((repo / "params.yaml").read_text())
    params["variants"]["copynet_t5"]["model"]["backbone"] = str(repo.parent / "tiny_t5")
    params["mechanisms"].append("copynet_t5")
    (repo / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    out = run(["scripts/with_prefect_server.sh", "dvc", "repro", "settings", "vocab@copy_rules"], repo, env)
    assert "Running stage 'vocab@copy_rules'" in out
    assert changed_stages(repo, env) == {f"{s}@copy_rules-copynet_t5" for s in ("train", "evaluate")} | {"compare"}
    run(["git", "checkout", "params.yaml", "dvc.lock", "data/settings"], repo, env)
    (repo / "data/settings/copy_rules/copynet_t5.json").unlink()  # the new row's settings file, untracked
    run(["dvc", "checkout", "vocab@copy_rules"], repo, env)
    assert changed_stages(repo, env) == set()

    # One train stage on two machines (docs/training.md): node 0 runs `dvc repro` of the stage (it owns
    # dvc.lock, the outputs and the MLflow run); node 1 is a clone of the repository that pulled the
    # vocab stage's output from the DVC remote and joins with `python -m pipeline.stages.train_node`.
    # Two torchrun agents on loopback, one process each (DDP on gloo); node 1 writes nothing.
    params = yaml.safe_load((repo / "params.yaml").read_text())
    params["train"].update(nproc=1, nnodes=2, rdzv_endpoint=f"127.0.0.1:{free_port()}", rdzv_timeout=300)
    (repo / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    node1 = repo.parent / "node1"
    run(["git", "clone", "-q", str(repo), str(node1)], repo.parent, env)
    shutil.copy2(repo / "params.yaml", node1 / "params.yaml")  # the same params (a user commits and pulls them)
    run(["dvc", "pull", "vocab@copy_rules"], node1, env)
    copynet_runs = len(mechanism_runs(repo, env, "copynet"))
    joined = subprocess.Popen(
        [sys.executable, "-m", "pipeline.stages.train_node", "--task", "copy_rules", "--mechanism", "copynet"],
        cwd=node1,
        env=env,  # the same MLflow store as node 0, as on two machines tracking into one server
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        out = run(
            ["scripts/with_prefect_server.sh", "dvc", "repro", "train@copy_rules-copynet"], repo, env, timeout=900
        )
        node1_out = joined.communicate(timeout=300)[0]
    finally:
        joined.kill()
    assert joined.returncode == 0, node1_out[-12000:]
    assert re.findall(r"Running stage '([^']+)'", out) == ["settings", "train@copy_rules-copynet"]
    history = json.loads((repo / "data/checkpoints/copy_rules/copynet/history.json").read_text())
    assert [r["processes"] for r in history] == [2] * (1 + params_used["train"]["epochs"])  # step 0 + epochs
    assert (repo / "data/checkpoints/copy_rules/copynet/model.pt").exists()
    assert "train@copy_rules-copynet" not in changed_stages(repo, env)  # node 0's dvc.lock has the run
    assert len(mechanism_runs(repo, env, "copynet")) == copynet_runs + 1  # one MLflow run, node 0's
    # Node 1: no stage output, train state, MLflow store or dvc.lock change; only the params it was given
    # and the pulled vocabularies (the data/ files git does not track).
    tracked = set(run(["git", "ls-files", "data"], node1, env).split())
    written = {p.relative_to(node1).as_posix() for p in (node1 / "data").rglob("*") if p.is_file()} - tracked
    assert written and all(p.startswith("data/vocab/copy_rules/") for p in written), sorted(written)
    assert not (node1 / "mlflow.db").exists() and not (node1 / "mlruns").exists()
    assert run(["git", "status", "--porcelain"], node1, env).split() == ["M", "params.yaml"]
    run(["git", "checkout", "params.yaml", "dvc.lock", "data/settings"], repo, env)
    run(["dvc", "checkout"], repo, env)

    # A DVC experiment with a changed param, then compare it with `dvc metrics diff` / `exp show`.
    # One row's stages as the target (the whole matrix again would add ~18 stage runs to CI, and
    # `dvc repro -f` above already ran every stage twice).
    target = "evaluate@copy_rules-copynet"
    cmd = ["scripts/with_prefect_server.sh", "dvc", "exp", "run", "-S", "train.epochs=1", target]
    out = run(cmd, repo, env, timeout=900)
    assert re.findall(r"Running stage '([^']+)'", out) == ["settings", "train@copy_rules-copynet", target]
    diff = run(["dvc", "metrics", "diff", "--all"], repo, env)
    assert "test.top1" in diff and "copynet/metrics.json" in diff
    shown = run(["dvc", "exp", "show", "--no-pager", "--csv"], repo, env)
    assert "train.epochs" in shown and "test.top1" in shown
