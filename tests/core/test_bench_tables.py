"""The tables the benchmarks and the chaos run name in their SQL are the product's tables as
the migrations leave them: a table renamed or merged (deployments 0009 made the job tables
one) fails here, not half-way through a `make bench`."""

import re
from pathlib import Path

from django.apps import apps

ROOT = Path(__file__).resolve().parents[2]
# A quoted or bare name of an app's table: the app's label, an underscore, the model's name.
_APP_LABELS = sorted({config.label for config in apps.get_app_configs()}, key=len)


def _tables_named(text: str) -> set[str]:
    labels = "|".join(re.escape(label) for label in _APP_LABELS)
    return set(re.findall(rf"\b(?:{labels})_[a-z][a-z0-9_]*\b", text))


def test_every_table_a_benchmark_or_the_chaos_run_names_exists():
    tables = {
        model._meta.db_table for model in apps.get_models(include_auto_created=True)
    }
    unknown = {}
    for folder in ("bench", "chaos"):
        for path in sorted((ROOT / folder).glob("*.py")):
            if path.name == "job_migration.py":
                continue  # it fills the tables as they were before deployments 0009
            text = path.read_text()
            # Only names in SQL: after FROM, INTO, UPDATE, TABLE, JOIN or TRUNCATE.
            named = {
                name
                for name in _tables_named(text)
                if re.search(
                    rf"\b(FROM|INTO|UPDATE|TABLE|JOIN|TRUNCATE)\s+{name}\b", text
                )
            }
            missing = named - tables
            if missing:
                unknown[str(path.relative_to(ROOT))] = sorted(missing)
    assert unknown == {}
