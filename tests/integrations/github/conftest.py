import pytest

from tests.integrations.github.factories import github_source_create


@pytest.fixture
def github_source(db):
    return github_source_create()
