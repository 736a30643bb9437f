#!/usr/bin/env bash
# Gigaword learning curve by training size: the `gigaword` task, `cpu` preset, trained on
# the first N pairs of ../shared/data/gigaword_train_20k for each N given (all: the 20,213), each as
# a DVC experiment in a separate clone, so the main workspace keeps the default run. The vocabularies
# are built on all 20,213 pairs at every size (the vocab stage reads the whole split; only the
# training pairs change). Valid = DUC 2003 (75-byte recall), test = Rush's test set (full-length F1).
# Usage: scripts/gigaword_curve.sh DIR [N[:EPOCHS] ...]   (default: all 5000:12 1000:30)
#   EPOCHS: train.epochs at that size (default: the preset's 6); the best validation epoch is kept.
#   EXTRA_SETS: more `dvc exp run -S` settings for every size (space-separated).
# Writes DIR/curve/<N>/gigaword.metrics.json (every row's metrics: the mechanisms and Lead-8) and
# <N>/gigaword.md (the comparison page).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
dir="${1:?usage: scripts/gigaword_curve.sh DIR [N ...]}"; shift
sizes=("$@"); [ ${#sizes[@]} -gt 0 ] || sizes=(all 5000:12 1000:30)
mechanisms="${MECHANISMS:-[rnnsearch,copynet,read_again,pointer_generator]}"
[ -d "$dir/.git" ] || git clone -q "$root" "$dir"
[ -e "$dir/.venv" ] || ln -s "$root/.venv" "$dir/.venv"
cd "$dir"
.venv/bin/python -m pipeline.data.tasks enable gigaword --preset cpu >/dev/null
for size in "${sizes[@]}"; do
  n="${size%%:*}"; limit="$n"; [ "$n" = all ] && limit=null
  sets=(-S "mechanisms=$mechanisms" -S "++task_settings.gigaword.presets.cpu.train.max_train_examples=$limit")
  [ "$size" = "$n" ] || sets+=(-S "++task_settings.gigaword.presets.cpu.train.epochs=${size#*:}")
  for s in ${EXTRA_SETS:-}; do sets+=(-S "$s"); done
  scripts/with_prefect_server.sh dvc exp run -n "gigaword-$n" "${sets[@]}"
  mkdir -p "curve/$n"
  cp data/eval/comparison/gigaword.md data/eval/comparison/gigaword.metrics.json "curve/$n/"
done
