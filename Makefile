# One gate: `make test` is exactly what CI runs (.ci/run). Both targets set up .venv first if needed.
.PHONY: setup smoke test lint bench synth clean

setup:
	@bash scripts/setup.sh

smoke: setup
	.venv/bin/benchctl run examples/smoke.yaml

lint: setup
	.venv/bin/ruff check .
	.venv/bin/mypy benchctl lambdas stacks app.py

test: setup lint
	.venv/bin/python -m pytest -p no:dash -q

synth: setup
	CDK_OUTDIR=cdk.out .venv/bin/python app.py

bench: setup
	.venv/bin/python bench/local_campaign.py

clean:
	rm -rf runs cdk.out build .pytest_cache .ruff_cache .mypy_cache
