#!/usr/bin/env bash
# Ansible collections the roles, playbooks and Molecule scenarios use, unpacked
# from the `ansible` community wheel on PyPI into .collections/ (Galaxy may be
# unreachable; the wheel carries the same collections). Idempotent and cached:
# the wheel is downloaded once into .cache/, and nothing is unpacked when every
# collection is already present for this version.
set -euo pipefail
cd "$(dirname "$0")/../.."

VERSION="${AGENT_SANDBOX_ANSIBLE_BUNDLE:-12.3.0}"
DEST=.collections/ansible_collections
COLLECTIONS=(containers/podman community/general ansible/posix community/hashi_vault
             kubernetes/core ansible/windows community/windows)
stamp=.collections/.bundle-version

complete=1
for c in "${COLLECTIONS[@]}"; do [ -f "$DEST/$c/MANIFEST.json" ] || complete=0; done
if [ "$complete" = 1 ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$VERSION" ]; then
  exit 0
fi

mkdir -p .cache/wheels "$DEST"
wheel=$(ls .cache/wheels/ansible-"$VERSION"-*.whl 2>/dev/null | head -n1 || true)
if [ -z "$wheel" ]; then
  echo "bootstrap: downloading the ansible $VERSION collection bundle"
  .venv/bin/python -m pip download -q --no-deps --only-binary=:all: -d .cache/wheels "ansible==$VERSION"
  wheel=$(ls .cache/wheels/ansible-"$VERSION"-*.whl | head -n1)
fi

echo "bootstrap: unpacking collections ${COLLECTIONS[*]}"
.venv/bin/python - "$wheel" "$DEST" "${COLLECTIONS[@]}" <<'PY'
import shutil
import sys
import zipfile
from pathlib import Path

wheel, dest, *wanted = sys.argv[1:]
dest_path = Path(dest).resolve()
prefixes = [f"ansible_collections/{c}/" for c in wanted]
for c in wanted:
    shutil.rmtree(dest_path / c, ignore_errors=True)
with zipfile.ZipFile(wheel) as zf:
    for info in zf.infolist():
        name = info.filename
        if info.is_dir() or not any(name.startswith(p) for p in prefixes):
            continue
        target = (dest_path / name[len("ansible_collections/"):]).resolve()
        if not str(target).startswith(str(dest_path) + "/"):
            raise SystemExit(f"refusing to unpack {name!r} outside {dest_path}")
        target.parent.mkdir(parents=True, exist_ok=True)
        with zf.open(info) as src, open(target, "wb") as out:
            shutil.copyfileobj(src, out)
        mode = (info.external_attr >> 16) & 0o777
        if mode:
            target.chmod(mode)
PY
echo "$VERSION" > "$stamp"
