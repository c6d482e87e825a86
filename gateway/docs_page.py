"""`/docs`: Swagger UI served from the gateway itself, so it works on a cluster without internet.

FastAPI's own page loads Swagger UI from a public CDN, which a cluster without internet access
cannot reach (the page stays blank). Here its files come from gateway/swagger_ui/ (vendored from
npm's `swagger-ui-dist`, see VENDORED.md there) and the page names nothing off the host: no CDN,
no favicon from fastapi.tiangolo.com, no validator badge from validator.swagger.io.

The docs are public, like the probes: they describe the API and serve nothing (the API itself
keeps needing a key), and a browser opening /docs sends no bearer header. "Try it out" asks for the
key under Authorize.
"""

from pathlib import Path

from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

DOCS_PATH = "/docs"
OPENAPI_PATH = "/openapi.json"
STATIC_PATH = "/docs/static"
ASSETS = Path(__file__).parent / "swagger_ui"


def is_docs_path(path: str) -> bool:
    """The page, its OpenAPI document and its static files: open to all."""
    return path in (DOCS_PATH, OPENAPI_PATH) or path.startswith(STATIC_PATH + "/")


def install_docs(app: FastAPI) -> None:
    """Serve /docs from the vendored files; create the app with docs_url=None and redoc_url=None."""
    app.mount(STATIC_PATH, StaticFiles(directory=ASSETS), name="swagger-ui")

    @app.get(DOCS_PATH, include_in_schema=False)
    async def docs() -> HTMLResponse:
        return get_swagger_ui_html(openapi_url=OPENAPI_PATH, title=f"{app.title} - docs",
                                   swagger_js_url=f"{STATIC_PATH}/swagger-ui-bundle.js",
                                   swagger_css_url=f"{STATIC_PATH}/swagger-ui.css",
                                   swagger_favicon_url=f"{STATIC_PATH}/favicon-32x32.png",
                                   swagger_ui_parameters={"validatorUrl": None})
