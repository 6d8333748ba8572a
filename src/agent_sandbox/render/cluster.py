"""Cluster artifacts: where infrastructure actions run, and what they may reach.

Rendered when ``spec.cluster.enabled`` (for whichever host applies them, usually
the Ansible controller), under ``<prefix>/cluster/``:

- ``00-runtimeclass.yaml``: the gVisor RuntimeClass (handler ``runsc``);
- ``01-namespace.yaml``: the sandbox Namespace with Pod Security ``restricted``
  labels (enforce, audit, warn) and the runner ServiceAccount with no token
  automount;
- ``10-networkpolicy.yaml``: Kubernetes NetworkPolicy, default-deny (ingress and
  egress) plus explicit egress allows: DNS, the API server by endpoint address,
  the allowed CIDRs and the egress proxy;
- ``20-calico.yaml`` (``spec.cluster.calico``): the same as Calico
  ``projectcalico.org/v3`` policies with an order: a namespaced NetworkPolicy
  (order 100) allows, a GlobalNetworkPolicy (order 2000) denies the rest.
  Open-source Calico has no domain rules, so allowed *domains* are reached only
  through the egress proxy, which filters them; the files say so;
- ``30-runner-job.yaml``: the Job template for one-shot runner pods (gVisor,
  no service-account token, the credential mounted as a file and never as an
  environment variable, resource limits, a deadline, non-root, read-only root);
- ``vault/<role>.hcl`` and ``vault/roles.json``: Vault/OpenBao policies and
  Kubernetes secrets engine roles, one per action scope, which
  ``agent_sandbox.vault`` applies idempotently.

Pure: (spec, facts) -> artifacts. Never writes files or starts processes.
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Iterable
from typing import Any

import yaml

from ..inventory import HostFacts
from ..spec.models import Cluster, Spec, VaultRole
from . import Artifact, RenderError, json_bytes, memo

RUNTIME_CLASS = "gvisor"
SERVICE_ACCOUNT = "agent-sandbox-runner"
CREDENTIAL_SECRET = "agent-sandbox-credential"  # noqa: S105 (a Secret object name)
CREDENTIAL_DIR = "/var/run/secrets/agent-sandbox"
RUNNER_UID = 65532
JOB_DEADLINE_S = 900
DOMAINS_NOTE = ("Open-source Calico has no domain rules: allowed domains are reached only "
                "through the egress proxy, which filters them by name.")
API_PORTS = (443, 6443)
CALICO_ALLOW_ORDER = 100
CALICO_DENY_ORDER = 2000


def cluster_dir(facts: HostFacts) -> str:
    return f"{facts.prefix}/cluster"


def _cidr(value: str, where: str) -> str:
    try:
        return str(ipaddress.ip_network(value, strict=False))
    except ValueError:
        raise RenderError(f"{where}: {value!r} is not an IP address or CIDR") from None


def _proxy(value: str) -> dict[str, Any]:
    """``host:port`` of the egress proxy: an IP, or ``service.namespace[.svc...]``."""
    m = re.fullmatch(r"\[?([^\]]+?)\]?:(\d{1,5})", value.strip())
    if not m or not 1 <= int(m.group(2)) <= 65535:
        raise RenderError(f"cluster.egress_proxy: {value!r} must be host:port")
    host, port = m.group(1), int(m.group(2))
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        parts = host.split(".")
        if len(parts) < 2 or not all(re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", p)
                                     for p in parts[:2]):
            raise RenderError(f"cluster.egress_proxy: {value!r} must be IP:port or "
                              "service.namespace[.svc.cluster.local]:port") from None
        return {"service": parts[0], "namespace": parts[1], "port": port}
    suffix = 32 if ip.version == 4 else 128
    return {"cidr": f"{ip}/{suffix}", "port": port}


def _labels(extra: dict[str, str] | None = None) -> dict[str, str]:
    return {"app.kubernetes.io/managed-by": "agent-sandbox",
            "app.kubernetes.io/part-of": "agent-sandbox", **(extra or {})}


# ------------------------------------------------------------------- Kubernetes


def runtime_class() -> dict[str, Any]:
    return {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
            "metadata": {"name": RUNTIME_CLASS, "labels": _labels()}, "handler": "runsc"}


def namespace(cl: Cluster) -> list[dict[str, Any]]:
    pss = {f"pod-security.kubernetes.io/{mode}": "restricted"
           for mode in ("enforce", "audit", "warn")}
    pss.update({f"pod-security.kubernetes.io/{mode}-version": "latest"
                for mode in ("enforce", "audit", "warn")})
    return [
        {"apiVersion": "v1", "kind": "Namespace",
         "metadata": {"name": cl.namespace, "labels": _labels(pss)}},
        {"apiVersion": "v1", "kind": "ServiceAccount",
         "metadata": {"name": SERVICE_ACCOUNT, "namespace": cl.namespace, "labels": _labels()},
         "automountServiceAccountToken": False},
    ]


def network_policies(cl: Cluster) -> list[dict[str, Any]]:
    egress: list[dict[str, Any]] = [{
        "to": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name":
                                                      "kube-system"}},
                "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}}}],
        "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}],
    }]
    api = [_cidr(c, "cluster.api_server") for c in cl.api_server]
    if api:
        egress.append({"to": [{"ipBlock": {"cidr": c}} for c in api],
                       "ports": [{"protocol": "TCP", "port": p} for p in API_PORTS]})
    allowed = [_cidr(c, "cluster.allowed_cidrs") for c in cl.allowed_cidrs]
    if allowed:
        egress.append({"to": [{"ipBlock": {"cidr": c}} for c in allowed]})
    if cl.egress_proxy:
        px = _proxy(cl.egress_proxy)
        if "cidr" in px:
            peer: dict[str, Any] = {"ipBlock": {"cidr": px["cidr"]}}
        else:
            peer = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name":
                                                          px["namespace"]}},
                    "podSelector": {"matchLabels": {"app.kubernetes.io/name": px["service"]}}}
        egress.append({"to": [peer], "ports": [{"protocol": "TCP", "port": px["port"]}]})
    return [
        {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
         "metadata": {"name": "agent-sandbox-default-deny", "namespace": cl.namespace,
                      "labels": _labels()},
         "spec": {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}},
        {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
         "metadata": {"name": "agent-sandbox-allow-egress", "namespace": cl.namespace,
                      "labels": _labels(),
                      "annotations": {"agent-sandbox/domains": DOMAINS_NOTE}},
         "spec": {"podSelector": {}, "policyTypes": ["Egress"], "egress": egress}},
    ]


def calico_policies(cl: Cluster) -> list[dict[str, Any]]:
    note = {"annotations": {"agent-sandbox/domains": DOMAINS_NOTE}}
    rules: list[dict[str, Any]] = []
    for proto in ("UDP", "TCP"):
        rules.append({"action": "Allow", "protocol": proto,
                      "destination": {"selector": "k8s-app == 'kube-dns'",
                                      "namespaceSelector":
                                          "projectcalico.org/name == 'kube-system'",
                                      "ports": [53]}})
    api = [_cidr(c, "cluster.api_server") for c in cl.api_server]
    if api:
        rules.append({"action": "Allow", "protocol": "TCP",
                      "destination": {"nets": api, "ports": list(API_PORTS)}})
    allowed = [_cidr(c, "cluster.allowed_cidrs") for c in cl.allowed_cidrs]
    if allowed:
        rules.append({"action": "Allow", "destination": {"nets": allowed}})
    if cl.egress_proxy:
        px = _proxy(cl.egress_proxy)
        if "cidr" in px:
            dest: dict[str, Any] = {"nets": [px["cidr"]], "ports": [px["port"]]}
        else:
            dest = {"selector": f"app.kubernetes.io/name == '{px['service']}'",
                    "namespaceSelector": f"projectcalico.org/name == '{px['namespace']}'",
                    "ports": [px["port"]]}
        rules.append({"action": "Allow", "protocol": "TCP", "destination": dest,
                      "metadata": note})
    return [
        {"apiVersion": "projectcalico.org/v3", "kind": "NetworkPolicy",
         "metadata": {"name": "agent-sandbox-allow-egress", "namespace": cl.namespace,
                      "labels": _labels()},
         "spec": {"order": CALICO_ALLOW_ORDER, "selector": "all()", "types": ["Egress"],
                  "egress": rules}},
        {"apiVersion": "projectcalico.org/v3", "kind": "GlobalNetworkPolicy",
         "metadata": {"name": "agent-sandbox-default-deny", "labels": _labels()},
         "spec": {"order": CALICO_DENY_ORDER,
                  "namespaceSelector": f"projectcalico.org/name == '{cl.namespace}'",
                  "selector": "all()", "types": ["Ingress", "Egress"],
                  "ingress": [{"action": "Deny"}],
                  "egress": [{"action": "Deny", "metadata": note}]}},
    ]


def runner_job(cl: Cluster) -> dict[str, Any]:
    env: list[dict[str, Any]] = [
        {"name": "AGENT_SANDBOX_CREDENTIAL_FILE", "value": f"{CREDENTIAL_DIR}/token"},
        {"name": "HOME", "value": "/tmp"},
    ]
    if cl.egress_proxy:
        url = f"http://{cl.egress_proxy}"
        env += [{"name": n, "value": url} for n in ("HTTPS_PROXY", "HTTP_PROXY",
                                                     "https_proxy", "http_proxy")]
        env += [{"name": n, "value": "localhost,127.0.0.1"} for n in ("NO_PROXY", "no_proxy")]
    pod: dict[str, Any] = {
        "serviceAccountName": SERVICE_ACCOUNT,
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "restartPolicy": "Never",
        "securityContext": {"runAsNonRoot": True, "runAsUser": RUNNER_UID,
                            "runAsGroup": RUNNER_UID, "fsGroup": RUNNER_UID,
                            "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [{
            "name": "runner",
            "image": cl.runner_image,
            "imagePullPolicy": "IfNotPresent",
            "command": ["/bin/sh", "-c", "exit 64"],
            "env": env,
            "securityContext": {"allowPrivilegeEscalation": False,
                                "readOnlyRootFilesystem": True,
                                "runAsNonRoot": True,
                                "capabilities": {"drop": ["ALL"]},
                                "seccompProfile": {"type": "RuntimeDefault"}},
            "resources": {"requests": {"cpu": "250m", "memory": "256Mi",
                                       "ephemeral-storage": "256Mi"},
                          "limits": {"cpu": "1", "memory": "1Gi",
                                     "ephemeral-storage": "1Gi"}},
            "volumeMounts": [
                {"name": "credential", "mountPath": CREDENTIAL_DIR, "readOnly": True},
                {"name": "tmp", "mountPath": "/tmp"},
            ],
        }],
        "volumes": [
            {"name": "credential", "secret": {"secretName": CREDENTIAL_SECRET,
                                              "defaultMode": 0o400}},
            {"name": "tmp", "emptyDir": {"sizeLimit": "512Mi"}},
        ],
    }
    if cl.gvisor:
        pod["runtimeClassName"] = RUNTIME_CLASS
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"generateName": "agent-sandbox-run-", "namespace": cl.namespace,
                     "labels": _labels({"agent-sandbox/role": "runner"})},
        "spec": {"backoffLimit": 0, "activeDeadlineSeconds": JOB_DEADLINE_S,
                 "ttlSecondsAfterFinished": 600,
                 "template": {"metadata": {"labels": _labels({"agent-sandbox/role": "runner"})},
                              "spec": pod}},
    }


# ------------------------------------------------------------------------ Vault


def policy_name(role: VaultRole) -> str:
    return f"agent-sandbox-{role.name}"


def _hcl_string(text: str) -> str:
    return json.dumps(text)  # HCL strings take JSON escapes


def vault_policy(cl: Cluster, role: VaultRole) -> str:
    mount = cl.vault.kubernetes_mount.strip("/")
    return (
        f"# agent-sandbox: mint a Kubernetes credential for the {role.name!r} action only\n"
        f"# (namespaces: {', '.join(role.namespaces)}). Rendered; do not edit.\n"
        f"path {_hcl_string(f'{mount}/creds/{role.name}')} {{\n"
        '  capabilities = ["update"]\n'
        "}\n"
    )


def vault_role(role: VaultRole, where: str) -> dict[str, Any]:
    if not role.rules:
        raise RenderError(f"{where}.rules: a role needs at least one Kubernetes RBAC rule")
    ttl = int(role.ttl)
    if ttl <= 0:
        raise RenderError(f"{where}.ttl: must be positive")
    return {
        "allowed_kubernetes_namespaces": sorted(role.namespaces),
        "generated_role_rules": json.dumps({"rules": role.rules}, sort_keys=True),
        "kubernetes_role_type": "Role",
        "token_default_ttl": ttl,
        "token_max_ttl": ttl,
    }


def vault_plan(cl: Cluster) -> dict[str, Any]:
    """What ``agent_sandbox.vault.apply`` writes: the mount, policies and roles."""
    mount = cl.vault.kubernetes_mount.strip("/")
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*(/[A-Za-z0-9_.-]+)*", mount):
        raise RenderError(f"cluster.vault.kubernetes_mount: {mount!r} is not a mount path")
    seen: set[str] = set()
    policies: dict[str, str] = {}
    roles: dict[str, dict[str, Any]] = {}
    for i, role in enumerate(cl.vault.roles):
        if role.name in seen:
            raise RenderError(f"cluster.vault.roles[{i}].name: {role.name!r} is listed twice")
        seen.add(role.name)
        policies[policy_name(role)] = vault_policy(cl, role)
        roles[role.name] = vault_role(role, f"cluster.vault.roles[{i}]")
    return {"address": cl.vault.address, "kubernetes_mount": mount,
            "policies": policies, "roles": roles}


# ------------------------------------------------------------------------ render


def _yaml(docs: list[dict[str, Any]], header: str) -> bytes:
    body: str = yaml.safe_dump_all(docs, sort_keys=True, default_flow_style=False, width=100)
    return (header + body).encode()


HEADER = "# Rendered by agent-sandbox; do not edit.\n"
CALICO_HEADER = (HEADER + "# " + DOMAINS_NOTE + "\n"
                 "# Order: the namespaced allow policy (100) is evaluated before the global "
                 "deny (2000).\n")


def _artifacts(spec: Spec, facts: HostFacts) -> list[Artifact]:
    cl = spec.cluster
    base = cluster_dir(facts)
    out: list[Artifact] = []
    if cl.gvisor:
        out.append(Artifact(f"{base}/00-runtimeclass.yaml", _yaml([runtime_class()], HEADER),
                            0o644, "k8s"))
    out.append(Artifact(f"{base}/01-namespace.yaml", _yaml(namespace(cl), HEADER), 0o644, "k8s"))
    out.append(Artifact(f"{base}/10-networkpolicy.yaml",
                        _yaml(network_policies(cl), HEADER + "# " + DOMAINS_NOTE + "\n"),
                        0o644, "k8s"))
    if cl.calico:
        out.append(Artifact(f"{base}/20-calico.yaml", _yaml(calico_policies(cl), CALICO_HEADER),
                            0o644, "calico"))
    out.append(Artifact(f"{base}/30-runner-job.yaml", _yaml([runner_job(cl)], HEADER), 0o644,
                        "k8s-job-template"))
    plan = vault_plan(cl)
    for name, hcl in plan["policies"].items():
        out.append(Artifact(f"{base}/vault/{name}.hcl", hcl.encode(), 0o644, "vault-policy"))
    out.append(Artifact(f"{base}/vault/roles.json", json_bytes(plan), 0o644, "vault-roles"))
    return out


def render(spec: Spec, facts: HostFacts) -> Iterable[Artifact]:
    if not spec.cluster.enabled:
        return ()
    result: list[Artifact] = memo(spec, ("cluster", facts.prefix),
                                  lambda: _artifacts(spec, facts))
    return result
