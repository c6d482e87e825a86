"""`fleet-gateway` / `python -m gateway.main`: serve the HTTP gateway with uvicorn."""

import uvicorn

from common.logs import configure_logging
from gateway.app import create_app
from gateway.settings import GatewaySettings


def main() -> None:
    settings = GatewaySettings()
    configure_logging(json_lines=settings.log_json, level=settings.log_level)
    uvicorn.run(create_app(settings), host=settings.host, port=settings.port, log_level="warning",
                timeout_graceful_shutdown=5)


if __name__ == "__main__":
    main()
