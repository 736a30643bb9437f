#!/usr/bin/env bash
# The GPU proof in one run (benchmarks/README.md, "On a GPU"): the device tests on CUDA (every mechanism's
# contract on the recurrent and the Transformer decoder, the backbone heads on tiny local backbones,
# deterministic training, bf16, update_freq, averaging, CUDA graphs), then from
# benchmarks/bench_mechanisms.py CUDA graphs against eager training (--modes two-phase graphed) and the
# Transformer-decoder rows, and the heads on a BART-base-shaped backbone (benchmarks/bench_backbones.py).
# Logs and JSON go to $OUT
# (default out/gpu). The GPU machine lacks the project's pinned transformers: its wheels travel in
# .whl/ (git-ignored; benchmarks/README.md says which) and install to /tmp/site.
#
#     benchmarks/gpu_proof.sh              # about 8 minutes on an H100 (benchmarks/README.md)
set -u
OUT=${OUT:-out/gpu}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
PY=${PY:-python3}
if [ -d .whl ]; then
    $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl &&
        export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
nvidia-smi >"$OUT/nvidia-smi.txt" 2>&1
$PY -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"
echo "== tests on CUDA"
timeout ${TEST_TIMEOUT:-200} $PY -m pytest -q -m device --device cuda -p no:cacheprovider --maxfail=15 \
    tests/models/test_graphed.py tests/pipeline/runtime/test_device.py tests/models/test_contract.py \
    tests/pipeline/decoding/test_search.py tests/models/test_transformer_decoder.py >"$OUT/pytest.log" 2>&1
echo "pytest exit $?"
grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/pytest.log" | tail -25
echo "== CUDA graphs"
timeout ${GRAPHS_TIMEOUT:-120} $PY -m benchmarks.bench_mechanisms --device cuda --sections train --data gigaword --modes two-phase graphed \
    ${GRAPHS_ARGS:---mechanisms copynet pointer_generator rnnsearch read_again --vocabs 50000 --amp off bf16 --max-tokens 16000 --budget-lengths varied --batches 8 --steps 16 --warmup 0 --deadline-s 100} \
    --json "$OUT/graphs.json" >"$OUT/graphs.md" 2>&1
echo "graphs exit $?"
grep -v Warning "$OUT/graphs.md" | tail -22
echo "== Transformer-decoder rows"
timeout ${DEVICE_TIMEOUT:-105} $PY -m benchmarks.bench_mechanisms --device cuda --sections train --data gigaword \
    ${DEVICE_ARGS:---decoders transformer --sizes 150x300 512x512 --vocabs 16000 50000 --amp off bf16 --batch 64 --max-tokens 16000 --warmup 2 --steps 6 --deadline-s 90} \
    --json "$OUT/device.json" >"$OUT/transformer_rows.md" 2>&1
echo "transformer rows exit $?"
tail -5 "$OUT/transformer_rows.md"
echo "== heads on a BART-base-shaped backbone"
timeout ${BACKBONE_TIMEOUT:-90} $PY -m benchmarks.bench_backbones ${BACKBONE_ARGS:---preset bart-base --device cuda --precisions fp32 bf16 --batch 64 --max-tokens 16000 --skip-decode --deadline-s 70} \
    --json "$OUT/backbones.json" >"$OUT/bench_backbones.md" 2>&1
echo "bench_backbones exit $?"
tail -14 "$OUT/bench_backbones.md"
