"""The dashboard on the admin index page."""

from django import template

from audit.selectors import dashboard_figures

register = template.Library()


@register.simple_tag(takes_context=True)
def audit_dashboard(context):
    """The index page's figures, for users who may view the inbox."""
    request = context.get("request")
    if request is None or not request.user.has_perm("webhooks.view_inboxevent"):
        return None
    return dashboard_figures()
