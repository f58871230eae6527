"""sqldelay's HTTP service and dashboard (the optional extra ``sqldelay[web]``).

``create_app(engine, token=...)`` returns a Starlette application: the REST API under ``/v1``
and the dashboard at ``/``; ``sqldelay serve`` runs it on uvicorn. See docs/web.md.
"""

from .app import create_app

__all__ = ["create_app"]
