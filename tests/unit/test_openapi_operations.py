"""Every operation of the HTTP API has a unique operationId and a typed 2xx answer in the OpenAPI document.

A client generated from ``/openapi.json`` names its methods by operationId and its result types by
the 2xx schemas: an operation without either makes an unnamed method returning "anything". The
document is walked as FastAPI builds it for a real App, so a route added later without a response
model fails here.
"""

from __future__ import annotations

from sqsjobs import App
from sqsjobs.api.http_app import create_app


def _operations() -> list[tuple[str, str, dict]]:
    schema = create_app(App("openapi-check")).openapi()
    return [(method.upper(), path, op) for path, ops in schema["paths"].items() for method, op in ops.items()]


def _resolved(schema: dict, components: dict) -> dict:
    ref = schema.get("$ref")
    return components[ref.rsplit("/", 1)[1]] if ref else schema


def test_every_operation_has_a_unique_operation_id_named_after_what_it_does():
    ids = [(op.get("operationId"), f"{m} {p}") for m, p, op in _operations()]
    assert all(i for i, _ in ids), [w for i, w in ids if not i]
    names = [i for i, _ in ids]
    assert len(names) == len(set(names)), sorted(names)
    # FastAPI's default ids repeat the path and method (list_jobs_jobs_get): none is left
    assert not [i for i in names if i.endswith(("_get", "_post", "_delete"))], names


def test_every_operation_answers_2xx_with_a_schema_that_names_its_members():
    api = create_app(App("openapi-check"))
    document = api.openapi()
    components = document["components"]["schemas"]
    bare = []
    for path, ops in document["paths"].items():
        for method, op in ops.items():
            ok = {c: r for c, r in op["responses"].items() if c.startswith("2")}
            assert ok, f"{method.upper()} {path} documents no 2xx answer"
            for code, response in ok.items():
                if set(response.get("content", {})) == {"text/event-stream"}:
                    continue  # a stream of events: its media type is its type (docs/api.md)
                schema = response.get("content", {}).get("application/json", {}).get("schema", {})
                variants = schema.get("anyOf", [schema])
                for variant in variants:
                    if not _resolved(variant, components).get("properties"):
                        bare.append(f"{method.upper()} {path} {code}")
    assert not bare, f"2xx answers without a response model: {bare}"
