"""`fleet-gateway` / `python -m gateway.main`: serve the HTTP gateway with uvicorn."""

import uvicorn

from gateway.app import create_app
from gateway.settings import GatewaySettings


def main() -> None:
    settings = GatewaySettings()
    uvicorn.run(create_app(settings), host=settings.host, port=settings.port, log_level="warning",
                timeout_graceful_shutdown=5)


if __name__ == "__main__":
    main()
