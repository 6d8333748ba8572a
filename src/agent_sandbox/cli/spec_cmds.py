"""``sandbox validate``, ``sandbox render`` and ``sandbox schema``."""

from __future__ import annotations

import json
import os
from typing import Annotated

import typer

from agent_sandbox.errors import SpecError


def _problems_out(exc: SpecError) -> None:
    for p in exc.problems:
        typer.echo(str(p), err=True)
    n = len(exc.problems)
    typer.echo(f"{n} problem{'s' if n != 1 else ''} found", err=True)


def validate(
    specs: Annotated[list[str], typer.Argument(help="Spec files, most managed first "
                                                    "(fleet, group, host, repository), or an "
                                                    "inventory folder (every host is checked).")],
    each: Annotated[bool, typer.Option("--each", help="Check each file on its own, "
                                                      "not as one stack of layers.")] = False,
) -> None:
    """Check spec files; print file:line:column: key: message per problem, exit 1 on any."""
    from agent_sandbox.fleet import FleetRenderer
    from agent_sandbox.spec.loader import load_layer, load_stack

    problems: list[SpecError] = []
    files = [s for s in specs if not os.path.isdir(s)]
    for folder in (s for s in specs if os.path.isdir(s)):
        try:
            fleet = FleetRenderer.from_path(folder)
            seen: set[tuple[str, ...]] = set()
            for host in fleet.inventory:
                try:
                    fleet.facts(host)
                except SpecError as exc:
                    problems.append(exc)
                key = tuple(fleet.inventory.layer_paths(host))
                if key in seen:
                    continue
                seen.add(key)
                try:
                    fleet.spec_for(host)
                except SpecError as exc:
                    problems.append(exc)
        except SpecError as exc:
            problems.append(exc)
    groups = [[f] for f in files] if each else ([files] if files else [])
    for group in groups:
        layers, errs = [], []
        for f in group:
            try:
                layers.append(load_layer(f))
            except SpecError as exc:
                errs.append(exc)
        problems.extend(errs)
        if layers and not errs:
            try:
                load_stack(layers)
            except SpecError as exc:
                problems.append(exc)
    if problems:
        merged = SpecError([p for e in problems for p in e.problems])
        # the same problem can be found through two hosts sharing a layer
        uniq = list(dict.fromkeys(merged.problems))
        _problems_out(SpecError(uniq))
        raise typer.Exit(1)
    typer.echo("ok: " + ", ".join(specs))


def render_cmd(
    spec: Annotated[str, typer.Argument(help="An inventory folder (hosts.yml + sandbox/) "
                                             "or a single spec file.")],
    host: Annotated[str, typer.Option("--host", help="Host name in the inventory.")],
    out: Annotated[str, typer.Option("--out", help="Folder to write the files and "
                                                   "manifest.json into.")],
    os_name: Annotated[str, typer.Option("--os", help="Host OS when SPEC is a file.")] = "linux",
    user: Annotated[list[str] | None,
                    typer.Option("--user", help="NAME[:HOME] when SPEC is a file.")] = None,
    repo: Annotated[list[str] | None,
                    typer.Option("--repo", help="Repository path when SPEC is a file.")] = None,
) -> None:
    """Render every artifact for one host under OUT, with OUT/manifest.json."""
    from agent_sandbox.fleet import FleetRenderer
    from agent_sandbox.inventory import HostFacts
    from agent_sandbox.render import RenderError, render, write_tree
    from agent_sandbox.spec.loader import load_spec

    try:
        if os.path.isdir(spec):
            artifacts = FleetRenderer.from_path(spec).render_host(host)
        else:
            users = []
            for u in user or []:
                name, _, home = u.partition(":")
                users.append({"name": name, "home": home or None})
            facts = HostFacts.from_vars(host, {"sandbox_os": os_name, "sandbox_users": users,
                                               "sandbox_repositories": repo or []})
            artifacts = render(load_spec(spec), facts)
    except SpecError as exc:
        _problems_out(exc)
        raise typer.Exit(1) from None
    except RenderError as exc:
        typer.echo(f"sandbox: cannot render {host}: {exc}", err=True)
        raise typer.Exit(1) from None
    try:
        path = write_tree(artifacts, out)
    except (RenderError, OSError) as exc:
        typer.echo(f"sandbox: cannot write into {out}: {exc}", err=True)
        raise typer.Exit(1) from None
    typer.echo(f"rendered {len(artifacts)} files for {host} into {out} (manifest: {path})")


def schema() -> None:
    """Print the JSON Schema of the spec (for editor completion)."""
    from agent_sandbox.spec.models import Spec

    doc = Spec.model_json_schema()
    doc["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    doc["title"] = "agent-sandbox spec"
    typer.echo(json.dumps(doc, indent=2, sort_keys=True))


def register(app: typer.Typer) -> None:
    app.command("validate")(validate)
    app.command("render")(render_cmd)
    app.command("schema")(schema)
