#!/usr/bin/env bash
# Gigaword learning curve by training size (issue 14): the `gigaword` task, `cpu` preset, trained on
# the first N pairs of ../shared/data/gigaword_train_20k for each N given (all: the 20,213), each as
# a DVC experiment in a separate clone, so the main workspace keeps the default run. The vocabularies
# are built on all 20,213 pairs at every size (the vocab stage reads the whole split; only the
# training pairs change). Valid = DUC 2003 (75-byte recall), test = Rush's test set (full-length F1).
# Usage: scripts/gigaword_curve.sh DIR [N ...]   (default: 1000 5000 all)
# Writes DIR/curve/<N>/<mechanism>.json (each evaluate stage's metrics.json) and <N>/gigaword.md;
# then: python scripts/learning_curve.py DIR/curve
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
dir="${1:?usage: scripts/gigaword_curve.sh DIR [N ...]}"; shift
sizes=("$@"); [ ${#sizes[@]} -gt 0 ] || sizes=(1000 5000 all)
mechanisms="${MECHANISMS:-[rnnsearch,copynet,read_again,pointer_generator]}"
[ -d "$dir/.git" ] || git clone -q "$root" "$dir"
[ -e "$dir/.venv" ] || ln -s "$root/.venv" "$dir/.venv"
cd "$dir"
.venv/bin/python -m pipeline.tasks enable gigaword --preset cpu >/dev/null
for n in "${sizes[@]}"; do
  limit="$n"; [ "$n" = all ] && limit=null
  scripts/with_prefect_server.sh dvc exp run -n "gigaword-$n" -S "mechanisms=$mechanisms" \
    -S "++task_settings.gigaword.presets.cpu.train.max_train_examples=$limit"
  mkdir -p "curve/$n"
  for m in data/eval/runs/gigaword/*/metrics.json; do cp "$m" "curve/$n/$(basename "$(dirname "$m")").json"; done
  cp data/eval/comparison/gigaword.md "curve/$n/gigaword.md"
done
