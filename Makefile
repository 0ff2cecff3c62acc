# Two entry points for a fresh machine: `make demo` and `make test`.
# Each creates the virtual environment in .venv on first use.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: demo test bench clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $@

demo: $(VENV)/.installed
	$(VENV)/bin/forewarn demo

test: $(VENV)/.installed
	$(PY) -m pytest -q

bench: $(VENV)/.installed
	$(PY) bench/decision_latency.py
	$(PY) bench/precompute.py
	$(PY) bench/learn_throughput.py

clean:
	rm -rf $(VENV) forewarn-demo .pytest_cache
