PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-slow lint docs setup clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/python -m pip install -q -e '.[test,service,postgres,docs,scrapy,cluster]'
	touch $(STAMP)

setup: $(STAMP)

demo: $(STAMP)
	$(BIN)/recrawl demo

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks
	$(BIN)/mypy

# The docs site (mkdocs-material + mkdocstrings), built with --strict: a broken
# link or a docstring that does not render fails. `make docs DOCS_SITE=site`
# keeps the site in ./site; by default it is built in a temporary directory.
docs: $(STAMP)
	@tmp=$$(mktemp -d); site="$(or $(DOCS_SITE),$$tmp/site)"; \
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir "$$site"; rc=$$?; \
	rm -rf "$$tmp"; if [ $$rc -eq 0 ]; then echo "docs built (mkdocs --strict)$(if $(DOCS_SITE), in $(DOCS_SITE))"; fi; \
	exit $$rc

test: $(STAMP) lint docs
	@test -x /usr/bin/chromium || (apt-get update && apt-get install -y chromium)
	@test -x /usr/bin/promtool || (apt-get update && apt-get install -y prometheus)
	$(BIN)/python -m pytest -m "not slow"

# The tests marked slow (whole generated health histories, a million-page
# cluster plan): minutes, so kept out of `make test`.
test-slow: $(STAMP)
	$(BIN)/python -m pytest -m slow

clean:
	rm -rf $(VENV) build *.egg-info
