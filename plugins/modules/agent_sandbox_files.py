#!/usr/bin/python
"""Install a host's whole agent-sandbox bundle in one module call.

``ansible.builtin.copy`` costs a handful of round trips per file (a temporary
folder, ``stat``, the transfer, ``copy``, the cleanup); a host has thirty-odd
rendered files. This module takes them all at once, as the renderer's filter
(``agent_sandbox_render`` / ``agent_sandbox_select``) lists them, and writes only
the ones whose bytes, mode or ownership differ.

The work is ``agent_sandbox.install.rendered_files`` (reached through
``plugins/module_utils``), the same file the pyinfra deploy runs on its hosts:
links a user made in their home are never followed as root, and nothing is
written when any file is refused. The same call can make the bundle's folders
and links, install the runtime's virtualenv from the wheelhouse archive (only
when the archive installed differs: ``needs_archive`` asks the role to send it
first) and run the host steps (``sandbox install ...``) before and after the
files, so a host that needs nothing costs one round trip.


"""

from __future__ import annotations

DOCUMENTATION = r"""
module: agent_sandbox_files
short_description: Install a host's agent-sandbox bundle in one call
description:
  - Installs a list of rendered files (bytes, mode, owner) with one module call,
    writing only those whose bytes, mode or ownership differ on the host; with
    the other options, also the bundle's folders, links, runtime and host steps.
  - Folders are walked from C(/) without following links, except links root made
    in a root-owned folder; missing folders are created. A file is written to a
    temporary name in its folder and renamed over the old entry.
  - Files whose name ends in C(.json) must parse before anything is written.
  - Supports check mode and diff mode.
author: agent-sandbox maintainers
options:
  files:
    description:
      - The files, as C(agent_sandbox_select) lists them.
    type: list
    elements: dict
    required: true
    suboptions:
      target:
        description: Absolute path on the host (below I(root)).
        type: str
        required: true
      content_b64:
        description: The file's bytes, base64-encoded.
        type: str
        required: true
      mode:
        description: Octal mode, such as C(0644).
        type: str
        required: true
      owner:
        description:
          - The user whose home holds the file, if any. Folders created for the file
            are that user's; so is the file when I(home_user_owns_files) is set.
        type: str
      sha256:
        description: SHA-256 of the bytes; checked before anything is written.
        type: str
      kind:
        description: The artifact kind (informational).
        type: str
  root:
    description: A folder every target is placed under (a stand-in root); empty for C(/).
    type: str
    default: ''
  owner:
    description: Owner of the files (and of created folders outside users' homes).
    type: str
    default: root
  group:
    description: Group of the files; empty for the owner's primary group.
    type: str
    default: ''
  home_user_owns_files:
    description: A file in a user's home belongs to that user (and primary group).
    type: bool
    default: false
  folder_mode:
    description: Octal mode of created folders.
    type: str
    default: '0755'
  folders:
    description: Folders to make, or whose mode and owner to set where they differ.
    type: list
    elements: dict
    default: []
  links:
    description: Symbolic links (C(path), C(target)); one pointing elsewhere is replaced.
    type: list
    elements: dict
    default: []
  packages:
    description:
      - System packages the host must have (dpkg's names). When any is not installed,
        the call only makes the folders and returns them in C(needs_packages) (the
        caller installs them, then calls again); in check mode they are reported.
    type: list
    elements: str
    default: []
  runtime:
    description:
      - C(prefix), C(sha256) of the wheelhouse archive, C(python) and C(extras) (the
        package's optional dependencies to install, such as C(pull)). When the
        virtualenv under C(prefix) was not installed from that archive with those
        extras, it is (from C(prefix)/wheelhouse.tar); when that file is not the
        archive, the call only makes the folders and returns C(needs_archive).
    type: dict
  early_steps:
    description:
      - Host steps (C(name), C(argv), optional C(unless_exist) paths, C(after_change)
        targets and arguments, C(after_upgrade) arguments) run after
        I(files) and before I(late_files); the last output line C(changed) counts.
        No step runs in check mode.
    type: list
    elements: dict
    default: []
  late_files:
    description: Files installed after I(early_steps), as I(files).
    type: list
    elements: dict
    default: []
  late_steps:
    description: Host steps run last, after the links.
    type: list
    elements: dict
    default: []
"""

RETURN = r"""
changes:
  description: One entry per file, folder, link or runtime that was (or in check mode
    would be) changed.
  returned: always
  type: list
  elements: dict
steps:
  description: Each step run, with whether it changed anything.
  returned: always
  type: list
  elements: dict
needs_archive:
  description: The runtime's archive must be sent to the host first (only folders were made).
  returned: always
  type: bool
needs_packages:
  description: The packages to install first (only folders were made).
  returned: always
  type: list
  elements: str
"""

from ansible.module_utils.agent_sandbox_rendered_files import (  # noqa: E402
    DEFAULTS,
    Refused,
    StepFailed,
    Written,
    install_bundle,
)
from ansible.module_utils.basic import AnsibleModule  # noqa: E402


def main() -> None:
    file_options = {
        "target": {"type": "str", "required": True},
        "content_b64": {"type": "str", "required": True},
        "mode": {"type": "str", "required": True},
        "owner": {"type": "str"},
        "sha256": {"type": "str"},
        "kind": {"type": "str"},
    }
    module = AnsibleModule(
        argument_spec={
            "files": {"type": "list", "elements": "dict", "required": True,
                      "options": file_options},
            "root": {"type": "str", "default": DEFAULTS["root"]},
            "owner": {"type": "str", "default": DEFAULTS["owner"]},
            "group": {"type": "str", "default": DEFAULTS["group"]},
            "home_user_owns_files": {"type": "bool",
                                     "default": DEFAULTS["home_user_owns_files"]},
            "folder_mode": {"type": "str", "default": DEFAULTS["folder_mode"]},
            "folders": {"type": "list", "elements": "dict", "default": []},
            "packages": {"type": "list", "elements": "str", "default": []},
            "links": {"type": "list", "elements": "dict", "default": []},
            "runtime": {"type": "dict"},
            "early_steps": {"type": "list", "elements": "dict", "default": []},
            "late_files": {"type": "list", "elements": "dict", "default": [],
                           "options": file_options},
            "late_steps": {"type": "list", "elements": "dict", "default": []},
        },
        supports_check_mode=True,
    )
    try:
        result = install_bundle(module.params, module.check_mode, module._diff)
    except (Refused, StepFailed, OSError, KeyError, TypeError) as exc:
        module.fail_json(msg=f"agent_sandbox_files: {exc}; nothing was written", written=[])
    except Written as exc:
        module.fail_json(msg=f"agent_sandbox_files: {exc}; written before it: {exc.written}",
                         changed=bool(exc.written), written=exc.written)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
