"""A real nginx (Debian's package) in front of a sidecar (tests/server, bench/soak.py), configured
by the shipped examples/nginx/forewarn.conf: only its ports change."""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

from _ports import free_port

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "examples" / "nginx" / "forewarn.conf"


def nginx_binary() -> str | None:
    return shutil.which("nginx") or next((p for p in ("/usr/sbin/nginx",) if Path(p).exists()), None)


class Nginx:
    """``with Nginx(folder, upstream_port) as proxy: proxy.url`` — started, then stopped."""

    def __init__(self, folder: Path, upstream_port: int) -> None:
        self.folder = folder
        self.upstream_port = upstream_port
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Nginx:
        binary = nginx_binary()
        if binary is None:
            raise RuntimeError("nginx is not installed (apt-get install nginx-light; .ci/run installs it)")
        site = CONF.read_text(encoding="utf-8")
        site = site.replace("127.0.0.1:8321", f"127.0.0.1:{self.upstream_port}")
        site = site.replace("listen 127.0.0.1:8080", f"listen 127.0.0.1:{self.port}")
        self.folder.mkdir(parents=True, exist_ok=True)
        (self.folder / "forewarn.conf").write_text(site, encoding="utf-8")
        temp = {name: self.folder / name for name in ("body", "proxy", "fastcgi", "uwsgi", "scgi")}
        user = "user root;" if os.geteuid() == 0 else ""  # workers may write the test's own folders
        main = f"""{user}
daemon off;
worker_processes 1;
pid {self.folder / "nginx.pid"};
error_log {self.folder / "error.log"} warn;
events {{ worker_connections 8192; }}
http {{
    access_log off;
    client_body_temp_path {temp["body"]};
    proxy_temp_path {temp["proxy"]};
    fastcgi_temp_path {temp["fastcgi"]};
    uwsgi_temp_path {temp["uwsgi"]};
    scgi_temp_path {temp["scgi"]};
    include {self.folder / "forewarn.conf"};
}}
"""
        (self.folder / "nginx.conf").write_text(main, encoding="utf-8")
        self.process = subprocess.Popen([binary, "-p", str(self.folder), "-c", str(self.folder / "nginx.conf")],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                log = self.folder / "error.log"
                raise RuntimeError(f"nginx exited: {log.read_text() if log.exists() else ''}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return self
            except OSError:
                time.sleep(0.05)
        self.__exit__()
        raise RuntimeError("nginx did not start listening in 20 s")

    def __exit__(self, *exc: object) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()  # SIGTERM: a fast shutdown
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
