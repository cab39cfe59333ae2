# slurmpool: `make demo` brings up the lab and runs the operator on a sample pool;
# `make test` runs every test (unit and end-to-end). Both install what they need.
SHELL := /bin/bash
PY ?= python3
VENV := $(CURDIR)/.venv
BIN := $(VENV)/bin
export LAB_DIR ?= $(CURDIR)/.lab

.PHONY: plugin-wheel slurm e2e-matrix e2e-main e2e-beside matrix-a matrix-b images-all venv deps lab-build lab-up lab-down unit e2e load test demo crds tools chart manifests image-check images bench bench-matrix alerts-idle release dashboard-picture
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

# The kubectl plugin alone (plugin/pyproject.toml): dist/kubectl_slurmpool-<version>-py3-none-any.whl, built offline.
plugin-wheel: venv
	$(BIN)/pip wheel --no-build-isolation --no-deps --no-index -w dist plugin/

# Helm, a PromQL parser, Prometheus and promtool, and a checker of the admission policies' CEL
# (the apiserver's own validation code), built from Go modules
# (e2e/lab/build-{helm,promql,prometheus,celcheck}.sh; cached under ~/.cache/slurmpool).
tools: deps
	e2e/lab/build-helm.sh >/dev/null
	e2e/lab/build-promql.sh >/dev/null
	e2e/lab/build-prometheus.sh >/dev/null
	e2e/lab/build-celcheck.sh >/dev/null

# The chart: helm lint and template (defaults and every option on); deploy/manifests/ current.
# CHART_REQUIRED: the two values with no default (docs/install.md), as a site sets them.
CHART_REQUIRED := --set image.repository=registry.example.com/hpc/slurmpool --set 'poolPolicy.imagePrefixes={registry.example.com/hpc/}'
chart: tools
	h=$$(e2e/lab/build-helm.sh) && $$h lint --strict $(CHART) $(CHART_REQUIRED) && \
	  $$h template slurmpool $(CHART) -n slurmpool-system $(CHART_REQUIRED) >/dev/null && \
	  $$h template slurmpool $(CHART) -n slurmpool-system $(CHART_REQUIRED) --set metrics.serviceMonitor.enabled=true \
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
# SLURM: the slurmd images' Slurm versions, e.g. SLURM="22.05 24.11 26.05" (default 22.05); each with its
# -pyxis variant (pyxis and enroot for srun --container-image; SLURMD_PYXIS=0: none).
images: deps venv
	$(if $(SLURM),SLURMD_VERSIONS="$(SLURM)") deploy/docker/build-images.sh

# The release artifacts of pyproject's version in dist/<version>/: wheel, chart package, the operator
# and slurmd OCI image archives (SLURM as for `make images`), SHA256SUMS (deploy/release.sh).
release: deps venv tools
	$(if $(SLURM),SLURMD_VERSIONS="$(SLURM)") deploy/release.sh

unit: venv tools
	$(BIN)/lint-imports
	$(BIN)/ruff check operator bridge tests e2e
	$(BIN)/mypy
	SLURMPOOL_REQUIRE_TOOLS=1 $(BIN)/pytest -q tests

# LAB_PROMETHEUS=1: the lab's Prometheus runs (e2e/test_alerts_lab.py, e2e/test_dashboard_lab.py).
# LAB_REAL_NODES (default 2 here): real kubelet nodes beside the simulated ones, for
# e2e/test_real_nodes*.py (the images are built by deploy/docker/build-images.sh; e2e/lab/README.md).
# LAB_CGROUPS (default 1 here): Slurm isolates GPUs by cgroups, as GPU sites run it, on the simulated
# nodes and in the real nodes' slurmd pods (docs/slurmd-pod.md).
e2e: deps venv tools slurm
	LAB_PROMETHEUS=1 LAB_REAL_NODES=$${LAB_REAL_NODES:-2} LAB_CGROUPS=$${LAB_CGROUPS:-1} $(BIN)/pytest -q --durations=25 e2e

# The Slurm versions the lab offers besides Debian 12's 22.05, cached outside the checkout:
# 26.05 built from ../shared/vendor (about 4 min cold), 24.11 in a Debian 13 root filesystem.
slurm: deps
	e2e/lab/build-slurm.sh >/dev/null
	e2e/lab/build-rootfs-2411.sh >/dev/null

# The Slurm matrix (issue 13, e2e/matrix.sh): the move core on each version, access path and node
# model. CI runs MATRIX_CI (22.05 over SSH is all of `make e2e`); `e2e/matrix.sh` alone runs every row.
# 24.11-dynamic-requeue: the Requeue policy on 24.11 over SSH (24.11's slurmrestd cannot requeue), and
# the 24.11 slurmd image (munge, configless) on that lab's dynamic nodes. 22.05-names: Slurm NodeNames
# that differ from the Node names (LAB_SLURM_NAME_PREFIX=s), moved through spec.slurm.nodeName.
# 22.05-pyxis-real: srun --container-image in the 22.05-pyxis slurmd image's pod on a real kubelet node.
# *-cgroups: GPUs isolated by Slurm's device cgroups (LAB_CGROUPS=1) on 24.11 and 26.05 (22.05: e2e-main).
MATRIX_CI ?= $(MATRIX_A) $(MATRIX_B)
e2e-matrix: deps venv slurm
	e2e/matrix.sh $(MATRIX_CI)

# No alert pending or firing on a healthy lab: make demo's moves, then 5 idle minutes (~7 min).
alerts-idle: deps venv tools
	LAB_PROMETHEUS=1 SLURMPOOL_IDLE_SECONDS=300 $(BIN)/pytest -q -s e2e/test_dashboard_lab.py

# docs/dashboard.png: the chart's Grafana dashboard drawn from the lab's Prometheus over make demo's
# moves (e2e/render_dashboard.py, with matplotlib: the `docs` extra); fails naming any panel without
# data. The demo's operator and pool stay, as after make demo.
dashboard-picture: deps venv tools
	$(BIN)/pip install -q -e '.[docs]'
	LAB_PROMETHEUS=1 e2e/lab/up.sh
	$(BIN)/python e2e/render_dashboard.py docs/dashboard.png

# 20 pools on 500 simulated nodes (e2e/test_load.py): the lab is restarted with LAB_SIM_NODES=500.
load: deps venv
	LAB_SIM_NODES=500 $(BIN)/pytest -q -s e2e/test_load.py -k twenty_pools

# CI runs all of it (.ci/run). After the chart, the image pieces and the images, four lanes run at
# once, each in a lab of its own (LAB_DIR .lab or .lab-<lane>; LAB_PORT_OFFSET + 100 k shifts its
# ports, lo addresses, bridges and cgroups), with the unit tests beside them. A lab mostly waits (on
# Slurm, kubelets, timeouts): the 22.05 suite beside a matrix row kept 0.8 of the 2 cores busy, and
# the wall time is the longest lane's. Each lane's output is printed whole when it ends.
#   e2e-main     the 22.05 e2e modules but E2E_BESIDE, with Prometheus, 2 real nodes and Slurm's
#                cgroups (the lab-down test last); E2E_BESIDE: modules that need none of them (each
#                module runs on its own)
#   e2e-beside   E2E_BESIDE on a second 22.05 lab (+300), without cgroups
#   matrix-a     MATRIX_A's rows, then make load's 500 simulated nodes in that lab (+100)
#   matrix-b     MATRIX_B's rows (+200)
# `exec env`: no shell of a lane keeps the main lab's LAB_DIR in its environment
# (test_lab_down_leaves_nothing_behind finds the main lab's processes by it).
E2E_BESIDE ?= e2e/test_operator.py e2e/test_faults.py e2e/test_oncall.py e2e/test_isolation.py \
  e2e/test_health.py e2e/test_faults_nodes.py e2e/test_topology.py e2e/test_parking_jobs.py e2e/test_adopting.py
MATRIX_A ?= 24.11-rest 24.11-dynamic-requeue 22.05-names 22.05-pyxis-real 26.05-rest-parking
MATRIX_B ?= 26.05 26.05-dynamic-rest 24.11-cgroups 26.05-cgroups
lane_offset = $$(( $${LAB_PORT_OFFSET:-0} + $(1) ))
test: chart image-check images-all
	$(MAKE) --no-print-directory --output-sync=target -j5 unit e2e-main e2e-beside matrix-a matrix-b

e2e-main: deps venv tools slurm
	LAB_PROMETHEUS=1 LAB_REAL_NODES=$${LAB_REAL_NODES:-2} LAB_CGROUPS=$${LAB_CGROUPS:-1} $(BIN)/pytest -q --durations=10 \
	  $(filter-out $(E2E_BESIDE),$(sort $(wildcard e2e/test_*.py)))
e2e-beside: deps venv tools slurm
	exec env LAB_DIR=$(CURDIR)/.lab-beside LAB_PORT_OFFSET=$(call lane_offset,300) LAB_REAL_NODES=0 \
	  $(BIN)/pytest -q --durations=10 $(E2E_BESIDE)
matrix-a: deps venv slurm
	exec env LAB_DIR=$(CURDIR)/.lab-matrix-a LAB_PORT_OFFSET=$(call lane_offset,100) bash -c \
	  'e2e/matrix.sh $(MATRIX_A) && LAB_SIM_NODES=500 $(BIN)/pytest -q -s e2e/test_load.py -k twenty_pools'
matrix-b: deps venv slurm
	exec env LAB_DIR=$(CURDIR)/.lab-matrix-b LAB_PORT_OFFSET=$(call lane_offset,200) e2e/matrix.sh $(MATRIX_B)

# Every image the suite runs and the lab's binaries, built (or found cached) before the lanes start,
# so that no two lanes build them at once on a cold machine (the build scripts also take a lock).
# No -pyxis variant: no lane runs one (e2e/test_pyxis.py's real-kubelet test needs LAB_REAL_NODES with
# LAB_PYXIS=1 on 22.05, which no lane has); `make images` builds them.
# Also the previous release e2e/test_upgrade.py upgrades from (exit 3: not in a shallow clone; the test skips).
images-all: deps venv slurm lab-build
	SLURMD_VERSIONS="22.05 24.11 26.05" SLURMD_PYXIS=0 deploy/docker/build-images.sh >/dev/null
	e2e/lab/previous-release.sh >/dev/null || [ $$? = 3 ]

# LAB_PROMETHEUS=1 make demo: the lab's Prometheus scrapes the demo's operator and runs the alerts.
# The demo's operator and pool stay until `make lab-down`; make test, bench and load stop them first
# (e2e/harness.py: stop_demo), so the targets run in any order (CONTRIBUTING.md).
demo: lab-up
	e2e/demo.sh

# Speed and memory figures beside their targets (writes bench-results.json); uses the lab.
# BENCH_ONLY=planner,memory runs only those parts (of planner, calls, fragmentation, health,
# moves, gang, parking, drill, dra, handover, oncall, memory, plugin, load, restjobs, demand: the last two on fakes, no lab).
# BENCH_MATRIX=1 adds the idle moves on each Slurm version and access path (the lab restarted per row);
# `make bench-matrix` runs only those (BENCH_ROWS to choose rows) and merges them into bench-results.json.
bench: deps venv
	$(BIN)/python e2e/bench.py

bench-matrix: deps venv slurm
	$(BIN)/python e2e/bench.py --matrix-only $(BENCH_ROWS)
