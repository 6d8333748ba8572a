# agent-sandbox: the two commands a newcomer runs are `make demo` and `make test`.
SHELL := /bin/bash
VENV  := .venv
PY    := $(VENV)/bin/python
export CONTAINERS_CONF := $(CURDIR)/containers.conf
export ANSIBLE_COLLECTIONS_PATH := $(CURDIR)/.collections

.PHONY: setup test test-fast lint role-docs bench demo demo-down render-example clean

setup:
	@bash scripts/bootstrap.sh

test: setup
	$(PY) -m pytest -q

test-fast: setup
	$(PY) -m pytest -q -m "not slow"

lint: setup
	$(VENV)/bin/ruff check src tests bench scripts
	$(VENV)/bin/mypy
	$(PY) scripts/role_docs.py --check
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

clean:
	rm -rf build .pytest_cache
