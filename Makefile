# slurmpool: `make demo` brings up the lab and runs the operator on a sample pool;
# `make test` runs every test (unit and end-to-end). Both install what they need.
SHELL := /bin/bash
PY ?= python3
VENV := $(CURDIR)/.venv
BIN := $(VENV)/bin
export LAB_DIR ?= $(CURDIR)/.lab

.PHONY: slurm e2e-matrix e2e-matrix-beside images-all venv deps lab-build lab-up lab-down unit e2e load test demo crds tools chart manifests image-check images bench bench-matrix alerts-idle
CHART := deploy/helm/slurmpool

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
	deploy/render-manifests.sh --crds-only

# Helm, a PromQL parser, Prometheus and promtool, and a checker of the admission policies' CEL
# (the apiserver's own validation code), built from Go modules
# (e2e/lab/build-{helm,promql,prometheus,celcheck}.sh; cached under ~/.cache/slurmpool).
tools: deps
	e2e/lab/build-helm.sh >/dev/null
	e2e/lab/build-promql.sh >/dev/null
	e2e/lab/build-prometheus.sh >/dev/null
	e2e/lab/build-celcheck.sh >/dev/null

# The chart: helm lint and template (defaults and every option on); deploy/manifests/ current.
chart: tools
	h=$$(e2e/lab/build-helm.sh) && $$h lint --strict $(CHART) && \
	  $$h template slurmpool $(CHART) -n slurmpool-system >/dev/null && \
	  $$h template slurmpool $(CHART) -n slurmpool-system --set metrics.serviceMonitor.enabled=true \
	    --set metrics.prometheusRule.enabled=true --set cadence.createRole=true \
	    --set oncall.createRole=true --set 'oncall.subjects[0].kind=Group,oncall.subjects[0].name=gpu-oncall' \
	    --set 'rbac.poolNamespaces={gpu-a,gpu-b}' >/dev/null
	deploy/render-manifests.sh --check

# Plain manifests for users without Helm, rendered from the chart.
manifests: tools
	deploy/render-manifests.sh

# The image's pieces: the wheel builds, its entrypoint runs from a fresh venv, hadolint.
image-check: venv
	deploy/docker/check.sh

# The operator image and slurmd images as OCI archives from a Debian base, no engine or registry
# (deploy/docker/build-images.sh; cached under ~/.cache/slurmpool/images). README: push them.
# SLURM: the slurmd images' Slurm versions, e.g. SLURM="22.05 24.11 26.05" (default 22.05).
images: deps venv
	$(if $(SLURM),SLURMD_VERSIONS="$(SLURM)") deploy/docker/build-images.sh

unit: venv tools
	SLURMPOOL_REQUIRE_TOOLS=1 $(BIN)/pytest -q tests

# LAB_PROMETHEUS=1: the lab's Prometheus runs (e2e/test_alerts_lab.py, e2e/test_dashboard_lab.py).
# LAB_REAL_NODES (default 2 here): real kubelet nodes beside the simulated ones, for
# e2e/test_real_nodes*.py (the images are built by deploy/docker/build-images.sh; e2e/lab/README.md).
e2e: deps venv tools slurm
	LAB_PROMETHEUS=1 LAB_REAL_NODES=$${LAB_REAL_NODES:-2} $(BIN)/pytest -q --durations=25 e2e

# The Slurm versions the lab offers besides Debian 12's 22.05, cached outside the checkout:
# 26.05 built from ../shared/vendor (about 4 min cold), 24.11 in a Debian 13 root filesystem.
slurm: deps
	e2e/lab/build-slurm.sh >/dev/null
	e2e/lab/build-rootfs-2411.sh >/dev/null

# The Slurm matrix (issue 13, e2e/matrix.sh): the move core on each version, access path and node
# model. CI runs MATRIX_CI (22.05 over SSH is all of `make e2e`); `e2e/matrix.sh` alone runs every row.
# 24.11-dynamic-requeue: the Requeue policy on 24.11 over SSH (24.11's slurmrestd cannot requeue), and
# the 24.11 slurmd image (munge, configless) on that lab's dynamic nodes.
MATRIX_CI ?= 24.11-rest 24.11-dynamic-requeue 26.05 26.05-dynamic-rest
e2e-matrix: deps venv slurm
	e2e/matrix.sh $(MATRIX_CI)

# The matrix in a lab of its own beside the 22.05 suite's (make test): its own LAB_DIR, and ports
# and addresses shifted by another 100 (e2e/lab/up.sh: LAB_PORT_OFFSET). `exec env`: no shell of
# this recipe keeps the main lab's LAB_DIR in its environment (test_lab_down_leaves_nothing_behind
# looks for the main lab's processes by it).
MATRIX_LAB_DIR ?= $(CURDIR)/.lab-matrix
MATRIX_PORT_OFFSET ?= $(shell echo $$(( $${LAB_PORT_OFFSET:-0} + 100 )))
e2e-matrix-beside: deps venv slurm
	exec env LAB_DIR=$(MATRIX_LAB_DIR) LAB_PORT_OFFSET=$(MATRIX_PORT_OFFSET) e2e/matrix.sh $(MATRIX_CI)

# Every image the suite runs, built (or found cached) before the two labs start, so that no two
# builds of one image run at once.
images-all: deps venv slurm
	SLURMD_VERSIONS="22.05 24.11 26.05" deploy/docker/build-images.sh >/dev/null

# No alert pending or firing on a healthy lab: make demo's moves, then 5 idle minutes (~7 min).
alerts-idle: deps venv tools
	LAB_PROMETHEUS=1 SLURMPOOL_IDLE_SECONDS=300 $(BIN)/pytest -q -s e2e/test_dashboard_lab.py

# 20 pools on 500 simulated nodes (e2e/test_load.py): the lab is restarted with LAB_SIM_NODES=500.
load: deps venv
	LAB_SIM_NODES=500 $(BIN)/pytest -q -s e2e/test_load.py -k twenty_pools

# CI runs all of it (.ci/run). The 22.05 suite and the matrix run side by side, each in its own lab
# (the machine's 2 cores are half idle while a lab waits on Slurm, kubelets and timeouts); then
# load restarts the main lab with 500 simulated nodes.
test: chart unit image-check images-all
	$(MAKE) --no-print-directory -j2 e2e e2e-matrix-beside
	$(MAKE) --no-print-directory load

# LAB_PROMETHEUS=1 make demo: the lab's Prometheus scrapes the demo's operator and runs the alerts.
demo: lab-up
	e2e/demo.sh

# Speed and memory figures beside their targets (writes bench-results.json); uses the lab.
# BENCH_ONLY=planner,memory runs only those parts (of planner, calls, fragmentation, health,
# moves, memory, load).
# BENCH_MATRIX=1 adds the idle moves on each Slurm version and access path (the lab restarted per row);
# `make bench-matrix` runs only those (BENCH_ROWS to choose rows) and merges them into bench-results.json.
bench: deps venv
	$(BIN)/python e2e/bench.py

bench-matrix: deps venv slurm
	$(BIN)/python e2e/bench.py --matrix-only $(BENCH_ROWS)
