# One gate: `make test` is exactly what CI runs (.ci/run runs `make smoke`, then `make test`).
# Each tier ends with its slowest tests (15 of those over 5 s): where the time budget goes, in every CI log.
# Every target sets up .venv first if needed (scripts/setup.sh is idempotent).
.PHONY: setup engine-env smoke test unit integration e2e engine infra lint docs bench synth clean

PYTEST = .venv/bin/python -m pytest -p no:dash -q --durations=15 --durations-min=5
# infra is CPU-bound (synth, cfn-lint, node) and times nothing: on both cores, a file per worker (its cached synth)
INFRA = $(PYTEST) -n 2 --dist loadfile tests/infra

setup:
	@bash scripts/setup.sh

# Dynamo 1.6.1's vLLM worker with vLLM 0.31's CPU build, apart from .venv (3.8 GB, about 2 minutes the first
# time): the integration tier parses every rendered worker argv with it (tests/integration/test_worker_argv.py)
engine-env: setup
	@bash scripts/setup_engine.sh

smoke: setup
	.venv/bin/benchctl run examples/smoke.yaml

lint: setup
	.venv/bin/ruff check .
	.venv/bin/mypy benchctl lambdas stacks app.py

# The tiers: unit (no real processes, no synth; on both cores, an idle worker taking the other's queued tests), integration (real Dynamo, AIPerf,
# aiconfigurator), e2e (whole local campaigns), infra (CDK synth and the platforms' own checks).
unit: setup
	$(PYTEST) -n 2 --dist worksteal tests/unit

integration: setup engine-env
	$(PYTEST) tests/integration

e2e: setup
	$(PYTEST) tests/e2e

# The CPU engine (examples/engine-cpu.yaml): Dynamo's real vLLM worker from the rendered argv, on vLLM's CPU
# build with a tiny random-weight model, aggregated and disaggregated (NIXL), checked figure by figure
engine: setup engine-env
	$(PYTEST) tests/engine

infra: setup
	$(INFRA)

test: setup lint unit engine-env
	$(PYTEST) tests/integration tests/e2e tests/engine
	$(INFRA)

# The generated references of the manual (docs/reference/spec.md, cli.md, spec.schema.json), from the spec's
# models and the CLI's parser; tests/unit/test_docs.py fails while a checked-in copy differs.
docs: setup
	.venv/bin/python -m benchctl.cli.reference --write docs/reference

synth: setup
	CDK_OUTDIR=cdk.out .venv/bin/python app.py

bench: setup
	.venv/bin/python bench/local_campaign.py

clean:
	rm -rf runs cdk.out build .pytest_cache .ruff_cache .mypy_cache
