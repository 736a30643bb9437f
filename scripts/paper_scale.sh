#!/usr/bin/env bash
# CopyNet section 5.1 at paper scale (200 rules x 200 instances, emb 150, hidden 300, beam 10) as a
# DVC experiment in a separate clone, so the main workspace keeps the default run.
# Usage: scripts/paper_scale.sh DIR [extra `dvc exp run` args, e.g. -S train.epochs=10]
# Results: DIR/data/eval/comparison/copy_rules.md, `dvc exp show` and MLflow (DIR/mlflow.db).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
dir="${1:?usage: scripts/paper_scale.sh DIR [dvc exp run args]}"; shift
[ -d "$dir/.git" ] || git clone -q "$root" "$dir"
[ -e "$dir/.venv" ] || ln -s "$root/.venv" "$dir/.venv"
cd "$dir"
exec scripts/with_prefect_server.sh dvc exp run -n paper-scale \
  -S prepare.copy_rules.n_rules=200 -S prepare.copy_rules.instances_per_rule=200 \
  -S prepare.copy_rules.unseen_per_rule=20 \
  -S model.emb=150 -S model.hidden=300 \
  -S train.batch_size=64 -S train.epochs=6 \
  -S evaluate.beam_size=10 "$@"
