"""Load spec layers from YAML, keeping where every key came from.

``load_layer`` parses one file into a ``Layer``: the raw mapping plus a map from
key paths to (line, column). ``load_stack`` validates each layer, merges them
in order (fleet -> group -> host -> repository) with ``layers.merge`` and
validates the result. Every problem is collected and raised together as one
``SpecError`` whose lines read ``file:line:column: key.path: message``.

Never raises anything but ``SpecError`` for bad input.
"""

from __future__ import annotations

import os
import stat
from typing import Any

import yaml
from pydantic import ValidationError

from ..errors import Problem, SpecError
from ..repo_layout import SANDBOX
from .layer import Layer, Path_, clean_loc, dotted, message, validate_layer
from .models import Spec

MAX_NODES = 200_000
MAX_DEPTH = 64
MAX_BYTES = 4 * 1024 * 1024


class _Loader(yaml.SafeLoader):  # type: ignore[misc]
    pass


# the node graph comes from libyaml where PyYAML was built with it (several times
# faster than the pure-Python parser, the same nodes and marks); scalars are then
# constructed with the safe constructor either way
_COMPOSER = getattr(yaml, "CSafeLoader", _Loader)


def _construct(node: yaml.Node, path: Path_, positions: dict[Path_, tuple[int, int]],
               counter: list[int], depth: int, source: str) -> Any:
    counter[0] += 1
    if counter[0] > MAX_NODES:
        raise SpecError([Problem(source, node.start_mark.line + 1, node.start_mark.column + 1,
                                 dotted(path), f"document expands to more than {MAX_NODES} nodes "
                                 "(aliases?); refusing to load it")])
    if depth > MAX_DEPTH:
        raise SpecError([Problem(source, node.start_mark.line + 1, node.start_mark.column + 1,
                                 dotted(path), f"nesting deeper than {MAX_DEPTH} levels")])
    positions.setdefault(path, (node.start_mark.line + 1, node.start_mark.column + 1))
    if isinstance(node, yaml.MappingNode):
        out: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                raise SpecError([Problem(source, key_node.start_mark.line + 1,
                                         key_node.start_mark.column + 1, dotted(path),
                                         "YAML merge keys (<<) are not supported in specs")])
            key = _scalar(key_node, path, source)
            if not isinstance(key, (str, int, float, bool)) or key is None:
                raise SpecError([Problem(source, key_node.start_mark.line + 1,
                                         key_node.start_mark.column + 1, dotted(path),
                                         "mapping keys must be plain scalars")])
            key = str(key) if not isinstance(key, str) else key
            if key == "<<":
                raise SpecError([Problem(source, key_node.start_mark.line + 1,
                                         key_node.start_mark.column + 1, dotted(path),
                                         "YAML merge keys (<<) are not supported in specs")])
            if key in out:
                raise SpecError([Problem(source, key_node.start_mark.line + 1,
                                         key_node.start_mark.column + 1, dotted((*path, key)),
                                         "duplicate key")])
            sub = (*path, key)
            positions[sub] = (key_node.start_mark.line + 1, key_node.start_mark.column + 1)
            out[key] = _construct(value_node, sub, positions, counter, depth + 1, source)
        return out
    if isinstance(node, yaml.SequenceNode):
        return [
            _construct(item, (*path, i), positions, counter, depth + 1, source)
            for i, item in enumerate(node.value)
        ]
    return _scalar(node, path, source)


def _scalar(node: yaml.Node, path: Path_, source: str) -> Any:
    """Construct one scalar (or a key) with the safe loader; errors keep the node's place."""
    if not isinstance(node, yaml.ScalarNode):
        raise SpecError([Problem(source, node.start_mark.line + 1, node.start_mark.column + 1,
                                 dotted(path), "mapping keys must be plain scalars")])
    try:
        return _Loader.construct_object(_LOADER_SINGLETON, node, deep=True)
    except yaml.YAMLError as exc:
        problem = getattr(exc, "problem", None) or "cannot read this value"
        raise SpecError([Problem(source, node.start_mark.line + 1, node.start_mark.column + 1,
                                 dotted(path), f"invalid YAML value: {problem}")]) from None
    except (ValueError, TypeError, OverflowError) as exc:
        raise SpecError([Problem(source, node.start_mark.line + 1, node.start_mark.column + 1,
                                 dotted(path), f"invalid YAML value: {exc}")]) from None


_LOADER_SINGLETON = _Loader("")


def parse_yaml(text: str, source: str) -> Layer:
    """Parse YAML text into a Layer, or raise SpecError with the position."""
    if len(text) > MAX_BYTES:
        raise SpecError([Problem(source, 1, 1, "", f"file is larger than {MAX_BYTES} bytes")])
    try:
        docs = list(yaml.compose_all(text, Loader=_COMPOSER))
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line, col = (mark.line + 1, mark.column + 1) if mark else (1, 1)
        msg = " ".join(x for x in (exc.context, exc.problem) if x) or "invalid YAML"
        raise SpecError([Problem(source, line, col, "", f"invalid YAML: {msg}")]) from None
    except yaml.YAMLError as exc:
        raise SpecError([Problem(source, 1, 1, "", f"invalid YAML: {exc}")]) from None
    except (ValueError, RecursionError) as exc:
        raise SpecError([Problem(source, 1, 1, "", f"invalid YAML: {exc}")]) from None
    docs = [d for d in docs if d is not None]
    if not docs:
        return Layer(source, {}, {(): (1, 1)})
    if len(docs) > 1:
        raise SpecError([Problem(source, docs[1].start_mark.line + 1, 1, "",
                                 "a spec file holds one YAML document")])
    root = docs[0]
    positions: dict[Path_, tuple[int, int]] = {}
    try:
        data = _construct(root, (), positions, [0], 0, source)
    except RecursionError:
        raise SpecError([Problem(source, 1, 1, "", "document is nested too deeply")]) from None
    except yaml.YAMLError as exc:
        raise SpecError([Problem(source, 1, 1, "", f"invalid YAML: {exc}")]) from None
    except (ValueError, TypeError) as exc:
        raise SpecError([Problem(source, 1, 1, "", f"invalid YAML value: {exc}")]) from None
    if not isinstance(data, dict):
        raise SpecError([Problem(source, root.start_mark.line + 1, root.start_mark.column + 1,
                                 "", "a spec must be a mapping of keys "
                                 "(filesystem:, network:, ...)")])
    return Layer(source, data, positions)


def load_layer(path: str) -> Layer:
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read(MAX_BYTES + 1)
    except FileNotFoundError:
        raise SpecError([Problem(path, 1, 1, "", "file not found")]) from None
    except IsADirectoryError:
        raise SpecError([Problem(path, 1, 1, "", "is a directory, not a spec file")]) from None
    except UnicodeDecodeError as exc:
        raise SpecError([Problem(path, 1, 1, "", f"not UTF-8 text: {exc.reason}")]) from None
    except OSError as exc:
        raise SpecError([Problem(path, 1, 1, "", f"cannot read: {exc.strerror}")]) from None
    layer = parse_yaml(text, path)
    layer.name = os.path.basename(path)
    import_codex_rules(layer, layer_base(path))
    if os.path.basename(os.path.dirname(os.path.abspath(path))) == SANDBOX:
        layer.base = layer_base(path)
    return layer


def layer_base(path: str) -> str:
    """The folder a layer's relative paths start from: the repository for a
    repository layer (``<repo>/.sandbox/*.yml``), else the file's folder."""
    folder = os.path.dirname(os.path.abspath(path))
    return os.path.dirname(folder) if os.path.basename(folder) == SANDBOX else folder


def import_codex_rules(layer: Layer, base: str) -> None:
    """Replace ``commands.codex_rules_files`` by the ``prefix_rule`` calls those
    files hold, appended to the layer's ``commands.rules``.

    Imported rules are this layer's rules for everything that follows (their
    examples are checked, and layering treats them like rules written here);
    problems point at the file's entry in ``codex_rules_files``.
    """
    from .rules import RuleSyntaxError, parse_codex_rules

    commands = layer.data.get("commands")
    if not isinstance(commands, dict):
        return
    files = commands.get("codex_rules_files")
    if not isinstance(files, list) or not files:
        return
    rules = commands.setdefault("rules", [])
    if not isinstance(rules, list):
        return  # the model reports the wrong type
    problems = []
    for i, name in enumerate(files):
        where = ("commands", "codex_rules_files", i)
        if not isinstance(name, str) or not name:
            continue  # the model reports the wrong type
        path = name if os.path.isabs(name) else os.path.join(base, name)
        try:
            if not stat.S_ISREG(os.stat(path).st_mode):
                problems.append(layer.problem(where, f"{path} is not a regular file"))
                continue
            with open(path, encoding="utf-8") as fh:
                source = fh.read(MAX_BYTES + 1)
            imported = parse_codex_rules(source, name)
        except (OSError, UnicodeDecodeError) as exc:
            reason = getattr(exc, "strerror", None) or str(exc)
            problems.append(layer.problem(where, f"cannot read Codex rules {path}: {reason}"))
            continue
        except (RuleSyntaxError, ValueError, RecursionError, MemoryError) as exc:
            problems.append(layer.problem(where, f"invalid Codex rules: {exc}"))
            continue
        for rule in imported:
            rule.setdefault("reason", f"from {name}")
            layer.positions[("commands", "rules", len(rules))] = layer.where(where)
            rules.append(rule)
    if problems:
        raise SpecError(problems)
    commands["codex_rules_files"] = []


def load_stack(layers: list[Layer]) -> Spec:
    """Validate each layer, merge them in order, validate the result."""
    from .layers import merge

    problems: list[Problem] = []
    specs: list[Spec] = []
    for layer in layers:
        spec, found = validate_layer(layer)
        problems.extend(found)
        if spec is not None:
            specs.append(spec)
    if problems:
        # The layers above the first broken one can still be merged soundly:
        # report their loosenings too, so one run shows every problem it can.
        valid = 0
        while valid < len(layers) and valid < len(specs) and \
                specs[valid] is not None and not _has_problem(layers[valid], problems):
            valid += 1
        if valid >= 2:
            problems.extend(merge(layers[:valid], specs[:valid])[1])
        raise SpecError(problems)
    from .actions import ActionOverride

    # one layer is its own result, unless it only adjusts actions nobody declared
    # (the merge reports those)
    if len(layers) == 1 and not any(isinstance(a, ActionOverride)
                                    for a in specs[0].actions.values()):
        return specs[0]
    merged, found = merge(layers, specs)
    if found:
        raise SpecError(found)
    try:
        return Spec.model_validate(merged)
    except ValidationError as exc:
        last = layers[-1] if layers else Layer("<merged>", {})
        raise SpecError([last.problem(clean_loc(e["loc"]), message(e))
                         for e in exc.errors(include_url=False)]) from None


def _has_problem(layer: Layer, problems: list[Problem]) -> bool:
    return any(p.file == layer.source for p in problems)


def load_spec(*paths: str) -> Spec:
    """Load one spec file, or a stack of them (first is the most managed)."""
    return load_stack([load_layer(p) for p in paths])
