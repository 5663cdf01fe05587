# Two commands set up everything on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
# torch is installed first, pinned, so that pip takes the build this machine serves from disk
# instead of resolving a newer one through the extras.
TORCH  ?= torch==2.14.1 torchvision==0.29.1

.PHONY: install demo campaign-demo test test-fast bench lint clean

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q $(TORCH)
	$(BIN)/pip install -q -e ".[workers,kernels,dev]"
	touch $@

demo: install
	$(BIN)/genloop demo --out out/demo

campaign-demo: install
	$(BIN)/genloop campaign run examples/campaign.yaml --out out/campaigns

test: install
	$(BIN)/python -m pytest -q

test-fast: install
	$(BIN)/python -m pytest -q -m "not slow"

bench: install
	$(BIN)/python benchmarks/orchestration.py

lint: install
	$(BIN)/ruff check sdk workers kernels evaluators tests benchmarks examples
	$(BIN)/mypy sdk

clean:
	rm -rf $(VENV) out .pytest_cache
