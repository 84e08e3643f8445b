# Two commands matter: `make demo` (the whole pipeline locally) and `make test` (every test).
# Both build what they need; nothing has to be installed by hand first.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: jdbc mariadb venv sam-venv refine bi sample-db localstack-venv demo demo-spark test jvm-archive test-unit test-integration browser dashboard lint format bench deploy deploy-venv preflight local-up local-down clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@touch $@

# The whole pipeline on the embedded local AWS (LocalStack + SAM + local DMS + Glue running our Spark jobs).
# DMS_FORMAT=parquet: the local DMS writes Parquet (DataFormat=parquet) instead of CSV.
# SOURCE=mysql: the source is a local MariaDB server (installed by the `mariadb` target) read from its binlog.
demo: venv localstack-venv sam-venv jdbc $(if $(filter mysql,$(SOURCE)),mariadb,)
	$(BIN)/python -m localaws.demo $(if $(DMS_FORMAT),--dms-format $(DMS_FORMAT),) $(if $(SOURCE),--source $(SOURCE),) $(DEMO_ARGS)

# The Spark pipeline alone over generated DMS files (no local AWS).
demo-spark: venv
	$(BIN)/python -m tools.demo_spark

# The suite in TEST_WORKERS parallel pytest processes (pytest-xdist; TEST_WORKERS=1: one process, in order). Each
# worker has its own SparkSession and, for integration tests, its own local AWS on LOCALAWS_PORT + 1 + its number
# (LOCALAWS_PORT: 4566 unless set); a worker takes a whole module (the local AWS's own tests: all of them), see
# parallel_scope in tests/conftest.py; --no-loadscope-reorder: the workers' order, the long integration modules first.
TEST_WORKERS ?= 3
PYTEST_PARALLEL = $(if $(filter-out 0 1,$(TEST_WORKERS)),-n $(TEST_WORKERS) --dist loadscope --no-loadscope-reorder,)
# Up to TEST_WORKERS local AWSs at once: each keeps one warm Spark worker, not two (more start while runs overlap).
test test-integration: export LOCALAWS_WARM_SPARK_WORKERS ?= 1

test: venv localstack-venv sam-venv browser jdbc mariadb jvm-archive
	$(BIN)/python -m pytest $(PYTEST_PARALLEL)

# The tests' JVMs map one class-data archive of Spark's, Iceberg's and the JDBC drivers' classes instead of
# loading them from the jars each (localaws/jvm_archive.py): made once per JDK and class path, in var/jvm-archive/.
jvm-archive: venv jdbc mariadb
	$(BIN)/python -m localaws.jvm_archive

# The reconcile job's JDBC driver for the local PostgreSQL source (Debian's package; Maven is not reachable
# here): /usr/share/java/postgresql.jar, which the local Spark session puts on spark.jars.
jdbc:
	@test -f /usr/share/java/postgresql.jar || { \
	  SUDO=$$( [ "$$(id -u)" = 0 ] && echo "" || echo "sudo -n" ); \
	  ( $$SUDO apt-get install -y -q libpostgresql-jdbc-java >/dev/null 2>&1 || \
	    { $$SUDO apt-get update -q >/dev/null 2>&1 && $$SUDO apt-get install -y -q libpostgresql-jdbc-java >/dev/null 2>&1; } ) \
	  || echo "WARNING: could not install libpostgresql-jdbc-java: the reconcile tests will fail"; }

# The MySQL source's server and the reconcile job's JDBC driver for it (Debian's mariadb-server, libmariadb-java;
# `make demo SOURCE=mysql` and the MySQL tests start their own server, unprivileged, in a temp dir, with the
# binlog DMS needs): said loudly when they can't be had.
mariadb:
	@{ test -x /usr/sbin/mariadbd && test -f /usr/share/java/mariadb-java-client.jar; } || { \
	  SUDO=$$( [ "$$(id -u)" = 0 ] && echo "" || echo "sudo -n" ); \
	  PKGS="mariadb-server libmariadb-java"; \
	  ( $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q $$PKGS >/dev/null 2>&1 || \
	    { $$SUDO apt-get update -q >/dev/null 2>&1 && \
	      $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q $$PKGS >/dev/null 2>&1; } ) \
	  || echo "WARNING: could not install mariadb-server libmariadb-java: the MySQL source tests will fail"; }

# A headless Chromium (Debian's package) for the dashboard's browser test; said loudly when it can't be had.
browser:
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || { \
	  SUDO=$$( [ "$$(id -u)" = 0 ] && echo "" || echo "sudo -n" ); \
	  ( $$SUDO apt-get install -y -q chromium >/dev/null 2>&1 || \
	    { $$SUDO apt-get update -q >/dev/null 2>&1 && $$SUDO apt-get install -y -q chromium >/dev/null 2>&1; } ) \
	  || echo "WARNING: could not install chromium: the dashboard's browser test will be SKIPPED"; }

test-unit: venv jdbc mariadb jvm-archive
	$(BIN)/python -m pytest $(PYTEST_PARALLEL) -m "not integration"

test-integration: venv localstack-venv sam-venv jvm-archive
	$(BIN)/python -m pytest $(PYTEST_PARALLEL) -m integration

# LocalStack (community, host mode, no Docker) in its own Python 3.13 venv, with our plugins.
localstack-venv: venv
	$(BIN)/python -m localaws.setup_venv

# The SAM CLI in its own venv (.venv-sam): `sam build` / `sam deploy`.
sam-venv: venv
	$(BIN)/python -m localaws.setup_sam

# Deploy (deploy/release.py): preflight checks, sam build, the jobs' code, library, jar and schema file published
# under keys that hold their content's hash (passed as template parameters: a stack rollback rolls the code
# back), sam deploy with PARAMS passed through. Only what deploying needs (.venv-deploy, the `deploy` extra).
# First deploy: make deploy SCHEMA_FILE=schema.json PARAMS="DmsReplicationInstanceArn=… DmsSourceEndpointArn=…"
# (docs/DEPLOY.md, "First deploy"); later ones keep every value not given again. CONFIG_ENV: a samconfig.toml
# environment (default, prod); YES=1: no changeset confirmation. AWS_ENDPOINT_URL set: the same to the local AWS.
STACK ?=
CONFIG_ENV ?= default
DEPLOY_VENV := .venv-deploy
DEPLOY_STAMP := $(DEPLOY_VENV)/.installed

deploy-venv: $(DEPLOY_STAMP)

$(DEPLOY_STAMP): pyproject.toml
	@test -x $(DEPLOY_VENV)/bin/python || $(PYTHON) -m venv $(DEPLOY_VENV)
	$(DEPLOY_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(DEPLOY_VENV)/bin/python -m pip install --quiet -e '.[deploy]'
	@touch $@

deploy: deploy-venv
	$(DEPLOY_VENV)/bin/python -m deploy.release $(if $(STACK),--stack-name $(STACK),) --config-env $(CONFIG_ENV) \
	  $(if $(PARAMS),--parameter-overrides '$(PARAMS)',) $(if $(SCHEMA_FILE),--schema-file $(SCHEMA_FILE),) \
	  $(if $(YES),--no-confirm-changeset,)

# The preflight alone (no build, no deploy): the same checks make deploy runs first.
preflight: deploy-venv
	$(DEPLOY_VENV)/bin/python -m deploy.preflight $(if $(STACK),--stack-name $(STACK),) --config-env $(CONFIG_ENV) \
	  $(if $(PARAMS),--parameter-overrides '$(PARAMS)',) $(if $(SCHEMA_FILE),--schema-file $(SCHEMA_FILE),)

# The dashboard of the demo's warehouse and its run reports (make demo writes one itself at its end and keeps
# the reports in var/demo/reports): var/demo/dashboard.html
dashboard: venv
	$(BIN)/python -m tools.dashboard --catalog_type hadoop --warehouse var/warehouse/clean \
	  --clean_database demo_clean --refined_database demo_refined --out var/demo/dashboard.html \
	  $$( [ -d var/demo/reports ] && echo --reports var/demo/reports )

sample-db: venv
	$(BIN)/python -m tools.sample_data --db var/source.db --scale 1 --seed 42 --schema_out var/schema.json

refine: venv
	$(BIN)/python spark_jobs/refine_job.py --warehouse var/warehouse

bi: venv
	$(BIN)/python -m tools.bi --run --warehouse var/warehouse

local-up: venv
	$(BIN)/python -m localaws.stack up

local-down:
	$(BIN)/python -m localaws.stack down

# Lint and types (CI runs it before the tests): ruff over the product and the tests; mypy over the product
# only ([tool.mypy] in pyproject.toml): one run over the Spark library and jobs, the Lambdas' layer, the local
# AWS, tools, deploy and bench, then one per Lambda folder, each its own root (each has an app.py).
LAMBDA_DIRS := $(patsubst %/app.py,%,$(wildcard functions/*/app.py))

lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy spark_jobs functions/shared localaws tools lakectl deploy bench
	@for dir in $(LAMBDA_DIRS); do \
	  echo "MYPYPATH=$$dir $(BIN)/mypy $$dir"; MYPYPATH=$$dir $(BIN)/mypy $$dir || exit 1; \
	done

format: venv
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

# Benchmarks (not tests): BENCH_ARGS=--quick for a smoke run; results in bench/RESULTS.md.
bench: venv
	$(BIN)/python bench/run.py $(BENCH_ARGS)

clean:
	rm -rf var .pytest_cache .ruff_cache .mypy_cache .aws-sam
