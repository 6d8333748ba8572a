# Prints, as JSON, the resolved form of each path read from standard input (a
# JSON object {"read": [...], "write": [...]}) that resolves somewhere else.
# argv[1]: a folder the paths live under (empty on a real host). Reads only.
import json
import os
import sys

root = sys.argv[1].rstrip("/") if len(sys.argv) > 1 else ""
denied = json.load(sys.stdin)
out = {}
for path in sorted({p for kind in ("read", "write") for p in denied.get(kind, [])}):
    real = os.path.realpath(root + path)
    if root and (real == root or real.startswith(root + "/")):
        real = real[len(root):] or "/"
    if real != path:
        out[path] = real
json.dump(out, sys.stdout, sort_keys=True)
