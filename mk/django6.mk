# Django 6's own django.tasks (docs/django.md) needs Python 3.12: a second virtualenv where
# tests/outbox/test_django6.py runs the Django tests again, the backend on django.tasks itself.
# The machine's Python is 3.11; pyenv's 3.12 (or a python3.12 on PATH) builds it. uv never downloads
# an interpreter here: without a 3.12 the target fails and says so.
DJ6_VENV := .venv-django6
PY312 := $(firstword $(wildcard /root/.pyenv/versions/3.12*/bin/python3.12) $(shell command -v python3.12 2>/dev/null))

test: $(DJ6_VENV)/bin/sqsjobs

# `psycopg[binary]`: the test's driver (libpq bundled); pytest and its timeout: what the module needs.
$(DJ6_VENV)/bin/sqsjobs: pyproject.toml | $(UV)
	@test -n "$(PY312)" || { echo "Django 6 needs Python 3.12: no python3.12 on PATH or in pyenv" >&2; exit 1; }
	UV_PYTHON_DOWNLOADS=never $(UV_VENV) --python $(PY312) $(DJ6_VENV)
	$(UV_INSTALL) --python $(DJ6_VENV)/bin/python -e '.[postgres,django]' 'psycopg[binary]>=3.2,<4' \
	  'pytest>=8,<10' 'pytest-timeout>=2.3'
	touch $@
