"""One error tree: every exception class the package defines derives from
``agent_sandbox.errors.SandboxError`` (errors.py says every user error is one),
except the few listed here with the reason they are not user errors.

The walk imports every module of the package and looks at the classes each
defines itself, so a new module with its own ``class FooError(ValueError)``
fails here."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import agent_sandbox
from agent_sandbox.errors import SandboxError

# qualified name -> why it is not a SandboxError
NOT_USER_ERRORS = {
    "agent_sandbox.hooks.tool_call.OutOfTime":
        "the hook's own deadline: a BaseException so that no `except Exception` swallows it",
    "agent_sandbox.install.rendered_files.Refused":
        "runs alone on a host before agent-sandbox is installed there (stdlib only); "
        "its command line and the Ansible module turn it into a failed result",
    "agent_sandbox.install.rendered_files.StepFailed":
        "as Refused (a kind of it): a host step of the bundle that exited non-zero",
    "agent_sandbox.install.rendered_files.Written":
        "as Refused: a failure after some files were written, reported as a result",
}


def package_exceptions() -> dict[str, type[BaseException]]:
    found: dict[str, type[BaseException]] = {}
    for info in pkgutil.walk_packages(agent_sandbox.__path__, "agent_sandbox."):
        if info.name.endswith("__main__"):
            continue
        module = importlib.import_module(info.name)
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if issubclass(cls, BaseException) and cls.__module__ == info.name:
                found[f"{cls.__module__}.{cls.__qualname__}"] = cls
    return found


def outside_tree(classes: dict[str, type[BaseException]]) -> list[str]:
    return sorted(name for name, cls in classes.items()
                  if not issubclass(cls, SandboxError) and name not in NOT_USER_ERRORS)


def test_every_exception_class_is_a_sandbox_error() -> None:
    classes = package_exceptions()
    assert len(classes) >= 20, sorted(classes)  # the walk reached the whole package
    assert outside_tree(classes) == []


def test_the_allow_list_names_classes_that_exist() -> None:
    classes = package_exceptions()
    stale = sorted(set(NOT_USER_ERRORS) - set(classes))
    assert stale == [], f"allow-listed classes that no longer exist: {stale}"
    inside = sorted(n for n in NOT_USER_ERRORS if issubclass(classes[n], SandboxError))
    assert inside == [], f"allow-listed but already in the tree (drop them): {inside}"


def test_control_a_class_outside_the_tree_is_reported() -> None:
    class StrayError(ValueError):
        pass

    class TreeError(SandboxError, ValueError):
        pass

    assert outside_tree({"agent_sandbox.x.StrayError": StrayError,
                         "agent_sandbox.x.TreeError": TreeError}) == ["agent_sandbox.x.StrayError"]
