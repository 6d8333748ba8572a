"""The catalogue of implicit triggers (``triggers.json``), proven with the real tools.

For each entry whose tool is installed, a two-step case: a sandboxed command (a
real ``sandbox exec``) plants what the entry names, then the real tool, run on
the host as the user runs it (a shell starting, ``git commit``, ``hg status``,
``cargo check``, ``python3 -i``, ``mvn validate``), fires it; the judge is a
marker file the planted code would write, seen from the host. The same plant
without the sandbox is the control: the marker must appear there, so no case
passes because its judge cannot fire. A tool that is not installed skips its
case; an entry with no case here says why in its ``proof``.

The tree: ``work`` (a writable root, the working folder) and ``home`` (the
user's home folder, a writable root only where the entry is below it).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import needs_bwrap

pytestmark = [needs_bwrap]
SANDBOX = str(Path(sys.executable).parent / "sandbox")
CATALOGUE = json.loads((Path(__file__).resolve().parents[2] / "src/agent_sandbox/triggers.json")
                       .read_text())["entries"]
BASE_PY = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
# what an entry's proof may say instead of naming a case here
ELSEWHERE = ("not runnable here:", "by design:", "by name:", "covered:", "agent clients:",
             "agent-sandbox:")


@dataclass
class Proof:
    plant: str  # shell text, run in work (sandboxed, or not for the control)
    fire: str  # shell text the user runs on the host, in work
    needs: tuple[str, ...] = ()  # programs the case needs
    home: bool = False  # the home folder is writable (the entry is below it)
    setup: str = ""  # the user's own state, made on the host first
    path: str = ""  # PATH entries before the usual ones, for plant and fire alike
    env: dict[str, str] | None = None  # the user's variables ({HOME}: the home folder)


HOOK = "printf '#!/bin/sh\\ntouch {M}\\n' > {f} && chmod +x {f}"


def hook(f: str) -> str:
    return HOOK.replace("{f}", f)


REPO = "git init -q -b main && git commit -q --allow-empty -m a"
CRATE = ("mkdir -p src && printf '[package]\\nname = \"c\"\\nversion = \"0.1.0\"\\n' > Cargo.toml"
         " && echo 'fn main() {}' > src/main.rs")
POM = ("echo '<project><modelVersion>4.0.0</modelVersion><groupId>a</groupId><artifactId>b"
       "</artifactId><version>1</version></project>' > pom.xml")
PROOFS: dict[str, Proof] = {
    # shells
    "bash-rc": Proof("echo 'touch {M}' > ~/.bashrc", "bash -i -c true", home=True),
    "bash-login": Proof("echo 'touch {M}' > ~/.bash_profile", "bash -l -c true", home=True),
    "bash-logout": Proof("echo 'touch {M}' > ~/.bash_logout", "bash -l -c exit", home=True),
    "bash-aliases": Proof("echo 'touch {M}' > ~/.bash_aliases", "bash -i -c true", home=True,
                          setup="echo '[ -f ~/.bash_aliases ] && . ~/.bash_aliases' > "
                                "~/.bashrc"),
    "sh-profile": Proof("echo 'touch {M}' > ~/.profile", "dash -l -c true", ("dash",),
                        home=True),
    "sh-env": Proof("echo 'touch {M}' > ~/.shrc", "dash -i -c true </dev/null", ("dash",),
                    home=True, env={"ENV": "{HOME}/.shrc"}),
    "zsh-rc": Proof("echo 'touch {M}' > ~/.zshrc", "zsh -i -c true", ("zsh",), home=True),
    "zsh-env": Proof("echo 'touch {M}' > ~/.zshenv", "zsh -c true", ("zsh",), home=True),
    "zsh-login": Proof("echo 'touch {M}' > ~/.zprofile", "zsh -l -c true", ("zsh",),
                       home=True),
    "ksh-rc": Proof("echo 'touch {M}' > ~/.kshrc", "ksh -i -c true </dev/null", ("ksh",),
                    home=True),
    "tcsh-rc": Proof("echo 'touch {M}' > ~/.tcshrc", "tcsh -c true", ("tcsh",), home=True),
    "tcsh-cshrc": Proof("echo 'touch {M}' > ~/.cshrc", "tcsh -c true", ("tcsh",), home=True),
    "tcsh-login": Proof("echo 'touch {M}' > ~/.login", "echo exit | tcsh -l", ("tcsh",),
                        home=True),
    "fish-config": Proof("mkdir -p ~/.config/fish && echo 'touch {M}' > "
                         "~/.config/fish/config.fish", "fish -c true", ("fish",), home=True),
    "shell-path": Proof(f"mkdir -p ~/.local/bin && {hook('~/.local/bin/git')}",
                        "PATH=$HOME/.local/bin:$PATH git --version", home=True),
    "shell-relative-path": Proof(f"mkdir -p node_modules/.bin && {hook('node_modules/.bin/git')}",
                                 "git --version", path="node_modules/.bin"),
    # version control
    "git-user-config": Proof("printf '[core]\\n\\tfsmonitor = \"touch {M}; false\"\\n' > "
                             "~/.gitconfig", "git status", home=True, setup=REPO),
    "git-xdg-config": Proof("mkdir -p ~/.config/git && printf '[core]\\n\\tfsmonitor = "
                            "\"touch {M}; false\"\\n' > ~/.config/git/config", "git status",
                            home=True, setup=REPO),
    "git-husky": Proof(f"mkdir -p .husky && {hook('.husky/pre-commit')}",
                       "git commit -q --allow-empty -m u",
                       setup=f"{REPO} && git config core.hooksPath .husky"),
    "git-hook": Proof(hook(".git/hooks/pre-commit"), "git commit -q --allow-empty -m u",
                      setup=REPO),
    "pre-commit-config": Proof(
        "printf 'repos:\\n- repo: local\\n  hooks:\\n  - id: x\\n    name: x\\n    entry: "
        "touch {M}\\n    language: system\\n    pass_filenames: false\\n    always_run: true\\n' "
        "> .pre-commit-config.yaml && git add .pre-commit-config.yaml",
        "git commit -q --allow-empty -m u", ("pre-commit",),
        setup=f"{REPO} && echo 'repos: []' > .pre-commit-config.yaml && git add -A && "
              "git commit -qm c && pre-commit install"),
    "git-filter-driver": Proof(
        f"{hook('tools/clean.sh')} && echo cat >> tools/clean.sh && touch a.txt",
        "git status --short", setup=f"{REPO} && mkdir tools && printf '#!/bin/sh\\ncat\\n' > "
        "tools/clean.sh && chmod +x tools/clean.sh && echo '*.txt filter=tidy' > .gitattributes"
        " && echo hello > a.txt && git config filter.tidy.clean ./tools/clean.sh && git add -A "
        "&& git commit -qm i"),
    "git-relative-hookspath": Proof(f"mkdir -p .githooks && {hook('.githooks/pre-commit')}",
                                    "git commit -q --allow-empty -m u",
                                    setup=f"git config --global core.hooksPath .githooks && "
                                          f"{REPO}"),
    "hg-repo-hgrc": Proof("printf '[hooks]\\npre-status = touch {M}\\n' > .hg/hgrc",
                          "hg status", ("hg",), setup="hg init ."),
    "hg-sharedpath": Proof("mkdir ev && cp -r .hg/store .hg/requires ev/ && printf "
                           "'[hooks]\\npre-status = touch {M}\\n' > ev/hgrc && "
                           "echo $PWD/ev > .hg/sharedpath && "
                           "printf 'share-safe\\nshared\\n' > .hg/requires",
                           "hg status", ("hg",), setup="hg init ."),
    "hg-user-hgrc": Proof("printf '[hooks]\\npre-status = touch {M}\\n' > ~/.hgrc",
                          "hg status", ("hg",), home=True, setup="hg init ."),
    # editors
    "vim-exrc": Proof("echo 'silent !touch {M}' > .exrc", "vim --not-a-term -c q </dev/null",
                      ("vim",), setup="echo 'set exrc' > ~/.vimrc"),
    "vim-vimrc": Proof("echo 'silent !touch {M}' > .vimrc", "vim --not-a-term -c q </dev/null",
                       ("vim",), setup="echo 'set exrc' > ~/.vimrc"),
    "vim-plugin": Proof("mkdir -p ~/.vim/plugin && echo 'silent !touch {M}' > "
                        "~/.vim/plugin/x.vim", "vim --not-a-term -c q </dev/null", ("vim",),
                        home=True),
    "nvim-exrc": Proof("echo 'silent !touch {M}' > .nvimrc", "nvim --headless -c q </dev/null",
                       ("nvim",), setup="mkdir -p ~/.config/nvim && echo 'set exrc' > "
                                        "~/.config/nvim/init.vim"),
    "nvim-init": Proof("mkdir -p ~/.config/nvim && echo 'silent !touch {M}' > "
                       "~/.config/nvim/init.vim", "nvim --headless -c q </dev/null", ("nvim",),
                       home=True),
    "emacs-dir-locals": Proof("echo '((nil . ((eval . (shell-command \"touch {M}\")))))' > "
                              ".dir-locals.el",
                              "emacs --batch --eval '(progn (setq enable-local-variables :all "
                              "enable-local-eval t) (find-file \"f.txt\"))'", ("emacs",),
                              setup="echo x > f.txt"),
    # tools that run code from their configuration
    "direnv": Proof("echo 'touch {M}' >> .envrc && mkdir -p ~/.local/share/direnv/allow && "
                    "printf '%s\\n' \"$PWD/.envrc\" > ~/.local/share/direnv/allow/"
                    "$( (printf '%s\\n' \"$PWD/.envrc\"; cat .envrc) | sha256sum | cut -c1-64)",
                    "direnv exec . true", ("direnv",), home=True,
                    setup="echo 'export A=1' > .envrc && direnv allow ."),
    "bash-completion": Proof("echo 'touch {M}' > ~/.bash_completion", "bash -i -c true",
                             home=True, setup="cp /etc/skel/.bashrc ~/.bashrc"),
    "bash-completion-xdg": Proof("mkdir -p ~/.config && echo 'touch {M}' > "
                                 "~/.config/bash_completion", "bash -l -i -c true",
                                 home=True),
    "bashrc-d": Proof("mkdir -p ~/.bashrc.d && echo 'touch {M}' > ~/.bashrc.d/x.sh",
                      "bash -i -c true", home=True,
                      setup="printf 'for rc in ~/.bashrc.d/*; do . \"$rc\"; done\\n' > ~/.bashrc"),
    "git-template-dir": Proof("mkdir -p ~/.git-templates/hooks && "
                              + hook("~/.git-templates/hooks/post-checkout"),
                              "git clone -q up clone", ("git",), home=True,
                              setup="mkdir -p ~/.git-templates && printf '[init]\\n\\t"
                                    "templateDir = ~/.git-templates\\n' > ~/.gitconfig && "
                                    "git init -q up && git -C up commit -q --allow-empty -m a"),
    "less-lesskey": Proof(f"{hook('lo.sh')} && echo 'cat \"$1\"' >> lo.sh && printf "
                          "'#env\\nLESSOPEN=|%s/lo.sh %%s\\n' \"$PWD\" > ~/.lesskey",
                          "echo hi > f.txt && less -F f.txt </dev/null >/dev/null", ("less",),
                          home=True),
    "rc-sourced-nvm": Proof("mkdir -p ~/.nvm && echo 'touch {M}' > ~/.nvm/nvm.sh",
                            "bash -i -c true </dev/null >/dev/null 2>&1", ("bash",), home=True,
                            setup="echo '[ -s \"$HOME/.nvm/nvm.sh\" ] && . \"$HOME/.nvm/"
                                  "nvm.sh\"' >> ~/.bashrc"),
    # what the shell's start-up files name (runtime/broker/configs.py reads them as an
    # .envrc is): a file of the user's they source, a folder they put on PATH
    "bashrc-sourced-file": Proof("mkdir -p ~/.config/sh && echo 'touch {M}' > "
                                 "~/.config/sh/aliases.sh",
                                 "bash -i -c true </dev/null >/dev/null 2>&1", ("bash",),
                                 home=True, setup="echo '[ -f ~/.config/sh/aliases.sh ] && "
                                                  "source ~/.config/sh/aliases.sh' >> ~/.bashrc"),
    "ansible-home-cfg": Proof(f"{hook('inv.sh')} && echo 'echo {{}}' >> inv.sh && printf "
                              "'[defaults]\\ninventory = %s/inv.sh\\n' \"$PWD\" > ~/.ansible.cfg",
                              "ansible --list-hosts all >/dev/null 2>&1", ("ansible",), home=True,
                              path=str(Path(sys.executable).parent)),
    "mypy-home-plugin": Proof("printf 'from mypy.plugin import Plugin\\nopen(\"{M}\", \"w\")\\n"
                              "def plugin(v):\\n    return Plugin\\n' > plug.py && mkdir -p "
                              "~/.config/mypy && printf '[mypy]\\nplugins = %s/plug.py\\n' "
                              "\"$PWD\" > ~/.config/mypy/config",
                              "echo 'x = 1' > app.py && mypy app.py >/dev/null 2>&1", ("mypy",),
                              home=True, path=str(Path(sys.executable).parent)),
    "gdb-init": Proof("echo 'shell touch {M}' > ~/.gdbinit", "gdb -batch -ex quit", ("gdb",),
                      home=True),
    "tmux-conf": Proof("echo 'run-shell \"touch {M}\"' > ~/.tmux.conf",
                       "tmux -S \"$PWD/s\" new-session -d 'sleep 2' && sleep 1; "
                       "tmux -S \"$PWD/s\" kill-server", ("tmux",), home=True),
    "perl-perldb": Proof("echo 'system(\"touch {M}\");' > .perldb",
                         "perl -de0 </dev/null >/dev/null 2>&1", ("perl",)),
    "pip-user-config": Proof(f"{hook('evilpy')} && mkdir -p ~/.config/pip && printf "
                             "'[global]\\npython = %s/evilpy\\n' \"$PWD\" > "
                             "~/.config/pip/pip.conf", "v/bin/pip --version", ("python3",),
                             home=True, setup="python3 -m venv v"),
    "npm-init-module": Proof("echo 'require(\"fs\").writeFileSync(\"{M}\", \"\")' > "
                             "~/.npm-init.js", "npm init -y >/dev/null", ("npm",), home=True),
    "selected-editor": Proof("echo 'touch {M}; SELECTED_EDITOR=/bin/true' > ~/.selected_editor",
                             "EDITOR= VISUAL= sensible-editor f.txt </dev/null >/dev/null",
                             ("sensible-editor",), home=True,
                             setup="echo 'SELECTED_EDITOR=/bin/true' > ~/.selected_editor"),
    "lessfilter": Proof(f"{hook('~/.lessfilter')} && echo 'exit 1' >> ~/.lessfilter",
                        "echo hi > f.txt && LESSOPEN='| lesspipe %s' less -F f.txt "
                        "</dev/null >/dev/null", ("lesspipe", "less"), home=True),
    "gem-user-plugin": Proof("d=~/.local/share/gem/ruby/$(ruby -e 'print RbConfig::CONFIG"
                             "[\"ruby_version\"]')/plugins && mkdir -p $d && echo 'File.write("
                             "\"{M}\", \"\")' > $d/x_plugin.rb", "gem list >/dev/null",
                             ("gem",), home=True),
    "tclshrc": Proof("echo 'exec touch {M}' > ~/.tclshrc", "echo exit | tclsh >/dev/null",
                     ("tclsh",), home=True),
    "xdg-user-dirs": Proof("mkdir -p ~/.config && echo 'touch {M}' > ~/.config/user-dirs.dirs",
                           "xdg-user-dir DESKTOP >/dev/null", ("xdg-user-dir",), home=True),
    "direnv-named": Proof("echo 'touch {M}' > .envrc.local", "direnv exec . true", ("direnv",),
                          setup="printf 'PATH_add bin\\nsource_env_if_exists .envrc.local\\n' "
                                "> .envrc && direnv allow ."),
    "venv-program": Proof(hook(".venv/bin/git"), ". .venv/bin/activate && git --version",
                          ("python3",), setup="python3 -m venv --without-pip .venv"),
    "npm-npmrc": Proof(f"{hook('evil.sh')} && echo \"script-shell=$PWD/evil.sh\" > .npmrc",
                       "npm test --silent", ("npm",),
                       setup="echo '{\"scripts\": {\"test\": \"echo ok\"}}' > package.json"),
    # languages
    "rustup-toolchain": Proof("mkdir -p tc/bin && " + hook("tc/bin/cargo") +
                              " && cp tc/bin/cargo tc/bin/rustc && printf "
                              "'[toolchain]\\npath = \"%s/tc\"\\n' \"$PWD\" > "
                              "rust-toolchain.toml", "cargo --version", ("rustup",)),
    "cargo-config": Proof(f"{hook('w.sh')} && echo 'exec \"$@\"' >> w.sh && mkdir -p "
                          ".cargo && printf '[build]\\nrustc-wrapper = \"%s/w.sh\"\\n' "
                          "\"$PWD\" > .cargo/config.toml",
                          "cargo check -q --offline", ("cargo",), setup=CRATE),
    # what a tool's configuration names by path (runtime/broker/configs.py)
    "cargo-wrapper-named": Proof(f"{hook('tools/wrap.sh')} && echo 'exec \"$@\"' >> tools/wrap.sh",
                                 "cargo check -q --offline", ("cargo",),
                                 setup=f"{CRATE} && mkdir -p tools .cargo && printf '#!/bin/sh\\n"
                                       "exec \"$@\"\\n' > tools/wrap.sh && chmod +x tools/wrap.sh"
                                       " && printf '[build]\\nrustc-wrapper = \"tools/wrap.sh\""
                                       "\\n' > .cargo/config.toml"),
    # what a repository's hooks run (runtime/broker/hook_scripts.py): pre-commit's
    # -mpre_commit at the top imports a module there first, lefthook's hook names
    # its binary below node_modules, husky's puts node_modules/.bin first on PATH
    "hook-python-module": Proof("printf 'open(\"{M}\", \"w\")\\n' > cfgv.py",
                                "git commit -q --allow-empty -m u", ("pre-commit",),
                                setup=f"{REPO} && echo 'repos: []' > .pre-commit-config.yaml"
                                      " && git add -A && git commit -qm c && pre-commit install"),
    "mypy-plugin": Proof("printf 'from mypy.plugin import Plugin\\nopen(\"{M}\", \"w\")\\n"
                         "def plugin(v):\\n    return Plugin\\n' > plug.py && printf "
                         "'[mypy]\\nplugins = plug.py\\n' > mypy.ini",
                         "mypy --no-incremental x.py >/dev/null", ("mypy",),
                         path=str(Path(sys.executable).parent), setup="echo 'x = 1' > x.py"),
    # a shared configuration's sections that load code (runtime/broker/shared_configs.py)
    "mypy-pyproject-plugin": Proof(
        "printf 'from mypy.plugin import Plugin\\nopen(\"{M}\", \"w\")\\ndef plugin(v):\\n"
        "    return Plugin\\n' > plug.py && printf '[project]\\nname = \"p\"\\n\\n"
        "[tool.mypy]\\nplugins = [\"plug.py\"]\\n' > pyproject.toml",
        "mypy --no-incremental x.py >/dev/null", ("mypy",),
        path=str(Path(sys.executable).parent),
        setup="echo 'x = 1' > x.py && printf '[project]\\nname = \"p\"\\n' > pyproject.toml"),
    "ansible-cfg-inventory": Proof(f"{hook('inv.sh')} && echo 'echo {{}}' >> inv.sh && printf "
                                   "'[defaults]\\ninventory = ./inv.sh\\n' > ansible.cfg",
                                   "ansible --list-hosts all >/dev/null 2>&1", ("ansible",),
                                   path=str(Path(sys.executable).parent)),
    "cargo-env": Proof("mkdir -p ~/.cargo && echo 'touch {M}' > ~/.cargo/env",
                       "sh -l -c true", home=True,
                       setup="echo '. \"$HOME/.cargo/env\"' > ~/.profile"),
    "go-env": Proof(f"{hook('t.sh')} && echo 'exec \"$@\"' >> t.sh && mkdir -p "
                    "~/.config/go && echo \"GOFLAGS=-toolexec=$PWD/t.sh\" > ~/.config/go/env",
                    "go build -buildvcs=false -o /dev/null .", ("go",), home=True,
                    setup="echo 'module m' > go.mod && printf 'package main\\nfunc main() "
                          "{}\\n' > main.go"),
    "python-pdbrc": Proof("echo 'import os; os.system(\"touch {M}\")' > .pdbrc",
                          f"{BASE_PY} -m pdb ../user.py </dev/null",
                          setup="echo 'x = 1' > ../user.py"),
    "python-readline": Proof("echo 'open(\"{M}\", \"w\")' > readline.py",
                             f"{BASE_PY} -i </dev/null"),
    "python-m-venv": Proof("mkdir -p venv && echo 'open(\"{M}\", \"w\")' > venv/__init__.py",
                           f"{BASE_PY} -m venv ../v"),
    "python-user-site": Proof(f"d=$({BASE_PY} -c 'import site; print(site.getusersitepackages())')"
                              " && mkdir -p $d && echo 'import os; os.system(\"touch {M}\")' > "
                              "$d/x.pth", f"{BASE_PY} -c pass", home=True),
    "ipython-startup": Proof("mkdir -p ~/.ipython/profile_default/startup && echo 'open(\"{M}\", "
                             "\"w\")' > ~/.ipython/profile_default/startup/x.py",
                             "ipython -c 1", ("ipython",), home=True),
    "irb-irbrc": Proof("echo 'File.write(\"{M}\", \"\")' > .irbrc", "echo | irb", ("irb",)),
    "maven-jvm-config": Proof(f"{hook('e.sh')} && mkdir -p .mvn && echo \"-Xmx4m "
                              "-XX:OnOutOfMemoryError=$PWD/e.sh\" > .mvn/jvm.config",
                              "mvn -q -o validate", ("mvn",), setup=POM),
    "maven-mavenrc": Proof("echo 'touch {M}' > ~/.mavenrc", "mvn -v", ("mvn",), home=True),
}


# more forms of the entries above (what an attacker tried next): each run the same way
VARIANTS: dict[str, Proof] = {
    # one level further: what a file a start-up file or an .envrc sources names
    "bashrc-sourced-then-path": Proof(
        f"mkdir -p ~/dot/bin && {hook('~/dot/bin/git')}",
        "bash -i -c 'git --version' </dev/null >/dev/null 2>&1", ("bash",), home=True,
        setup="mkdir -p ~/dot && echo 'export PATH=\"$HOME/dot/bin:$PATH\"' > ~/dot/main.sh && "
              "echo 'source ~/dot/main.sh' >> ~/.bashrc"),
    "envrc-local-path-add": Proof(f"mkdir -p tools && {hook('tools/git')}",
                                  "direnv exec . git --version", ("direnv",),
                                  setup="echo 'source_env .envrc.local' > .envrc && echo "
                                        "'PATH_add tools' > .envrc.local && direnv allow ."),
    "hook-path-shadow-node": Proof(
        f"mkdir -p node_modules/.bin && {hook('node_modules/.bin/node')}",
        "git commit -q --allow-empty -m u", ("npx",),
        setup=REPO + " && mkdir -p .husky/_ && printf '#!/bin/sh\\nexport PATH=\"node_modules/"
        ".bin:$PATH\"\\nsh -e .husky/pre-commit\\n' > .husky/_/pre-commit && chmod +x "
        ".husky/_/pre-commit && echo 'npx --version >/dev/null' > .husky/pre-commit && "
        "git config core.hooksPath .husky/_"),
    "bashrc-path-entry": Proof(f"mkdir -p ~/tools/bin && {hook('~/tools/bin/git')}",
                               "bash -i -c 'git --version' </dev/null >/dev/null 2>&1",
                               ("bash",), home=True,
                               setup="echo 'export PATH=\"$HOME/tools/bin:$PATH\"' >> ~/.bashrc"),
    "pre-commit-module-entry": Proof(
        "printf 'open(\"{M}\", \"w\")\\n' > tools/lint.py",
        "git add -A && git commit -q --allow-empty -m u", ("pre-commit",),
        setup=f"{REPO} && mkdir tools && touch tools/__init__.py tools/lint.py && printf "
        "'repos:\\n- repo: local\\n  hooks:\\n  - id: x\\n    name: x\\n    entry: "
        "python3 -m tools.lint\\n    language: system\\n    pass_filenames: false\\n    "
        "always_run: true\\n' > .pre-commit-config.yaml && git add -A && git commit -qm c && "
        "pre-commit install"),
    "direnv-node-options": Proof("echo \"require('fs').writeFileSync('{M}', '')\" > hook.js",
                                 "direnv exec . node -e 0", ("direnv", "node"),
                                 setup="echo 'export NODE_OPTIONS=\"--require ./hook.js\"' > "
                                       ".envrc && echo '' > hook.js && direnv allow ."),
    "venv-site-module-before-pyvenv": Proof(
        "d=.venv/lib/python$(python3 -c 'import sys; print(\"%d.%d\" % sys.version_info[:2])')"
        "/site-packages && mkdir -p $d && printf 'open(\"{M}\", \"w\")\\n' > $d/evilmod.py",
        "python3 -m venv --without-pip .venv && .venv/bin/python -c 'import evilmod'",
        ("python3",)),
    "venv-grandparent-moved": Proof(
        f"mv app app.old; mkdir -p app/backend && python3 -m venv --without-pip "
        f"app/backend/.venv; {hook('app/backend/.venv/bin/git')}",
        ". app/backend/.venv/bin/activate && git --version", ("python3",),
        setup="mkdir -p app/backend && python3 -m venv --without-pip app/backend/.venv"),
    "venv-renamed-into-place": Proof(
        f"mkdir -p st/bin && {hook('st/bin/git')} && mv st .venv",
        "python3 -m venv --without-pip .venv && . .venv/bin/activate && git --version",
        ("python3",)),
    # a protected setting that switches something off may not be removed either
    "npm-ignore-scripts-removed": Proof(
        "rm -f .npmrc; printf '{\"name\":\"x\",\"version\":\"1.0.0\",\"scripts\":"
        "{\"preinstall\":\"touch {M}\"}}' > package.json",
        "npm install --offline --no-audit --no-fund >/dev/null 2>&1", ("npm",),
        setup="echo ignore-scripts=true > .npmrc && echo '{\"name\":\"x\",\"version\":"
              "\"1.0.0\"}' > package.json"),
    "hook-names-tree-program": Proof(
        hook("node_modules/tool-x/bin/tool"), "git commit -q --allow-empty -m u",
        setup=REPO + " && mkdir -p node_modules/tool-x/bin && printf '#!/bin/sh\\nexit 0\\n' > "
        "node_modules/tool-x/bin/tool && chmod +x node_modules/tool-x/bin/tool && printf "
        "'#!/bin/sh\\ndir=\"$(git rev-parse --show-toplevel)\"\\narch=x\\n"
        "\"$dir/node_modules/tool-${arch}/bin/tool\" \"$@\"\\n' > .git/hooks/pre-commit && "
        "chmod +x .git/hooks/pre-commit"),
    "hook-path-shadow": Proof(
        f"mkdir -p node_modules/.bin && {hook('node_modules/.bin/sh')}",
        "git commit -q --allow-empty -m u",
        setup=REPO + " && mkdir -p .husky/_ && printf '#!/bin/sh\\nexport PATH=\"node_modules/"
        ".bin:$PATH\"\\nsh -e .husky/pre-commit\\n' > .husky/_/pre-commit && chmod +x "
        ".husky/_/pre-commit && echo true > .husky/pre-commit && git config core.hooksPath "
        ".husky/_"),
    "direnv-sourced-file": Proof("echo 'touch {M}' > env.sh", "direnv exec . true", ("direnv",),
                                 setup="echo 'source ./env.sh' > .envrc && touch env.sh && "
                                       "direnv allow ."),
    "direnv-path-assignment": Proof(f"mkdir -p scripts && {hook('scripts/git')}",
                                    "direnv exec . git --version", ("direnv",),
                                    setup="echo 'export PATH=\"$PWD/scripts:$PATH\"' > .envrc "
                                          "&& direnv allow ."),
    "direnv-legacy-rc": Proof("echo 'touch {M}' > ~/.direnvrc", "direnv exec . true",
                              ("direnv",), home=True,
                              setup="echo 'export A=1' > .envrc && direnv allow ."),
    "direnv-path-add": Proof(f"mkdir -p bin && {hook('bin/git')}", "direnv exec . git --version",
                             ("direnv",), setup="printf 'PATH_add bin\\n' > .envrc && "
                                                "direnv allow ."),
    "venv-pip-conf": Proof(f"{hook('evilpy')} && printf '[global]\\npython = %s/evilpy\\n' "
                           "\"$PWD\" > .venv/pip.conf", ".venv/bin/pip --version",
                           ("python3",), setup="python3 -m venv .venv"),
    "venv-package-code": Proof(
        "f=$(echo .venv/lib/python3*/site-packages/pip/_internal/cli/main.py) && "
        "{ echo \"open('{M}', 'w')\"; cat $f; } > m.tmp && mv m.tmp $f",
        ".venv/bin/pip --version", ("python3",), setup="python3 -m venv .venv"),
    # a virtualenv made later over what a run left (python3 -m venv keeps it): its
    # programs under the usual names, a site folder under any name, the folder
    # above the user's own one moved and remade
    "venv-bin-before-pyvenv": Proof(f"mkdir -p .venv/bin && {hook('.venv/bin/git')}",
                                    "python3 -m venv --without-pip .venv && "
                                    ". .venv/bin/activate && git --version", ("python3",)),
    **{f"venv-bin-before-pyvenv-{name}": Proof(
        f"mkdir -p {name}/bin && {hook(name + '/bin/git')}",
        f"python3 -m venv --without-pip {name} && . {name}/bin/activate && git --version",
        ("python3",)) for name in (".venv-3.11", "myenv")},
    "venv-site-before-pyvenv-any-name": Proof(
        "d=.tox/py/lib/python3.$(python3 -c 'import sys; print(sys.version_info[1])')/"
        "site-packages && mkdir -p $d && echo \"import os; open('{M}', 'w')\" > $d/zz.pth",
        "python3 -m venv --without-pip .tox/py && .tox/py/bin/python -c pass", ("python3",)),
    "venv-folder-above-remade": Proof(
        "mv backend .trash; mkdir -p backend/.venv/bin && cp .trash/.venv/pyvenv.cfg "
        f"backend/.venv/ && {hook('backend/.venv/bin/activate')}",
        ". backend/.venv/bin/activate", ("python3",),
        setup="mkdir backend && python3 -m venv --without-pip backend/.venv"),
    # a folder above what a configuration names, remade with other contents
    "git-hookspath-folder-remade": Proof(
        f"cp -a .github n && {hook('n/hooks/pre-commit')} && mv .github o && mv n .github",
        "git commit -q --allow-empty -m u", ("git",),
        setup=f"{REPO} && mkdir -p .github/hooks && printf '#!/bin/sh\\nexit 0\\n' > "
              ".github/hooks/pre-commit && chmod +x .github/hooks/pre-commit && "
              "git config core.hooksPath .github/hooks"),
    "direnv-named-folder-remade": Proof(
        f"cp -a tools n && {hook('n/bin/git')} && mv tools o && mv n tools",
        "direnv exec . git --version", ("direnv",),
        setup="mkdir -p tools/bin && printf 'PATH_add tools/bin\\n' > .envrc && direnv allow ."),
    # what an .envrc names inside a list of commands, or by the folder's other spellings
    "direnv-conditional-source": Proof(
        "echo 'touch {M}' > .envrc.local", "direnv exec . true", ("direnv",),
        setup="echo '[ -f .envrc.local ] && source_env .envrc.local' > .envrc && "
              "touch .envrc.local && direnv allow ."),
    "direnv-sourced-in-a-loop": Proof(
        "echo 'touch {M}' > .envrc.d/x.sh", "direnv exec . true", ("direnv",),
        setup="mkdir .envrc.d && touch .envrc.d/a.sh && echo 'for f in .envrc.d/*.sh; do "
              "source \"$f\"; done' > .envrc && direnv allow ."),
    "direnv-path-from-toplevel": Proof(
        f"mkdir -p tools && {hook('tools/git')}", "direnv exec . git --version",
        ("direnv", "git"),
        setup="git init -q && echo 'PATH_add \"$(git rev-parse --show-toplevel)/tools\"' > "
              ".envrc && direnv allow ."),
    "direnv-path-from-pwd": Proof(
        f"mkdir -p bin && {hook('bin/git')}", "direnv exec . git --version", ("direnv",),
        setup="echo 'export PATH=$(pwd)/bin:$PATH' > .envrc && direnv allow ."),
    "hg-extension-named": Proof("printf 'import os\\nopen(\"{M}\", \"w\")\\n' > tools/ext.py",
                                "hg status", ("hg",),
                                setup="hg init . && mkdir tools && echo '' > tools/ext.py && "
                                      "printf '[extensions]\\next = tools/ext.py\\n' >> .hg/hgrc"),
    "mypy-plugin-named": Proof("printf 'from mypy.plugin import Plugin\\nopen(\"{M}\", \"w\")\\n"
                               "def plugin(v):\\n    return Plugin\\n' > tools/plug.py",
                               "mypy --no-incremental x.py >/dev/null", ("mypy",),
                               path=str(Path(sys.executable).parent),
                               setup="mkdir tools && printf 'from mypy.plugin import Plugin\\n"
                                     "def plugin(v):\\n    return Plugin\\n' > tools/plug.py && "
                                     "printf '[mypy]\\nplugins = tools/plug.py\\n' > mypy.ini && "
                                     "echo 'x = 1' > x.py"),
    # modules the standard library imports from outside it, from the working folder
    "python-org-shadow": Proof("echo 'open(\"{M}\", \"w\")' > org.py",
                               f"{BASE_PY} -c 'import copy'"),
    "python-sysconfigdata-shadow": Proof(
        f"echo 'open(\"{{M}}\", \"w\")' > $({BASE_PY} -c 'import sysconfig; "
        "print(sysconfig._get_sysconfigdata_name())').py", f"{BASE_PY} -m venv ../v"),
    # a driver's script inside a quoted command, or after $PWD/
    **{f"git-textconv-{form}": Proof(
        f"{hook('tools/conv.sh')} && echo 'cat \"$1\"' >> tools/conv.sh",
        "echo b >> a.txt && git diff >/dev/null", ("git",),
        setup=f"{REPO} && mkdir tools && printf '#!/bin/sh\\ncat \"$1\"\\n' > tools/conv.sh && "
              "chmod +x tools/conv.sh && echo '*.txt diff=a' > .gitattributes && echo a > a.txt "
              f"&& git config diff.a.textconv {value} && git add -A && git commit -qm i")
       for form, value in (("quoted", "\"sh -c 'tools/conv.sh \\\"\\$0\\\"'\""),
                           ("pwd", "'$PWD/tools/conv.sh'"))},
    # a hook installed as a link to a script of the work tree: the script is the hook
    "git-hook-link-target": Proof(
        hook("scripts/pre-commit"), "git commit -q --allow-empty -m u", ("git",),
        setup=f"{REPO} && mkdir scripts && printf '#!/bin/sh\\nexit 0\\n' > scripts/pre-commit"
              " && chmod +x scripts/pre-commit && ln -s ../../scripts/pre-commit "
              ".git/hooks/pre-commit"),
    # a driver's file argument given without a folder (python3 strip.py)
    "git-filter-driver-bare-word": Proof(
        "echo \"import os, sys; open('{M}', 'w'); sys.stdout.write(sys.stdin.read())\" > "
        "strip.py && touch a.txt", "git status --short", ("git", "python3"),
        setup=f"{REPO} && echo 'import sys; sys.stdout.write(sys.stdin.read())' > strip.py && "
              "echo '*.txt filter=strip' > .gitattributes && echo hello > a.txt && "
              "git config filter.strip.clean 'python3 strip.py' && git add -A && "
              "git commit -qm i"),
    "venv-site-before-pyvenv": Proof(
        "d=.venv/lib/python3.$(python3 -c 'import sys; print(sys.version_info[1])')/"
        "site-packages && mkdir -p $d && echo \"import os; open('{M}', 'w')\" > $d/zz.pth",
        "python3 -m venv --without-pip .venv && .venv/bin/python -c pass", ("python3",)),
    "hg-hgrc-not-shared": Proof("printf '[hooks]\\npre-status = touch {M}\\n' > "
                                ".hg/hgrc-not-shared", "hg status", ("hg",),
                                setup="hg init ."),
    "hg-folder-as-a-link": Proof("mkdir -p h d/x && printf '[hooks]\\npre-status = touch {M}\\n' "
                                 "> h/hgrc && ln -s ../../h d/x/.hg", "cd d/x && hg status",
                                 ("hg",)),
    "cargo-folder-as-a-link": Proof(f"{hook('w.sh')} && echo 'exec \"$@\"' >> w.sh && mkdir c && "
                                    "printf '[build]\\nrustc-wrapper = \"%s/w.sh\"\\n' \"$PWD\" "
                                    "> c/config.toml && ln -s c .cargo",
                                    "cargo check -q --offline", ("cargo",), setup=CRATE),
    "irb-underscore-irbrc": Proof("echo 'File.write(\"{M}\", \"\")' > _irbrc", "echo | irb",
                                  ("irb",)),
    "vim-underscore-vimrc": Proof("echo 'silent !touch {M}' > _vimrc",
                                  "vim --not-a-term -c q </dev/null", ("vim",),
                                  setup="echo 'set exrc' > ~/.vimrc"),
    "python-stdlib-shadow": Proof("echo 'import os; os.system(\"touch {M}\")' > logging.py",
                                  f"{BASE_PY} -m venv ../v", setup="git init -q"),
    "python-stdlib-shadow-plain-folder": Proof(
        "mkdir tools && echo 'import os; os.system(\"touch {M}\")' > tools/logging.py",
        f"cd tools && {BASE_PY} -m venv ../v"),

    "nvim-rplugin-manifest": Proof("mkdir -p ~/.local/share/nvim && echo 'silent !touch {M}' > "
                                   "~/.local/share/nvim/rplugin.vim",
                                   "nvim --headless -c q </dev/null", ("nvim",), home=True),
    "python-stdlib-package": Proof("mkdir -p http && echo 'open(\"{M}\", \"w\")' > "
                                   "http/__init__.py", f"{BASE_PY} -c 'import http.server'",
                                   setup="touch pyproject.toml"),
    "python-startup-file": Proof("echo 'open(\"{M}\", \"w\")' > ~/.pythonrc",
                                 f"{BASE_PY} -i </dev/null", home=True,
                                 env={"PYTHONSTARTUP": "{HOME}/.pythonrc"}),
    "nvim-site-plugin": Proof("mkdir -p ~/.local/share/nvim/site/plugin && echo 'silent !touch "
                              "{M}' > ~/.local/share/nvim/site/plugin/x.vim",
                              "nvim --headless -c q </dev/null", ("nvim",), home=True),
    "fish-vendor-conf": Proof("mkdir -p ~/.local/share/fish/vendor_conf.d && echo 'touch {M}' > "
                              "~/.local/share/fish/vendor_conf.d/x.fish", "fish -c true",
                              ("fish",), home=True),
}


def proof_ids() -> list[str]:
    return sorted({e["proof"] for e in CATALOGUE if not e["proof"].startswith(ELSEWHERE)})


def test_every_entry_is_proven_here_or_says_why() -> None:
    assert set(proof_ids()) == set(PROOFS), set(proof_ids()) ^ set(PROOFS)


class World:
    def __init__(self, base: Path, proof: Proof) -> None:
        self.base, self.proof = base, proof
        self.work, self.home, self.marker = base / "work", base / "home", base / "marker"
        self.work.mkdir()
        self.home.mkdir()
        roots = [str(self.work)] + ([str(self.home)] if proof.home else [])
        self.settings = base / "settings.json"
        self.settings.write_text(json.dumps({
            "network": {"allowedDomains": [], "deniedDomains": []},
            "filesystem": {"denyRead": [], "denyWrite": [], "allowWrite": roots}}))
        path = os.environ.get("PATH", "/usr/bin:/bin")
        if proof.path:
            path = f"{proof.path}:{path}"
        self.env = {"PATH": path, "HOME": str(self.home), "LANG": "C.UTF-8", "TERM": "dumb",
                    "GIT_CONFIG_NOSYSTEM": "1", "GIT_AUTHOR_NAME": "u",
                    "GIT_AUTHOR_EMAIL": "u@u", "GIT_COMMITTER_NAME": "u",
                    "GIT_COMMITTER_EMAIL": "u@u", "GOCACHE": str(base / "gocache"),
                    "GOFLAGS": "", "GOTOOLCHAIN": "local", "GOPATH": str(base / "gopath"),
                    "CARGO_HOME": str(base / "cargo-home"), "HGUSER": "u",
                    "npm_config_update_notifier": "false", "MAVEN_SKIP_RC": ""}
        for k, v in (proof.env or {}).items():
            self.env[k] = v.replace("{HOME}", str(self.home))
        self.env.pop("GOFLAGS")
        self.env.pop("MAVEN_SKIP_RC")
        if shutil.which("rustup", path=path) and "cargo" not in proof.needs:
            self.env.pop("CARGO_HOME")  # rustup's own proxies find their toolchains
        if "cargo" in proof.needs and os.path.exists("/usr/bin/cargo"):
            self.env["PATH"] = "/usr/bin:" + path  # Debian's, not a rustup proxy

    def sh(self, script: str, *, sandboxed: bool = False) -> subprocess.CompletedProcess[str]:
        text = script.replace("{M}", str(self.marker))
        argv = ["sh", "-c", text]
        if sandboxed:
            argv = [SANDBOX, "exec", "--settings", str(self.settings), "--", *argv]
        return subprocess.run(argv, cwd=self.work, env=self.env, capture_output=True,
                              text=True, timeout=300, stdin=subprocess.DEVNULL)


@pytest.mark.parametrize("sandboxed", [True, False], ids=["sandboxed", "control"])
@pytest.mark.parametrize("name", sorted(PROOFS) + sorted(VARIANTS))
def test_a_trigger_planted_in_a_run_never_fires_on_the_host(
        tmp_path: Path, name: str, sandboxed: bool) -> None:
    proof = PROOFS.get(name) or VARIANTS[name]
    world = World(tmp_path, proof)
    missing = [p for p in proof.needs if not shutil.which(p, path=world.env["PATH"])]
    if missing:
        pytest.skip(f"{', '.join(missing)} not installed")
    if proof.setup:
        done = world.sh(proof.setup)
        assert done.returncode == 0, done.stdout + done.stderr
    planted = world.sh(proof.plant, sandboxed=sandboxed)
    assert not world.marker.exists(), "the plant itself fired: " + planted.stderr
    if sandboxed:  # stopped by the protection, not by anything else
        assert "refused" in planted.stderr, planted.stdout + planted.stderr
    fired = world.sh(proof.fire)
    detail = f"plant: {planted.stdout}{planted.stderr}\nfire: {fired.stdout}{fired.stderr}"
    assert world.marker.exists() == (not sandboxed), detail
