#!/usr/bin/env bash
# Client libraries written by others, against the real `kura serve` (debug build). Installs
# them into a local virtual environment (.venv) on first use.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/python ]; then
    python3 -m venv .venv || { apt-get install -y python3-venv && python3 -m venv .venv; }
fi
.venv/bin/pip install -q -r tests/clients/requirements.txt
cargo build -p kura
KURA_BIN="$PWD/target/debug/kura" .venv/bin/python -m pytest -q tests/clients
