"""A careful POSIX/bash shell tokenizer that splits a command line into the
simple commands it would run.

Used on the hook's hot path, so it is stdlib only and imports nothing heavy.
It understands quoting (``'...'``, ``"..."``, ``$'...'``, backslashes),
operators (``|``, ``|&``, ``&&``, ``||``, ``;``, ``&``, newlines), subshells
and groups, redirections (including here-documents), command and process
substitution (``$(...)``, backticks, ``<(...)``, ``>(...)``), environment
prefixes, and the wrappers that run another command (``bash -c``, ``sh -c``,
``eval``, ``xargs``, ``find -exec``, ``env``, ``timeout``, ``nice``, ...). Every
nested command is returned as its own segment, so the policy engine can judge
each one.

What it cannot decide with certainty it reports (``Parse.problems``) rather
than guesses: a caller must treat a problem as "not allowed". It never
executes or expands anything.
"""

from __future__ import annotations

MAX_DEPTH = 8
MAX_LENGTH = 200_000

SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "busybox", "fish"})
INTERPRETERS = frozenset(
    {"python", "python2", "python3", "perl", "ruby", "node", "nodejs", "php", "lua", "deno", "bun"}
)
# Wrappers whose remaining arguments are another command, with the options that
# take a value (so the wrapped command is found after them).
WRAPPERS: dict[str, frozenset[str]] = {
    "env": frozenset({"-u", "--unset", "-C", "--chdir", "-S", "--split-string"}),
    "nice": frozenset({"-n", "--adjustment"}),
    "nohup": frozenset(),
    "timeout": frozenset({"-s", "--signal", "-k", "--kill-after"}),
    "stdbuf": frozenset({"-i", "-o", "-e", "--input", "--output", "--error"}),
    "setsid": frozenset(),
    "exec": frozenset({"-a"}),
    "command": frozenset(),
    "builtin": frozenset(),
    "time": frozenset({"-f", "--format", "-o", "--output"}),
    "ionice": frozenset({"-c", "--class", "-n", "--classdata", "-p", "--pid"}),
    "chrt": frozenset(),
    "taskset": frozenset(),
    "unbuffer": frozenset(),
    "xargs": frozenset(
        {"-a", "--arg-file", "-d", "--delimiter", "-E", "-e", "-I", "-i", "-L", "-l", "-n",
         "--max-args", "-P", "--max-procs", "-s", "--max-chars", "--process-slot-var"}
    ),
}
# Words that take a positional first argument before the command (timeout DURATION CMD).
_WRAPPER_POSITIONAL = {"timeout": 1, "chrt": 1, "taskset": 1}
KEYWORDS_PREFIX = frozenset({"if", "then", "else", "elif", "while", "until", "do", "!", "{"})
KEYWORDS_END = frozenset({"fi", "done", "esac", "}"})
DEV_SINKS = frozenset({"/dev/null", "/dev/stdout", "/dev/stderr", "/dev/tty"})


# Plain classes, not dataclasses: importing dataclasses costs the hook ~10 ms.
class Word:
    """One shell word: its literal text with quotes removed, and whether any
    part of it is decided only at run time (a variable, a substitution, a glob,
    a brace or tilde form other than ``~/``). ``glob`` marks a word whose only
    run-time part is an unquoted ``*`` or ``?`` (the engine may expand it)."""

    __slots__ = ("dynamic", "glob", "quoted", "text")

    def __init__(self, text: str, dynamic: bool = False, quoted: bool = False,
                 glob: bool = False) -> None:
        self.text, self.dynamic, self.quoted, self.glob = text, dynamic, quoted, glob


class Segment:
    """One simple command as it would be executed."""

    __slots__ = ("after", "argv", "assignments", "conditional", "dynamic", "globs", "heredoc",
                 "origin", "persist", "pipe_sources", "redirects", "stdin_from_pipe")

    def __init__(
        self,
        argv: list[str],
        dynamic: list[bool],
        redirects: list[tuple[str, str]] | None = None,
        assignments: list[str] | None = None,
        *,
        origin: str = "",
        heredoc: str | None = None,
    ) -> None:
        self.argv = argv
        self.dynamic = dynamic
        self.redirects = redirects if redirects is not None else []  # (op, target)
        self.assignments = assignments if assignments is not None else []
        self.stdin_from_pipe = False
        self.pipe_sources: list[list[str]] = []  # argv of the earlier pipe stages
        self.heredoc = heredoc
        self.origin = origin  # how it was reached: "", "bash -c", "$(...)", "find -exec"
        # which words are plain unquoted * / ? globs (their only run-time part)
        self.globs: list[bool] = [False] * len(argv)
        # whether a change of directory here outlives the command: top level, not in
        # ( ), a pipeline, the background or a substitution
        self.persist = False
        self.after = ""  # the operator before it: "", ";", "\n", "&&", "||", "&", "|"
        self.conditional = False  # behind if/then/else/while/until/do/!

    def __repr__(self) -> str:
        return f"Segment({self.argv!r}, origin={self.origin!r})"

    @property
    def text(self) -> str:
        return " ".join(self.argv)

    @property
    def name(self) -> str:
        if not self.argv:
            return ""
        return self.argv[0].rsplit("/", 1)[-1]


class Parse:
    __slots__ = ("loops", "problems", "segments")

    def __init__(self) -> None:
        self.segments: list[Segment] = []
        self.problems: list[str] = []
        self.loops = False  # while/until/for/select: the order of segments may repeat


class _Unparsable(Exception):
    pass


_OPERATORS = ("&&", "||", ";;", "|&", "|", ";", "&", "\n", "(", ")")
_REDIR_OPS = ("<<<", "<<-", "<<", "&>>", "&>", ">>", ">|", "<>", ">&", "<&", ">", "<")


class _Tok:
    __slots__ = ("fd", "kind", "subs", "value", "word")

    def __init__(self, kind: str, value: str, word: Word | None = None,
                 subs: list[str] | None = None, fd: str = "") -> None:
        self.kind = kind  # "word" | "op" | "redir"
        self.value = value
        self.word = word
        self.subs = subs if subs is not None else []  # command substitutions in the word
        self.fd = fd


class _Lexer:
    def __init__(self, src: str):
        self.s = src
        self.i = 0
        self.n = len(src)
        self.heredocs: list[tuple[str, bool, bool]] = []  # (delimiter, strip tabs, quoted)
        self.heredoc_bodies: list[str] = []
        self.expanding_heredoc = False  # a body with $, ` or \\ under an unquoted delimiter

    def error(self, msg: str) -> _Unparsable:
        return _Unparsable(msg)

    def _read_balanced(self, open_: str, close: str) -> str:
        """Read from just after ``$(`` (or ``<(``) to the matching ``)``,
        honouring quotes and nesting; returns the inner text."""
        depth = 1
        start = self.i
        s, n = self.s, self.n
        while self.i < n:
            c = s[self.i]
            if c == "\\":
                self.i += 2
                continue
            if c == "'":
                j = s.find("'", self.i + 1)
                if j < 0:
                    raise self.error("unterminated single quote")
                self.i = j + 1
                continue
            if c == '"':
                self._skip_double()
                continue
            if c == "`":
                j = self._find_backtick(self.i + 1)
                self.i = j + 1
                continue
            if c == open_:
                depth += 1
            elif c == close:
                depth -= 1
                if depth == 0:
                    inner = s[start : self.i]
                    self.i += 1
                    return inner
            self.i += 1
        raise self.error("unterminated substitution")

    def _skip_double(self) -> None:
        s, n = self.s, self.n
        self.i += 1
        while self.i < n:
            c = s[self.i]
            if c == "\\":
                self.i += 2
                continue
            if c == '"':
                self.i += 1
                return
            if c == "$" and self.i + 1 < n and s[self.i + 1] == "(":
                self.i += 2
                self._read_balanced("(", ")")
                continue
            if c == "`":
                self.i = self._find_backtick(self.i + 1) + 1
                continue
            self.i += 1
        raise self.error("unterminated double quote")

    def _find_backtick(self, j: int) -> int:
        s = self.s
        while j < self.n:
            if s[j] == "\\":
                j += 2
                continue
            if s[j] == "`":
                return j
            j += 1
        raise self.error("unterminated backtick")

    def tokens(self) -> list[_Tok]:
        out: list[_Tok] = []
        s, n = self.s, self.n
        while self.i < n:
            c = s[self.i]
            if c in " \t\r":
                self.i += 1
                continue
            if c == "\\" and self.i + 1 < n and s[self.i + 1] == "\n":
                self.i += 2
                continue
            if c == "#":
                # a comment only at the start of a word
                j = s.find("\n", self.i)
                self.i = n if j < 0 else j
                continue
            if c == "\n":
                out.append(_Tok("op", "\n"))
                self.i += 1
                if self.heredocs:
                    self._read_heredoc_bodies()
                continue
            # redirections, with an optional fd number before them
            m = self._redir_at(self.i)
            if m is not None:
                fd, op, end = m
                self.i = end
                out.append(_Tok("redir", op, fd=fd))
                if op in ("<<", "<<-"):
                    while self.i < n and s[self.i] in " \t":
                        self.i += 1
                    delim = self._word()
                    if delim.word is None or not delim.word.text or delim.subs:
                        raise self.error("here-document without a plain delimiter")
                    self.heredocs.append((delim.word.text, op == "<<-", delim.word.quoted))
                    out.append(delim)
                continue
            if not (c in "<>" and self.i + 1 < n and s[self.i + 1] == "("):
                found = next((o for o in _OPERATORS if s.startswith(o, self.i)), None)
                if found is not None:
                    out.append(_Tok("op", found))
                    self.i += len(found)
                    continue
            out.append(self._word())
        if self.heredocs:
            raise self.error("here-document without its body")
        return out

    def _redir_at(self, i: int) -> tuple[str, str, int] | None:
        s = self.s
        j = i
        while j < self.n and s[j].isdigit():
            j += 1
        fd = s[i:j]
        if fd and (j >= self.n or s[j] not in "<>"):
            return None
        if j < self.n and s[j] in "<>" and j + 1 < self.n and s[j + 1] == "(":
            return None
        for op in _REDIR_OPS:
            if s.startswith(op, j):
                return fd, op, j + len(op)
        if fd == "" and s.startswith("&>", j):
            return "", "&>", j + 2
        return None

    def _read_heredoc_bodies(self) -> None:
        s = self.s
        for delim, strip, quoted in self.heredocs:
            lines: list[str] = []
            while True:
                if self.i >= self.n:
                    raise self.error(f"here-document ended before {delim!r}")
                j = s.find("\n", self.i)
                line = s[self.i :] if j < 0 else s[self.i : j]
                self.i = self.n if j < 0 else j + 1
                check = line.lstrip("\t") if strip else line
                if check == delim:
                    break
                lines.append(line)
            body = "\n".join(lines)
            if not quoted and any(c in body for c in "$`\\"):
                self.expanding_heredoc = True
            self.heredoc_bodies.append(body)
        self.heredocs = []

    def _word(self) -> _Tok:
        s, n = self.s, self.n
        buf: list[str] = []
        dynamic = quoted = glob = quoted_glob = False
        subs: list[str] = []
        if s[self.i] == "~":
            # tilde expansion: only a bare ``~`` or ``~/...`` is modelled (as $HOME);
            # ``~user``, ``~+``, ``~-`` (=$OLDPWD) and ``~N`` are decided at run time
            j = self.i + 1
            if j < n and s[j] not in " \t\r\n;&|()<>/":
                dynamic = True
        while self.i < n:
            c = s[self.i]
            if c in " \t\r\n;&|()":
                break
            if c in "<>":
                if self.i + 1 < n and s[self.i + 1] == "(":
                    self.i += 2
                    subs.append(self._read_balanced("(", ")"))
                    dynamic = True
                    buf.append("\x00")
                    continue
                break
            if c == "\\":
                if self.i + 1 < n:
                    buf.append(s[self.i + 1])
                    quoted_glob = quoted_glob or s[self.i + 1] in "*?["
                self.i += 2
                quoted = True
                continue
            if c == "'":
                j = s.find("'", self.i + 1)
                if j < 0:
                    raise self.error("unterminated single quote")
                part = s[self.i + 1 : j]
                quoted_glob = quoted_glob or any(g in part for g in "*?[")
                buf.append(part)
                self.i = j + 1
                quoted = True
                continue
            if c == "$" and self.i + 1 < n and s[self.i + 1] == "'":
                text, self.i = _ansi_c(s, self.i + 2)
                quoted_glob = quoted_glob or any(g in text for g in "*?[")
                buf.append(text)
                quoted = True
                continue
            if c == "$" and self.i + 1 < n and s[self.i + 1] == '"':
                # $"..." is translated through the message catalogue at run time
                dynamic = True
                self.i += 1
                continue
            if c == '"':
                quoted = True
                self.i += 1
                while True:
                    if self.i >= n:
                        raise self.error("unterminated double quote")
                    d = s[self.i]
                    if d == '"':
                        self.i += 1
                        break
                    if d == "\\" and self.i + 1 < n and s[self.i + 1] in '$`"\\\n':
                        buf.append(s[self.i + 1])
                        self.i += 2
                        continue
                    if d == "$" or d == "`":
                        dyn, sub = self._dollar()
                        dynamic = dynamic or dyn
                        if sub is not None:
                            subs.append(sub)
                        buf.append("\x00")
                        continue
                    quoted_glob = quoted_glob or d in "*?["
                    buf.append(d)
                    self.i += 1
                continue
            if c == "$" or c == "`":
                dyn, sub = self._dollar()
                dynamic = dynamic or dyn
                if sub is not None:
                    subs.append(sub)
                buf.append("\x00")
                continue
            if c in "*?":
                glob = True
            elif c == "[" or (c == "{" and "}" in s[self.i : self.i + 4096]):
                # bracket classes, brace expansion ({a,b}, {a..z}) and {fd}> names
                dynamic = True
            buf.append(c)
            self.i += 1
        text = "".join(buf)
        if glob and quoted_glob:
            dynamic = True  # quoted and unquoted glob characters in one word: not expanded here
        return _Tok("word", text, Word(text.replace("\x00", "$"), dynamic or glob, quoted,
                                       glob and not dynamic), subs)

    def _dollar(self) -> tuple[bool, str | None]:
        """At ``$`` or a backtick: consume the expansion. Returns (dynamic,
        command substitution text or None)."""
        s, n = self.s, self.n
        c = s[self.i]
        if c == "`":
            j = self._find_backtick(self.i + 1)
            inner = s[self.i + 1 : j].replace("\\`", "`").replace("\\\\", "\\")
            self.i = j + 1
            return True, inner
        # c == "$"
        if self.i + 1 >= n:
            self.i += 1
            return False, None  # a lone $ is literal
        d = s[self.i + 1]
        if s.startswith("$((", self.i):
            self.i += 3
            inner = self._read_balanced("(", ")")
            if self.i < n and s[self.i] == ")":
                self.i += 1
            return True, inner if "$(" in inner or "`" in inner else None
        if d == "(":
            self.i += 2
            return True, self._read_balanced("(", ")")
        if d == "{":
            j = s.find("}", self.i + 2)
            if j < 0:
                raise self.error("unterminated ${")
            body = s[self.i + 2 : j]
            self.i = j + 1
            if "$(" in body or "`" in body:
                raise self.error("command substitution inside ${...}")
            return True, None
        if d.isalnum() or d in "_@*#?-$!":
            j = self.i + 1
            if d.isalpha() or d == "_":
                while j < n and (s[j].isalnum() or s[j] == "_"):
                    j += 1
            else:
                j += 1
            self.i = j
            return True, None
        self.i += 1
        return False, None


def _ansi_c(s: str, i: int) -> tuple[str, int]:
    out: list[str] = []
    esc = {"n": "\n", "t": "\t", "r": "\r", "a": "\a", "b": "\b", "e": "\x1b", "E": "\x1b",
           "f": "\f", "v": "\v", "\\": "\\", "'": "'", '"': '"', "?": "?"}
    n = len(s)
    while i < n:
        c = s[i]
        if c == "'":
            return "".join(out), i + 1
        if c == "\\" and i + 1 < n:
            d = s[i + 1]
            if d in esc:
                out.append(esc[d])
                i += 2
                continue
            if d == "x":
                j = i + 2
                while j < n and j < i + 4 and s[j] in "0123456789abcdefABCDEF":
                    j += 1
                out.append(chr(int(s[i + 2 : j] or "0", 16)))
                i = j
                continue
            if d in "01234567":
                j = i + 1
                while j < n and j < i + 4 and s[j] in "01234567":
                    j += 1
                out.append(chr(int(s[i + 1 : j], 8) & 0xFF))
                i = j
                continue
            out.append("\\" + d)
            i += 2
            continue
        out.append(c)
        i += 1
    raise _Unparsable("unterminated $'...'")


def parse(command: str) -> Parse:
    """Split ``command`` into every simple command it would run."""
    result = Parse()
    if not isinstance(command, str):
        result.problems.append("command is not a string")
        return result
    if len(command) > MAX_LENGTH:
        result.problems.append("command is too long to judge")
        return result
    if "\x00" in command:
        result.problems.append("command contains a NUL byte")
        return result
    _parse_into(command, result, 0, "")
    return result


def _parse_into(command: str, result: Parse, depth: int, origin: str) -> None:
    if depth > MAX_DEPTH:
        result.problems.append("commands nested too deeply to judge")
        return
    lexer = _Lexer(command)
    try:
        toks = lexer.tokens()
    except _Unparsable as exc:
        result.problems.append(f"cannot parse the command: {exc}")
        return
    if lexer.expanding_heredoc:
        result.problems.append("a here-document body is expanded at run time (unquoted "
                               "delimiter with $, ` or \\ in the body)")
    bodies = iter(lexer.heredoc_bodies)
    # group tokens into pipelines of simple commands
    pipeline: list[Segment] = []
    cur_words: list[_Tok] = []
    cur_redirs: list[tuple[str, str]] = []
    cur_heredoc: list[str | None] = [None]
    pending_redir: str | None = None
    pending_fd = ""
    paren = 0
    prev_op = ""

    def flush(op: str) -> None:
        nonlocal cur_words, cur_redirs, prev_op
        seg = _segment(cur_words, cur_redirs, cur_heredoc[0], result, depth, origin)
        cur_words, cur_redirs = [], []
        cur_heredoc[0] = None
        piped_next = op in ("|", "|&")
        if seg is not None:
            seg.after = prev_op
            seg.persist = (depth == 0 and paren == 0 and not pipeline and not piped_next
                           and op != "&")
            if pipeline:
                seg.stdin_from_pipe = True
                seg.pipe_sources = [p.argv for p in pipeline]
            pipeline.append(seg)
            result.segments.append(seg)
        if not piped_next:
            pipeline.clear()
        prev_op = op

    for tok in toks:
        if pending_redir is not None:
            if tok.kind != "word" or tok.word is None:
                result.problems.append(f"redirection {pending_redir} has no target")
                return
            op = pending_redir
            pending_redir = None
            for sub in tok.subs:
                _parse_into(sub, result, depth + 1, "$(...)")
            if op in ("<<", "<<-"):
                try:
                    cur_heredoc[0] = next(bodies)
                except StopIteration:
                    result.problems.append("here-document without its body")
                    return
                continue
            if op == "<<<":
                if tok.word.dynamic:
                    result.problems.append("a here-string decided at run time")
                cur_heredoc[0] = tok.word.text
                continue
            target = tok.word.text
            if tok.word.dynamic:
                target = "\x00dynamic:" + target
            cur_redirs.append((pending_fd + op, target))
            continue
        if tok.kind == "redir":
            pending_redir = tok.value
            pending_fd = tok.fd
            continue
        if tok.kind == "word":
            cur_words.append(tok)
            continue
        op = tok.value
        if op in ("(", ")"):
            if cur_words and op == "(":
                # "name ( ) {" : a function definition, or arithmetic we do not model
                result.problems.append("function definitions are not judged; run them as a script")
                return
            flush(prev_op if op == "(" else ";")
            paren += 1 if op == "(" else -1
            if paren < 0:
                result.problems.append("unbalanced parenthesis")
                return
        elif op == ";;":
            result.problems.append("case statements are not judged")
            return
        else:
            flush(op)
    if pending_redir is not None:
        result.problems.append(f"redirection {pending_redir} has no target")
        return
    if paren:
        result.problems.append("unbalanced parenthesis")
    flush("")


def _segment(
    words: list[_Tok],
    redirs: list[tuple[str, str]],
    heredoc: str | None,
    result: Parse,
    depth: int,
    origin: str,
) -> Segment | None:
    for w in words:
        for sub in w.subs:
            _parse_into(sub, result, depth + 1, "$(...)")
    toks = [w for w in words if w.word is not None]
    # leading keywords and assignments
    assignments: list[str] = []
    conditional = False
    while toks:
        t = toks[0].word
        assert t is not None
        if not t.quoted and t.text in KEYWORDS_PREFIX:
            conditional = True
            if t.text in ("while", "until"):
                result.loops = True
            toks = toks[1:]
            continue
        if not t.quoted and t.text in ("for", "select", "case", "function"):
            if t.text in ("case", "function"):
                result.problems.append(f"{t.text} statements are not judged")
            else:
                result.loops = True
            return None
        if not t.quoted and t.text in KEYWORDS_END:
            toks = toks[1:]
            continue
        if _is_assignment(t.text):
            if t.dynamic:
                result.problems.append(f"an assignment decided at run time ({t.text!r})")
            assignments.append(t.text)
            toks = toks[1:]
            continue
        break
    ws = [w.word for w in toks if w.word is not None]
    if not ws:
        if assignments or redirs:
            seg = Segment([], [], redirs, assignments, origin=origin, heredoc=heredoc)
            seg.conditional = conditional
            return seg
        return None
    seg = Segment([w.text for w in ws], [w.dynamic for w in ws], redirs, assignments,
                  heredoc=heredoc, origin=origin)
    seg.globs = [w.glob for w in ws]
    seg.conditional = conditional
    _expand_nested(seg, result, depth)
    return seg


def _is_assignment(text: str) -> bool:
    eq = text.find("=")
    if eq <= 0:
        return False
    name = text[:eq].rstrip("+")
    return name.replace("_", "a").isalnum() and not name[0].isdigit()


def _expand_nested(seg: Segment, result: Parse, depth: int) -> None:
    """Find commands that this one runs (bash -c, eval, xargs, find -exec, env ...)."""
    argv = seg.argv
    name = seg.name
    if name in WRAPPERS:
        inner = _unwrap(name, argv[1:])
        if inner:
            sub = Segment(inner, seg.dynamic[len(argv) - len(inner):], [], origin=name)
            if name == "xargs":
                sub.stdin_from_pipe = seg.stdin_from_pipe
            result.segments.append(sub)
            _expand_nested(sub, result, depth)
        return
    if name in SHELLS:
        script = _shell_c_arg(argv[1:])
        if script is not None and script in argv:
            if seg.dynamic[argv.index(script)]:
                result.problems.append(f"{name} -c runs a script decided at run time")
                return
            _parse_into(script, result, depth + 1, f"{name} -c")
        elif seg.heredoc is not None:
            _parse_into(seg.heredoc, result, depth + 1, f"{name} <<")
        return
    if name == "eval":
        _parse_into(" ".join(argv[1:]), result, depth + 1, "eval")
        return
    if name in ("find", "fd"):
        i = 1
        while i < len(argv):
            if argv[i] in ("-exec", "-execdir", "-ok", "-okdir", "-x", "--exec", "-X",
                           "--exec-batch"):
                j = i + 1
                inner = []
                dyn: list[bool] = []
                while j < len(argv) and argv[j] not in (";", "+"):
                    if argv[j] != "{}":
                        inner.append(argv[j])
                        dyn.append(seg.dynamic[j])
                    j += 1
                if inner:
                    sub = Segment(inner, dyn, [], origin="find -exec")
                    result.segments.append(sub)
                    _expand_nested(sub, result, depth)
                i = j
            i += 1


def _unwrap(name: str, args: list[str]) -> list[str]:
    takes_value = WRAPPERS[name]
    positional = _WRAPPER_POSITIONAL.get(name, 0)
    i = 0
    while i < len(args):
        a = args[i]
        if name == "env" and _is_assignment(a):
            i += 1
            continue
        if a == "--":
            i += 1
            break
        if a.startswith("-") and a != "-":
            if name == "env" and a in ("-S", "--split-string") and i + 1 < len(args):
                return args[i + 1].split()
            if a in takes_value or (name == "xargs" and a in ("-I", "-i")):
                i += 2
            else:
                i += 1
            continue
        break
    rest = args[i:]
    if positional and len(rest) > positional:
        rest = rest[positional:]
    elif positional:
        return []
    return rest


def _shell_c_arg(args: list[str]) -> str | None:
    i = 0
    while i < len(args):
        a = args[i]
        if a == "-c" or (a.startswith("-") and not a.startswith("--") and "c" in a[1:]):
            return args[i + 1] if i + 1 < len(args) else ""
        if a in ("-o", "+o", "-O", "+O"):
            i += 2
            continue
        if a.startswith("-") or a.startswith("+"):
            i += 1
            continue
        return None
    return None
