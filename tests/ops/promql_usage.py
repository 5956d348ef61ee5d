"""What the shipped alerting rules and dashboard ask of /metrics, checked against a real scrape.

Every expression of ``deploy/prometheus/alerts.yml`` and ``deploy/grafana/dashboard.json`` is
parsed with a real PromQL parser (``promql_parser``), and the labels of each sub-expression are
worked out as Prometheus would: a selector has the labels its metric is exported with (plus the
target labels the scrape adds), ``sum by (...)`` keeps those it names, ``histogram_quantile``
drops ``le``, a one-to-one match ``on (...)`` keeps those it names, ``group_left (...)`` adds
those it names from the right-hand side... A metric name that no sample of the scrape has (a
counter's family name without ``_total``, a histogram's without ``_bucket``), a label matcher
on a label the metric does not have, and a ``by``/``without``/``on``/``ignoring``/``group_*``
label that the expression under it cannot carry are all reported."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import promql_parser as promql
import yaml
from prometheus_client.parser import text_string_to_metric_families

REPOSITORY = Path(__file__).resolve().parents[2]
ALERTS = REPOSITORY / "deploy" / "prometheus" / "alerts.yml"
DASHBOARD = REPOSITORY / "deploy" / "grafana" / "dashboard.json"

# Labels that Prometheus adds to every series it scrapes.
TARGET_LABELS = frozenset({"job", "instance"})

# Grafana's interval variables, replaced by a duration before parsing; other variables
# (``$source``) only appear inside label matcher strings, where they parse as they are.
GRAFANA_DURATIONS = re.compile(r"\$(__rate_interval|__interval|__range)\b|\$\{__\w+\}")
LABEL_VALUES = re.compile(
    r"^\s*label_values\(\s*(?:(?P<selector>.+?)\s*,\s*)?(?P<label>\w+)\s*\)\s*$"
)

# Functions whose result has no labels of their arguments.
_SCALAR_FUNCTIONS = {
    "time",
    "scalar",
    "pi",
    "minute",
    "hour",
    "day_of_month",
    "day_of_week",
    "day_of_year",
    "days_in_month",
    "month",
    "year",
}
_AGGREGATES_KEEPING_LABELS = {"topk", "bottomk", "limitk", "limit_ratio"}


@dataclass(frozen=True)
class Expression:
    where: str  # "alert WebhookQueueLagHigh", "panel 'Queue lag' A"...
    promql: str
    # The labels a ``label_values(selector, label)`` template query reads (dashboard only).
    label_values: str | None = None


@dataclass
class Check:
    """The problems of one expression, and the labels of its result."""

    problems: list[str] = field(default_factory=list)
    metrics: set[str] = field(default_factory=set)


def exported_labels(exposition: str) -> dict[str, frozenset[str]]:
    """``{sample name: its label names}`` of a /metrics text. Sample names, not family names:
    a counter's series are ``<name>_total``, a histogram's ``_bucket``/``_sum``/``_count``.
    The ``_created`` samples of a single process are left out: the multiprocess exposition of
    the servers has none."""
    found: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(exposition):
        for sample in family.samples:
            if sample.name.endswith("_created") and family.type in {
                "counter",
                "histogram",
                "summary",
            }:
                continue
            found.setdefault(sample.name, set()).update(sample.labels)
    return {name: frozenset(labels) for name, labels in found.items()}


def alert_expressions(path: Path = ALERTS) -> list[Expression]:
    rules = yaml.safe_load(path.read_text())
    return [
        Expression(f"alert {rule.get('alert') or rule.get('record')}", rule["expr"])
        for group in rules["groups"]
        for rule in group["rules"]
    ]


def dashboard_panels(dashboard: Mapping) -> Iterator[Mapping]:
    for panel in dashboard["panels"]:
        yield panel
        yield from panel.get("panels", [])  # the panels of a collapsed row


def dashboard_expressions(path: Path = DASHBOARD) -> list[Expression]:
    dashboard = json.loads(path.read_text())
    found = []
    for panel in dashboard_panels(dashboard):
        for target in panel.get("targets", []):
            where = f"panel {panel['title']!r} {target.get('refId', '')}".strip()
            found.append(Expression(where, target["expr"]))
    for variable in dashboard.get("templating", {}).get("list", []):
        if variable.get("type") != "query":
            continue
        query = variable.get("query")
        text = query.get("query", "") if isinstance(query, dict) else query
        match = LABEL_VALUES.match(text or "")
        if match is None:
            found.append(Expression(f"variable {variable['name']}", text))
        else:
            found.append(
                Expression(
                    f"variable {variable['name']}",
                    match["selector"] or "",
                    label_values=match["label"],
                )
            )
    return found


def grafana_to_promql(text: str) -> str:
    return GRAFANA_DURATIONS.sub("5m", text)


def expression_check(
    expression: Expression,
    exported: Mapping[str, frozenset[str]],
    *,
    pending: Mapping[str, frozenset[str]] | None = None,
) -> Check:
    """The problems of ``expression`` against the exported sample names and their labels;
    ``pending`` names metrics another part of the product adds, with their labels."""
    known = {**(pending or {}), **exported}
    check = Check()
    text = grafana_to_promql(expression.promql)
    try:
        node = promql.parse(text)
    except ValueError as exc:
        check.problems.append(f"{expression.where}: does not parse: {exc}")
        return check
    labels = _labels(node, known, check, expression.where)
    wanted = expression.label_values
    if wanted is not None and labels is not None and wanted not in labels:
        check.problems.append(
            f"{expression.where}: label_values of {expression.label_values!r}, "
            f"which {text!r} does not have"
        )
    return check


def result_labels(text: str, exported: Mapping[str, frozenset[str]]) -> frozenset[str]:
    """The labels of the result of ``text`` (an alert's expression: those its annotations
    may name)."""
    labels = _labels(promql.parse(text), exported, Check(), "")
    return frozenset(labels or ())


# --- the labels of each node -----------------------------------------------------------------


def _selector_name(node) -> str | None:
    if node.name:
        return node.name
    for matcher in node.matchers.matchers:
        if matcher.name == "__name__" and str(matcher.op) == "MatchOp.Equal":
            return matcher.value
    return None


def _labels(node, known, check: Check, where: str) -> set[str] | None:
    """The label names of ``node``'s result (``None`` for a scalar or a string)."""
    if isinstance(node, promql.VectorSelector):
        name = _selector_name(node)
        if name is None:
            check.problems.append(f"{where}: a selector without a metric name")
            return set(TARGET_LABELS)
        check.metrics.add(name)
        if name not in known:
            check.problems.append(f"{where}: no series named {name!r} in /metrics")
            return set(TARGET_LABELS)
        labels = set(known[name]) | TARGET_LABELS
        alternatives = [m for group in node.matchers.or_matchers for m in group]
        for matcher in [*node.matchers.matchers, *alternatives]:
            if matcher.name != "__name__" and matcher.name not in labels:
                check.problems.append(
                    f"{where}: {name} has no label {matcher.name!r} "
                    f"(it has {sorted(known[name])})"
                )
        return labels
    if isinstance(node, promql.MatrixSelector):
        return _labels(node.vector_selector, known, check, where)
    if isinstance(node, promql.ParenExpr | promql.UnaryExpr | promql.SubqueryExpr):
        return _labels(node.expr, known, check, where)
    if isinstance(node, promql.NumberLiteral | promql.StringLiteral):
        return None
    if isinstance(node, promql.Call):
        return _call_labels(node, known, check, where)
    if isinstance(node, promql.AggregateExpr):
        return _aggregate_labels(node, known, check, where)
    if isinstance(node, promql.BinaryExpr):
        return _binary_labels(node, known, check, where)
    check.problems.append(f"{where}: unexpected expression {type(node).__name__}")
    return set()


def _call_labels(node, known, check, where) -> set[str] | None:
    name = node.func.name
    args = [_labels(arg, known, check, where) for arg in node.args]
    vectors = [labels for labels in args if labels is not None]
    if name in _SCALAR_FUNCTIONS:
        return None
    if name == "vector":
        return set()
    if name in {"absent", "absent_over_time"}:
        selector = node.args[0]
        if isinstance(selector, promql.MatrixSelector):
            selector = selector.vector_selector
        if not isinstance(selector, promql.VectorSelector):
            return set()
        return {
            m.name
            for m in selector.matchers.matchers
            if m.name != "__name__" and str(m.op) == "MatchOp.Equal"
        }
    if name == "histogram_quantile":
        buckets = args[1] or set()
        if "le" not in buckets:
            check.problems.append(
                f"{where}: histogram_quantile over series without an 'le' label"
            )
        return buckets - {"le"}
    if name in {"label_replace", "label_join"}:
        strings = [arg.val for arg in node.args[1:]]
        source_labels = strings[3:] if name == "label_join" else strings[2:3]
        for label in source_labels:
            if label and label not in (args[0] or set()):
                check.problems.append(
                    f"{where}: {name} reads a missing label {label!r}"
                )
        return (args[0] or set()) | {strings[0]}
    return vectors[0] if vectors else None


def _aggregate_labels(node, known, check, where) -> set[str]:
    inner = _labels(node.expr, known, check, where) or set()
    op = str(node.op)
    modifier = node.modifier
    named = list(modifier.labels) if modifier is not None else []
    for label in named:
        if label not in inner:
            check.problems.append(
                f"{where}: {op} by/without {label!r}, which the expression under it "
                f"does not carry (it has {sorted(inner)})"
            )
    if op in _AGGREGATES_KEEPING_LABELS:
        return inner
    if modifier is None:
        grouped = set()
    elif modifier.type == promql.AggModifierType.Without:
        grouped = inner - set(named)
    else:
        grouped = set(named)
    if op == "count_values":
        grouped |= {node.param.val}
    return grouped


def _binary_labels(node, known, check, where) -> set[str] | None:
    lhs = _labels(node.lhs, known, check, where)
    rhs = _labels(node.rhs, known, check, where)
    if lhs is None or rhs is None:
        return rhs if lhs is None else lhs
    op = str(node.op)
    modifier = node.modifier
    matching = modifier.matching if modifier is not None else None
    matched = list(matching.labels) if matching is not None else []
    on = matching is not None and matching.type == promql.LabelModifierType.Include
    for label in matched:
        sides = (lhs, rhs) if on else ((lhs | rhs),)
        if any(label not in side for side in sides):
            check.problems.append(
                f"{where}: {'on' if on else 'ignoring'} ({label}), a label that "
                f"{'a side' if on else 'neither side'} of {op!r} carries"
            )
    card = modifier.card if modifier is not None else None
    group = list(modifier.group_labels or []) if modifier is not None else []
    if op in {"and", "unless"}:
        return lhs
    if op == "or":
        return lhs | rhs
    if card == promql.VectorMatchCardinality.ManyToOne:
        for label in group:
            if label not in rhs:
                check.problems.append(
                    f"{where}: group_left ({label}), not on the right"
                )
        return lhs | set(group)
    if card == promql.VectorMatchCardinality.OneToMany:
        for label in group:
            if label not in lhs:
                check.problems.append(
                    f"{where}: group_right ({label}), not on the left"
                )
        return rhs | set(group)
    if matching is None:
        if lhs != rhs:
            check.problems.append(
                f"{where}: {op!r} matches series on all their labels, and its sides carry "
                f"different ones ({sorted(lhs)} and {sorted(rhs)}): nothing would match"
            )
        return lhs
    return set(matched) if on else lhs - set(matched)
