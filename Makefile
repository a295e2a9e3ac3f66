# Threadline: `make run` serves, `make test` runs the whole suite. Both set up
# everything they need on a fresh machine (virtual environment, packages, npm
# harness, migrations).

SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
TEST_STAMP := $(VENV)/.installed-test
NODE_STAMP := tests/clients/node_modules/.installed
EXAMPLE := examples/copilotkit
EXAMPLE_STAMP := $(EXAMPLE)/node_modules/.installed
EXAMPLE_PORT ?= 3000
# The page Threadline serves at /app/ (project/app_page.py), built from the example by vite.
APP_PAGE := $(EXAMPLE)/dist-app
APP_STAMP := $(APP_PAGE)/.built
APP_SOURCES := $(EXAMPLE)/index.html $(EXAMPLE)/vite.config.js $(wildcard $(EXAMPLE)/src/*)

# The first interpreter that really runs and is 3.12 or newer. pyenv shims for
# versions that are not selected fail when run, so each candidate is tried.
find_python = $(shell for c in $$PYTHON python3.13 python3.12 python3 \
	$$(ls -d $${PYENV_ROOT:-$$HOME/.pyenv}/versions/3.1[2-9]*/bin/python3 2>/dev/null | sort -rV); do \
	[ -n "$$c" ] && "$$c" -c 'import sys; sys.exit(sys.version_info < (3, 12))' 2>/dev/null && { echo "$$c"; break; }; done)

.PHONY: run test lint install install-test clean bench example docs app-page

$(PY):
	@base="$(find_python)"; \
	if [ -z "$$base" ]; then \
		echo "error: Threadline needs Python 3.12 or newer (Django 6); none was found." >&2; \
		echo "       Install one, or point PYTHON=/path/to/python3.12 at it." >&2; exit 1; fi; \
	echo "Creating $(VENV) with $$base"; \
	"$$base" -m venv $(VENV)

$(STAMP): $(PY) pyproject.toml
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e .
	@touch $@

$(TEST_STAMP): $(STAMP)
	$(PY) -m pip install --quiet -e '.[test]'
	@touch $@

$(NODE_STAMP): tests/clients/package.json tests/clients/package-lock.json
	npm ci --prefix tests/clients --no-audit --no-fund --loglevel=error
	@touch $@

# The CopilotKit example's packages, exactly as its package-lock.json says.
$(EXAMPLE_STAMP): $(EXAMPLE)/package.json $(EXAMPLE)/package-lock.json
	npm ci --prefix $(EXAMPLE) --no-audit --no-fund --loglevel=error
	@touch $@

# Built again only when its sources or packages change. vite empties dist-app first, so the stamp
# is written after the build.
$(APP_STAMP): $(EXAMPLE_STAMP) $(APP_SOURCES)
	cd $(EXAMPLE) && node_modules/.bin/vite build --mode app --logLevel warn
	@touch $@

# The page at /app/ when Node.js 20+ and npm are here; without them (or if the build fails) it says
# what is missing and carries on: everything else is served, and /app/ answers 503 saying the same.
app-page:
	@if command -v npm >/dev/null && node -e 'process.exit(Number(process.versions.node.split(".")[0]) < 20 ? 1 : 0)' 2>/dev/null; then \
		$(MAKE) --no-print-directory $(APP_STAMP) || \
			echo "warning: the page at /app/ could not be built (see above); everything else is served." >&2; \
	else \
		echo "note: the page at /app/ is not built: it needs Node.js 20 or newer and npm, and they were not found." >&2; \
		echo "      Everything else is served. Install them and run make run again to build it once." >&2; \
	fi

install: $(STAMP)
install-test: $(TEST_STAMP) $(NODE_STAMP) $(EXAMPLE_STAMP)

run: install app-page
	$(PY) manage.py migrate --noinput
	$(PY) manage.py firstlogin
	$(PY) manage.py serve

test: install-test lint
	$(PY) -m pytest $(PYTEST_ARGS)

# Types (mypy strict, django-stubs) and lint over the project's own code.
lint: install-test
	$(PY) -m ruff check orchestrator agents agui threads project runhost vocabulary bench tests
	$(PY) -m ruff format --check orchestrator agents agui threads project runhost vocabulary bench tests
	$(PY) -m mypy .

# The documentation site (mkdocs.yml, docs/*.md) into site/, offline and with warnings as errors;
# open site/index.html. The test suite builds it the same way (tests/project/test_docs_build.py).
docs: $(TEST_STAMP)
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict --site-dir site

# The CopilotKit example against a local Threadline: both servers in this terminal,
# the page at http://127.0.0.1:$(EXAMPLE_PORT)/ (Ctrl-C stops both).
example: install $(EXAMPLE_STAMP)
	$(PY) manage.py migrate --noinput
	npm run build --prefix $(EXAMPLE) --silent
	@host="$${HOST:-127.0.0.1}"; port="$${PORT:-8000}"; \
	token="$${AGUI_TOKEN:-$$($(PY) manage.py shell -c 'from django.conf import settings; print(settings.AGUI_TOKEN)' 2>/dev/null | tail -n1)}"; \
	$(PY) manage.py serve & threadline=$$!; \
	trap 'kill $$threadline 2>/dev/null' EXIT INT TERM; \
	for _ in $$(seq 1 150); do \
		curl -sf -o /dev/null -H "Authorization: Bearer $$token" "http://$$host:$$port/agui/info" && break; sleep 0.2; \
	done; \
	THREADLINE_URL="http://$$host:$$port" AGUI_TOKEN="$$token" HOST=127.0.0.1 PORT=$(EXAMPLE_PORT) \
		node $(EXAMPLE)/server.mjs

# The whole bench on SQLite, then the single-stream, concurrent and operators benches again with
# the full stack on PostgreSQL (BENCH_DATABASE_URL), when it is reachable: --streams 0 and
# --growth '' skip only the open-streams and growth modes; the concurrent mode (100 replies of
# 2,000 tokens) runs, since #27 item 4 holds it to 0.8x the Django view on PostgreSQL too, and
# the operators bench (bench/operators.py, stream.py --operators 500) runs in both.
BENCH_DATABASE_URL ?= postgresql://127.0.0.1:5432/test
bench: install-test
	$(PY) bench/stream.py
	$(PY) bench/log_storage.py
	$(PY) bench/reconnect_storm.py --streams 3000
	$(PY) bench/paced.py
	@if $(PY) -c "import psycopg, sys; psycopg.connect(sys.argv[1], connect_timeout=3).close()" "$(BENCH_DATABASE_URL)" 2>/dev/null; then \
		echo; echo "=== The same with the full stack on PostgreSQL ($(BENCH_DATABASE_URL))"; \
		DATABASE_URL="$(BENCH_DATABASE_URL)" $(PY) bench/stream.py --streams 0 --growth '' --concurrent 100x2000; \
		DATABASE_URL="$(BENCH_DATABASE_URL)" $(PY) bench/log_storage.py; \
		DATABASE_URL="$(BENCH_DATABASE_URL)" $(PY) bench/paced.py; \
	else echo "PostgreSQL at $(BENCH_DATABASE_URL) is not reachable: the PostgreSQL bench did not run"; fi

clean:
	rm -rf $(VENV) site tests/clients/node_modules $(EXAMPLE)/node_modules $(EXAMPLE)/dist $(APP_PAGE)
