from __future__ import annotations

from collections.abc import Callable

import pytest
from fastapi.testclient import TestClient

from fleetscope.service.app import ServiceSettings, create_app
from tests.service.support import ScriptedAnalyze


@pytest.fixture
def scripted() -> ScriptedAnalyze:
    return ScriptedAnalyze()


@pytest.fixture
def make_client(scripted: ScriptedAnalyze) -> Callable[..., TestClient]:
    """A TestClient over an app whose analysis is ``scripted``; ``analyzed=True`` runs one cycle first."""

    def make(analyzed: bool = True, **settings) -> TestClient:
        app = create_app(ServiceSettings(run_analysis=False, **settings), scripted)
        if analyzed:
            assert app.state.runner.run_once()
        return TestClient(app)

    return make
