"""Stand-in action plugin for modules whose real target is missing here.

Installed by the role tests over ``ansible.windows`` (no Windows host) and
``kubernetes.core`` (no Kubernetes API server) in a throwaway copy of those
collections. For each task it:

- validates the task's arguments against the *real* module's documented options
  (types, required, choices, elements, suboptions), as the module would;
- refuses to run outside check mode (it cannot make the change);
- answers the few questions a role asks (``win_stat``: whether a path exists, from
  ``STANDIN_EXISTING``), checks what it can (``win_powershell``: the script supports
  check mode and declares the parameters passed; ``k8s``: the object passes
  kubernetes-validate), and reports the task as a change;
- appends the call (module and arguments) to ``STANDIN_LOG`` for the test to read.

It never executes anything on a host.
"""

from __future__ import annotations

import json
import os
import re

from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.plugins.action import ActionBase
from ansible.plugins.loader import fragment_loader, module_loader
from ansible.utils.plugin_docs import get_docstring

_TYPES = {"str", "int", "bool", "list", "dict", "path", "raw", "float", "jsonarg", "json",
          "bytes", "bits", "sid"}


def _spec(options: dict) -> dict:
    out = {}
    for name, opt in (options or {}).items():
        entry = {"type": opt.get("type", "str") if opt.get("type", "str") in _TYPES else "raw"}
        if entry["type"] == "sid":
            entry["type"] = "str"
        for key in ("required", "choices", "elements", "aliases", "default", "no_log"):
            if key in opt:
                entry[key] = opt[key]
        if entry.get("elements") not in (None, *_TYPES):
            entry["elements"] = "raw"
        if entry.get("elements") == "sid":
            entry["elements"] = "str"
        if "suboptions" in opt:
            entry["options"] = _spec(opt["suboptions"])
        out[name] = entry
    return out


class ActionModule(ActionBase):
    TRANSFERS_FILES = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        name = self._task.action
        short = name.rsplit(".", 1)[-1]
        args = dict(self._task.args)
        ctx = module_loader.find_plugin_with_context(name)
        if not ctx.resolved:
            return {"failed": True, "msg": f"stand-in: no real module {name}"}
        path = ctx.plugin_resolved_path
        doc_path = path[:-4] + ".py" if path.endswith(".ps1") else path
        if not os.path.exists(doc_path):
            doc_path = path[:-4] + ".yml"
        doc = get_docstring(doc_path, fragment_loader,
                            collection_name=".".join(name.split(".")[:2]))[0]
        validator = ArgumentSpecValidator(_spec(doc.get("options", {})))
        checked = validator.validate(args)
        if checked.error_messages:
            return {"failed": True, "msg": f"{name}: " + "; ".join(checked.error_messages)}
        if not self._play_context.check_mode:
            return {"failed": True, "msg": f"stand-in for {name} only runs in check mode"}
        out = {"changed": True, "standin": True}
        if short == "win_stat":
            existing = json.loads(os.environ.get("STANDIN_EXISTING", "[]"))
            out = {"changed": False, "stat": {"exists": args["path"] in existing}}
        elif short == "win_powershell":
            script = args.get("script", "")
            if not re.search(r"\[CmdletBinding\(SupportsShouldProcess", script):
                return {"failed": True, "msg": "script would be skipped in check mode"}
            block = re.search(r"param\((.*?)\n\)", script, re.S)
            names = re.findall(r"\$(\w+)", block.group(1)) if block else []
            declared = {m.lower() for m in names}
            for key in (args.get("parameters") or {}):
                if key.lower() not in declared:
                    return {"failed": True, "msg": f"script has no parameter -{key}"}
        elif short == "k8s":
            import kubernetes_validate

            definition = args.get("definition") or {}
            if not str(definition.get("apiVersion", "")).startswith("projectcalico.org/"):
                try:
                    kubernetes_validate.validate(definition, kubernetes_validate.latest_version(),
                                                 strict=True)
                except kubernetes_validate.ValidationError as exc:
                    return {"failed": True, "msg": f"invalid object: {exc.message}"}
        log = os.environ.get("STANDIN_LOG")
        if log:
            with open(log, "a", encoding="utf-8") as fh:
                fh.write(json.dumps({"module": name, "args": args}, default=str) + "\n")
        result.update(out)
        return result
