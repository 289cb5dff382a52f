#!/usr/bin/env bash
# The GPU check of a commit, as one command on a CUDA machine (run from the repository root):
#
#   bash benchmarks/gpu_check.sh [OUT]
#
# 1. the `gpu`-marked tests (CUDA training, fp16/bf16 AMP, fused Adam, channels-last, the
#    NCCL world-size-1 DDP run, no host-device syncs per step, GPU scorers) and the
#    collapse tests, on the GPU;
# 2. benchmarks/bench_gpu.py in full (bare step, fit throughput, the defaults on digits
#    on the GPU and on the same machine's CPU, the CPU round trip), saved as
#    results/gpu.{md,json,png} and copied to OUT.
#
# OUT receives checks.log, bench_gpu.log, gpu.{md,json,png} and rt/ (the pickle, its inputs
# and the GPU's embeddings: `python benchmarks/bench_gpu.py --check-pickle OUT/rt` repeats the
# round trip on another machine).
# Each step has its own time limit, so one that hangs cannot take the others with it.
# Where skdml's dependencies are missing (a bare CUDA image), carry them as wheels in .whl/
# (pymanopt; pytorch-metric-learning for the loss oracle): they are installed first.
set -uo pipefail
OUT=${1:-${OUT:-/tmp/gpu_check}}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
if compgen -G ".whl/*.whl" > /dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl || exit 1
    export PYTHONPATH=/tmp/site
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 -c "import skdml; skdml.show_versions()" 2>&1 | tee "$OUT/checks.log"

GPU_TEST_FILES="tests/training/test_averaging.py tests/losses/test_losses.py
    tests/scale/test_ddp.py tests/test_metrics.py tests/deep/test_estimator.py
    tests/deep/test_deml_network.py"
# shellcheck disable=SC2086
timeout 240 python3 -m pytest -p no:cacheprovider -q -rs -m gpu $GPU_TEST_FILES \
    2>&1 | tee -a "$OUT/checks.log" | tail -25
timeout 120 python3 -m pytest -p no:cacheprovider -q tests/deep/test_collapse.py \
    2>&1 | tee -a "$OUT/checks.log" | tail -5

timeout 330 python3 benchmarks/bench_gpu.py --pickle-out "$OUT/rt" 2>&1 \
    | tee "$OUT/bench_gpu.log" | grep -v "^$" | tail -60
cp benchmarks/results/gpu.md benchmarks/results/gpu.json benchmarks/results/gpu.png "$OUT/" \
    2>/dev/null
echo "gpu_check done"
