"""What the tools' own configuration files name: programs and files they run.

A protected configuration (``triggers.json``) is safe only if what it names is
too: cargo's ``build.rustc-wrapper = "tools/wrap.sh"`` (run by ``cargo metadata``,
which rust-analyzer runs when an editor opens the folder), yarn's ``yarnPath``
(``.yarn/releases/yarn-4.cjs``, run by every ``yarn``), mise's ``_.source`` and
``_.path`` (on every ``cd``), a Mercurial extension or hook (``hg status``), a
pre-commit or lefthook hook's ``entry`` / ``run`` (``git commit``).
``Configs.named`` finds, when a call writes a path, these files in the folders
above it (up to ``/``) and refuses what they name.

What counts as named is read from the text, whatever the format: a word that is
a relative path of two or more parts (``tools/wrap.sh``, ``./scripts/env.sh``),
a file name with a script's extension (``check.py``), or a module Python runs
(``-m tools.lint``: ``tools/lint.py`` and ``tools/lint/``), each taken relative to
the folder that holds the configuration (cargo's and Mercurial's: the folder
above ``.cargo`` and ``.hg``, where they resolve them). Patterns (``^src/.*``)
are not paths. The same rule for every file: it protects more than a tool reads,
never less. An ``.envrc`` is one more such file, read by its own parser
(``envrc.names``); git's configuration has a reader of its own (``surroundings``).
"""

from __future__ import annotations

import os
import posixpath

from ..bwrap.globs import under
from .envrc import ENVRC, rc_names
from .envrc import names as envrc_names
from .named_text import NamedText

# the configurations that name other files, relative to the folder they serve
NAMING = (".cargo/config.toml", ".cargo/config", ".yarnrc.yml", ".hg/hgrc",
          "mise.toml", ".mise.toml", "mise.local.toml", ".mise.local.toml",
          ".config/mise.toml", ".config/mise/config.toml", "mise/config.toml",
          ".pre-commit-config.yaml", "lefthook.yml", "lefthook.yaml", ".lefthook.yml",
          ".lefthook.yaml", "lefthook-local.yml", ".lefthook-local.yml", "mypy.ini",
          ".mypy.ini", ".flake8", ".pylintrc", "pylintrc", ".cfnlintrc", ".cfnlintrc.yaml",
          "ansible.cfg", ".ansible-lint", ".ansible-lint.yml", ".ansible-lint.yaml",
          ".config/ansible-lint.yml", ".config/ansible-lint.yaml")
_SCRIPTS = (".sh", ".bash", ".py", ".js", ".cjs", ".mjs", ".ts", ".rb", ".pl", ".ps1")
_PATTERN = None  # compiled on first use: the launcher's start stays light
_MODULE = None


def names(text: str) -> list[str]:
    """The paths a configuration's text names, relative to its folder (pure)."""
    import re

    global _PATTERN, _MODULE
    if _MODULE is None:
        _MODULE = re.compile(r"(?:^|[\s\"'\[,])-m\s*([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)")
    if _PATTERN is None:
        part = r"\.?[A-Za-z0-9_@+][A-Za-z0-9_.@+-]*"
        _PATTERN = re.compile(
            rf"(?<![\w./*$\\^-])((?:\./)?(?:{part}/)+{part}|{part}(?:"
            + "|".join(re.escape(s) for s in _SCRIPTS) + r"))(?![\w*$()\\\[?+{|/])")
    out = []
    # a module Python runs (``entry: python3 -m tools.lint``): its file and its package
    for m in _MODULE.finditer(text):
        rel = m.group(1).replace(".", "/")
        out += [rel + ".py", rel]
    for m in _PATTERN.finditer(text):
        word = m.group(1)
        if "://" in text[max(0, m.start() - 3):m.start() + 3] or ("/" not in word and \
                not word.endswith(_SCRIPTS)):
            continue
        out.append(posixpath.normpath(word))
    return out


def _tree(paths: tuple[str, ...]) -> dict[str, object]:
    """``NAMING`` as nested names: ``{".cargo": {"config.toml": {}}, ...}``."""
    out: dict[str, object] = {}
    for p in paths:
        level = out
        for part in p.split("/"):
            level = level.setdefault(part, {})  # type: ignore[assignment]
    return out


# the shell's start-up files, read as an .envrc is, the home folder standing for the
# folder that holds them: what they source (nvm's, SDKMAN!'s), the folders they put on
# PATH (``export PATH="$HOME/go/bin:$PATH"``)
SHELL_RC = (".bashrc", ".bash_profile", ".bash_login", ".profile", ".zshrc", ".zprofile",
            ".zshenv", ".zlogin", ".kshrc", ".mkshrc")
_NAMING_TREE = _tree((*NAMING, ENVRC, *SHELL_RC))
_SOURCED_MAX = 16  # the files a start-up file names, read for what they name in turn


class Configs:
    """The naming configurations above written paths, each read once per identity;
    which of them a folder holds is looked at again only when the folder changes
    (a write call costs a ``stat`` a folder above it)."""

    def __init__(self, home: str = "") -> None:
        self.home = home.rstrip("/") or ""
        self._text = NamedText(names)
        self._envrc = NamedText(envrc_names)
        self._rc = NamedText(rc_names)
        self._held: dict[str, tuple[tuple[int, ...], list[str]]] = {}

    def named(self, path: str, above: bool = False) -> str | None:
        """Why a configuration in a folder above ``path`` (up to ``/``: a project's
        ``.envrc`` may sit above the writable root), or a shell start-up file of the
        home folder (it names folders anywhere: ``PATH=/opt/tools/bin:$PATH``), names
        ``path``; ``above``: or a folder above what it names (a folder moved there
        or away)."""
        at = posixpath.dirname(path)
        seen_home = False
        while True:
            seen_home = seen_home or at == self.home
            why = self._named_from(at, path, above)
            if why:
                return why
            if at == "/":
                return None if seen_home or not self.home else \
                    self._named_from(self.home, path, above)
            at = posixpath.dirname(at)

    def _named_from(self, at: str, path: str, above: bool) -> str | None:
        """Why a configuration of the folder ``at`` names ``path``. An ``.envrc`` or a
        shell start-up file is read with what it sources, one level down (an
        ``.envrc.local`` it names, a ``main.sh`` the ``.bashrc`` sources), as a
        shell reads them, in the same folder's terms."""
        for config in self._present(at, _NAMING_TREE):
            name = posixpath.basename(config)
            envrc = name == ENVRC
            reader = self._envrc if envrc else self._rc if name in SHELL_RC else self._text
            names = reader.names(config, at)
            if envrc or name in SHELL_RC:
                names = names + [n for sourced in names[:_SOURCED_MAX]
                                 if os.path.isfile(sourced)
                                 for n in reader.names(sourced, at)]
            for named in names:
                if under(path, named) or (above and under(named, path)):
                    return f"{path} is named by {config} " + (
                        "(direnv runs or reads what is there)" if envrc else
                        "(the shell runs or reads what is there)" if name in SHELL_RC
                        else "(what the tool runs)")
        return None

    def _present(self, folder: str, tree: dict[str, object]) -> list[str]:
        """The paths of ``tree`` (``NAMING`` below ``folder``) that exist."""
        try:
            st = os.stat(folder)
        except OSError:
            return []
        ident = (st.st_ino, st.st_mtime_ns, st.st_ctime_ns)
        cached = self._held.get(folder)
        if cached is None or cached[0] != ident:
            here = []
            for name in tree:
                try:
                    os.lstat(posixpath.join(folder, name))
                    here.append(name)
                except OSError:
                    continue
            cached = self._held[folder] = (ident, here)
        out: list[str] = []
        for name in cached[1]:
            below = tree[name]
            full = posixpath.join(folder, name)
            out += self._present(full, below) if below else [full]  # type: ignore[arg-type]
        return out
