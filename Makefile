# vmservice: `make run` to start the daemon, `make test` to run the suite.
# Both install what they need first (Debian packages, the virtualenv, the guest image).

SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
CONFIG ?= conf/vmservice.yaml
# The guest image cache lives outside the clone, keyed by the hash of its recipe ($VMSERVICE_IMAGE_DIR
# when set).
IMAGE_DIR ?= $(or $(VMSERVICE_IMAGE_DIR),/var/cache/vmservice/images)
APT_PACKAGES := qemu-system-x86 qemu-utils e2fsprogs lz4 cpio kmod dpkg apt iproute2 nftables tmux openssh-client gcc libc6-dev
export VMSERVICE_IMAGE_DIR := $(IMAGE_DIR)
# The development control plane's programs (kube-apiserver, kube-scheduler, kube-controller-manager built
# from Debian's source package, etcd and kubectl from its binary packages), cached outside the clone, keyed
# by the hash of their recipe ($VMSERVICE_CONTROLPLANE_DIR when set); `make cluster` runs one in
# CLUSTER_DIR on CLUSTER_PORTS (API server), +1 and +2 (etcd), +3 (scheduler), +4 (controller-manager).
CONTROLPLANE_DIR ?= $(or $(VMSERVICE_CONTROLPLANE_DIR),/var/cache/vmservice/controlplane)
export VMSERVICE_CONTROLPLANE_DIR := $(CONTROLPLANE_DIR)
CLUSTER_DIR ?= /var/lib/vmservice/devcluster
CLUSTER_PORTS ?= 16443
CLUSTER_NODES ?= vms-a,vms-b

.PHONY: install apt venv image e2b-js controlplane cluster cluster-stop run typecheck check test-unit test-integration test fuzz faults bench clean

install: apt venv image

# Install the Debian packages the daemon and the image builder need, when any is missing.
# No Recommends (GTK/SDL/audio UI, ovmf, qemu-block-extra): headless microvm loads only
# pvh.bin and bios-microvm.bin (qemu-system-data) and accel-tcg-x86_64.so (qemu-system-common),
# which qemu-system-x86 Depends on, like seabios and ipxe-qemu.
apt:
	@missing=""; for p in $(APT_PACKAGES); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q 'ok installed' || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	fi

venv: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	@$(PYTHON) -c 'import ensurepip, venv' 2>/dev/null || \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --config-settings editable_mode=compat -e '.[test]'
	touch $@

# The images the integration tests boot (each is rebuilt only when its recipe hash changes).
IMAGES ?= default dev e2b

image: apt venv
	@for name in $(IMAGES); do \
	  $(BIN)/python -m vmservice.images build --image-dir $(IMAGE_DIR) --name $$name || exit 1; \
	done

# The official E2B JavaScript SDK and the Node.js it needs, for tests/integration/test_e2b_js.py: from the npm
# registry as configured, cached outside the clone keyed by the lock file (Debian's npm runs the install).
e2b-js: apt venv
	@command -v npm >/dev/null || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq npm)
	@$(BIN)/python -m tests.integration.e2b_js_sdk install

# The control plane's programs, built once (about 6 minutes of 2 cores the first time; then a check of a
# second). The integration tests start a control plane of their own from them.
controlplane: apt venv
	@$(BIN)/python -m vmservice.devcluster build --cache-dir $(CONTROLPLANE_DIR)

# A development control plane on loopback (docs/cluster.md); the last line is `export KUBECONFIG=...`.
cluster: venv
	@$(BIN)/python -m vmservice.devcluster start --dir $(CLUSTER_DIR) --ports $(CLUSTER_PORTS) \
	  --nodes $(CLUSTER_NODES) --cache-dir $(CONTROLPLANE_DIR)

cluster-stop: venv
	@$(BIN)/python -m vmservice.devcluster stop --dir $(CLUSTER_DIR)

run: install
	$(BIN)/twistd -n vmservice --config $(CONFIG)

# Unit tests: every test package and module under tests/ except tests/integration (no real process,
# socket, sleep or QEMU there); integration tests boot real guests and start real processes.
UNIT_TESTS = $(sort $(patsubst %.py,%,$(subst /,.,$(filter-out tests/integration/ tests/__pycache__/ tests/__init__.py tests/summary.py,\
  $(wildcard tests/*/ tests/test_*.py)))))
UNIT_TESTS := $(patsubst %.,%,$(UNIT_TESTS))
TRIAL := $(BIN)/python -b -W 'ignore::BytesWarning:twisted.web.http_headers' -m twisted.trial --random=0

typecheck: venv
	$(BIN)/mypy

test-unit: venv
	$(TRIAL) $(UNIT_TESTS)

# The integration tests run as parallel shards of whole modules (tests/shards.py): a test mostly waits
# for one guest's vCPU or a timer, so two side by side on two cores take far less wall time.
INTEGRATION_SHARDS ?= 2
INTEGRATION := $(BIN)/python tests/shards.py $(INTEGRATION_SHARDS) $(TRIAL) --reporter=timing

test-integration: install controlplane e2b-js
	$(INTEGRATION)

# mypy and the unit tests: fast, needs no image.
check: typecheck test-unit

# Everything CI runs: mypy, the unit tests, then the integration tests (real guests, in shards, each
# test with its time: `python tests/shards.py --record LOG` keeps the modules' times for the next
# deal); trial's own summaries, then the plain "N passed, N failed" line CI reads (both runs counted).
test: install controlplane e2b-js
	@set -o pipefail; status=0; rm -f .trial-output.log; \
	steps=""; $(BIN)/mypy || { status=1; steps="mypy"; }; \
	$(TRIAL) $(UNIT_TESTS) 2>&1 | tee -a .trial-output.log || status=1; \
	$(INTEGRATION) 2>&1 | tee -a .trial-output.log || status=1; \
	$(FUZZ) --max-examples $(TEST_FUZZ_EXAMPLES) --max-time $(TEST_FUZZ_TIME) || { status=1; steps="$$steps fuzz"; }; \
	$(BIN)/python tests/summary.py .trial-output.log $$steps; rm -f .trial-output.log; exit $$status

# Schemathesis against the served OpenAPI document, a real daemon (auth on) and a real guest
# (tests/fuzzing.py): `make fuzz` runs longer than the bounded pass `make test` makes.
FUZZ_SEED ?= 1
FUZZ := $(BIN)/python tests/fuzzing.py --seed $(FUZZ_SEED)
FUZZ_EXAMPLES ?= 25
TEST_FUZZ_EXAMPLES ?= 3
TEST_FUZZ_TIME ?= 180

fuzz: install
	$(FUZZ) --max-examples $(FUZZ_EXAMPLES)

# The fault-injection modules (every tests/integration/test_fault*.py), one after another, each test's
# outcome in bench/results/faults.json (bench/faults.py; `make bench` runs it too).
faults: install
	$(BIN)/python bench/faults.py

# Every benchmark, one after another (each boots its own guests; none beside another), each writing
# its bench/results/*.json through bench/recording.py (the commit, the load average before and after,
# the machine), the fuzzing pass of `make fuzz` (bench/fuzz.py) and the fault-injection modules
# (bench/faults.py) among them; then the figures README.md, docs/performance.md, docs/reliability.md
# and docs/cluster.md cite are rewritten from those files (bench/publish.py lists what changed: re-read the sentences
# around them).  Not here, as they compare with an earlier build: limits.py --pairs-against DIR, and
# warm.py (into bench/results/warm-against-earlier.json) and netlink.py with --before DIR.
# Not benchmarks: exec_spawn_probe.py (runs in a guest), earlier.py, recording.py, publish.py.
# The earlier commit bench/sidebyside.py measures this checkout against: the last one before the
# source-tree restructuring.
BEFORE_REF ?= 9690c00

bench: install bench-extra controlplane
	$(BIN)/python bench/limits.py
	$(BIN)/python bench/boot.py
	$(BIN)/python bench/channel.py
	$(BIN)/python bench/channel.py --parts cp --rounds 3 --cp-mib 256
	$(BIN)/python bench/exec_spawn.py --api
	$(BIN)/python bench/density.py
	$(BIN)/python bench/density_warm.py
	$(BIN)/python bench/suspend.py
	$(BIN)/python bench/network.py
	$(BIN)/python bench/warm.py
	$(BIN)/python bench/admission.py
	$(BIN)/python bench/idle.py
	$(BIN)/python bench/stats.py
	$(BIN)/python bench/tunnel.py
	$(BIN)/python bench/netlink.py
	$(BIN)/python bench/restart.py
	$(BIN)/python bench/load.py
	$(BIN)/python bench/fuzz.py --max-examples $(FUZZ_EXAMPLES) --seed $(FUZZ_SEED)
	$(BIN)/python bench/faults.py
	$(BIN)/python bench/cluster.py
	$(BIN)/python bench/e2b.py
	$(BIN)/python bench/sidebyside.py --ref $(BEFORE_REF)
	$(BIN)/python bench/publish.py

# The load benchmark's soak variant: an hour of load, unattended; exits 1 (and says why in
# bench/results/load-soak.json) if an answer was wrong or something was left behind.
soak: install bench-extra
	$(BIN)/python bench/load.py --soak

# matplotlib, for the plots of bench/load.py (the `bench` extra; without it no PNG is drawn).
bench-extra: venv
	@$(BIN)/python -c 'import matplotlib' 2>/dev/null || $(BIN)/pip install -q --config-settings editable_mode=compat -e '.[test,bench]'

clean:
	rm -rf $(VENV) _trial_temp *.egg-info
