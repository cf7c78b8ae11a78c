# workloadmap: `make demo` and `make test` work on a fresh machine (Python 3.11+).
# Downloads are cached by pip under ~/.cache/pip; the virtualenv lives in .venv.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: demo test bench docs chart clean kafka-jars kube-binaries helm-binary

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e .
	touch $@

$(VENV)/.installed-test: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e ".[test]"
	touch $@ $(VENV)/.installed

demo: $(VENV)/.installed
	$(BIN)/workloadmap demo

# The real Kafka broker's jars (Maven Central, cached in ~/.m2 and ~/.cache/workloadmap).
kafka-jars: $(VENV)/.installed-test
	$(BIN)/python -m tests.services.kafka_broker fetch

# The real Kubernetes API server and etcd, built with Go >= 1.26 from the Go module proxy
# (cached in ~/.cache/workloadmap and ~/.cache/go-build; ~10 min the first time).
kube-binaries: $(VENV)/.installed-test
	$(BIN)/python -m tests.services.kube_api build

# helm, built with Go >= 1.26 from the Go module proxy (cached in ~/.cache/workloadmap/helm-<version>),
# for the chart tests (helm lint, helm template).
helm-binary: $(VENV)/.installed-test
	$(BIN)/python -m tests.services.helm_cli build

test: $(VENV)/.installed-test kafka-jars kube-binaries helm-binary
	$(BIN)/python -m pytest

bench: $(VENV)/.installed-test kafka-jars kube-binaries
	$(BIN)/python bench/resolve_bench.py
	$(BIN)/python bench/simulate_bench.py
	$(BIN)/python bench/warehouse_bench.py
	$(BIN)/python bench/warehouse_bench.py --history
	$(BIN)/python bench/pipeline_bench.py
	$(BIN)/python bench/pipeline_bench.py --stream pods
	$(BIN)/python bench/writer_bench.py
	$(BIN)/python bench/analytics_bench.py
	$(BIN)/python bench/allocation_bench.py
	$(BIN)/python bench/allocation_bench.py --analytics
	$(BIN)/python bench/watch_bench.py
	$(BIN)/python bench/watch_bench.py --kind pods --objects 100000 --namespaces 50
	$(BIN)/python bench/pod_processing_bench.py
	$(BIN)/python bench/state_bench.py
	$(BIN)/python bench/exporter_bench.py
	$(BIN)/python bench/live_bench.py

# docs/cli-reference.md: every command's --help; README's states table: the built-in definitions'
# headers (the suite fails when either is stale).
docs: $(VENV)/.installed
	$(BIN)/python docs/cli_reference.py docs/cli-reference.md
	$(BIN)/python docs/states_table.py README.md
	$(BIN)/python docs/readme_examples.py README.md

# The chart's ClusterRole rules (charts/workloadmap/files/reader-rules.yaml): what `workloadmap rbac`
# prints for the built-in catalog (the suite fails when it is stale).
chart: $(VENV)/.installed
	$(BIN)/python charts/reader_rules.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .hypothesis .mypy_cache .import_linter_cache
