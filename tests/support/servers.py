"""Real servers for tests: free ports and waiting until a port accepts connections."""

from __future__ import annotations

import socket
import threading
import time


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port: int, *, host: str = "127.0.0.1", timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((host, port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.02)
    raise TimeoutError(f"nothing listening on {host}:{port} after {timeout}s")


class ThreadedUvicorn:
    """A real uvicorn server for an ASGI app, in a thread, on a free loopback port."""

    def __init__(self, app: object, *, port: int | None = None, **options: object) -> None:
        import uvicorn

        self.port = port or free_port()
        defaults: dict[str, object] = {
            "log_level": "warning",
            "access_log": False,
            "ws": "none",
            "lifespan": "on",
        }
        config = uvicorn.Config(app, host="127.0.0.1", port=self.port, **{**defaults, **options})
        self.server = uvicorn.Server(config)
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> ThreadedUvicorn:
        self._thread = threading.Thread(target=self.server.run, daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"server on port {self.port} did not start")
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)
