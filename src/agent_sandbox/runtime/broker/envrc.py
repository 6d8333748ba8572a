"""What an ``.envrc`` names: files direnv reads and folders it puts on ``PATH``.

direnv runs a folder's allowed ``.envrc`` on every ``cd`` into it (the name is
protected everywhere: ``triggers.json``). What that file names is run as well,
though its name is the user's choice: ``source_env .envrc.local``, ``dotenv``
(``.env`` by default: it can set ``LD_PRELOAD`` or ``PATH``), ``PATH_add bin``
(every program there shadows one the user runs), ``PATH=`` assignments and those
of the other variables that lead a program to code (``LD_LIBRARY_PATH``,
``PYTHONPATH``, ``NODE_OPTIONS``: ``_PATH_VARIABLES``, ``_FILE_VARIABLES``), the
shell's own ``source`` and ``.``, ``layout`` (its ``.direnv`` folder on ``PATH``;
``layout php``'s ``vendor/bin`` too), ``use nix`` and ``use flake`` (the nix files
are evaluated). ``configs.Configs.named`` finds, when a call writes a path, the
``.envrc`` files of the folders above it, with the other tools' configurations,
and refuses what they name.

Not named here: ``layout node`` puts ``node_modules/.bin`` on ``PATH``, which
``npm install`` writes; a user with it trusts what packages install there.
"""

from __future__ import annotations

import posixpath

ENVRC = ".envrc"
# command -> the arguments that name paths (slice), and the path when none is given
_COMMANDS: dict[str, tuple[slice, tuple[str, ...]]] = {
    "source_env": (slice(1, 2), ()), "source_env_if_exists": (slice(1, 2), ()),
    "dotenv": (slice(1, 2), (".env",)), "dotenv_if_exists": (slice(1, 2), (".env",)),
    "PATH_add": (slice(1, None), ()), "path_add": (slice(2, None), ()),
    "load_prefix": (slice(1, 2), ()),
}
_USES = {"nix": ("shell.nix", "default.nix"), "flake": ("flake.nix", "flake.lock")}
# what a layout puts on PATH beside its .direnv folder
_LAYOUT_BINS = {"php": ("vendor/bin",)}


# variables whose value is a list of folders a host program searches for code
_PATH_VARIABLES = frozenset({"PATH", "LD_LIBRARY_PATH", "PYTHONPATH", "NODE_PATH", "PERL5LIB",
                             "RUBYLIB", "GEM_PATH", "GOPATH", "CLASSPATH", "MANPATH",
                             "XDG_DATA_DIRS", "XDG_CONFIG_DIRS"})
# variables that name files a program loads or runs (``--require FILE`` in NODE_OPTIONS)
_FILE_VARIABLES = frozenset({"LD_PRELOAD", "NODE_OPTIONS", "BASH_ENV", "ENV", "PYTHONSTARTUP",
                             "GIT_CONFIG_GLOBAL", "GIT_CONFIG_SYSTEM", "KUBECONFIG",
                             "PERL5OPT", "RUBYOPT", "JAVA_TOOL_OPTIONS", "GEM_HOME",
                             "PYTHONUSERBASE", "npm_config_userconfig", "NPM_CONFIG_USERCONFIG"})
# words that lead a command in a list (``if [ -f x ]; then source_env x; fi``)
_LEADERS = frozenset({"if", "then", "else", "elif", "do", "while", "until", "!", "{", "}"})
# spellings of the ``.envrc``'s own folder
_PWD = ("$(pwd)", "`pwd`", "${PWD}", '"$PWD"', '"${PWD}"', "$(git rev-parse --show-toplevel)",
        "$(expand_path .)")


def _commands(line: str) -> list[list[str]]:
    """The simple commands of one line: split at ``&&``, ``||``, ``;``, ``|``, ``&``,
    leading keywords dropped; [] when the shell would not split it."""
    import shlex  # only where an .envrc is read (the launcher's start stays light)

    for spelling in _PWD:
        line = line.replace(spelling, "$PWD")
    lexer = shlex.shlex(line, posix=True, punctuation_chars="&|;")
    lexer.whitespace_split = True
    lexer.commenters = "#"
    try:
        tokens = list(lexer)
    except ValueError:
        return []
    out: list[list[str]] = [[]]
    for token in tokens:
        if token and set(token) <= set("&|;"):
            out.append([])
        elif out[-1] or token not in _LEADERS:
            out[-1].append(token)
    return [c for c in out if c]


def names(text: str) -> list[str]:
    """The paths (relative to the ``.envrc``'s folder, or absolute) a ``.envrc``'s
    text names (pure), in every command of every line. A line the shell would not
    split is skipped."""
    out: list[str] = []
    for words in (c for line in text.splitlines() for c in _commands(line)):
        cmd = words[0]
        if cmd == "for" and "in" in words:  # for f in .envrc.d/*.sh: each file sourced
            out += [posixpath.dirname(w) for w in words[words.index("in") + 1:]
                    if ("*" in w or "?" in w) and posixpath.dirname(w)]
            continue
        if cmd == "export":
            words = words[1:] or [""]
            cmd = words[0]
        var, eq, value = cmd.partition("=")
        if eq and var in _PATH_VARIABLES:  # PATH="$PWD/scripts:$PATH", LD_LIBRARY_PATH=lib
            out += [e for e in value.split(":") if e and not e.startswith(("$" + var,
                                                                             "${" + var))]
        elif eq and var in _FILE_VARIABLES:  # NODE_OPTIONS="--require ./hook.js"
            out += [w.split("=", 1)[-1] for w in value.split() if not w.startswith("-")
                    or "=" in w]
        elif cmd in (".", "source") and len(words) > 1:
            out.append(words[1])
        elif cmd in _COMMANDS:
            which, default = _COMMANDS[cmd]
            out += [w for w in words[which] if not w.startswith("-")] or list(default)
        elif cmd == "layout" and len(words) > 1 and words[1] != "node":
            out += [".direnv", *_LAYOUT_BINS.get(words[1], ())]
        elif cmd == "use" and len(words) > 1 and words[1] in _USES:
            out += [w for w in words[2:3]] or list(_USES[words[1]])
    return [_plain(w) for w in out if _plain(w)]


def _plain(word: str) -> str:
    for prefix in ("$PWD/", "${PWD}/", "./"):
        if word.startswith(prefix):
            return word[len(prefix):] or "."
    return "" if word.startswith(("$", "~")) else word


def rc_names(text: str) -> list[str]:
    """What a shell start-up file in the home folder names (pure): read as an
    ``.envrc`` is, ``$HOME/`` and ``~/`` standing for its own folder."""
    for spelling in ("${HOME}/", "$HOME/", '"$HOME"/', "~/"):
        text = text.replace(spelling, "./")
    return names(text.replace("\\.", "."))

