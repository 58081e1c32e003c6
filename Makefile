PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint setup clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/python -m pip install -q -e '.[test,service,postgres,docs]'
	touch $(STAMP)

setup: $(STAMP)

demo: $(STAMP)
	$(BIN)/recrawl demo

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks
	$(BIN)/mypy

test: $(STAMP) lint
	@test -x /usr/bin/chromium || (apt-get update && apt-get install -y chromium)
	$(BIN)/python -m pytest

clean:
	rm -rf $(VENV) build *.egg-info
