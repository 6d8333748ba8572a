"""The catalogue of implicit triggers as a table in docs/security-model.md.

    python scripts/triggers_table.py           # rewrite the table between its markers
    python scripts/triggers_table.py --check   # exit 1 when the table is stale

Each row: the tool, its files (where they are), what fires it, and its status:
"proven" with the case of tests/exec/test_triggers.py, or what the entry says
instead (covered by another test, not runnable here and why).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CATALOGUE = ROOT / "src/agent_sandbox/triggers.json"
DOC = ROOT / "docs/security-model.md"
BEGIN = "<!-- triggers table: scripts/triggers_table.py -->"
END = "<!-- end of the triggers table -->"
WHERE = {"any": "any depth", "home": "home", "git-dir": "every git folder",
         "python": "Python start-up", "cwd-module": "imported from the working folder",
         "env": "the file the variable names", "env-path": "relative PATH entries",
         "git-user-key": "the user's git configuration",
         "named": "judged by what surrounds it when written"}


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def table() -> str:
    rows = ["| tool | files | fires on | status |", "| --- | --- | --- | --- |"]
    for entry in json.loads(CATALOGUE.read_text())["entries"]:
        files = ", ".join(f"`{p}`{'/' if k == 'd' else ''} ({WHERE[w]})"
                          for p, k, w in entry["files"])
        proof = entry["proof"]
        status = proof if ":" in proof or " " in proof else \
            f"proven (`test_triggers.py` `{proof}`)"
        rows.append(f"| {_cell(entry['tool'])} | {_cell(files)} | {_cell(entry['fires_on'])} "
                    f"| {_cell(status)} |")
    return "\n".join(rows)


def main(argv: list[str]) -> int:
    doc = DOC.read_text()
    head, _, rest = doc.partition(BEGIN)
    _, _, tail = rest.partition(END)
    new = f"{head}{BEGIN}\n{table()}\n{END}{tail}"
    if "--check" in argv:
        if BEGIN not in doc or END not in doc or new != doc:
            print(f"{DOC.relative_to(ROOT)}: the triggers table is stale; run "
                  "python scripts/triggers_table.py", file=sys.stderr)
            return 1
        return 0
    DOC.write_text(new)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
