# agent-sandbox: the two commands a newcomer runs are `make demo` and `make test`.
SHELL := /bin/bash
VENV  := .venv
PY    := $(VENV)/bin/python
export CONTAINERS_CONF := $(CURDIR)/containers.conf
export ANSIBLE_COLLECTIONS_PATH := $(CURDIR)/.collections

.PHONY: setup test test-fast lint role-docs bench demo demo-down demo-infra demo-infra-down \
        render-example clean

setup:
	@bash scripts/bootstrap.sh

# The suite runs in parallel (pytest-xdist, two workers per core): every worker gets
# its own state, lock and audit folders (tests/conftest.py); each test file stays on
# one worker (--dist loadfile: module fixtures such as the molecule scenario's
# containers are made once; xdist_group does not hold under pytest 9). The longest
# files are handed out first (tests/conftest.py LONGEST_FIRST), so that no long file
# runs alone at the end. Many tests wait (on containers, clients, timeouts), so a
# worker per core leaves the cores idle. On 2 cores, with the suite at about 750 CPU-s:
# 3 workers took 569 s, 4 took 502 s, 5 took 575 s. TEST_JOBS=0 runs it in one
# process, no workers.
TEST_JOBS ?= $(shell n=$$(nproc 2>/dev/null || echo 1); echo $$(( n * 2 )))
PYTEST := $(PY) -m pytest -q -n $(TEST_JOBS) --dist loadfile

test: setup
	$(PYTEST)

test-fast: setup
	$(PYTEST) -m "not slow"

lint: setup
	$(VENV)/bin/ruff check src tests bench scripts plugins roles
	$(VENV)/bin/mypy
	$(PY) scripts/role_docs.py --check
	$(PY) scripts/triggers_table.py --check
	$(VENV)/bin/ansible-lint --profile production --nocolor

role-docs: setup
	$(PY) scripts/role_docs.py

bench: setup
	@for b in bench/bench_*.py; do echo "== $$b"; $(PY) $$b || exit 1; done

render-example: setup
	$(VENV)/bin/sandbox render inventories/example-fleet --host dev-linux-01 --out build/render/dev-linux-01

demo: setup
	@bash scripts/demo.sh

demo-down: setup
	@bash scripts/demo.sh down

# privileged infrastructure actions end to end: PostgreSQL, OpenBao, gVisor (not part of demo)
demo-infra: setup
	@bash scripts/base-image.sh
	@$(PY) scripts/demo_infra.py

demo-infra-down: setup
	@$(PY) scripts/demo_infra.py down

clean:
	rm -rf build .pytest_cache
