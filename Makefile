# Two entry points (see README): `make run` sets up and runs the main job, `make test` runs the tests.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
SOURCE ?= mobilenet_v2
BUDGET ?= 1g
SUITE ?= quick

.PHONY: setup run test test-all eval collect costmodel gpu-models summary
setup: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --disable-pip-version-check -c constraints.txt -e '.[dev,cuda]' 2>&1 | grep -v "is ignored: it is neither" || true
	$(BIN)/python -c "import tvm, torch, transformers, tlm" 
	touch $(STAMP)

run: setup
	$(BIN)/tlm compile $(SOURCE) --budget $(BUDGET) --progress

# The evaluation (issues 7, 15): resumable on the same hardware, results/SUITE-HARDWARE/summary.md
# + CSVs + PNGs. SUITE=quick|standard|large|heldout|full
eval: setup
	$(BIN)/tlm eval --suite $(SUITE)

# results/summary.md: the final run's report (issue 15), copied with its image paths pointed into
# the run's folder; after `tlm eval --suite full --out $(FINAL) --report-only`, run this again.
FINAL ?= results/full-llvm-znver4-2c
summary:
	{ echo "<!-- A copy of $(FINAL)/summary.md (its figures and CSVs are there), written by: tlm eval --suite full --out $(FINAL) --report-only -->"; echo; \
	  sed -E 's#\]\(((corpus/)?[A-Za-z0-9_.-]+\.png)\)#]($(notdir $(FINAL))/\1)#' $(FINAL)/summary.md; } > results/summary.md

# The data engine (issue 15): the iterative loop over the training tasks, its records flushed as
# append-only shards into data/corpus (commit them). Resumes from the committed corpus on any machine.
HOURS ?= 0
collect: setup
	$(BIN)/tlm collect --corpus data/corpus --hours $(HOURS)

# The cost model that ranks TLM's samples, refit on the whole corpus (commit pretrained/costmodel-*).
costmodel: setup
	$(BIN)/tlm costmodel --corpus data/corpus --out pretrained/costmodel-llvm-x86_64

gpu-models: setup  # the GPU TLM and cost model, on CPUs (tools/train_gpu_models.sh), then shipped
	TLM=$(BIN)/tlm bash tools/train_gpu_models.sh work/gpu-lm
	rm -rf pretrained/tlm-ft-cuda-sm90 pretrained/costmodel-cuda-sm90
	mkdir -p pretrained/tlm-ft-cuda-sm90
	cp work/gpu-lm/ft/*.json work/gpu-lm/ft/model.safetensors pretrained/tlm-ft-cuda-sm90/
	cp -r work/gpu-lm/costmodel-cuda pretrained/costmodel-cuda-sm90

test: setup
	$(BIN)/python -m pytest -q -n auto --dist loadfile --durations=30

test-all: setup
	$(BIN)/python -m pytest -q -m ""
