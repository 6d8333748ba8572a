#!/usr/bin/python
"""Ansible module: apply agent-sandbox's Vault/OpenBao plan idempotently."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sandbox_vault_apply
short_description: Apply agent-sandbox Vault/OpenBao policies and Kubernetes secrets engine roles
description:
  - Reads the policies and roles on the server, compares them with the rendered plan
    (C(vault/roles.json)) and writes only what differs, so a second run reports no change.
  - Enables the Kubernetes secrets engine at the plan's mount when it is missing, and fails
    when another engine is mounted there.
  - Used instead of community.hashi_vault.vault_write, which writes unconditionally (not
    idempotent) and cannot enable or compare secrets engines.
  - Runs where agent_sandbox is importable (the controller, with delegate_to).
options:
  address:
    description: Vault/OpenBao address.
    type: str
    required: true
  token:
    description: Token allowed to manage policies, mounts and the engine's roles.
    type: str
    required: true
  plan:
    description: The rendered plan (mount, policies by name, roles by name).
    type: dict
    required: true
  engine_config:
    description: >-
      Optional engine configuration (kubernetes_host, kubernetes_ca_cert, ...),
      applied when different.
    type: dict
  timeout:
    description: Seconds to wait for the server.
    type: float
    default: 10
author:
  - agent-sandbox maintainers
"""

EXAMPLES = r"""
- name: Apply the plan
  sandbox_vault_apply:
    address: http://127.0.0.1:8200
    token: "{{ vault_token }}"
    plan: "{{ plan }}"
"""

RETURN = r"""
changes:
  description: What was changed (or would be, in check mode), as "action kind name".
  type: list
  elements: str
  returned: always
"""

from ansible.module_utils.basic import AnsibleModule  # noqa: E402


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "address": {"type": "str", "required": True},
            "token": {"type": "str", "required": True, "no_log": True},
            "plan": {"type": "dict", "required": True},
            "engine_config": {"type": "dict", "no_log": False},
            "timeout": {"type": "float", "default": 10},
        },
        supports_check_mode=True,
    )
    try:
        from agent_sandbox import vault
    except ImportError as exc:
        module.fail_json(msg=f"agent_sandbox is not importable by {module._name}'s Python: {exc}")
        return
    try:
        client = vault.client(module.params["address"], module.params["token"],
                              timeout=module.params["timeout"])
        changes = vault.apply_plan(client, module.params["plan"],
                                   engine_config=module.params["engine_config"],
                                   check=module.check_mode)
    except vault.VaultApplyError as exc:
        module.fail_json(msg=str(exc))
        return
    except (KeyError, TypeError, ValueError) as exc:
        module.fail_json(msg=f"the plan is malformed: {exc}")
        return
    module.exit_json(changed=bool(changes), changes=[str(c) for c in changes])


if __name__ == "__main__":
    main()
