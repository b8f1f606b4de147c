"""Print lit_rlhf's import graph: the rooms (top-level modules and folders), the imports that run back up the floors,
and the import circles between modules.

    python scripts/import_graph.py            # summary: rooms, edges, back-arrows, circles
    python scripts/import_graph.py --edges    # every room-to-room edge, with the modules behind it

Every `import` counts, at module level or inside a function (a deferred import is still a dependency). Exit code 1
when there is a back-arrow or a circle, so that a test can hold the line.
"""
from __future__ import annotations

import argparse
import ast
import sys
from collections import defaultdict
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "lit_rlhf"

# The floors, bottom first: a room imports only from its own floor or below. Within a floor, rooms may import one
# another (no circle between modules, though).
FLOORS: list[tuple[str, ...]] = [
    ("errors", "terminal", "output_streams", "noise", "display", "choices", "ops", "hub", "dropped_stops",
     "stops_outside_stages"),
    ("config", "estimators", "statistics", "interrupts", "loggers", "lazy_exports", "plot"),
    ("distributed", "checkpoints", "models", "tasks", "data", "envs", "remote", "rewards", "teachers"),
    ("rollout",),
    ("step",),
    ("algos",),
    ("callbacks", "evaluation"),
    ("cli", "export", "serve", "__init__"),
]
FLOOR_OF = {room: level for level, rooms in enumerate(FLOORS) for room in rooms}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def room_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def imported_modules(path: Path, module: str, known: set[str]) -> set[str]:
    """The lit_rlhf modules `path` imports (`from lit_rlhf.x import y` counts y when y is a module)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            names = [f"{base}.{alias.name}" for alias in node.names] + [base]
        else:
            continue
        for name in names:
            while name and name not in known:
                name = name.rpartition(".")[0]
            if name and name.startswith("lit_rlhf.") and name != module:
                found.add(name)
    # `from lit_rlhf.a import b` where b is a module: keep b, drop the package a it came through
    return {name for name in found if not any(other.startswith(name + ".") for other in found)} or found


def build_graph() -> dict[str, set[str]]:
    paths = {module_name(path): path for path in sorted(PACKAGE.rglob("*.py")) if "assets" not in path.parts}
    known = set(paths)
    return {module: imported_modules(path, module, known) for module, path in paths.items()}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph.get(node, ()):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(10_000)
    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--edges", action="store_true", help="print every room-to-room edge")
    args = parser.parse_args()
    graph = build_graph()
    room_edges: dict[tuple[str, str], set[str]] = defaultdict(set)
    for module, targets in graph.items():
        for target in targets:
            if room_of(module) != room_of(target):
                room_edges[room_of(module), room_of(target)].add(f"{module} -> {target}")
    unplaced = sorted({room_of(module) for module in graph} - set(FLOOR_OF))
    back = {edge: why for edge, why in room_edges.items() if FLOOR_OF.get(edge[0], 99) < FLOOR_OF.get(edge[1], 99)}
    loops = circles(graph)
    rooms = {room_of(module) for module in graph}
    print(f"{len(graph)} modules in {len(rooms)} rooms; {len(room_edges)} room-to-room edges; "
          f"{len(back)} back-arrows; {len(loops)} circles")
    if args.edges:
        for (source, target), why in sorted(room_edges.items()):
            print(f"  {source} -> {target}: {len(why)}")
    for (source, target), why in sorted(back.items()):
        print(f"back-arrow {source} (floor {FLOOR_OF[source]}) -> {target} (floor {FLOOR_OF[target]}):")
        for line in sorted(why):
            print(f"    {line}")
    for loop in loops:
        print("circle: " + " <-> ".join(loop))
    for room in unplaced:
        print(f"room {room} is on no floor: add it to FLOORS in {Path(__file__).name}")
    return 1 if back or loops or unplaced else 0


if __name__ == "__main__":
    sys.exit(main())
