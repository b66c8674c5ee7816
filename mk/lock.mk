# locks/: what the worker image and the Lambda zip install, every package pinned with its hashes
# (docs/deploy.md, "A lock"). Universal locks (uv pip compile --universal): one file holds the right
# pins for every Python from 3.11 up (markers where they differ) and every platform, so the image's
# Python, the Lambda runtime's (3.12 by default) and MiniStack's (this machine's) install from the
# same lock; each pin lists the hashes of all its files. `make lock` regenerates both (~20 s).
#   locks/image.txt   sqsjobs[api]: the library, its API and CLI (Dockerfile)
#   locks/lambda.txt  what the zip installs: sqsjobs' runtime requirements, no CLI (sqsjobs package lambda)
LOCK_COMPILE = $(UV) pip compile --quiet --universal --python-version 3.11 --generate-hashes \
  --no-emit-package sqsjobs --custom-compile-command 'make lock'

.PHONY: lock
lock: $(BIN)/sqsjobs
	mkdir -p build/lock locks
	$(LOCK_COMPILE) pyproject.toml --extra api -o locks/image.txt
	$(BIN)/python -c 'from sqsjobs.deploy.packaging import runtime_requirements; print("\n".join(runtime_requirements()))' > build/lock/lambda.in
	$(LOCK_COMPILE) build/lock/lambda.in -o locks/lambda.txt
