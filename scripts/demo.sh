#!/usr/bin/env bash
# `make demo`: build what is missing (collections, the base image), create the
# three-host demo fleet (privileged podman containers), provision it with
# `ansible-playbook site.yml`, run `sandbox verify` on every host through the
# fleet's compliance report (playbooks/verify.yml: build/demo/report/) and print a
# table: host, checks passed, failures. Exits non-zero on any failure.
# `make demo-down` (this script with `down`) removes the fleet.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
export CONTAINERS_CONF="${CONTAINERS_CONF:-$ROOT/containers.conf}"
export ANSIBLE_COLLECTIONS_PATH="${ANSIBLE_COLLECTIONS_PATH:-$ROOT/.collections}"
export ANSIBLE_CONFIG="$ROOT/ansible.cfg"
INVENTORY="${AGENT_SANDBOX_DEMO_INVENTORY:-inventories/demo}"
PLAYBOOK=.venv/bin/ansible-playbook
PY=.venv/bin/python

if [ "${1:-}" = "down" ]; then
  "$PLAYBOOK" -i "$INVENTORY" playbooks/demo-down.yml
  exit 0
fi

bash scripts/bootstrap.d/10-collections.sh
bash scripts/base-image.sh
echo "demo: creating the fleet"
"$PLAYBOOK" -i "$INVENTORY" playbooks/demo-up.yml
echo "demo: provisioning with site.yml"
"$PLAYBOOK" -i "$INVENTORY" site.yml

hosts=$(.venv/bin/ansible-inventory -i "$INVENTORY" --list \
  | "$PY" -c 'import json,sys; d=json.load(sys.stdin); print(" ".join(sorted(d.get("demo",{}).get("hosts",[]) + [h for c in d.get("demo",{}).get("children",[]) for h in d.get(c,{}).get("hosts",[])])))')
out=build/demo
rm -rf "$out"
mkdir -p "$out"
echo "demo: the fleet's compliance report (playbooks/verify.yml) on ${hosts}"
# one `sandbox verify --format json` a host, merged into one JUnit file and a summary
"$PLAYBOOK" -i "$INVENTORY" playbooks/verify.yml -e "sandbox_verify_report_dir=$ROOT/$out/report" \
  > "$out/verify.log" 2>&1 || true
for h in $hosts; do
  cp "$out/report/hosts/$h.json" "$out/$h.json" 2>/dev/null || tail -n 5 "$out/verify.log" > "$out/$h.err"
done
pids=()
for h in $hosts; do
  ( # how the host's proxy service is supervised (verify has asked it for a refusal)
    podman exec "$h" sh -c 'if [ -d /run/systemd/system ]; then
        echo "systemd unit, $(systemctl is-active agent-sandbox-proxy.service)"
      elif kill -0 "$(cat /run/agent-sandbox-proxy.pid 2>/dev/null)" 2>/dev/null; then
        echo "no init system, detached"
      else echo "not running"; fi' > "$out/$h.proxy" 2>/dev/null || echo "unknown" > "$out/$h.proxy"
  ) &
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p"; done

"$PY" - "$out" $hosts <<'PY'
import json
import sys
from pathlib import Path

out, hosts = Path(sys.argv[1]), sys.argv[2:]
rows, failed = [], False
for host in hosts:
    try:
        doc = json.loads((out / f"{host}.json").read_text())
        checks = doc["checks"]
    except (OSError, ValueError, KeyError):
        err = (out / f"{host}.err").read_text(errors="replace").strip().splitlines()
        rows.append((host, "0/0", "verify did not run: " + (err[-1] if err else "no output")))
        failed = True
        continue
    # the report's own verdict (hostcheck.report): a waived check does not fail the
    # host, an expired waiver does
    fails = [f"{c['name']}: {c['detail']}" for c in checks
             if c.get("status", "passed" if c["passed"] else "failed") == "failed"]
    fails += [f"{c['name']}: waiver expired {c['waiver']['expires']}" for c in checks
              if c.get("status") == "waiver-expired"]
    waived = sum(c.get("status") == "waived" for c in checks)
    failed = failed or not doc.get("ok", not fails) or not checks
    rows.append((host, f"{doc['passed']}/{doc['total']}" + (f" ({waived} waived)" if waived else ""),
                 "; ".join(fails) or "none"))
proxy = {h: (out / f"{h}.proxy").read_text().strip() if (out / f"{h}.proxy").exists() else "unknown"
         for h in hosts}
w = max(len(r[0]) for r in rows + [("host", "", "")])
p = max(len(v) for v in [*proxy.values(), "proxy service"])
print()
c = max(len(r[1]) for r in rows + [("", "checks passed", "")])
print(f"{'host':<{w}}  {'checks passed':<{c}}  {'proxy service':<{p}}  failures")
print(f"{'-' * w}  {'-' * c}  {'-' * p}  --------")
for host, passed, fails in rows:
    print(f"{host:<{w}}  {passed:<{c}}  {proxy[host]:<{p}}  {fails}")
print(f"fleet report: {out / 'report' / 'fleet-junit.xml'} (JUnit), "
      f"{out / 'report' / 'fleet-summary.md'}")
print()
sys.exit(1 if failed else 0)
PY
