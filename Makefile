# The one entry point. `make demo` and `make test` each set up everything they need first.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-$(shell cat pyproject.toml requirements/dev.txt | cksum | cut -d' ' -f1)
# How the lock is exported for pip (tests/infra/test_lockfile.py checks the files are current).
LOCK_EXPORT := export --frozen --offline --format requirements-txt --no-header --no-emit-project
OUT    ?= out
NPM_STAMP := node_modules/.package-lock.json

export JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION := 20
# The .venv is installed without bytecode: with PYTHONDONTWRITEBYTECODE set (some images set it)
# every process would compile every module it imports again, seconds each.
unexport PYTHONDONTWRITEBYTECODE

.PHONY: help setup demo test lint typecheck pytest schema synth sbom audit deploy clean console lock lockcheck

help:  ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'

# Every distribution from the lock, each checked against its hash; then stepcrawl itself.
# --no-compile: compiling every installed module to bytecode was most of the install (40 of
# 54 s for the demo's set alone, measured); Python compiles a module when it is first imported
# instead, and writes it once (see unexport below): the demo and the tests import a small part
# of what is installed.
$(STAMP): pyproject.toml requirements/dev.txt
	$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11) and "stepcrawl needs Python 3.11+")'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --no-compile --upgrade pip
	$(BIN)/python -m pip install --quiet --no-compile --require-hashes -r requirements/dev.txt
	$(BIN)/python -m pip install --quiet --no-compile --no-deps -e .
	rm -f $(VENV)/.installed-*
	touch $@

setup: $(STAMP)  ## create .venv with stepcrawl and its dev tools

demo: $(STAMP)  ## the main job: crawl the bundled demo shop end to end, then compile the examples
	$(BIN)/stepcrawl demo --out $(OUT)/demo
	$(BIN)/stepcrawl validate pipelines/
	@for f in pipelines/*.yaml; do \
		n=$$(basename $$f .yaml); \
		$(BIN)/stepcrawl compile $$f --format asl --out $(OUT)/$$n.asl.json || exit 1; \
		$(BIN)/stepcrawl compile $$f --format mermaid --out $(OUT)/$$n.mmd || exit 1; \
	done

test: lockcheck lint typecheck pytest  ## everything CI runs: the lock, ruff, mypy --strict, the whole pytest suite

lock: $(STAMP)  ## re-resolve uv.lock from pyproject.toml (UPGRADE=1: newest allowed) and export requirements/*.txt
	$(BIN)/uv lock $(if $(UPGRADE),--upgrade,)
	$(BIN)/uv $(LOCK_EXPORT) --extra dev > requirements/dev.txt
	$(BIN)/uv $(LOCK_EXPORT) --extra dev --extra bench > requirements/bench.txt

lockcheck: $(STAMP)  ## fail when pyproject.toml, uv.lock and requirements/*.txt disagree
	@$(BIN)/uv lock --check --offline || { echo "uv.lock is stale: run 'make lock'"; exit 1; }
	@$(BIN)/uv $(LOCK_EXPORT) --extra dev | diff -q - requirements/dev.txt >/dev/null \
		|| { echo "requirements/dev.txt is stale: run 'make lock'"; exit 1; }
	@$(BIN)/uv $(LOCK_EXPORT) --extra dev --extra bench | diff -q - requirements/bench.txt >/dev/null \
		|| { echo "requirements/bench.txt is stale: run 'make lock'"; exit 1; }

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy

$(NPM_STAMP): package-lock.json
	npm ci --no-audit --no-fund

pytest: $(STAMP) $(NPM_STAMP)
	$(BIN)/pytest -p no:cacheprovider

schema: $(STAMP)  ## regenerate schemas/pipeline.schema.json from the models
	$(BIN)/stepcrawl schema --out schemas/pipeline.schema.json

synth: $(STAMP) $(NPM_STAMP)  ## synthesize the CDK stack into cdk.out (builds the layer, runs cdk-nag)
	PATH="$(CURDIR)/$(BIN):$$PATH" npx cdk synth --no-notices -q

sbom: $(STAMP)  ## CycloneDX SBOM of the Lambda layer's exact dependencies -> cdk.out/sbom.cdx.json
	$(BIN)/python -m infra.sbom --out cdk.out/sbom.cdx.json --requirements-out cdk.out/layer-requirements.txt

audit: sbom  ## pip-audit the layer's dependencies (needs the network: not part of CI)
	$(BIN)/python -m pip install --quiet pip-audit
	$(BIN)/pip-audit --no-deps --disable-pip -r cdk.out/layer-requirements.txt

deploy: $(STAMP) $(NPM_STAMP)  ## deploy the stack (STAGE=dev by default)
	PATH="$(CURDIR)/$(BIN):$$PATH" npx cdk deploy --no-notices -c stage=$(or $(STAGE),dev)

console:  ## build the console's assets into layers/stepcrawl/console/static (npm ci + vite build)
	cd console && npm ci --no-audit --no-fund && npm run build

clean:  ## remove the virtualenv and generated output
	rm -rf $(VENV) $(OUT) .pytest_cache .mypy_cache .ruff_cache .hypothesis cdk.out .build node_modules
