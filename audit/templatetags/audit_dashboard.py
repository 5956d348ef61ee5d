"""The dashboard on the admin index page: the figures come from ``audit.selectors``; this
module only lays them out."""

from django import template

from audit.selectors import dashboard_figures

register = template.Library()

CHART_BAR_WIDTH = 10
CHART_BAR_STEP = 12
CHART_BASELINE = 64
CHART_HEIGHT = 60


def chart_bars(per_hour: list[dict]) -> list[dict]:
    """One bar per hour, scaled to the busiest hour, in the SVG's coordinates."""
    peak = max((point["count"] for point in per_hour), default=0) or 1
    return [
        {
            **point,
            "x": i * CHART_BAR_STEP,
            "width": CHART_BAR_WIDTH,
            "height": round(CHART_HEIGHT * point["count"] / peak, 1),
            "y": round(CHART_BASELINE - CHART_HEIGHT * point["count"] / peak, 1),
        }
        for i, point in enumerate(per_hour)
    ]


@register.simple_tag(takes_context=True)
def audit_dashboard(context):
    """The index page's figures, for users who may view the inbox."""
    request = context.get("request")
    if request is None or not request.user.has_perm("webhooks.view_inboxevent"):
        return None
    figures = dashboard_figures()
    figures["chart"] = chart_bars(figures["per_hour"])
    return figures
