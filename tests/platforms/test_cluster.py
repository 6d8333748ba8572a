"""Cluster: Kubernetes objects validated with kubernetes-validate (strict),
Calico policies validated against the projectcalico.org/v3 CRD schemas with
``additionalProperties: false`` added to every object that declares properties
(strict), plus semantic checks. No Kubernetes API server exists here: nothing
is applied to a cluster in these tests.
"""

from __future__ import annotations

import copy
import functools
import json

import jsonschema
import kubernetes_validate
import pytest
import yaml

from agent_sandbox.inventory import HostFacts
from agent_sandbox.render import RenderError, cluster
from agent_sandbox.spec.models import Spec

K8S_VERSION = kubernetes_validate.latest_version()

CLUSTER = {
    "enabled": True,
    "namespace": "agent-sandbox",
    "api_server": ["10.96.0.1/32", "192.0.2.10"],
    "allowed_cidrs": ["198.51.100.0/24"],
    "egress_proxy": "egress-proxy.agent-sandbox-egress.svc:3128",
    "vault": {"address": "http://127.0.0.1:8200", "kubernetes_mount": "kubernetes",
              "roles": [
                  {"name": "deploy-staging", "namespaces": ["staging"], "ttl": "10m",
                   "rules": [{"apiGroups": ["apps"], "resources": ["deployments"],
                              "verbs": ["get", "list", "patch"]}]},
                  {"name": "read-prod", "namespaces": ["prod", "prod-jobs"],
                   "rules": [{"apiGroups": [""], "resources": ["pods", "pods/log"],
                              "verbs": ["get", "list"]}]},
              ]},
}


def _spec(**over) -> Spec:
    data = copy.deepcopy(CLUSTER)
    data.update(over)
    return Spec.model_validate({"cluster": data})


def _docs(spec: Spec) -> dict[str, list[dict]]:
    arts = cluster.render(spec, HostFacts("controller"))
    out = {}
    for a in arts:
        if a.target.endswith(".yaml"):
            out[a.target.rsplit("/", 1)[1]] = list(yaml.safe_load_all(a.content))
    return out


def _strict(schema):
    if isinstance(schema, dict):
        schema = {k: _strict(v) for k, v in schema.items()}
        if schema.get("type") == "object" and "properties" in schema:
            schema.setdefault("additionalProperties", False)
        return schema
    if isinstance(schema, list):
        return [_strict(x) for x in schema]
    return schema


@functools.cache
def _calico_schema(kind: str) -> dict:
    fname = {"GlobalNetworkPolicy": "projectcalico.org_globalnetworkpolicies.yaml",
             "NetworkPolicy": "projectcalico.org_networkpolicies.yaml"}[kind]
    from third_party import schema

    crd = schema("calico", fname)
    version = crd["spec"]["versions"][0]
    assert crd["spec"]["group"] == "projectcalico.org" and version["name"] == "v3"
    return _strict(version["schema"]["openAPIV3Schema"])


def _calico_validate(doc: dict) -> None:
    assert doc["apiVersion"] == "projectcalico.org/v3"
    schema = _calico_schema(doc["kind"])
    # int-or-string fields carry x-kubernetes-int-or-string and no type
    jsonschema.Draft7Validator(schema).validate(doc)
    meta = doc["metadata"]
    assert set(meta) <= {"name", "namespace", "labels", "annotations"}


# ----------------------------------------------------------- Kubernetes objects


def test_kubernetes_objects_validate_strictly():
    docs = _docs(_spec())
    kinds = []
    for name in ("00-runtimeclass.yaml", "01-namespace.yaml", "10-networkpolicy.yaml",
                 "30-runner-job.yaml"):
        for doc in docs[name]:
            kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
            kinds.append(doc["kind"])
    assert sorted(kinds) == ["Job", "Namespace", "NetworkPolicy", "NetworkPolicy",
                             "RuntimeClass", "ServiceAccount"]


def test_kubernetes_validate_catches_mistakes():
    job = _docs(_spec())["30-runner-job.yaml"][0]
    bad = copy.deepcopy(job)
    bad["spec"]["template"]["spec"]["containers"][0]["securityContext"]["readOnlyRoot"] = True
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, K8S_VERSION, strict=True)


def test_runtime_class_and_namespace():
    docs = _docs(_spec())
    (rc,) = docs["00-runtimeclass.yaml"]
    assert rc["handler"] == "runsc" and rc["metadata"]["name"] == "gvisor"
    ns, sa = docs["01-namespace.yaml"]
    labels = ns["metadata"]["labels"]
    for mode in ("enforce", "audit", "warn"):
        assert labels[f"pod-security.kubernetes.io/{mode}"] == "restricted"
    assert sa["automountServiceAccountToken"] is False
    assert "00-runtimeclass.yaml" not in _docs(_spec(gvisor=False))


def _restricted_violations(pod: dict) -> list[str]:
    """Pod Security Standards, restricted profile (the checks that apply here)."""
    out = []
    psc = pod.get("securityContext", {})
    allowed_volumes = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral",
                       "persistentVolumeClaim", "projected", "secret"}
    for v in pod.get("volumes", []):
        kinds = set(v) - {"name"}
        if not kinds <= allowed_volumes:
            out.append(f"volume {v['name']} type {kinds}")
    for key in ("hostNetwork", "hostPID", "hostIPC"):
        if pod.get(key):
            out.append(key)
    for c in pod["containers"]:
        sc = c.get("securityContext", {})
        if sc.get("privileged"):
            out.append("privileged")
        if sc.get("allowPrivilegeEscalation") is not False:
            out.append("allowPrivilegeEscalation")
        if not (sc.get("runAsNonRoot") or psc.get("runAsNonRoot")):
            out.append("runAsNonRoot")
        if sc.get("runAsUser", psc.get("runAsUser")) == 0:
            out.append("runAsUser 0")
        seccomp = sc.get("seccompProfile", psc.get("seccompProfile", {})).get("type")
        if seccomp not in ("RuntimeDefault", "Localhost"):
            out.append("seccomp")
        caps = sc.get("capabilities", {})
        if caps.get("drop") != ["ALL"] or set(caps.get("add", [])) - {"NET_BIND_SERVICE"}:
            out.append("capabilities")
        if c.get("ports") and any("hostPort" in p for p in c["ports"]):
            out.append("hostPort")
    return out


def test_runner_job_template():
    (job,) = _docs(_spec())["30-runner-job.yaml"]
    spec = job["spec"]
    pod = spec["template"]["spec"]
    assert _restricted_violations(pod) == []
    assert pod["runtimeClassName"] == "gvisor"
    assert pod["automountServiceAccountToken"] is False
    assert pod["restartPolicy"] == "Never"
    assert 0 < spec["activeDeadlineSeconds"] <= 3600 and spec["backoffLimit"] == 0
    (c,) = pod["containers"]
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert c["securityContext"]["runAsNonRoot"] is True
    for kind in ("cpu", "memory", "ephemeral-storage"):
        assert kind in c["resources"]["limits"]
    # the credential is a file from a Secret volume, never an environment variable
    for e in c.get("env", []):
        assert "valueFrom" not in e, e
        assert "TOKEN" not in e["name"] or e["value"].startswith("/")
    assert "envFrom" not in c
    vols = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["name"]: m for m in c["volumeMounts"]}
    assert vols["credential"]["secret"]["secretName"] == cluster.CREDENTIAL_SECRET
    assert vols["credential"]["secret"]["defaultMode"] == 0o400
    assert mounts["credential"]["readOnly"] is True
    assert {e["name"]: e["value"] for e in c["env"]}["HTTPS_PROXY"] == \
        "http://egress-proxy.agent-sandbox-egress.svc:3128"
    no_gvisor = _docs(_spec(gvisor=False))["30-runner-job.yaml"][0]
    assert "runtimeClassName" not in no_gvisor["spec"]["template"]["spec"]
    assert _restricted_violations({"containers": [{"securityContext": {}}]})


def test_network_policies_default_deny_and_explicit_allows():
    deny, allow = _docs(_spec())["10-networkpolicy.yaml"]
    assert deny["spec"] == {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}
    assert allow["spec"]["policyTypes"] == ["Egress"]
    egress = allow["spec"]["egress"]
    dns = egress[0]
    assert {(p["protocol"], p["port"]) for p in dns["ports"]} == {("UDP", 53), ("TCP", 53)}
    assert dns["to"][0]["podSelector"]["matchLabels"] == {"k8s-app": "kube-dns"}
    api = egress[1]
    assert [t["ipBlock"]["cidr"] for t in api["to"]] == ["10.96.0.1/32", "192.0.2.10/32"]
    assert {p["port"] for p in api["ports"]} == {443, 6443}
    assert [t["ipBlock"]["cidr"] for t in egress[2]["to"]] == ["198.51.100.0/24"]
    proxy = egress[3]
    assert proxy["to"][0]["namespaceSelector"]["matchLabels"] == {
        "kubernetes.io/metadata.name": "agent-sandbox-egress"}
    assert proxy["ports"] == [{"protocol": "TCP", "port": 3128}]
    # nothing else: no rule without a destination ("allow all")
    assert all(rule.get("to") for rule in egress)
    ip_proxy = _docs(_spec(egress_proxy="192.0.2.50:3128"))["10-networkpolicy.yaml"][1]
    assert ip_proxy["spec"]["egress"][-1]["to"] == [{"ipBlock": {"cidr": "192.0.2.50/32"}}]


# ------------------------------------------------------------------- Calico


def test_calico_policies_validate_against_the_crds_strictly():
    docs = _docs(_spec())["20-calico.yaml"]
    assert [d["kind"] for d in docs] == ["NetworkPolicy", "GlobalNetworkPolicy"]
    for doc in docs:
        _calico_validate(doc)


def test_strict_calico_validation_rejects_unknown_fields():
    allow = _docs(_spec())["20-calico.yaml"][0]
    bad = copy.deepcopy(allow)
    bad["spec"]["egress"][-1]["destination"]["domains"] = ["github.com"]  # Enterprise only
    with pytest.raises(jsonschema.ValidationError, match="domains"):
        _calico_validate(bad)
    bad = copy.deepcopy(allow)
    bad["spec"]["egress"][0]["action"] = "Accept"
    with pytest.raises(jsonschema.ValidationError):
        _calico_validate(bad)


def test_calico_order_and_domain_note():
    arts = {a.target.rsplit("/", 1)[1]: a for a in
            cluster.render(_spec(), HostFacts("controller"))}
    text = arts["20-calico.yaml"].content.decode()
    assert "no domain rules" in text.splitlines()[1]
    allow, deny = yaml.safe_load_all(text)
    assert allow["spec"]["order"] < deny["spec"]["order"]
    assert allow["metadata"]["namespace"] == "agent-sandbox"
    assert deny["spec"]["namespaceSelector"] == "projectcalico.org/name == 'agent-sandbox'"
    assert deny["spec"]["egress"][-1]["action"] == "Deny"
    assert deny["spec"]["types"] == ["Ingress", "Egress"]
    actions = [r["action"] for r in allow["spec"]["egress"]]
    assert set(actions) == {"Allow"}
    nets = [n for r in allow["spec"]["egress"] for n in r.get("destination", {}).get("nets", [])]
    assert "0.0.0.0/0" not in nets
    assert "10-networkpolicy.yaml" in arts and "20-calico.yaml" not in {
        a.target.rsplit("/", 1)[1] for a in cluster.render(_spec(calico=False),
                                                           HostFacts("controller"))}


# ------------------------------------------------------------------ Vault plan


def test_vault_plan_one_role_per_action_scope():
    arts = {a.target.rsplit("/", 1)[1]: a for a in
            cluster.render(_spec(), HostFacts("controller"))}
    plan = json.loads(arts["roles.json"].content)
    assert set(plan["roles"]) == {"deploy-staging", "read-prod"}
    assert set(plan["policies"]) == {"agent-sandbox-deploy-staging", "agent-sandbox-read-prod"}
    role = plan["roles"]["deploy-staging"]
    assert role["token_default_ttl"] == role["token_max_ttl"] == 600
    assert role["allowed_kubernetes_namespaces"] == ["staging"]
    assert json.loads(role["generated_role_rules"])["rules"][0]["verbs"] == ["get", "list",
                                                                          "patch"]
    assert plan["roles"]["read-prod"]["token_default_ttl"] == 600  # the default: 10 minutes
    hcl = arts["agent-sandbox-deploy-staging.hcl"].content.decode()
    assert 'path "kubernetes/creds/deploy-staging" {' in hcl
    assert 'capabilities = ["update"]' in hcl
    assert "read-prod" not in hcl


BAD = [
    ({"api_server": ["10.0.0.300"]}, "cluster.api_server"),
    ({"allowed_cidrs": ["example.com"]}, "cluster.allowed_cidrs"),
    ({"egress_proxy": "proxy"}, "host:port"),
    ({"egress_proxy": "UPPER.ns:3128"}, "service.namespace"),
    ({"vault": {"roles": [{"name": "x", "namespaces": ["a"], "rules": []}]}}, "RBAC rule"),
    ({"vault": {"roles": [{"name": "x", "namespaces": ["a"], "rules": [{"verbs": ["get"]}]},
                          {"name": "x", "namespaces": ["b"], "rules": [{"verbs": ["get"]}]}]}},
     "listed twice"),
    ({"vault": {"kubernetes_mount": "../sys"}}, "mount path"),
]


@pytest.mark.parametrize("over, message", BAD)
def test_bad_cluster_settings_are_refused_by_the_spec(tmp_path, over, message):
    from agent_sandbox.errors import SpecError
    from agent_sandbox.spec.loader import load_layer, load_stack

    data = copy.deepcopy(CLUSTER)
    data.update(over)
    layer = tmp_path / "layer.yml"
    layer.write_text(yaml.safe_dump({"cluster": data}))
    with pytest.raises(SpecError) as err:
        load_stack([load_layer(str(layer))])
    text = str(err.value)
    assert text.startswith(str(layer) + ":") and "cluster." in text


@pytest.mark.parametrize("over, message", BAD)
def test_bad_cluster_settings_are_refused_by_the_renderer(over, message):
    """Defence in depth: a spec built without validation still renders nothing bad."""
    spec = _spec()
    raw = copy.deepcopy(CLUSTER)
    raw.update(over)
    vault = raw.pop("vault", {})
    for key, value in raw.items():
        setattr(spec.cluster, key, value)
    if "kubernetes_mount" in vault:
        spec.cluster.vault.kubernetes_mount = vault["kubernetes_mount"]
    if "roles" in vault:
        from agent_sandbox.spec.models import VaultRole

        spec.cluster.vault.roles = [VaultRole.model_construct(**r) for r in vault["roles"]]
    with pytest.raises(RenderError, match=message):
        list(cluster.render(spec, HostFacts("controller")))


def test_disabled_cluster_renders_nothing(fleet):
    assert list(cluster.render(Spec(), HostFacts("h"))) == []
    for host in fleet.inventory:
        cluster_kinds = [a.kind for a in fleet.render_host(host).values()
                         if a.kind.startswith(("k8s", "calico", "vault"))]
        # Only the sandbox_cluster group switches the cluster side on.
        if "sandbox_cluster" in fleet.inventory.host_groups.get(host, []):
            assert fleet.spec_for(host).cluster.enabled
            assert {"k8s", "calico"} <= {k.split("-")[0] for k in cluster_kinds}, cluster_kinds
        else:
            assert cluster_kinds == [], host
