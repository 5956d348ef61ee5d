"""The floors alone: a bare endpoint and a raw INSERT ... ON CONFLICT endpoint on gunicorn."""

from bench.harness import BenchContext, Figure, database_reset, floors_measure, report


def run(ctx: BenchContext) -> list[Figure]:
    base = ctx.gunicorn(workers=2)
    floors = floors_measure(base)
    bare, insert = floors["bare"], floors["raw_insert"]
    return [
        Figure(
            "floors", "bare endpoint req/s", bare.rps, "req/s", extra=bare.as_dict()
        ),
        Figure(
            "floors",
            "raw INSERT ON CONFLICT req/s",
            insert.rps,
            "req/s",
            floor_name="bare",
            floor_value=bare.rps,
            extra=insert.as_dict(),
        ),
    ]


def main() -> None:
    database_reset()
    with BenchContext() as ctx:
        report(run(ctx), name="floors")


if __name__ == "__main__":
    main()
