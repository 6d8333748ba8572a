"""The sections of shared configurations that load code, kept as they were.

``pyproject.toml``, ``setup.cfg`` and ``tox.ini`` are the project's to change (a
run adds a dependency, a test option), so they are not protected; but some of
their sections name code a linter runs on its own when an editor opens the
folder: mypy's ``plugins``, pylint's ``init-hook`` (Python it executes) and
``load-plugins``, flake8's ``local-plugins``, coverage's ``plugins``. When a run
writes one of these files (opened for writing, replaced by a rename or a link),
its bytes before are kept (``note``); once the run has ended (``settle``), a file
whose code-loading sections changed is put back as it was, and the run's version
kept beside it under a quarantine name, said to the user. The rest of a run's
change to such a file is lost with it: the section is not merged."""

from __future__ import annotations

import os
import time

SHARED = frozenset({"pyproject.toml", "setup.cfg", "tox.ini"})
READ_LIMIT = 1 << 20  # a larger file is judged by its bytes: any change counts
# section names (lower case) whose text is judged, or their prefixes before a '.' or ':'
_JUDGED = ("mypy", "tool.mypy", "pylint", "tool.pylint", "master", "main", "flake8",
           "flake8:local-plugins", "coverage:run", "tool.coverage.run", "tool.coverage")


def loading_sections(text: str) -> dict[str, str]:
    """The judged sections of an INI or TOML text: name -> their lines (pure)."""
    out: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("[") and "]" in stripped:
            name = stripped.strip("[]").strip().strip('"').lower()
            judged = any(name == j or name.startswith((j + ".", j + ":", j + "-"))
                         for j in _JUDGED)
            current = out.setdefault(name, []) if judged else None
            continue
        if current is not None and stripped and not stripped.startswith(("#", ";")):
            current.append(stripped)
    return {k: "\n".join(v) for k, v in out.items()}


def _toml_sections(text: str) -> dict[str, str] | None:
    """The judged tables of a TOML text as TOML reads them (dotted keys, spaced or
    quoted headers, inline tables alike), each as canonical JSON; None when it
    does not parse."""
    import json
    import tomllib

    try:
        doc = tomllib.loads(text)
    except (tomllib.TOMLDecodeError, UnicodeError):
        return None
    raw = doc.get("tool")
    tool = raw if isinstance(raw, dict) else {}
    return {f"tool.{k}": json.dumps(v, sort_keys=True, default=str) for k, v in tool.items()
            if any(k == j.split(".", 1)[1] for j in _JUDGED if j.startswith("tool."))}


def judged(path: str, data: bytes | None) -> dict[str, str] | None:
    """What of the file's text is judged: its code-loading sections (a TOML file's
    as TOML reads them); None when it cannot be read whole (too large, or a TOML
    text that does not parse): then any change counts."""
    if data is None:
        return {}
    if len(data) > READ_LIMIT:
        return None
    text = data.decode("utf-8", "replace")
    if path.endswith(".toml"):
        return _toml_sections(text)
    return loading_sections(text)


def _read(path: str) -> bytes | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        return os.read(fd, READ_LIMIT + 1)
    except OSError:
        return None
    finally:
        os.close(fd)


class SharedConfigs:
    """The shared configurations a run wrote, with their bytes before."""

    def __init__(self) -> None:
        self.before: dict[str, bytes | None] = {}

    def note(self, path: str, was: str | None = None) -> None:
        """``path`` is about to be written: its bytes now (``was``: those of the file
        at that path instead, one a folder being moved brings), the first time."""
        if path not in self.before and os.path.basename(path) in SHARED:
            self.before[path] = _read(was or path)

    def note_moved(self, root: str, src: str, dst: str) -> None:
        """A folder is moved from ``src`` to ``dst`` (read below ``root``, the caller's
        root): the shared configurations it holds (three levels down, not into
        ``node_modules`` or ``.git``) are noted at their new paths, with their bytes
        now."""
        top = root + src
        try:
            for folder, dirs, files in os.walk(top):
                depth = folder[len(top):].count("/")
                dirs[:] = [] if depth >= 3 else [d for d in dirs
                                                 if d not in ("node_modules", ".git")]
                for name in SHARED.intersection(files):
                    rel = os.path.join(folder, name)[len(top):]
                    if src + rel in self.before:  # written by this run before the move
                        self.before.setdefault(dst + rel, self.before[src + rel])
                    else:
                        self.note(dst + rel, was=top + rel)
        except OSError:
            pass

    def settle(self) -> list[str]:
        """After the run: each file whose code-loading sections changed put back, the
        run's kept beside it; what was done, one line each."""
        said = []
        for path, old in self.before.items():
            new = _read(path)
            was, now = judged(path, old), judged(path, new)
            if new == old or (was is not None and now is not None and now == was):
                continue
            changed = sorted(k for k in set(was or {}) | set(now or {})
                             if (was or {}).get(k) != (now or {}).get(k)) or ["all of it"]
            aside = f"{path}.sandbox-quarantine-{time.strftime('%Y%m%dT%H%M%S')}"
            try:
                os.rename(path, aside)
                if old is not None:
                    tmp = f"{path}.sandbox-restore-{os.getpid()}"
                    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
                    try:
                        os.write(fd, old)
                    finally:
                        os.close(fd)
                    os.rename(tmp, path)
            except OSError as exc:
                said.append(f"refused: {path}: the run changed [{', '.join(changed)}], which "
                            f"loads code a linter runs; it could not be put back "
                            f"({exc.strerror}): read it before running mypy, pylint or flake8")
                continue
            said.append(f"refused: {path}: the run changed [{', '.join(changed)}], which loads "
                        "code a linter runs on its own; put back as it was, the run's kept as "
                        f"{aside}")
        self.before.clear()
        return said
