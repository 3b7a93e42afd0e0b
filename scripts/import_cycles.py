"""Every import cycle among the project's modules, ``TYPE_CHECKING`` imports and
imports inside functions included.

    .venv/bin/python scripts/import_cycles.py

Builds the import graph with grimp (the library import-linter uses) over the
top-level packages, splits it into strongly connected components (Tarjan's
algorithm) and prints each component of more than one module, with one cycle
through it as a chain of imports (file and line of each). Exits 1 if there is
any. A package's ``__init__`` counts as the module it is, so a package that
imports one of its modules, which imports the package, is a cycle too.
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Iterable, Mapping

import grimp

PACKAGES = (
    "warmpool",
    "functions",
    "node_agent",
    "emulated",
    "bench",
    "simulation",
    "demo",
    "warmpool_cli",
    "infra",
)


def edges(graph: grimp.ImportGraph) -> dict[str, set[str]]:
    """Module -> the project modules it imports directly."""
    return {m: set(graph.find_modules_directly_imported_by(m)) for m in sorted(graph.modules)}


def components(out: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (or a module importing itself)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(out):
        if root in index:
            continue
        # iterative Tarjan: (node, iterator over its successors)
        work = [(root, iter(sorted(out.get(root, ()))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, succ = work[-1]
            advanced = False
            for nxt in succ:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(out.get(nxt, ())))))
                    advanced = True
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    m = stack.pop()
                    on_stack.discard(m)
                    comp.append(m)
                    if m == node:
                        break
                if len(comp) > 1 or node in out.get(node, ()):
                    found.append(sorted(comp))
    return sorted(found)


def cycle_in(out: Mapping[str, Iterable[str]], comp: list[str]) -> list[str]:
    """One cycle through the component's first module (breadth-first, so a shortest one)."""
    members = set(comp)
    start = comp[0]
    prev: dict[str, str] = {}
    frontier = [start]
    while frontier:
        nxt_frontier = []
        for m in frontier:
            for n in sorted(out.get(m, ())):
                if n not in members:
                    continue
                if n == start:
                    path = [m]
                    while path[-1] != start:
                        path.append(prev[path[-1]])
                    return [start, *reversed(path[:-1]), start]
                if n not in prev:
                    prev[n] = m
                    nxt_frontier.append(n)
        frontier = nxt_frontier
    return [start]


def build() -> tuple[grimp.ImportGraph, dict[str, set[str]], list[list[str]]]:
    """The graph, its edges and its cycles (as strongly connected components)."""
    graph = grimp.build_graph(*PACKAGES, include_external_packages=False, cache_dir=None)
    out = edges(graph)
    return graph, out, components(out)


def main() -> int:
    graph, out, found = build()
    for comp in found:
        print(f"cycle among {len(comp)} modules: {', '.join(comp)}")
        chain = cycle_in(out, comp)
        for a, b in itertools.pairwise(chain):
            where = "; ".join(
                f"line {d['line_number']}: {d['line_contents']}"
                for d in graph.get_import_details(importer=a, imported=b)
            )
            print(f"  {a} -> {b}  ({where})")
    print(f"{len(graph.modules)} modules, {sum(len(v) for v in out.values())} imports, {len(found)} cycles")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
