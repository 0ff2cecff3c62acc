# Two entry points for a fresh machine: `make demo` and `make test`.
# Each creates the virtual environment in .venv on first use. `make demo` installs
# Forewarn alone (no test tools, no torch/transformers); `make test` adds the test extra.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: demo test check bench clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

# What the demo needs: the package and its own dependencies.
$(VENV)/.demo: pyproject.toml | $(PY)
	$(PY) -m pip install --quiet -e .
	touch $@

# The test tools (pytest, hypothesis, schemathesis, the Hugging Face source) on top.
$(VENV)/.installed: pyproject.toml | $(PY)
	$(PY) -m pip install --quiet -e '.[test]'
	touch $@ $(VENV)/.demo

demo: $(VENV)/.demo
	$(VENV)/bin/forewarn demo
	@echo "Run the hints above as printed, or activate the environment first: source $(VENV)/bin/activate"

test: $(VENV)/.installed
	$(PY) -m pytest -q

# Static checks CI runs after the tests (each issue-11 part adds its line here).
check: $(VENV)/.installed
	$(VENV)/bin/lint-imports

bench: $(VENV)/.installed
	$(PY) bench/decision_latency.py
	$(PY) bench/precompute.py
	$(PY) bench/learn_throughput.py

clean:
	rm -rf $(VENV) forewarn-demo .pytest_cache
