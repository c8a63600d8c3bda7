"""The house rules of the core, checked on the source: one home per rule, no cycles, and settings
that reach the CLI, the link and the sidebar from their one declaration."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from kvplan.arch import Kind
from kvplan.cli import build_parser
from kvplan.engines import REGISTRY, SETTINGS, EngineSettings
from kvplan.scenario import Scenario

KVPLAN = Path(__file__).resolve().parent.parent / "kvplan"
ENGINE_IDS = sorted(REGISTRY)


def _modules() -> dict[str, Path]:
    return {".".join(p.relative_to(KVPLAN.parent).with_suffix("").parts).removesuffix(".__init__"): p
            for p in KVPLAN.rglob("*.py")}


def _imports(path: Path) -> set[str]:
    """Every ``kvplan`` module a file imports (top level or inside functions)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("kvplan"):
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("kvplan"))
    return found


def test_no_import_cycle_in_kvplan() -> None:
    modules = _modules()
    graph = {name: {m for m in _imports(path) if m in modules and m != name}
             for name, path in modules.items()}
    # a package's __init__ re-exporting its submodules is not a cycle through them
    for name in graph:
        graph[name] -= {m for m in graph[name] if name.startswith(m + ".") or m == "kvplan"}
    state: dict[str, int] = {}

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        for nxt in graph[node]:
            if state.get(nxt) == 1:
                pytest.fail(f"import cycle: {' → '.join([*stack, node, nxt])}")
            if nxt not in state:
                visit(nxt, [*stack, node])
        state[node] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [])


def test_engine_names_appear_only_in_the_engine_package() -> None:
    """No module outside ``kvplan/engines/`` spells an engine id (so none compares one)."""
    alternatives = "|".join(map(re.escape, ENGINE_IDS))
    pattern = re.compile(rf"""["']({alternatives})["']""")
    offenders = [f"{path.relative_to(KVPLAN.parent)}:{i}"
                 for path in [*KVPLAN.rglob("*.py"), KVPLAN.parent / "app.py"]
                 if "engines" not in path.relative_to(KVPLAN.parent).parts
                 for i, line in enumerate(path.read_text().splitlines(), 1) if pattern.search(line)]
    assert offenders == []


def test_core_never_imports_streamlit() -> None:
    for name, path in _modules().items():
        if not name.startswith("kvplan.ui"):
            imported = {n for n in ast.walk(ast.parse(path.read_text()))
                        if isinstance(n, ast.Import | ast.ImportFrom)
                        and any((a.name if isinstance(n, ast.Import) else n.module or "")
                                .startswith("streamlit") for a in n.names)}
            assert not imported, name


@pytest.mark.parametrize("name", sorted(SETTINGS))
def test_every_declared_setting_reaches_cli_link_and_sidebar(name: str) -> None:
    """One declaration → a CLI flag on kv/fit/calibrate, a link key that round-trips, a widget."""
    from kvplan.ui.sidebar import SETTING_WIDGETS

    setting = SETTINGS[name]
    parser = build_parser()
    subparsers = next(a for a in parser._actions if a.dest == "command").choices
    for command in ("kv", "fit", "calibrate"):
        subparsers[command].declare()  # a command's arguments are declared on its first parse or help
        flags = {s for a in subparsers[command]._actions for s in a.option_strings}
        assert setting.flag in flags, (command, setting.flag)
    value = {"int": 7, "float": 0.5, "bool": False, "tristate": False,
             "int_list": (7, 9), "json": '{"method":"ngram","num_speculative_tokens":3}',
             "text": "EAGLE"}[setting.kind]
    if setting.kind == "bool":  # the value that is not the default (a default is not linked)
        value = not EngineSettings.model_fields[name].default
    if setting.modalities:  # SGLang's per-modality counts: a JSON object of image/video/audio
        value = '{"image":2,"video":1}'
    scenario = Scenario(engine_settings=EngineSettings(**{name: value}))
    query = scenario.to_query()
    assert query[setting.key] == setting.format(value)
    assert query[setting.key] in {"7", "0.5", "0", "1", "7,9",
                                  '{"method":"ngram","num_speculative_tokens":3}', "EAGLE",
                                  '{"image":2,"video":1}'}
    again, warnings = Scenario.from_query(query)
    assert warnings == [] and getattr(again.engine_settings, name) == value
    assert SETTING_WIDGETS[name] == f"w_{setting.key}"


def test_every_engine_labels_only_declared_settings() -> None:
    for engine in REGISTRY.values():
        assert set(engine.setting_labels) <= set(SETTINGS), engine.id
        assert engine.release and engine.label and engine.short


#: The layers of ``docs/architecture.md``, top to bottom: a module imports only from its own layer or
#: below (``kvplan.engines.*`` and ``kvplan.ui.*`` are one module each here).
LAYERS: tuple[frozenset[str], ...] = (
    frozenset({"kvplan.ui", "kvplan.cli", "kvplan.__main__"}),
    frozenset({"kvplan.serving", "kvplan.nocache", "kvplan.designs", "kvplan.recommend",
               "kvplan.calibrate", "kvplan.report", "kvplan.catalogue", "kvplan.instances",
               "kvplan.offload", "kvplan.disagg"}),
    frozenset({"kvplan.scenario"}),
    frozenset({"kvplan.capacity", "kvplan.sizing", "kvplan.flops", "kvplan.adapters"}),
    frozenset({"kvplan.plan"}),
    frozenset({"kvplan.engines"}),
    frozenset({"kvplan.weights", "kvplan.checkpoint", "kvplan.hub"}),
    frozenset({"kvplan.config_import", "kvplan.presets"}),
    frozenset({"kvplan.arch", "kvplan.dtypes", "kvplan.errors", "kvplan.files", "kvplan.parallel",
               "kvplan.png", "kvplan.colors", "kvplan.multimodal", "kvplan"}),
)


def _unit(module: str) -> str:
    parts = module.split(".")
    return ".".join(parts[:2]) if len(parts) > 1 else module


def test_every_import_goes_down_the_layers() -> None:
    """No module imports from a layer above its own (``docs/architecture.md``'s picture): the engines
    never import the plan, the questions or the weights' callers; weights never import the engines."""
    rank = {module: index for index, layer in enumerate(LAYERS) for module in layer}
    offenders = []
    for name, path in _modules().items():
        unit = _unit(name)
        assert unit in rank, f"{unit} is in no layer of LAYERS (add it, and to docs/architecture.md)"
        for imported in _imports(path):
            target = _unit(imported)
            if target in rank and rank[target] < rank[unit]:
                offenders.append(f"{name} imports {imported}")
    assert offenders == []


#: Functions that turn an engine id into an engine object.
LOOKUPS = frozenset({"get_engine", "engine_view", "recurrent_state_bytes"})
#: The boundaries where an id becomes an engine (``kvplan.plan.resolve_engine``): the plan itself,
#: the CLI's argument parser, the link check and the sidebar.
BOUNDARIES = frozenset({"kvplan.plan", "kvplan.cli", "kvplan.scenario", "kvplan.ui.sidebar"})


def _called(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call):
            func = node.func
            names.add(func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute)
                      else "")
        elif isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) \
                and node.value.id in {"REGISTRY", "RELEASES"}:
            names.add(node.value.id + "[]")
    return names


def test_engines_are_looked_up_by_id_only_at_the_boundary() -> None:
    """Outside ``kvplan/engines/`` no module calls the registry's lookups or indexes the registry; only
    the boundaries call ``resolve_engine``, and of those only ``kvplan.plan`` calls ``get_engine``. Every
    question reads its engine from the Plan it is given."""
    offenders = []
    for name, path in [*_modules().items(), ("app", KVPLAN.parent / "app.py")]:
        if name.startswith("kvplan.engines"):
            continue
        called = _called(path)
        lookups = called & (LOOKUPS | {"REGISTRY[]", "RELEASES[]"})
        if name == "kvplan.plan":
            lookups -= {"get_engine"}
        if "resolve_engine" in called and name not in BOUNDARIES:
            lookups.add("resolve_engine")
        offenders.extend(f"{name}: {lookup}" for lookup in sorted(lookups))
    assert offenders == []
#: The serialised cache-kind names (``kvplan.arch.Kind`` values) that no module outside the engine
#: package may compare against: it asks the kind's properties or compares ``Kind`` members.
KIND_NAMES = frozenset(kind.value for kind in Kind if kind.caches)


def _kind_literals(node: ast.expr) -> list[str]:
    """The cache-kind string literals ``node`` spells: a constant, or one in a set/tuple/list."""
    items = node.elts if isinstance(node, ast.Set | ast.Tuple | ast.List) else [node]
    return [item.value for item in items
            if isinstance(item, ast.Constant) and isinstance(item.value, str) and item.value in KIND_NAMES]


def test_no_cache_kind_string_compared_outside_the_engine_package() -> None:
    """``==``/``!=``/``in`` against "full", "sliding", "chunked", "mla", "recurrent", … appear only in
    ``kvplan/engines/``; elsewhere a layer's or cache's kind is a ``Kind`` and read through its
    properties (``windowed``, ``grows``, ``holds_state``)."""
    offenders = []
    for path in [*KVPLAN.rglob("*.py"), KVPLAN.parent / "app.py"]:
        if "engines" in path.relative_to(KVPLAN.parent).parts or not path.exists():
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Compare):
                spelled = [s for operand in (node.left, *node.comparators) for s in _kind_literals(operand)]
                if spelled:
                    offenders.append(f"{path.relative_to(KVPLAN.parent)}:{node.lineno} {spelled}")
    assert offenders == []


def test_layer_kinds_are_kind_members() -> None:
    """Every layer spec's ``kind`` is declared as ``Kind`` members, so a parsed layer carries one."""
    from typing import get_args

    from kvplan.arch import MLA, Attention, NoCache, Recurrent

    for spec in (Attention, MLA, Recurrent, NoCache):
        values = get_args(spec.model_fields["kind"].annotation)
        assert values and all(isinstance(v, Kind) for v in values), spec.__name__
        assert isinstance(spec.model_fields["kind"].default, Kind), spec.__name__
    assert {k.value for k in Kind} >= {"full", "sliding", "chunked", "mla", "recurrent", "none"}
    assert [k for k in Kind if k.windowed] == [Kind.SLIDING, Kind.CHUNKED]
    assert [k for k in Kind if k.holds_state] == [Kind.RECURRENT]


def test_every_engine_declares_a_spec_for_each_cache_kind() -> None:
    """One table ``Kind → spec class`` per engine covers every kind a layer can cache (after the
    engine's own remapping: TensorRT-LLM stores windowed layers full length)."""
    from kvplan.engines import RELEASES
    from kvplan.engines.kinds import CacheRule

    for releases in RELEASES.values():
        for engine in releases.values():
            assert engine.specs and all(issubclass(c, CacheRule) for c in engine.specs.values())
            assert {Kind.FULL, Kind.MLA, Kind.DSA_INDEXER, Kind.RECURRENT} <= set(engine.specs), engine.id
