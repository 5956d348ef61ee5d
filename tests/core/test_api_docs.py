import re

import pytest

pytestmark = pytest.mark.django_db


def test_openapi_schema_is_public_and_describes_the_bearer_scheme(client):
    response = client.get(
        "/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json"
    )
    assert response.status_code == 200
    schema = response.json()
    assert schema["openapi"].startswith("3.")
    assert schema["components"]["securitySchemes"]["BearerToken"]["scheme"] == "bearer"


def test_interactive_docs_load_every_asset_from_this_server(client):
    response = client.get("/api/docs/")
    assert response.status_code == 200
    html = response.content.decode()
    assets = re.findall(r'(?:src|href)="([^"]+)"', html)
    assert assets
    for asset in assets:
        # Nothing from the internet: every script and style is served by the application.
        assert asset.startswith("/"), asset
        if asset.startswith("/static/"):
            assert client.get(asset).status_code == 200, asset
