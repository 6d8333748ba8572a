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
executes or expands anything. The words themselves come from ``shell_lexer``.
"""

from __future__ import annotations

from .shell_lexer import Lexer, Tok, Unparsable

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


# Plain classes, not dataclasses: importing dataclasses costs the hook ~10 ms.
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
    lexer = Lexer(command)
    try:
        toks = lexer.tokens()
    except Unparsable as exc:
        result.problems.append(f"cannot parse the command: {exc}")
        return
    if lexer.expanding_heredoc:
        result.problems.append("a here-document body is expanded at run time (unquoted "
                               "delimiter with $, ` or \\ in the body)")
    bodies = iter(lexer.heredoc_bodies)
    # group tokens into pipelines of simple commands
    pipeline: list[Segment] = []
    cur_words: list[Tok] = []
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
    words: list[Tok],
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
