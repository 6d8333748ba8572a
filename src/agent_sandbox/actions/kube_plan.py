"""What a Kubernetes plan changes: which operations delete or overwrite objects
or widen access (the gate stops those at a human).

Two shapes are read, nothing else:

- a stream of manifests, YAML (``---`` between documents) or JSON, each an
  object to apply; a ``List`` (``kind: List`` or any ``...List`` with
  ``items``) stands for its items;
- an operations document, ``{"operations": [{"op": OP, "object": {...}}]}``
  with OP one of ``apply``, ``create``, ``delete``, ``replace``.

Every object needs ``apiVersion``, ``kind`` and ``metadata.name`` (a create
may give ``metadata.generateName`` instead).

Destructive signals: every ``delete`` (of a Namespace: everything in it),
every ``replace`` (a PUT: fields not given are dropped), and applies or
creates that are destructive by what they are, judged here as: RBAC objects
(Role, ClusterRole, RoleBinding, ClusterRoleBinding: they change who may do
what), admission webhooks and policies (they see or refuse every later
write), CustomResourceDefinitions (a changed schema or a dropped version can
make stored objects unreadable), a ServiceAccount token Secret (it mints a
credential), a Namespace whose Pod Security label says ``privileged`` (it
lifts the restricted profile), a workload scaled to zero replicas, and an
object that reaches the node (a Pod, a workload's or a CronJob's pod template,
a PersistentVolume, or any other kind that carries these fields): privileged
containers, ``hostPath`` volumes, ``hostNetwork``, ``hostPID``, ``hostIPC``,
``hostPort``, capabilities added beyond ``NET_BIND_SERVICE``,
``allowPrivilegeEscalation`` not false, ``runAsUser: 0``, Windows
``hostProcess``, an unmasked ``/proc``, an unconfined seccomp or AppArmor
profile (what the baseline Pod Security profile forbids). Those fields are
looked for anywhere in the object, their names in any case, outside
``metadata`` and outside ConfigMaps and Secrets (their data is text). A plain
Namespace is not a signal: creating one destroys nothing, and deleting one is
a delete.

PyYAML's safe loader only, and stricter still: a key given twice in one
mapping (which object would the cluster see?) and anchors or aliases (one node
standing for many) make the plan unreadable, as does any shape not above.
Never raises on the document.
"""

from __future__ import annotations

from typing import Any

from .plan_reading import Reading, Unreadable, shown, strict_json, unreadable

OPERATIONS = ("apply", "create", "delete", "replace")
RBAC = frozenset({"Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding"})
ADMISSION = frozenset({"ValidatingWebhookConfiguration", "MutatingWebhookConfiguration",
                       "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding",
                       "MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding"})
SCALABLE = frozenset({"Deployment", "StatefulSet", "ReplicaSet", "ReplicationController"})
POD_SECURITY = "pod-security.kubernetes.io/enforce"
NO_POD_FIELDS = frozenset({"ConfigMap", "Secret"})  # their data is text, not a pod
HOST_NAMESPACES = {"hostnetwork": "hostNetwork", "hostpid": "hostPID", "hostipc": "hostIPC"}
HARMLESS_CAPABILITIES = frozenset({"NET_BIND_SERVICE"})  # the restricted profile allows it
NODE_KEEP = 4  # how many ways an object reaches the node are named
MAX_OBJECTS = 1000


def _loader() -> Any:
    import yaml

    class StrictLoader(yaml.SafeLoader):  # type: ignore[misc]
        """The safe loader, refusing aliases and duplicate keys."""

        def compose_node(self, parent: Any, index: Any) -> Any:
            if self.check_event(yaml.AliasEvent):
                raise Unreadable("the YAML uses an alias (*name): refused")
            event = self.peek_event()
            if getattr(event, "anchor", None):
                raise Unreadable("the YAML uses an anchor (&name): refused")
            return super().compose_node(parent, index)

        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            seen: set[Any] = set()
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=True)
                try:
                    duplicate = key in seen
                    seen.add(key)
                except TypeError:
                    raise Unreadable("a mapping key is not a plain value") from None
                if duplicate:
                    raise Unreadable(f"the key {shown(key)} appears twice in one mapping")
            return super().construct_mapping(node, deep=deep)

    return StrictLoader


def _documents(text: str) -> list[Any]:
    import yaml

    stripped = text.lstrip()
    if stripped.startswith(("{", "[")):
        return [strict_json(text)]
    try:
        return [d for d in yaml.load_all(text, Loader=_loader()) if d is not None]
    except yaml.YAMLError as exc:
        raise Unreadable(f"not YAML: {shown(str(exc).splitlines()[0], 200)}") from None
    except RecursionError:
        raise Unreadable("the YAML is nested too deeply") from None


def read(text: str) -> Reading:
    """What the Kubernetes plan ``text`` changes."""
    try:
        return _read(_documents(text))
    except Unreadable as exc:
        return unreadable(str(exc))


def _operations(docs: list[Any]) -> list[tuple[str, dict[str, Any]]]:
    ops: list[tuple[str, dict[str, Any]]] = []
    if any(isinstance(d, dict) and "operations" in d for d in docs):
        if len(docs) != 1:
            raise Unreadable("an operations document stands alone, not beside manifests")
        doc = docs[0]
        if set(doc) != {"operations"} or not isinstance(doc["operations"], list):
            raise Unreadable('an operations document is {"operations": [...]} and nothing else')
        for i, entry in enumerate(doc["operations"]):
            if not isinstance(entry, dict) or set(entry) != {"op", "object"}:
                raise Unreadable(f"operation {i} is not {{op, object}}")
            if entry["op"] not in OPERATIONS:
                raise Unreadable(f"operation {i}: op {shown(entry['op'], 30)} is not one of "
                                  f"{', '.join(OPERATIONS)}")
            for obj in _expand(entry["object"], f"operation {i}"):
                ops.append((entry["op"], obj))
        return ops
    for i, doc in enumerate(docs):
        for obj in _expand(doc, f"document {i + 1}"):
            ops.append(("apply", obj))
    return ops


def _expand(obj: Any, where: str) -> list[dict[str, Any]]:
    if not isinstance(obj, dict):
        raise Unreadable(f"{where} is not an object")
    kind = obj.get("kind")
    if isinstance(kind, str) and kind.endswith("List") and "items" in obj:
        items = obj["items"]
        if not isinstance(items, list):
            raise Unreadable(f"{where}: a {shown(kind, 40)}'s items is not a list")
        out: list[dict[str, Any]] = []
        for j, item in enumerate(items):
            out.extend(_expand(item, f"{where} item {j}"))
        return out
    return [obj]


def _identity(op: str, obj: dict[str, Any]) -> str:
    api, kind, meta = obj.get("apiVersion"), obj.get("kind"), obj.get("metadata")
    if not isinstance(api, str) or not api or not isinstance(kind, str) or not kind:
        raise Unreadable("an object without apiVersion or kind")
    if not isinstance(meta, dict):
        raise Unreadable(f"a {shown(kind, 40)} without metadata")
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        generated = meta.get("generateName")
        if op == "create" and isinstance(generated, str) and generated:
            name = generated + "*"
        else:
            raise Unreadable(f"a {shown(kind, 40)} without metadata.name")
    namespace = meta.get("namespace")
    if namespace is not None and not isinstance(namespace, str):
        raise Unreadable(f"{shown(kind, 40)} {shown(name)}: metadata.namespace is not text")
    where = f"{shown(namespace)}/" if namespace else ""
    return f"{shown(kind, 40)} {where}{shown(name)}"


def _by_nature(obj: dict[str, Any]) -> str:
    """Why applying ``obj`` is destructive by what it is, or ""."""
    kind = obj.get("kind")
    meta = obj.get("metadata") or {}
    if kind in RBAC:
        return "changes access (RBAC)"
    if kind in ADMISSION:
        return "sees or refuses every later write (admission)"
    if kind == "CustomResourceDefinition":
        return "changes an API (stored objects may become unreadable)"
    if kind == "Secret" and obj.get("type") == "kubernetes.io/service-account-token":
        return "mints a service account token"
    if kind == "Namespace":
        labels = meta.get("labels") if isinstance(meta, dict) else None
        if isinstance(labels, dict) and str(labels.get(POD_SECURITY, "")).strip() == "privileged":
            return "lifts Pod Security to privileged"
    if kind in SCALABLE:
        spec = obj.get("spec")
        if isinstance(spec, dict) and spec.get("replicas") in (0, "0"):
            return "scales to zero replicas"
    return ""


def _off(value: Any) -> bool:
    return value is None or value is False


def _node_reach(key: str, value: Any) -> str:
    """How the field ``key: value`` reaches the node, or ""."""
    key = key.lower()
    if key == "privileged" and not _off(value):
        return "privileged container"
    if key == "allowprivilegeescalation" and not _off(value):
        return "allowPrivilegeEscalation"
    if key in HOST_NAMESPACES and not _off(value):
        return HOST_NAMESPACES[key]
    if key == "hostprocess" and not _off(value):
        return "Windows hostProcess"
    if key == "hostpath" and isinstance(value, dict):
        return f"hostPath volume {shown(value.get('path', '?'), 60)}"
    if key == "hostport" and value not in (None, 0, "0"):
        return f"hostPort {shown(value, 20)}"
    if key == "runasuser" and value in (0, "0") and value is not False:
        return "runs as root (runAsUser 0)"
    if key == "procmount" and str(value).lower() == "unmasked":
        return "procMount Unmasked"
    if key in ("seccompprofile", "apparmorprofile") and isinstance(value, dict) and str(
            value.get("type", "")).lower() == "unconfined":
        return f"{'seccomp' if key == 'seccompprofile' else 'AppArmor'} Unconfined"
    if key == "capabilities" and isinstance(value, dict):
        added = {str(k).lower(): v for k, v in value.items()}.get("add") or []
        names = [str(c).upper().removeprefix("CAP_") for c in added] if isinstance(
            added, list) else ["?"]
        wide = [n for n in names if n not in HARMLESS_CAPABILITIES]
        if wide:
            return "adds capabilities " + ", ".join(shown(n, 30) for n in wide[:5])
    return ""


def _reaches_node(obj: dict[str, Any]) -> str:
    """The ways ``obj`` reaches the node it runs on, or ""."""
    if obj.get("kind") in NO_POD_FIELDS:
        return ""
    found: list[str] = []
    stack: list[Any] = [v for k, v in obj.items() if k != "metadata"]
    while stack:
        value = stack.pop()
        if isinstance(value, list):
            stack.extend(reversed(value))
        elif isinstance(value, dict):
            for key, child in value.items():
                reach = _node_reach(str(key), child)
                if reach:
                    found.append(reach)
            stack.extend(reversed([c for c in value.values() if isinstance(c, (dict, list))]))
    found = list(dict.fromkeys(found))
    if not found:
        return ""
    more = f", +{len(found) - NODE_KEEP} more" if len(found) > NODE_KEEP else ""
    return f"reaches the node ({', '.join(found[:NODE_KEEP])}{more})"


def _read(docs: list[Any]) -> Reading:
    ops = _operations(docs)
    if len(ops) > MAX_OBJECTS:
        raise Unreadable(f"more than {MAX_OBJECTS} objects")
    changes: list[str] = []
    signals: list[str] = []
    for op, obj in ops:
        what = f"{op} {_identity(op, obj)}"
        changes.append(what)
        if op == "delete":
            extra = " (and everything in it)" if obj.get("kind") == "Namespace" else ""
            signals.append(what + extra)
        elif op == "replace":
            signals.append(what + " (fields not given are dropped)")
        if op != "delete":
            for nature in (_by_nature(obj), _reaches_node(obj)):
                if nature:
                    signals.append(f"{what}: {nature}")
    if not changes:
        changes.append("no objects")
    return Reading(changes=tuple(changes), signals=tuple(signals), writes=bool(ops))
