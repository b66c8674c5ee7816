# The worker image: `sqsjobs worker` by default; the sweeper task runs the same image with `sweep --once`.
#
# Small: a slim base, a venv built in a throw-away stage (no compiler or pip cache in the result).
# Non-root: the process runs as uid 10001 and can write nowhere but /tmp (ECS mounts it; the root
# filesystem is read-only there). SIGTERM reaches Python: ENTRYPOINT is in exec form, so `sqsjobs`
# is PID 1 with no shell in between, and the worker's own handler starts the drain (finish or release the running jobs, exit before the kill).
#
# Build from the repository root: docker build -t sqsjobs-worker .
# Your own jobs: copy your package next to `examples/` below and set SQSJOBS_APP=yourpkg.jobs:app.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/venv
COPY pyproject.toml README.md locks/image.txt /src/
COPY sqsjobs /src/sqsjobs
# Exactly the lock (locks/image.txt, `make lock`): every file checked against its hashes, nothing
# resolved here; then sqsjobs itself, its dependencies already in place. pip compiles every module
# it installs, and COPY --from keeps the sources' mtimes, so the interpreter uses that bytecode as it is.
RUN /opt/venv/bin/pip install --require-hashes --no-deps -r /src/image.txt \
 && /opt/venv/bin/pip install --no-deps /src

FROM ${PYTHON_IMAGE}
RUN useradd --system --uid 10001 --no-create-home --shell /usr/sbin/nologin sqsjobs
COPY --from=build /opt/venv /opt/venv
WORKDIR /app
COPY examples /app/examples
# The App's own modules as bytecode too: the root filesystem is read-only on ECS (and
# PYTHONDONTWRITEBYTECODE is set), so a start would otherwise compile them every time. Unchecked-hash
# pycs (PEP 552) do not depend on file times.
RUN python -m compileall -q --invalidation-mode unchecked-hash /app
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    SQSJOBS_APP=examples.shop:app
USER 10001
STOPSIGNAL SIGTERM
# The worker's /live (docs/deploy.md, "Health probe"), served when SQSJOBS_HEALTH_PORT is set (infra/
# sets it for the ECS worker, whose task definition has the same check): stdlib Python, no curl in a
# slim image. Without a port it passes: the sweeper runs from this image too and serves no probe.
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --retries=3 CMD ["python", "-c", "import os, sys, urllib.request; port = os.environ.get('SQSJOBS_HEALTH_PORT'); sys.exit(bool(port) and urllib.request.urlopen(f'http://127.0.0.1:{port}/live', timeout=4).status != 200)"]
ENTRYPOINT ["sqsjobs"]
CMD ["worker"]
