# gpuplace: the two commands of the quick start are `make demo` and `make test`.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
STACK := deploy/local/stack.sh

.PHONY: demo test deps venv stack-up stack-down stack-status lint unit

# Python environment pinned by requirements.lock; reinstalled only when the lock or pyproject changes.
$(VENV)/.installed: requirements.lock pyproject.toml
	@test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -c requirements.lock -e ".[dev]"
	@touch $@

venv: $(VENV)/.installed

# System packages (PostgreSQL, ...) and toolchains the local stack needs; idempotent.
deps: venv
	@bash deploy/local/install-deps.sh

stack-up: deps
	@bash $(STACK) up

stack-down:
	@bash $(STACK) down

stack-status:
	@bash $(STACK) status

# The static checks CI runs before any test: style, types (mypy reads [tool.mypy]), import contracts.
lint: venv
	$(VENV)/bin/ruff check libs services tests bench examples
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

unit: venv
	$(VENV)/bin/pytest tests/unit -q

demo: stack-up
	$(VENV)/bin/gpuplace demo

test: lint stack-up
	$(VENV)/bin/pytest
