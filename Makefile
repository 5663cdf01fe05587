# Two commands set up everything on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
# torch is installed first, pinned, so that pip takes the build this machine serves from disk
# instead of resolving a newer one through the extras.
TORCH  ?= torch==2.14.1 torchvision==0.29.1
EXTRAS := workers,kernels,dev
# The exact versions the suite last passed with (pip constraints: pyproject keeps ranges).
LOCK   := requirements.lock

.PHONY: install demo campaign-demo test test-fast bench lint typecheck clean gpu-check gpu-wheels \
	shapes-gpu lock latest mutation

install: $(VENV)/.installed

# venv-from-index DIR: a new venv in DIR with genloop and every extra resolved against the index,
# no lock (make lock, make latest).
define venv-from-index
	rm -rf $(1) && $(PYTHON) -m venv $(1)
	$(1)/bin/pip install -q --upgrade pip
	$(1)/bin/pip install -q $(TORCH)
	$(1)/bin/pip install -q --upgrade --upgrade-strategy eager -e ".[$(EXTRAS)]"
endef

$(VENV)/.installed: pyproject.toml $(LOCK)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -c $(LOCK) $(TORCH)
	$(BIN)/pip install -q -c $(LOCK) -e ".[$(EXTRAS)]"
	touch $@

demo: install
	$(BIN)/genloop demo --out out/demo

campaign-demo: install
	$(BIN)/genloop campaign run examples/campaign.yaml --out out/campaigns

# The suite runs on two processes (pytest-xdist): much of its time is spent waiting on worker
# pools, servers and subprocesses, not computing. The second process has a Redis of its own
# (tests/worker_redis.py); the wheel's tests stay on one (they share the built wheel).
# PYTEST_WORKERS=0 runs it in one process.
PYTEST_WORKERS ?= 2
PYTEST := -m pytest -q -n $(PYTEST_WORKERS) --dist loadgroup

test: install
	$(BIN)/python $(PYTEST)

test-fast: install
	$(BIN)/python $(PYTEST) -m "not slow"

bench: install
	$(BIN)/python benchmarks/orchestration.py

# Refresh the lock against today's index in a throwaway venv and run the whole suite there; the
# lock is replaced only if it passes: an upgrade is this target and one commit, nothing else.
lock:
	$(call venv-from-index,$(VENV)-lock)
	{ echo "# genloop's locked dependency set (Python 3.11, x86_64 Linux): written by make lock,"; \
	  echo "# installed by make install as pip constraints. Do not edit by hand."; \
	  $(VENV)-lock/bin/pip freeze --exclude-editable | LC_ALL=C sort -f; } > $(LOCK).new
	$(VENV)-lock/bin/python $(PYTEST)
	mv $(LOCK).new $(LOCK)

# The newest releases of everything, in a throwaway venv, under the fast tests: a breaking release
# shows here before a fresh machine meets it.
latest:
	$(call venv-from-index,$(VENV)-latest)
	$(VENV)-latest/bin/python $(PYTEST) -m "not slow"

lint: install
	$(BIN)/ruff check sdk workers gateway kernels evaluators integrations campaign shapes tests benchmarks examples tools
	$(MAKE) --no-print-directory typecheck

# mypy (with the pydantic plugin) over all of genloop. The code folders import each other as
# genloop.*, a name the editable install maps (package-dir) through a finder mypy does not follow,
# so out/typecheck/genloop/ holds a symlink per folder and mypy checks the package from there.
# genloop itself is a namespace package (no __init__.py), as installed. The cache under out/
# keeps a rerun to the changed modules; the report names the real files, not the symlinks.
TYPECHECK := out/typecheck
CODE_DIRS := sdk workers gateway kernels evaluators campaign integrations shapes
typecheck: install
	mkdir -p $(TYPECHECK)/genloop
	for d in $(CODE_DIRS); do ln -sfn ../../../$$d $(TYPECHECK)/genloop/$$d; done
	MYPYPATH=$(TYPECHECK) $(BIN)/mypy --cache-dir $(TYPECHECK)/.mypy_cache -p genloop \
		> $(TYPECHECK)/report.txt; rc=$$?; \
		sed 's#^$(TYPECHECK)/genloop/##' $(TYPECHECK)/report.txt; exit $$rc

# The GPU check runs on a lent GPU machine whose python3 has torch and Triton but not genloop's
# other dependencies: `make gpu-wheels` (here) downloads them into .whl, `make gpu-check` (there)
# installs them into /tmp/site and runs every check in one command, writing $OUT/gpu_check.json.
GPU_PYTHON ?= python3
gpu-check:
	$(GPU_PYTHON) -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
		--target /tmp/site .whl/*.whl
	PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 $(GPU_PYTHON) benchmarks/gpu_check.py \
		--out $${OUT:-out/gpu-check}

# Shapes world v2 on the GPU machine (same wheels as gpu-check): retrain the generator and
# shapes-clip in SHAPES_BUDGET seconds of training, evaluate against the shipped weights, and
# write $OUT/shapes_v2.json, shapes_v2.log and the weights as tar parts. About 7 minutes.
SHAPES_BUDGET ?= 240
shapes-gpu:
	$(GPU_PYTHON) -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
		--target /tmp/site .whl/*.whl
	PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 $(GPU_PYTHON) benchmarks/shapes_gpu.py \
		--out $${OUT:-out/shapes-v2} --budget-seconds $(SHAPES_BUDGET)

gpu-wheels:
	$(BIN)/python -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
		--implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
		--platform manylinux2014_x86_64 -d .whl $$($(BIN)/python benchmarks/gpu_check.py --wheels)

# Mutation testing (issue #49, docs/mutation.md): mutmut over the modules [tool.mutmut] in
# pyproject.toml lists. mutmut names a mutant by its file's path and the tests import genloop.*,
# so the code folders are staged under out/mutation/genloop/ as package-dir installs them, and
# mutmut runs there. Incremental: out/mutation is kept, rsync -a leaves unchanged files as they
# were, and mutmut retests only mutants of functions whose code changed (rm -rf out/mutation for
# a fresh run). MUTATION_REF=HEAD stages a commit instead of the working tree; MUTANTS narrows
# the run to a glob over mutant names (MUTANTS='genloop.workers.runtime.keys.*'). Needs the test Redis
# (GENLOOP_TEST_REDIS_PORT). Survivors: cd out/mutation && ../../.venv/bin/mutmut show NAME.
# Measured on 2 cores shared with two other engineers: keys, holders, the artifact stores and
# three scheduler functions (483 mutants) took 8 min, stats for the whole selection included;
# all ~5,200 do not fit an hour here (1,513 checked in 35 min), so run a module or two at a time.
MUTATION      := out/mutation
MUTATION_DIRS := $(CODE_DIRS)
MUTATION_JOBS ?= 2
MUTATION_REF  ?=
mutation: install
	mkdir -p $(MUTATION)/genloop $(MUTATION)/ref
	rm -rf $(MUTATION)/ref/*
	if [ -n "$(MUTATION_REF)" ]; then \
		git archive $(MUTATION_REF) $(MUTATION_DIRS) tests pyproject.toml | tar -x -C $(MUTATION)/ref; \
	else \
		cp -a $(MUTATION_DIRS) tests pyproject.toml $(MUTATION)/ref/; \
	fi
	for d in $(MUTATION_DIRS); do \
		rsync -a --checksum --delete --exclude __pycache__ $(MUTATION)/ref/$$d/ $(MUTATION)/genloop/$$d/; \
	done
	rsync -a --checksum --delete --exclude __pycache__ $(MUTATION)/ref/tests/ $(MUTATION)/tests/
	rsync -a --checksum $(MUTATION)/ref/pyproject.toml $(MUTATION)/
	cd $(MUTATION) && nice -n 10 ../../$(BIN)/mutmut run --max-children $(MUTATION_JOBS) $(MUTANTS)
	cd $(MUTATION) && ../../$(BIN)/mutmut export-cicd-stats

clean:
	rm -rf $(VENV) $(VENV)-lock $(VENV)-latest out .pytest_cache
