"""``make bench``: every benchmark in one run, one table, one JSON file (var/bench/results.json).

Each module's figures are measured next to floors from the same run on the same machine; see
docs/benchmarks.md for how to read them."""

import importlib
import sys
import traceback

from bench.harness import BenchContext, database_reset, report

MODULES = [
    "floors",
    "ingest",
    "deployments",
    "triggers",
    "processing",
    "endtoend",
    "costs",
    "admin",
    "auditlog",
    "soak",
]


def main(argv: list[str]) -> int:
    selected = argv or MODULES
    figures = []
    failed = []
    for name in selected:
        try:
            module = importlib.import_module(f"bench.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"bench.{name}":
                print(f"[bench] {name}: not present, skipped", flush=True)
                continue
            raise
        print(f"[bench] {name} ...", flush=True)
        database_reset()
        try:
            with BenchContext() as ctx:
                figures.extend(module.run(ctx))
        except Exception:
            traceback.print_exc()
            failed.append(name)
    print()
    report(figures, name="results")
    if failed:
        print(f"failed benchmarks: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
