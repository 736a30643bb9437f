# Two commands do everything on a fresh machine:
#   make repro   install into .venv (pinned), then run the pipeline (dvc repro) on the default tasks
#   make test    install into .venv (pinned), then the linter (ruff check + format check) and the test suite
#   (make test-fast: the same without the end-to-end tests)
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
# pytest-xdist workers for make test / test-fast (make test TEST_WORKERS=0: one process, no workers)
TEST_WORKERS ?= 2
PYTEST := $(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist worksteal --durations=15

.PHONY: install repro test test-fast lint bench clean-venv

$(BIN)/.installed: pyproject.toml requirements-lock.txt
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet -c requirements-lock.txt -e ".[dev,dask]"
	$(BIN)/python -c "from pipeline.runtime import mkl_vendor; mkl_vendor.main()"   # MKL's vendor check answered (a small library built with cc into ~/.cache/copyseq): one MKL code path on every CPU
	touch $@

install: $(BIN)/.installed

repro: install
	scripts/with_prefect_server.sh dvc repro

test: lint
	$(PYTEST)

test-fast: lint   # no end-to-end tests (dvc repro, Prefect flows): docs/development.md gives its time
	$(PYTEST) -m "not slow"

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

bench: install
	$(BIN)/python benchmarks/bench_mechanisms.py
