#!/usr/bin/env bash
# Installs MNN-LLM into the pocket cache, once: a private Python venv with the PyPI wheel
# mnn==3.6.1 (its MNN.llm module runs LLMs on the CPU) and MNN's exporter (PyPI llmexport
# 0.0.5, the release before the wheel's: a newer exporter emits ops the 3.6.1 engine lacks)
# with torch and transformers, which the export needs. Opt-in: compare/setup.sh and CI do not
# run it (see the README's compare section). A later run finds VENV_INFO and returns at once.
#
#   bash compare/provision-mnn.sh               the venv (<cache>/mnn/venv)
#   bash compare/provision-mnn.sh MODEL.gguf... also export each GGUF to MNN's format
#                                               (<cache>/mnn/models/, as pocket compare would)
#
# Cost: about 3.3 GB downloaded and 5.7 GB on disk, about 2 minutes (117 s on a 2-core VM).
# PyPI's torch is its CUDA build: the wheel (540 MB) does not import without its nvidia-*
# libraries (~2.3 GB), though nothing here runs on a GPU (the export runs on the CPU); only
# PyPI is reachable, so there is no CPU-only torch to take.
# The export of an MNN-Pocket model takes 1-2 minutes (it also checks that every code is kept).
#
# MNN's tools import MNN/tools/utils/log.py, which pip-installs aliyun-log-python-sdk into
# whatever pip is on PATH when `import aliyun.log` fails, and then sends usage logs. A
# stand-in aliyun.log package in the venv makes that import succeed and the logger's own
# import fail, so MNN runs without a logger: nothing is installed behind our back or sent.
#
#   POCKET_CACHE   cache directory (default ~/.cache/pocket)
set -euo pipefail
. "$(dirname "$0")/provision-common.sh" mnn

mnn_version="3.6.1"
llmexport_version="0.0.5"
torch_version="2.15.0"
transformers_version="5.8.1"
dir="$CACHE/mnn"
venv="$dir/venv"
py="$venv/bin/python"

# --- the venv --------------------------------------------------------------------------------
if [ -f "$dir/VENV_INFO" ] && [ -x "$py" ]; then
  say "already installed: $(cat "$dir/VENV_INFO")"
else
  command -v python3 >/dev/null || { say "python3 not found"; exit 1; }
  python3 -c 'import venv, ensurepip' 2>/dev/null \
    || { say "python3 has no venv/ensurepip: install python3-venv"; exit 1; }
  # The wheel is built for CPython 3.8-3.14 on x86-64 and aarch64 Linux, and macOS.
  mkdir -p "$dir"
  rm -f "$dir/VENV_INFO"
  [ -x "$py" ] || python3 -m venv "$venv"
  pip=("$py" -m pip --disable-pip-version-check)
  say "installing mnn==$mnn_version, torch==$torch_version (with its CUDA libraries: ~3 GB)," \
    "transformers==$transformers_version, llmexport==$llmexport_version into $venv"
  "${pip[@]}" install --quiet "mnn==$mnn_version" "torch==$torch_version" \
    "transformers==$transformers_version" yaspin sentencepiece onnx onnxslim gguf safetensors
  # llmexport lists MNN (any), torch and onnxruntime: the first two are pinned above, and
  # onnxruntime only serves its --test, so it is installed without its dependencies.
  "${pip[@]}" install --quiet --no-deps "llmexport==$llmexport_version"
  # The stand-in for aliyun-log-python-sdk (see the header).
  site="$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  mkdir -p "$site/aliyun/log"
  echo '"""pocket: a stand-in, so that MNN never installs its telemetry client."""' \
    > "$site/aliyun/__init__.py"
  cat > "$site/aliyun/log/__init__.py" <<'EOF'
"""pocket: a stand-in for aliyun-log-python-sdk. MNN/tools/utils/log.py pip-installs the SDK
when `import aliyun.log` fails and then sends usage logs; with this module the import works,
its `from aliyun.log import LogClient` raises ImportError, and MNN's tools run without a
logger (they catch that), so nothing is installed or sent."""
EOF
  # The check: MNN's converter module imports with no logger, and MNN.llm is there.
  "$py" - <<'EOF'
import importlib.util
from MNN.tools import mnnconvert
import MNN.llm, torch, transformers, gguf, safetensors  # noqa: F401
assert mnnconvert.mnn_logger is None, "MNN's telemetry logger is active"
# llmexport runs as a script (its modules import `utils` from its own directory).
assert importlib.util.find_spec("llmexport") is not None, "llmexport is not installed"
EOF
  "$py" -c "import MNN, torch, transformers
print(f'MNN {MNN.version()} (PyPI mnn wheel), llmexport $llmexport_version, torch {torch.__version__}, transformers {transformers.__version__}, python $("$py" -c 'import platform; print(platform.python_version())'), $(uname -sm)')" \
    | tail -n 1 > "$dir/VENV_INFO.tmp"  # MNN prints a line of its own on import
  mv "$dir/VENV_INFO.tmp" "$dir/VENV_INFO"
  say "ok: $(cat "$dir/VENV_INFO")"
fi

# --- models ----------------------------------------------------------------------------------
# Each GGUF is exported into <cache>/mnn/models/<name>-<size>/ (pocket compare's key: the
# file name and its size), the directory replaced only once complete.
for gguf in "$@"; do
  [ -f "$gguf" ] || { say "$gguf: no such file"; exit 1; }
  name="$(basename "$gguf" .gguf)-$(stat -c %s "$gguf" 2>/dev/null || stat -f %z "$gguf")"
  out="$dir/models/$name"
  if [ -f "$out/EXPORT_INFO" ]; then
    say "already exported: $out"
    continue
  fi
  mkdir -p "$dir/models"
  say "exporting $gguf to $out"
  start=$(date +%s)
  "$py" "$here/mnn_export.py" --gguf "$gguf" --out "$out"
  say "exported in $(( $(date +%s) - start )) s: $(cat "$out/EXPORT_INFO")"
done
