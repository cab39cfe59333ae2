# slurmpool: `make demo` brings up the lab and runs the operator on a sample pool;
# `make test` runs every test (unit and end-to-end). Both install what they need.
SHELL := /bin/bash
PY ?= python3
VENV := $(CURDIR)/.venv
BIN := $(VENV)/bin
export LAB_DIR ?= $(CURDIR)/.lab

.PHONY: venv deps lab-build lab-up lab-down unit e2e test demo crds

venv: deps $(VENV)/.stamp
$(VENV)/.stamp: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'
	touch $@

# System packages the lab needs (Slurm 22.05, munge, sshd) and the Go-built control plane.
deps:
	e2e/lab/install-deps.sh

lab-build: deps
	e2e/lab/build.sh

lab-up: deps venv
	e2e/lab/up.sh

lab-down:
	e2e/lab/down.sh

crds: venv
	$(BIN)/python -m slurmpool.crd > crds/slurmpool.io_slurmnodepools.yaml

unit: venv
	$(BIN)/pytest -q tests

e2e: deps venv
	$(BIN)/pytest -q e2e

test: unit e2e

demo: lab-up
	e2e/demo.sh
