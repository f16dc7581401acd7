# Two commands do everything on a fresh clone:
#   make demo   runs a worker and beat on the embedded default and shows runs firing
#   make test   runs ruff, mypy, the import contracts and the whole test suite
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint unit clean

# The demo runs on the embedded default, which needs no extra: it installs the package
# alone, and `make test` adds the development extras to the same environment.
DEMO_STAMP := $(VENV)/.installed-demo

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

# -qq: setuptools notes every editable install in a block of warnings, which is not
# what a newcomer should read first; pip's errors still show.
$(DEMO_STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -qq -e .
	touch $(DEMO_STAMP)

demo: $(DEMO_STAMP)
	$(BIN)/python -m workers.demo

# The documentation site, built by `make lint` in strict mode: a broken link, an anchor
# that is not there or a page left out of the nav fails it.
SITE ?= .site

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet --site-dir $(SITE)

# The unit tests run twice more with the clock moved (tests/unit/conftest.py): a year
# ahead, and two seconds before a change of daylight-saving time. A test that compares
# a fixed instant with the real clock fails there, rather than on the day the two meet.
#
# The suite then runs on $(WORKERS) processes (pytest-xdist, at most 6: each has a Redis
# database of its own; the tests of a file marked xdist_group share one, with its servers
# and virtualenvs), and the tests marked serial (a PostgreSQL restart, the chaos run)
# alone after it.
WORKERS ?= 4
test: lint
	BRIDGE_TEST_CLOCK=+366 $(BIN)/python -m pytest -q -n 2 tests/unit
	BRIDGE_TEST_CLOCK=dst:Europe/Berlin $(BIN)/python -m pytest -q -n 2 tests/unit
	$(BIN)/python -m pytest -n $(WORKERS) --dist loadgroup -m "not serial"
	$(BIN)/python -m pytest -m serial

unit: $(STAMP)
	$(BIN)/python -m pytest tests/unit

clean:
	rm -rf .demo .pytest_cache .mypy_cache .ruff_cache $(SITE)
