"""Build the wheelhouse a host installs agent-sandbox from, on the controller.

Fleet hosts may have no route to a package index, so the controller builds one
folder of wheels (the project plus every dependency) that the Ansible role and
the pyinfra deploy copy to each host and install with ``pip --no-index``.

The project wheel is built from a staged copy of the source (the renderer's
templates are package data under ``src/agent_sandbox/templates``) and
``SOURCE_DATE_EPOCH`` pinned, so
the same source gives the same bytes: copying the wheelhouse again changes
nothing on a host. Nothing is rebuilt when the source digest is unchanged.

It must never modify the source tree or install anything on the controller.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

STAMP = ".source-digest"
ARCHIVE = "wheelhouse.tar"
EPOCH = "315532800"  # 1980-01-01, the earliest date a zip entry can carry
EXTRAS = ("pull",)  # pyproject's optional dependencies a host may install
_SKIP_DIRS = {"__pycache__", ".mypy_cache", ".ruff_cache"}


def _source_files(project: Path) -> list[tuple[str, Path]]:
    """(path inside the staged tree, source path) for everything the wheel needs."""
    files: list[tuple[str, Path]] = []
    for name in ("pyproject.toml", "README.md"):
        if (project / name).is_file():
            files.append((name, project / name))
    base = project / "src"
    if base.is_dir():
        for root, dirs, names in os.walk(base):
            dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS and not d.endswith(".egg-info"))
            for n in sorted(names):
                if n.endswith((".pyc", ".pyo")):
                    continue
                src = Path(root) / n
                files.append((f"src/{src.relative_to(base).as_posix()}", src))
    return files


def source_digest(project: Path) -> str:
    """SHA-256 over the staged paths and bytes: the wheelhouse's cache key."""
    h = hashlib.sha256()
    for rel, src in _source_files(project):
        h.update(rel.encode() + b"\0" + src.read_bytes() + b"\0")
    return h.hexdigest()


def _pip(args: list[str], env: dict[str, str]) -> None:
    proc = subprocess.run([sys.executable, "-m", "pip", *args], env=env,
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"pip {' '.join(args[:2])} failed:\n{proc.stderr[-3000:]}")


def write_archive(out: Path) -> Path:
    """One tar of the wheels (sorted, fixed owner and time): the single file a
    host receives, so an unchanged wheelhouse is one checksum comparison."""
    archive = out / ARCHIVE
    tmp = out / (ARCHIVE + ".tmp")
    with tarfile.open(tmp, "w", format=tarfile.GNU_FORMAT) as tar:
        for wheel in sorted(out.glob("*.whl")):
            info = tar.gettarinfo(str(wheel), arcname=wheel.name)
            info.mtime, info.uid, info.gid, info.uname, info.gname = int(EPOCH), 0, 0, "", ""
            info.mode = 0o644
            with open(wheel, "rb") as fh:
                tar.addfile(info, fh)
    os.replace(tmp, archive)
    return archive


def build(project: Path, out: Path) -> bool:
    """Make ``out`` hold the project wheel, all its dependencies and
    ``wheelhouse.tar`` of them. Returns whether anything changed."""
    project, out = project.resolve(), out.resolve()
    digest = source_digest(project)
    stamp = out / STAMP
    if stamp.is_file() and stamp.read_text().strip() == digest and (out / ARCHIVE).is_file():
        return False
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "SOURCE_DATE_EPOCH": EPOCH, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    with tempfile.TemporaryDirectory(prefix="agent-sandbox-wheel.") as tmp:
        stage, built = Path(tmp) / "src", Path(tmp) / "dist"
        for rel, src in _source_files(project):
            dst = stage / rel
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, dst)
            os.utime(dst, (int(EPOCH), int(EPOCH)))
        _pip(["wheel", "--no-deps", "--wheel-dir", str(built), str(stage)], env)
        wheels = list(built.glob("agent_sandbox-*.whl"))
        if len(wheels) != 1:
            raise RuntimeError(f"expected one project wheel, found {wheels}")
        for old in out.glob("agent_sandbox-*.whl"):
            old.unlink()
        target = out / wheels[0].name
        shutil.copyfile(wheels[0], target)
    # Dependencies, with the extras a host may install (EXTRAS): offline from what
    # is already here when possible.
    wanted = f"{target}[{','.join(EXTRAS)}]"
    try:
        _pip(["wheel", "--no-index", "--find-links", str(out), "--wheel-dir", str(out),
              wanted], env)
    except RuntimeError:
        _pip(["wheel", "--find-links", str(out), "--wheel-dir", str(out), wanted], env)
    write_archive(out)
    stamp.write_text(digest + "\n")
    return True


def archive_sha256(out: Path) -> str:
    """The SHA-256 of the wheelhouse's archive (what a host's install is stamped with)."""
    from agent_sandbox.install.rendered_files import sha256_file

    digest = sha256_file(str(out / ARCHIVE))
    if digest is None:
        raise RuntimeError(f"{out / ARCHIVE} is missing: build the wheelhouse first")
    return digest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Build the offline wheelhouse for fleet hosts.")
    parser.add_argument("--project", required=True, help="the agent-sandbox source tree")
    parser.add_argument("--out", required=True, help="the wheelhouse folder")
    args = parser.parse_args(argv)
    try:
        changed = build(Path(args.project), Path(args.out))
    except (OSError, RuntimeError) as exc:
        print(f"wheelhouse: {exc}", file=sys.stderr)
        return 1
    out = Path(args.out).resolve()
    print(json.dumps({"changed": changed, "wheelhouse": str(out), "archive": str(out / ARCHIVE)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
