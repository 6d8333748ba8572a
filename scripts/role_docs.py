#!/usr/bin/env python3
"""Generate the "Role variables" section of each role's README from its
``meta/argument_specs.yml`` (the single source of truth for role variables).

    python scripts/role_docs.py            # rewrite the sections that are stale
    python scripts/role_docs.py --check    # exit 1 and name every stale README

Only the section between ``## Role variables`` and the next ``## `` heading is
generated; the rest of each README is written by hand. It never touches
anything outside ``roles/*/README.md``.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
HEADING = "## Role variables"
NOTE = ("Generated from `meta/argument_specs.yml` by `scripts/role_docs.py` "
        "(`make role-docs`); edit the specs, not this table.")


def _inline(text: str) -> str:
    """Ansible doc markup to Markdown: C(x) and I(x) as code, B(x) as bold."""
    text = re.sub(r"\b[CIV]\(([^)]*)\)", r"`\1`", text)
    text = re.sub(r"\bB\(([^)]*)\)", r"**\1**", text)
    return " ".join(text.split()).replace("|", "\\|")


def _default(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, str) and "\n" in value:
        shown = value.strip().splitlines()[-1]
        return f"`{shown}` (and comments)" if value.lstrip().startswith("#") else f"`{shown}` …"
    if value == "":
        return '`""`'
    text = value if isinstance(value, str) else yaml.safe_dump(
        value, default_flow_style=True, width=10_000).strip().removesuffix("...").strip()
    return "`" + str(text).replace("|", "\\|") + "`"


def variables_section(specs: dict[str, object]) -> str:
    main = specs["argument_specs"]["main"]  # type: ignore[index]
    rows = ["| variable | type | default | description |", "| --- | --- | --- | --- |"]
    for name, opt in main.get("options", {}).items():
        kind = opt.get("type", "str")
        if kind == "list" and opt.get("elements"):
            kind = f"list of {opt['elements']}"
        desc = opt.get("description", "")
        desc = " ".join(desc) if isinstance(desc, list) else str(desc)
        if opt.get("choices"):
            desc += " One of " + ", ".join(f"`{c}`" for c in opt["choices"]) + "."
        rows.append(f"| `{name}` | {kind} | {_default(opt.get('default'))} | {_inline(desc)} |")
    return f"{HEADING}\n\n{NOTE}\n\n" + "\n".join(rows) + "\n"


def rendered_readme(role: Path) -> str:
    specs = yaml.safe_load((role / "meta" / "argument_specs.yml").read_text())
    readme = (role / "README.md").read_text()
    section = variables_section(specs)
    start = readme.find(HEADING + "\n")
    if start < 0:
        raise SystemExit(f"{role}/README.md has no '{HEADING}' heading")
    nxt = readme.find("\n## ", start + len(HEADING))
    tail = readme[nxt + 1:] if nxt >= 0 else ""
    return readme[:start] + section + ("\n" + tail if tail else "")


def roles(root: Path = ROOT) -> list[Path]:
    return sorted(p.parent.parent for p in (root / "roles").glob("*/meta/argument_specs.yml"))


def stale(root: Path = ROOT) -> list[Path]:
    return [r / "README.md" for r in roles(root)
            if rendered_readme(r) != (r / "README.md").read_text()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only report stale READMEs")
    parser.add_argument("--root", type=Path, default=ROOT, help="the repository")
    args = parser.parse_args(argv)
    if args.check:
        bad = stale(args.root)
        for path in bad:
            print(f"stale: {path} (run scripts/role_docs.py)", file=sys.stderr)
        return 1 if bad else 0
    for role in roles(args.root):
        text = rendered_readme(role)
        if text != (role / "README.md").read_text():
            (role / "README.md").write_text(text)
            print(f"wrote {role / 'README.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
