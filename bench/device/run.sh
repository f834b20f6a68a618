#!/usr/bin/env bash
# Run ON a lent GPU machine, from the repo root, after bench/device/prepare.sh here:
#   run(command="bash bench/device/run.sh", carry=[".device"], timeout_s=560)
# One call, about 5 minutes: installs the carried wheels, prints the GPU, runs
# bench/bench_gpu_embed.py (plain sentence-transformers fp32/fp16 against the library
# pipeline fp16/fp32, vectors compared, then a real CUDA out-of-memory back-off), and
# leaves its log and JSON under $OUT. Env: N (chunks, default 60000), REPEATS (default 2),
# LIMIT (seconds for the benchmark, default 480).
set -uo pipefail
OUT="${OUT:-/tmp/ck-device-out}"
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/ck-site \
  .device/whl/*.whl || { echo "installing the carried wheels failed"; exit 1; }
export PYTHONPATH="/tmp/ck-site:$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 \
  TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
rm -rf /tmp/ck-peps && mkdir -p /tmp/ck-peps && tar -xzf .device/peps.tar.gz -C /tmp/ck-peps
{
  date -u
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv 2>&1
  nproc
  python3 -c "import sys, torch, sentence_transformers as st, transformers as tf, tokenizers as tk, numpy as np, pydantic
print(sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.is_available(),
      'st', st.__version__, 'transformers', tf.__version__, 'tokenizers', tk.__version__, 'numpy', np.__version__,
      'pydantic', pydantic.__version__)"
} 2>&1 | tee "$OUT/machine.txt"
timeout "${LIMIT:-480}" python3 bench/bench_gpu_embed.py --model .device/model --peps /tmp/ck-peps \
  --n "${N:-60000}" --repeats "${REPEATS:-2}" --oom-check --json "$OUT/gpu_embed.json" 2>&1 | tee "$OUT/gpu_embed.log"
echo "bench exit status ${PIPESTATUS[0]}"
