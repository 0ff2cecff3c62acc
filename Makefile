# Two entry points for a fresh machine: `make demo` and `make test`.
# Each creates the virtual environment in .venv on first use. `make demo` installs the
# core alone (the demo needs no extra, and no test tools); `make test` adds the test extra
# (every extra and the test tools). `make core-test` runs the tests that need no extra
# against a core-only, non-editable install in .venv-core, as a user's `pip install forewarn`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
CORE_VENV ?= .venv-core

.PHONY: demo test core-test extras-test check docs bench clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

# What the demo needs: the core (no extra, no test tools).
$(VENV)/.demo: pyproject.toml | $(PY)
	$(PY) -m pip install --quiet -e .
	touch $@

# Every extra and the test tools (pytest, hypothesis, schemathesis, playwright) on top.
$(VENV)/.installed: pyproject.toml | $(PY)
	$(PY) -m pip install --quiet -e '.[test]'
	touch $@ $(VENV)/.demo

demo: $(VENV)/.demo
	$(VENV)/bin/forewarn demo
	@echo "Run the hints above as printed, or activate the environment first: source $(VENV)/bin/activate"

test: $(VENV)/.installed
	$(PY) -m pytest -q

$(CORE_VENV)/bin/python:
	$(PYTHON) -m venv $(CORE_VENV)

# Built afresh each time (a non-editable install copies the sources): no stale build/ files.
# PYTHONPATH is dropped so that `forewarn` is the installed copy, not this checkout.
core-test: | $(CORE_VENV)/bin/python
	rm -rf build
	$(CORE_VENV)/bin/python -m pip install --quiet . pytest hypothesis
	cd tests && env -u PYTHONPATH ../$(CORE_VENV)/bin/python -c "from forewarn.guard._extras import EXTRAS, missing; \
	    present = [e for e in EXTRAS if not missing(e)]; assert not present, f'{present} installed in the core env'"
	env -u PYTHONPATH $(CORE_VENV)/bin/pytest -q -p no:cacheprovider --core

# Each extra alone: a venv with the core and that extra only, then its smallest real use (a server
# process spoken to over HTTP or stdio, a report written, ...), so that a module one extra imports but only
# another installs fails here rather than for a user (the full suite has every extra at once). One line
# per extra with its time; about 5 minutes (tests/extras/each_alone.py). `make extras-test EXTRAS="mcp hf"`
# runs some. CI runs it after the tests.
extras-test:
	$(PYTHON) tests/extras/each_alone.py $(EXTRAS)

# Static checks CI runs after the tests (each issue-11 part adds its line here). mypy checks the package,
# bench, examples and tests; each test folder's conftest.py on its own (all share the module name conftest).
check: $(VENV)/.installed
	$(PY) tools/check_commits.py
	$(VENV)/bin/lint-imports
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy
	for conftest in tests/*/conftest.py; do $(VENV)/bin/mypy $$conftest || exit 1; done
	$(MAKE) core-test

# The documentation site, from docs/ into site/ (open site/index.html; no network needed). Strict: a
# warning, a broken internal link or anchor, or an unreadable docstring fails it. CI runs it.
docs: $(VENV)/.installed
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

bench: $(VENV)/.installed
	$(PY) bench/decision_latency.py
	$(PY) bench/precompute.py
	$(PY) bench/learn_throughput.py

clean:
	rm -rf $(VENV) $(CORE_VENV) build forewarn-demo .pytest_cache site
