#!/usr/bin/env bash
# The GPU proof in one run (docs/training.md, "On a GPU"): the model and training-engine tests on
# CUDA, then benchmarks/bench_device.py (training throughput and memory of every mechanism, the
# compiled recurrence, decoding) and benchmarks/bench_onmt_peer.py (OpenNMT-py's copy_attn, the peer
# figure). Logs and JSON go to $OUT (default out/gpu). On a machine without the project's other
# dependencies, OpenNMT-py and what it needs travel as wheels in .whl/ (benchmarks/README.md).
#
#     benchmarks/gpu_proof.sh              # about 5 minutes on an H100 (measured 2026-11-26: tests 35 s,
#                                          # bench_device 117 s, OpenNMT peer 111 s)
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
echo "== tests on CUDA"
timeout 150 $PY -m pytest -q -m device --device cuda -p no:cacheprovider \
    tests/models/test_contract.py tests/pipeline/decoding/test_search.py tests/pipeline/runtime/test_device.py >"$OUT/pytest.log" 2>&1
echo "pytest exit $?"
tail -15 "$OUT/pytest.log"
echo "== bench_device"
timeout 360 $PY benchmarks/bench_device.py --stepwise --warmup 2 --steps 8 --deadline-s 300 --json "$OUT/device.json" >"$OUT/bench_device.md" 2>&1
echo "bench_device exit $?"
echo "== OpenNMT-py peer"
timeout 200 $PY benchmarks/bench_onmt_peer.py --device cuda --precision fp32 bf16 --warmup 10 --steps 60 --timeout 55 \
    --json "$OUT/onmt_peer.json" >"$OUT/onmt.log" 2>&1
echo "onmt exit $?"
tail -12 "$OUT/onmt.log"
grep -v "^|" "$OUT/bench_device.md" | tail -5
grep -A40 "## compile" "$OUT/bench_device.md" | head -60
