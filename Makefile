# Two commands do everything on a fresh machine:
#   make repro   install into .venv (pinned), then run the pipeline (dvc repro) on the default tasks
#   make test    install into .venv (pinned), then run the test suite
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin

.PHONY: install repro test bench clean-venv

$(BIN)/.installed: pyproject.toml requirements-lock.txt
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet -c requirements-lock.txt -e ".[dev]"
	touch $@

install: $(BIN)/.installed

repro: install
	scripts/with_prefect_server.sh dvc repro

test: install
	$(BIN)/python -m pytest -q

bench: install
	$(BIN)/python benchmarks/bench_mechanisms.py
