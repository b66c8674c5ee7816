# The Postgres outbox (issue 33, docs/outbox.md): tests/outbox/ start Debian's PostgreSQL server from
# its binaries (initdb + postgres in a temporary directory, as the `postgres` user when run as root).
# `make test` installs the package when missing (CI runs as root on a fresh Debian); without root or
# sudo it says so and those tests skip with that reason (they fail instead under CI=true).
APT_POSTGRES := DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql

.PHONY: postgres

postgres:
	@if ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = 0 ]; then apt-get update -qq && $(APT_POSTGRES); \
	elif sudo -n true 2>/dev/null; then sudo apt-get update -qq && sudo $(APT_POSTGRES); \
	else echo "postgresql missing and no root: apt-get install postgresql" >&2; fi

test: postgres
