#!/bin/sh
# Create the App's jobs table (with its indexes and TTL), queues and DLQs on an AWS-compatible
# endpoint: the same resources infra/ creates with CloudFormation, made by the same code path
# (`sqsjobs provision`, safe to repeat). Used by `make localstack-up` (MiniStack on the host) and by
# the `provision` service of docker-compose.yml (LocalStack in Docker).
#
#   SQSJOBS_APP           the App to provision          (default examples.shop:app)
#   SQSJOBS_ENDPOINT_URL  the emulator                  (default http://127.0.0.1:4566)
#   SQSJOBS               the sqsjobs executable        (default sqsjobs on PATH)
set -eu
: "${SQSJOBS_APP:=examples.shop:app}"
: "${SQSJOBS_ENDPOINT_URL:=http://127.0.0.1:4566}"
: "${SQSJOBS:=sqsjobs}"
# Emulators accept any credentials, but botocore refuses to sign without some.
: "${AWS_ACCESS_KEY_ID:=test}" "${AWS_SECRET_ACCESS_KEY:=test}" "${AWS_DEFAULT_REGION:=us-east-1}"
export AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY AWS_DEFAULT_REGION
exec "$SQSJOBS" provision --app "$SQSJOBS_APP" --endpoint-url "$SQSJOBS_ENDPOINT_URL"
