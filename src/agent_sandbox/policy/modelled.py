"""The commands the policy engine fully models, with every flag it knows.

A command may be allowed only when this module models it: its name is in the
table, every flag is one it lists (anything else, including an unknown long
option, is a problem), and every argument has a known role: literal text, a
file the command reads, a tree it walks, or a revision for git. The approach is
Codex's execpolicy and its list of known-safe commands: allow from a small set
whose flags are known, send the rest to a human. Every modelled command only
reads; writes happen through redirections, which the engine judges itself.

``model(argv)`` returns ``(problem, uses)``: ``problem`` is None when the
command is fully modelled, and ``uses`` lists ``(path, how)`` with ``how`` one
of ``read`` (opened or listed), ``tree`` (walked recursively) or ``git`` (the
repository git discovers from the working directory).

Stdlib only, no regular expressions compiled at import: the hook imports this on
every call. It never says a command is modelled when one of its words has a
role it does not know.
"""

from __future__ import annotations

# Builtins of bash: never looked up on PATH.
BUILTINS = frozenset({"echo", "printf", "pwd", "true", "false", ":", "test", "[", "cd",
                      "exit", "return", "shift", "break", "continue", "wait", "type",
                      "command", "time"})

# Environment prefixes that change nothing but formatting: everything else (PATH,
# LD_*, GIT_*, *_proxy, CDPATH, PAGER, EDITOR, BASH_ENV, PYTHON*, NODE_*, RIPGREP_CONFIG_PATH,
# anything a program may read to load code or configuration) is not modelled.
SAFE_ENV = frozenset({"LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "LC_COLLATE", "LC_MESSAGES",
                      "LC_NUMERIC", "LC_TIME", "LC_MONETARY", "TZ", "NO_COLOR", "CLICOLOR",
                      "TERM", "COLUMNS", "LINES"})
_SAFE_VALUE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.@+-")


def safe_assignment(text: str) -> bool:
    """``NAME=value`` that only changes formatting (no path, no code, no config)."""
    name, _, value = text.partition("=")
    return name in SAFE_ENV and all(c in _SAFE_VALUE for c in value)


class Flags:
    """A command's known flags and what its positional arguments are.

    The flag sets are built the first time a command is judged: the hook imports
    this table on every call and judges one or two commands of it.
    """

    __slots__ = ("_long", "_long_val", "_raw", "_short", "_short_val", "max_pos", "numeric",
                 "pos", "tree")

    def __init__(self, short: str = "", short_val: str = "", long: str = "", long_val: str = "",
                 pos: str = "files", *, max_pos: int = -1, numeric: bool = False,
                 tree: str = "") -> None:
        self._raw: tuple[str, str, str, str] | None = (short, short_val, long, long_val)
        self.pos = pos  # files | text | none | pattern_files | list | format | command...
        self.max_pos = max_pos
        self.numeric = numeric  # -5 means -n 5 (head, tail)
        self.tree = tree  # flags that make it walk a tree ("*": always)

    def _build(self) -> None:
        assert self._raw is not None
        short, short_val, long, long_val = self._raw
        self._short = frozenset(short)
        self._short_val = frozenset(short_val)
        self._long = frozenset(long.split()) | {"help", "version"}
        self._long_val = frozenset(long_val.split())
        self._raw = None

    @property
    def short(self) -> frozenset[str]:
        if self._raw is not None:
            self._build()
        return self._short

    @property
    def short_val(self) -> frozenset[str]:
        if self._raw is not None:
            self._build()
        return self._short_val

    @property
    def long(self) -> frozenset[str]:
        if self._raw is not None:
            self._build()
        return self._long

    @property
    def long_val(self) -> frozenset[str]:
        if self._raw is not None:
            self._build()
        return self._long_val


TABLE: dict[str, Flags] = {
    "cat": Flags("AbeEnstTuv", long="number number-nonblank squeeze-blank show-all show-ends "
                 "show-tabs show-nonprinting"),
    "head": Flags("qvz", "nc", "quiet silent verbose zero-terminated", "lines bytes",
                  numeric=True),
    "tail": Flags("qvz", "nc", "quiet silent verbose zero-terminated", "lines bytes",
                  numeric=True),
    "wc": Flags("clmwL", long="bytes chars lines words max-line-length"),
    "ls": Flags("aAbBcCdfFghiklLmnNopqQrRsStuUvxXZ1", "wIT",
                "all almost-all human-readable classify recursive reverse directory "
                "dereference inode numeric-uid-gid literal escape si full-time "
                "group-directories-first color",
                "color sort time time-style ignore hide width format indicator-style "
                "quoting-style", pos="list", tree="R recursive"),
    "echo": Flags(pos="text"),
    "printf": Flags(pos="text"),
    "pwd": Flags("LP", pos="none"),
    "true": Flags(pos="text"),
    "false": Flags(pos="text"),
    ":": Flags(pos="text"),
    "test": Flags(pos="text"),
    "[": Flags(pos="text"),
    "exit": Flags(pos="text"),
    "return": Flags(pos="text"),
    "shift": Flags(pos="text"),
    "break": Flags(pos="text"),
    "continue": Flags(pos="text"),
    "wait": Flags(pos="text"),
    "type": Flags("afptP", pos="text"),
    "basename": Flags("az", "s", "multiple zero", "suffix", pos="text"),
    "dirname": Flags("z", long="zero", pos="text"),
    "whoami": Flags(pos="none"),
    "id": Flags("gGnruz", long="group groups name real user zero", pos="text"),
    "uname": Flags("asnrvmpio", long="all kernel-name nodename kernel-release kernel-version "
                   "machine processor hardware-platform operating-system", pos="none"),
    "nproc": Flags(long="all", pos="none"),
    "arch": Flags(pos="none"),
    "date": Flags("uR", "d", "utc universal rfc-email", "date iso-8601 rfc-3339", pos="format"),
    "which": Flags("a", pos="text"),
    "grep": Flags("EFGPiywxvcLloqsbHhnTZzrRUaI", "efmABCdD",
                  "extended-regexp fixed-strings basic-regexp perl-regexp ignore-case "
                  "no-ignore-case word-regexp line-regexp invert-match count "
                  "files-with-matches files-without-match only-matching quiet silent "
                  "no-messages byte-offset with-filename no-filename line-number initial-tab "
                  "null null-data recursive dereference-recursive text binary color colour",
                  "regexp file max-count after-context before-context context include exclude "
                  "exclude-dir binary-files devices directories color colour label",
                  pos="pattern_files", tree="r R recursive dereference-recursive"),
    "rg": Flags("iSsnNlcwxFvuLH0oqIUP.", "egtTABCmMjd",
                "ignore-case smart-case case-sensitive line-number no-line-number "
                "files-with-matches files-without-match count count-matches word-regexp "
                "line-regexp fixed-strings invert-match hidden no-ignore no-ignore-vcs follow "
                "files json heading no-heading vimgrep only-matching null multiline "
                "no-config pcre2 no-messages with-filename no-filename quiet stats trim "
                "column no-column",
                "regexp glob iglob type type-not max-count context after-context "
                "before-context sort sortr max-depth threads color colors max-columns "
                "max-filesize encoding replace path-separator",
                pos="pattern_files", tree="*"),
    "sort": Flags("bdfgiMhnRrVsuzc", "ktS",
                  "ignore-leading-blanks dictionary-order ignore-case general-numeric-sort "
                  "ignore-nonprinting month-sort human-numeric-sort numeric-sort reverse "
                  "version-sort stable unique zero-terminated check random-sort",
                  "key field-separator buffer-size sort"),
    "uniq": Flags("cdDiuz", "fsw", "count repeated all-repeated ignore-case unique "
                  "zero-terminated", "skip-fields skip-chars check-chars", max_pos=1),
    "cut": Flags("nsz", "bcdf", "complement only-delimited zero-terminated",
                 "bytes characters delimiter fields output-delimiter"),
    "tr": Flags("cCdst", long="complement delete squeeze-repeats truncate-set1", pos="text"),
    "nl": Flags(),
    "tac": Flags("br", "s", "before regex", "separator"),
    "rev": Flags(),
    "diff": Flags("uqrNwbBityaTsp", "UCx",
                  "brief recursive new-file ignore-all-space ignore-space-change "
                  "ignore-blank-lines ignore-case side-by-side text report-identical-files "
                  "expand-tabs initial-tab show-c-function",
                  "unified context color exclude label width", max_pos=2,
                  tree="r recursive"),
    "cmp": Flags("blsz", "in", "print-bytes verbose quiet silent zero-terminated",
                 "ignore-initial bytes", max_pos=2),
    "od": Flags("bcdfilosvx", "AjNtw", "output-duplicates traditional",
                "address-radix skip-bytes read-bytes format width"),
    "xxd": Flags("aCEeiup", "cglosn", max_pos=1),
    "stat": Flags("LftZ", "c", "dereference file-system terse", "format printf"),
    "file": Flags("bLhiNks", long="brief dereference no-dereference mime no-pad "
                  "keep-going special-files"),
    "realpath": Flags("eLmPqsz", long="canonicalize-existing canonicalize-missing logical "
                      "physical quiet strip no-symlinks zero", long_val="relative-to "
                      "relative-base"),
    "readlink": Flags("efmnqsvz", long="canonicalize canonicalize-existing canonicalize-missing "
                      "no-newline quiet silent verbose zero"),
    "du": Flags("abcDhHklLmsSxP0", "dBt",
                "all apparent-size bytes total dereference-args human-readable dereference "
                "no-dereference count-links separate-dirs summarize si one-file-system null",
                "max-depth block-size threshold exclude time", tree="*"),
    "tree": Flags("adfFilnpsuhDCrtvxJQ", "LIP", tree="*"),
    "nice": Flags(short_val="n", long_val="adjustment", pos="command"),
    "timeout": Flags("v", "sk", "preserve-status foreground verbose", "signal kill-after",
                     pos="command1"),
    "time": Flags("p", pos="command"),
    "env": Flags("i0", "u", "ignore-environment null", "unset", pos="env"),
}

# git: global flags before the subcommand, and per subcommand its flags. Reading
# subcommands only; a positional argument is a revision or a path inside the
# repository (git refuses paths outside it).
_DIFF_SHORT = "pwbsuzRM"
_DIFF_LONG = ("patch no-patch stat shortstat numstat name-only name-status raw "
              "ignore-space-change ignore-all-space ignore-blank-lines word-diff minimal "
              "patience histogram no-color no-renames find-renames full-index binary "
              "abbrev no-abbrev summary check cached staged merge-base color color-words "
              "compact-summary exit-code quiet relative no-ext-diff no-textconv")
_DIFF_LONG_VAL = "unified stat word-diff color diff-filter relative abbrev src-prefix " \
                 "dst-prefix inter-hunk-context"
_LOG_LONG = ("oneline graph all decorate no-decorate reverse first-parent no-merges merges "
             "abbrev-commit follow left-right cherry-pick topo-order date-order walk-reflogs "
             "regexp-ignore-case all-match invert-grep fixed-strings basic-regexp "
             "extended-regexp source branches tags remotes show-signature no-walk")
_LOG_LONG_VAL = ("max-count skip since until after before author committer grep format "
                 "pretty date decorate since-as-filter branches tags remotes")
GIT: dict[str, Flags] = {
    "status": Flags("sbvuzl", long="short branch porcelain long verbose untracked-files "
                    "ignored ignore-submodules no-renames renames ahead-behind "
                    "no-ahead-behind null show-stash",
                    long_val="porcelain untracked-files ignored ignore-submodules", pos="text"),
    "log": Flags(_DIFF_SHORT + "i", "nU", _DIFF_LONG + " " + _LOG_LONG,
                 _DIFF_LONG_VAL + " " + _LOG_LONG_VAL, pos="text", numeric=True),
    "show": Flags(_DIFF_SHORT + "i", "nU", _DIFF_LONG + " " + _LOG_LONG,
                  _DIFF_LONG_VAL + " " + _LOG_LONG_VAL, pos="text"),
    "diff": Flags(_DIFF_SHORT, "U", _DIFF_LONG, _DIFF_LONG_VAL, pos="text"),
    "branch": Flags("avrl", long="all remotes verbose list show-current no-color",
                    long_val="contains no-contains merged no-merged sort points-at color",
                    pos="text"),
    "rev-parse": Flags("q", long="show-toplevel abbrev-ref short git-dir is-inside-work-tree "
                       "verify quiet show-prefix show-cdup absolute-git-dir "
                       "is-bare-repository symbolic-full-name",
                       long_val="short abbrev-ref", pos="text"),
    "ls-files": Flags("cdmoiksuvtz", long="cached deleted modified others ignored stage "
                      "unmerged killed exclude-standard full-name directory no-empty-directory "
                      "error-unmatch", long_val="exclude", pos="text"),
    "blame": Flags("wsentlfMCc", "L", long="porcelain line-porcelain show-name show-number "
                   "root show-stats incremental", pos="text"),
    "remote": Flags("v", long="verbose", pos="text"),
    "describe": Flags(long="tags all long always dirty exact-match contains",
                      long_val="abbrev match exclude dirty candidates", pos="text"),
    "shortlog": Flags("nsec", long="numbered summary email committer", pos="text"),
}
_GIT_GLOBAL = frozenset({"--no-pager", "-P", "--no-optional-locks"})

_FIND_VALUE = frozenset({"-name", "-iname", "-path", "-ipath", "-wholename", "-iwholename",
                         "-type", "-xtype", "-maxdepth", "-mindepth", "-size", "-mtime",
                         "-mmin", "-atime", "-amin", "-ctime", "-cmin", "-perm", "-user",
                         "-group", "-uid", "-gid", "-regex", "-iregex", "-links", "-inum",
                         "-regextype", "-lname", "-ilname", "-samefile"})
_FIND_FLAG = frozenset({"-print", "-print0", "-empty", "-not", "!", "(", ")", "-o", "-a", "-or",
                        "-and", "-prune", "-quit", "-true", "-false", "-depth", "-xdev",
                        "-mount", "-readable", "-writable", "-executable", "-nouser",
                        "-nogroup", "-daystart", "-follow", "-ls", ","})
_FIND_PATH_VALUE = frozenset({"-newer", "-anewer", "-cnewer", "-samefile"})


def model(argv: list[str]) -> tuple[str | None, list[tuple[str, str]]]:
    """Whether ``argv`` (literal words) is fully modelled, and the paths it uses."""
    if not argv:
        return None, []
    name = argv[0]
    if "/" in name:
        return f"{name!r} is run by path, not a modelled command", []
    if name == "git":
        return _git(argv)
    if name == "find":
        return _find(argv)
    if name == "sed":
        return _sed(argv)
    if name == "command":
        if len(argv) >= 3 and argv[1] in ("-v", "-V"):
            return None, []
        if len(argv) >= 2 and not argv[1].startswith("-"):
            return None, []  # the command it runs is judged as its own segment
        return "command with options other than -v/-V", []
    if name == "printf" and len(argv) > 1 and argv[1].startswith("-v"):
        return "printf -v assigns a shell variable", []
    flags = TABLE.get(name)
    if flags is None:
        return f"{name} is not a command the policy engine models", []
    return _generic(name, flags, argv[1:])


def _generic(name: str, f: Flags, args: list[str]) -> tuple[str | None, list[tuple[str, str]]]:
    positional: list[str] = []
    seen: set[str] = set()
    pattern_given = False
    i = 0
    ends = False
    while i < len(args):
        a = args[i]
        if f.pos in ("text", "format") and name not in ("date", "type", "id", "basename",
                                                         "dirname", "which"):
            positional.append(a)  # echo, printf, test: every word is data
            i += 1
            continue
        if ends or not a.startswith("-") or a == "-":
            if f.pos in ("command", "command1", "env"):
                if f.pos == "env" and "=" in a:
                    if not safe_assignment(a):
                        return f"env sets {a.split('=', 1)[0]}, which is not modelled", []
                    i += 1
                    continue
                if f.pos == "command1" and not positional:
                    positional.append(a)
                    i += 1
                    continue
                return None, []  # the wrapped command is judged as its own segment
            positional.append(a)
            i += 1
            continue
        if a == "--":
            ends = True
            i += 1
            continue
        if a.startswith("--"):
            key, eq, _val = a[2:].partition("=")
            if key in f.long_val and (eq or key not in f.long):
                if not eq:
                    if i + 1 >= len(args):
                        return f"{name} {a} needs a value", []
                    i += 1
                    _val = args[i]
                if key in ("regexp", "file"):
                    pattern_given = True
                if key == "file":
                    seen.add("file:" + _val)
            elif key in f.long and not eq:
                pass
            else:
                return f"{name} option {a.split('=', 1)[0]!r} is not modelled", []
            seen.add(key)
            i += 1
            continue
        # short flags, possibly bundled; a value flag takes the rest or the next word
        body = a[1:]
        if f.numeric and body.isdigit():
            i += 1
            continue
        j = 0
        while j < len(body):
            c = body[j]
            if c in f.short_val:
                val = body[j + 1:]
                if not val:
                    if i + 1 >= len(args):
                        return f"{name} -{c} needs a value", []
                    i += 1
                    val = args[i]
                if c in "ef" and f.pos == "pattern_files":
                    pattern_given = True
                    if c == "f":
                        seen.add("file:" + val)
                seen.add(c)
                break
            if c not in f.short:
                return f"{name} option -{c} is not modelled", []
            seen.add(c)
            j += 1
        i += 1
    if f.pos == "none" and positional:
        return f"{name} takes no arguments here", []
    if f.pos == "format":
        if any(not p.startswith("+") for p in positional) or len(positional) > 1:
            return f"{name}: only a +FORMAT argument is modelled", []
        return None, []
    if f.pos in ("text", "command", "command1", "env"):
        return None, []
    if 0 <= f.max_pos < len(positional):
        return f"{name} with more than {f.max_pos} file argument(s)", []
    if f.pos == "pattern_files" and not pattern_given and "files" not in seen:
        if not positional:
            return f"{name} without a pattern", []
        positional = positional[1:]
    tree = f.tree == "*" or any(t in seen for t in f.tree.split())
    how = "tree" if tree else "read"
    uses = [(p, how) for p in positional if p != "-"]
    uses += [(k[5:], "read") for k in seen if k.startswith("file:")]
    if not positional and (tree or f.pos == "list"):
        uses.append((".", how))
    return None, uses


_GIT_PATCH = frozenset({"-u", "--patch", "--patch-with-stat", "--patch-with-raw", "--cc",
                        "-c", "-m", "--word-diff", "--full-diff", "--color-words"})


def _git(argv: list[str]) -> tuple[str | None, list[tuple[str, str]]]:
    i = 1
    while i < len(argv) and argv[i].startswith("-"):
        if argv[i] not in _GIT_GLOBAL:
            return f"git option {argv[i].split('=', 1)[0]!r} is not modelled", []
        i += 1
    if i >= len(argv):
        return "git without a subcommand", []
    sub = argv[i]
    f = GIT.get(sub)
    if f is None:
        return f"git {sub} is not a git subcommand the policy engine models", []
    rest = argv[i + 1:]
    if sub == "branch" and not any(a in ("--list", "-l", "-a", "-r", "--all", "--remotes")
                                   for a in rest) and any(not a.startswith("-") for a in rest):
        return "git branch with a name changes branches", []
    if sub == "remote" and any(not a.startswith("-") for a in rest):
        return "git remote with a subcommand is not modelled", []
    problem = _git_flags(sub, f, rest)
    if problem:
        return problem, []
    # diff and blame read the working tree, patches of history (log -p, show) and
    # status -v print files' text, and untracked or ignored listings walk it:
    # judged like a walk of the repository
    walks = sub in ("diff", "blame", "show") or (sub == "log" and any(
        a in _GIT_PATCH or a.startswith(("-U", "--unified")) or (
            not a.startswith("--") and a.startswith("-") and "p" in a[1:]) for a in rest)) or (
        sub == "status" and any(a in ("-v", "-vv", "--verbose") for a in rest)) or (
        sub == "status" and any(
        (a.startswith(("-u", "--untracked-files", "--ignored")) and a not in (
            "-uno", "--untracked-files=no")) for a in rest)) or (sub == "ls-files" and any(
        a in ("--others", "--ignored", "--directory", "--killed") or (
            not a.startswith("--") and a.startswith("-") and any(c in a[1:] for c in "oik"))
        for a in rest))
    return None, [(".", "git"), *([(".", "tree")] if walks else [])]


def _git_flags(sub: str, f: Flags, args: list[str]) -> str | None:
    """Check git flags; positionals (revisions, pathspecs) are data for git."""
    i = 0
    while i < len(args):
        a = args[i]
        if a == "--":
            break
        if a.startswith("-") and a != "-":
            if a.startswith("--"):
                key, eq, _v = a[2:].partition("=")
                if key in f.long_val and (eq or key not in f.long):
                    if not eq:
                        i += 1
                elif not (key in f.long and not eq):
                    return f"git {sub} option {a.split('=', 1)[0]!r} is not modelled"
            else:
                body = a[1:]
                if (f.numeric and body.isdigit()) or (sub == "status" and body.startswith("u")
                                                      and body[1:] in ("", "no", "normal",
                                                                       "all")):
                    i += 1
                    continue
                for j, c in enumerate(body):
                    if c in f.short_val:
                        if j + 1 == len(body):
                            i += 1
                        break
                    if c not in f.short:
                        return f"git {sub} option -{c} is not modelled"
        i += 1
    return None


def _find(argv: list[str]) -> tuple[str | None, list[tuple[str, str]]]:
    i = 1
    while i < len(argv) and argv[i] in ("-H", "-L", "-P"):
        i += 1
    roots = []
    while i < len(argv) and not argv[i].startswith("-") and argv[i] not in ("!", "(", ")", ","):
        roots.append(argv[i])
        i += 1
    uses: list[tuple[str, str]] = [(r, "tree") for r in roots or ["."]]
    while i < len(argv):
        a = argv[i]
        if a in _FIND_VALUE:
            if i + 1 >= len(argv):
                return f"find {a} needs a value", []
            if a in _FIND_PATH_VALUE:
                uses.append((argv[i + 1], "read"))
            i += 2
            continue
        if a in _FIND_PATH_VALUE:
            if i + 1 >= len(argv):
                return f"find {a} needs a value", []
            uses.append((argv[i + 1], "read"))
            i += 2
            continue
        if a in _FIND_FLAG:
            i += 1
            continue
        return f"find {a} is not modelled (find runs, deletes and writes through its " \
               "expressions)", []
    return None, uses


def _sed(argv: list[str]) -> tuple[str | None, list[tuple[str, str]]]:
    """Only ``sed -n 'N[,M]p' FILE...``: printing lines, as Codex's safe list allows."""
    args = argv[1:]
    if len(args) < 2 or args[0] != "-n":
        return "sed is modelled only as sed -n 'N,Mp' FILE", []
    script = args[1]
    body = script[:-1] if script.endswith("p") else ""
    parts = body.split(",")
    if not body or len(parts) > 2 or not all(p.isdigit() or p == "$" for p in parts):
        return f"sed script {script!r} is not modelled (only N,Mp)", []
    files = args[2:]
    if any(f.startswith("-") for f in files):
        return "sed options after the script are not modelled", []
    return None, [(f, "read") for f in files]
