"""The package's shape: laid out by role, no import cycles, no oversized module, folders stacked in one order.

These hold the layout in place as features land: a new module at the top, an import that points
back up, or a module that grows past what one reader can hold fails here first.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "sqsjobs"
#: The roles below the model; a new folder is a new role (docs/architecture.md names each).
ROLES = {
    "store",
    "transport",
    "runtime",
    "schedules",
    "ops",
    "cli",
    "deploy",
    "local",
    "observability",
    "api",
    "batches",
    "chains",
    "limits",
    "ingress",
    "events",
    "hooks",
    "outbox",
    "django",
    "steps",
    "remote",
    "notify",
    "dedupe",
    "slow_runs",
    "archive",
    "children",
    "signals",
}
#: The model, and the AWS seam in two: `_aws` drives flows with client sets, `_client_config` configures a client;
#: `options` holds what `@app.job` takes beside the handler (dedup modes, hooks, versions, batch handlers).
MAX_TOP_LEVEL_MODULES = 18
MAX_MODULE_LINES = 600


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in PACKAGE.rglob("*.py")}


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """Every sqsjobs module ``name`` imports, TYPE_CHECKING and function-level imports included."""
    found = set()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name in known}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                target = f"{base}.{alias.name}"
                if target in known:
                    found.add(target)
                elif base in known:
                    found.add(base)
    found.discard(name)
    return found


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    return out


def test_there_are_no_import_cycles():
    mods = modules()
    graph = {name: imports_of(name, path, set(mods)) for name, path in mods.items()}
    assert cycles(graph) == []


def test_a_cycle_would_be_found():
    # The checker itself: a two-module loop is reported.
    assert cycles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [["a", "b"]]


def test_the_top_level_holds_the_model_and_the_folders_hold_the_roles():
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    folders = {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert len(top) <= MAX_TOP_LEVEL_MODULES, top
    assert folders == ROLES
    assert (PACKAGE / "py.typed").exists()


def test_no_module_is_too_long_to_read_in_one_sitting():
    lengths = {name: len(path.read_text().splitlines()) for name, path in modules().items()}
    assert {n: k for n, k in lengths.items() if k > MAX_MODULE_LINES} == {}


def test_the_model_does_not_depend_on_the_machinery():
    # job, retry, registry, envelope and errors import nothing from store/, transport/, runtime/ or boto3.
    mods = modules()
    for name in ("sqsjobs.job", "sqsjobs.retry", "sqsjobs.registry", "sqsjobs.envelope", "sqsjobs.errors"):
        deps = imports_of(name, mods[name], set(mods))
        assert not {d for d in deps if d.split(".")[1] in {"store", "transport", "runtime"}}, name
        assert "boto3" not in mods[name].read_text(), name


# ── the dependency order ──────────────────────────────────────────────────────────────────────
#: Each part of the package (a folder, or a module at the top) in its layer, lowest first. A part
#: imports only parts of lower layers; the model (layer 0) is the one layer whose parts import each
#: other. The kernel (``runtime``) sits below the features that plug into it, which sit below the
#: operator flows, the App, and the façades that load the App (HTTP API, CLI, ``sqsjobs dev``, tests).
LAYERS: list[set[str]] = [
    {
        "errors",
        "retry",
        "config",
        "envelope",
        "job",
        "_clock",
        "_aws",
        "_client_config",
        "context",
        "delivery",
        "registry",
        "options",
    },
    {"observability"},
    {"transport"},
    {"store"},
    {"producer"},
    {"transaction"},
    {"runtime"},
    {"notify"},  # per-job notifications: a feature the others' cancels tell through (a batch's, a chain's)
    {
        "limits",
        "batches",
        "chains",
        "schedules",
        "hooks",
        "steps",
        "dedupe",
    },  # the features: none imports another
    {"children"},  # children awaited durably: a batch (batches) answering a wait token (steps)
    {"ingress"},  # foreign messages (they reuse a schedule's empty payload)
    {"events"},  # job events: they read batch and chain records from the change stream
    {"deploy"},
    {"ops"},
    {"signals"},  # signals waited for (steps' tokens) or cancelling jobs (ops' cancel, dedupe's supersede)
    {"slow_runs"},  # runs far longer than usual: its baselines are the charts' series (ops)
    {"archive"},  # finished records to S3: a reader of the change stream, as the events are
    {"outbox"},  # jobs written in a Postgres transaction: rows the relay enqueues through the producer
    {"remote"},  # HTTP workers of any language: the claim and record stages behind leases
    {"app"},
    {"api"},
    {"django"},  # the django.tasks backend: it loads the App named in Django's settings, like a façade
    {"local"},
    {"testing"},
    {"sqsjobs"},  # the package's public names
    {"cli"},
    {"__main__"},
]
#: The feature folders: they plug into the kernel's seams (``runtime/seams.py``); the kernel imports none.
FEATURES = {
    "limits",
    "batches",
    "chains",
    "schedules",
    "ingress",
    "events",
    "hooks",
    "steps",
    "notify",
    "dedupe",
    "slow_runs",
    "archive",
    "children",
    "signals",
}
#: The parts a feature folder is made of, under the same name in every folder that has one: what the
#: kernel sees (``plugin``: the ``Plugin`` factory and the seams it fills), its items in the jobs table
#: (``records``: sans-I/O builders of their writes and reads) and what the App offers (``namespace``:
#: ``app.chains``, ``app.limits``...). Only these names repeat, and only in feature folders.
FEATURE_PARTS = {"plugin", "records", "namespace"}
#: Imports that break the order today, each with why; the list only shrinks.
KNOWN: dict[tuple[str, str], str] = {
    ("sqsjobs.deploy.packaging", "sqsjobs"): "it reads the package's own directory",
}
#: Where the App may be imported: itself, the package's names, and the façades above it.
APP_IMPORTERS = {"sqsjobs", "sqsjobs.app", "sqsjobs.testing", "sqsjobs.__main__"}
APP_IMPORTING_FOLDERS = {"cli", "api", "local", "django"}
#: The modules kept free of ``# fmt: skip`` now (the whole package is, once every branch landed).


def part_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def layer_of(part: str) -> int:
    return next(n for n, layer in enumerate(LAYERS) if part in layer)


def edges() -> set[tuple[str, str]]:
    mods = modules()
    return {(name, dep) for name, path in mods.items() for dep in imports_of(name, path, set(mods))}


def test_every_part_of_the_package_has_a_layer():
    parts = {part_of(m) for m in modules()}
    assert parts == set().union(*LAYERS)


def test_no_part_imports_a_part_above_it_or_beside_it():
    wrong = sorted(
        (a, b)
        for a, b in edges()
        if part_of(a) != part_of(b)
        and (
            layer_of(part_of(b)) > layer_of(part_of(a)) or (layer_of(part_of(b)) == layer_of(part_of(a)) > 0)
        )
        and (a, b) not in KNOWN
    )
    assert wrong == []


def test_the_known_exceptions_are_still_needed():
    assert set(KNOWN) <= edges()


def test_the_runtime_imports_no_feature():
    found = sorted(
        (a, b)
        for a, b in edges()
        if part_of(a) == "runtime" and part_of(b) in FEATURES and (a, b) not in KNOWN
    )
    assert found == []


def test_nothing_below_the_facades_imports_the_app():
    importers = sorted(
        a
        for a, b in edges()
        if b == "sqsjobs.app" and a not in APP_IMPORTERS and part_of(a) not in APP_IMPORTING_FOLDERS
    )
    assert importers == []


def test_no_module_needs_fmt_skip_to_stay_under_the_cap():
    marked = sorted(name for name, path in modules().items() if "fmt: skip" in path.read_text())
    assert marked == []


def test_no_module_name_repeats_across_folders_but_a_feature_folders_parts():
    # A name that stands for one module wherever it is read (a traceback, a log's ``module``, a
    # review): ``relay.py`` in two folders made every mention of "the relay" ambiguous. A feature's
    # parts are the exception on purpose: ``limits/plugin.py`` reads as "the limits' plug-in".
    by_name: dict[str, list[str]] = {}
    for name, path in modules().items():
        if path.name not in ("__init__.py", "__main__.py"):
            by_name.setdefault(path.stem, []).append(name)
    repeated = {stem: where for stem, where in by_name.items() if len(where) > 1}
    assert set(repeated) <= FEATURE_PARTS, {s: w for s, w in repeated.items() if s not in FEATURE_PARTS}
    outside = sorted(m for stem in FEATURE_PARTS for m in by_name.get(stem, []) if part_of(m) not in FEATURES)
    assert outside == []


def test_every_features_plug_in_is_made_in_its_folders_plugin_module():
    from sqsjobs.app import App
    from sqsjobs.runtime.kernel import features_of

    makers = {feature.factory.__module__ for feature in features_of(App)}
    assert {m for m in makers if not m.endswith(".plugin")} == set()
    assert {part_of(m) for m in makers} <= FEATURES


def aliased_module_imports() -> list[tuple[str, str, str]]:
    """(importer, module, alias) for every ``from sqsjobs.x import module as alias`` in the package."""
    known = set(modules())
    found = []
    for name, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("sqsjobs"):
                for alias in node.names:
                    if alias.asname and f"{node.module}.{alias.name}" in known:
                        found.append((name, f"{node.module}.{alias.name}", alias.asname))
    return found


def test_a_module_imported_under_another_name_keeps_its_own_in_it():
    # ``inspect_ops`` (beside the standard library's inspect) reads as what it is; ``rq``, ``sx`` or
    # ``env`` (the envelope, or the environment?) send a reader to the import block to find out.
    cryptic = sorted(
        (importer, module, alias)
        for importer, module, alias in aliased_module_imports()
        if module.rpartition(".")[2] not in alias
    )
    assert cryptic == []


def test_the_producer_and_the_kernel_name_no_dedup_mode():
    # A dedup mode plugs into the producer's seam (``KeyPolicy``, ``KeySettler``): the modes live in
    # ``dedupe/``, and a new one is a class there (tests/integration/test_key_policies.py), not an edit here.
    mods = modules()
    seams = {
        n for n in mods if n in {"sqsjobs.app", "sqsjobs.registry", "sqsjobs.context", "sqsjobs.producer"}
    }
    seams |= {n for n in mods if part_of(n) in {"runtime", "store"}}
    naming = {
        n: d for n in seams if (d := {i for i in imports_of(n, mods[n], set(mods)) if part_of(i) == "dedupe"})
    }
    assert naming == {}
