"""A private container registry for the tests: the CNCF Distribution `registry` (built by
tests/bed/build-registry.sh) on a free loopback port, plain HTTP (containerd speaks HTTP to a
loopback registry without any configuration), basic auth from a bcrypt htpasswd file, its storage
in a temporary directory. `push` copies an image of the test bed's OCI layouts into it through the
registry HTTP API v2 (blob uploads, then the manifest).
"""

from __future__ import annotations

import base64
import json
import os
import pathlib
import socket
import subprocess
import tarfile
import time
import urllib.error
import urllib.request
import warnings
from typing import Any

REPO = pathlib.Path(__file__).resolve().parents[1]
BUILD = REPO / "tests" / "bed" / "build-registry.sh"
VERSION = os.environ.get("REGISTRY_VERSION", "v3.1.2")
BINARY = pathlib.Path(os.environ.get("PYKUBELET_CACHE", "/var/cache/pykubelet")) / "registry" / VERSION / "registry"


def build() -> pathlib.Path:
    """The registry program, built first if the cache lacks it (a no-op once built)."""
    if not BINARY.is_file():
        subprocess.run(["bash", str(BUILD)], check=True, timeout=3600)
    return BINARY


def bcrypt_hash(password: str) -> str:
    """A bcrypt hash, the only kind the registry's htpasswd reads, from the C library's crypt(3)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # crypt: deprecated, still in 3.11 and enough
        import crypt
    return crypt.crypt(password, crypt.mksalt(crypt.METHOD_BLOWFISH))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PrivateRegistry:
    def __init__(self, workdir: pathlib.Path, username: str, password: str):
        self.workdir, self.username, self.password = workdir, username, password
        self.port = _free_port()
        self.host = f"127.0.0.1:{self.port}"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> "PrivateRegistry":
        self.workdir.mkdir(parents=True, exist_ok=True)
        (self.workdir / "htpasswd").write_text(f"{self.username}:{bcrypt_hash(self.password)}\n")
        config = {
            "version": 0.1, "log": {"level": "warn", "accesslog": {"disabled": True}},
            "storage": {"filesystem": {"rootdirectory": str(self.workdir / "data")}},
            "http": {"addr": self.host, "secret": base64.b64encode(os.urandom(24)).decode()},
            "auth": {"htpasswd": {"realm": "pykubelet-test", "path": str(self.workdir / "htpasswd")}},
        }
        (self.workdir / "config.yml").write_text(json.dumps(config))  # YAML reads JSON
        self.log = open(self.workdir / "registry.log", "wb")
        self.process = subprocess.Popen([str(build()), "serve", str(self.workdir / "config.yml")],
                                        stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while self._status("/v2/", auth=False) != 401:
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the registry did not start: {self.logs()}")
            time.sleep(0.1)
        return self

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log.close()

    def logs(self) -> str:
        return (self.workdir / "registry.log").read_text(errors="replace")[-3000:]

    def _request(self, method: str, path: str, body: bytes | None = None, headers: dict[str, str] | None = None,
                 auth: bool = True) -> Any:
        url = path if path.startswith("http") else f"http://{self.host}{path}"
        request = urllib.request.Request(url, data=body, method=method, headers=dict(headers or {}))
        if auth:
            token = base64.b64encode(f"{self.username}:{self.password}".encode()).decode()
            request.add_header("Authorization", f"Basic {token}")
        return urllib.request.urlopen(request, timeout=30)

    def _status(self, path: str, auth: bool = True) -> int:
        try:
            with self._request("GET", path, auth=auth) as response:
                return response.status
        except urllib.error.HTTPError as e:
            return e.code
        except OSError:
            return 0

    def push(self, layout_tar: pathlib.Path, repository: str, tag: str) -> str:
        """Upload the single-manifest OCI layout as <host>/<repository>:<tag>; its reference."""
        with tarfile.open(layout_tar) as tar:
            def blob(digest: str) -> bytes:
                member = tar.extractfile("blobs/sha256/" + digest.split(":", 1)[1])
                assert member is not None
                return member.read()
            index = json.loads(tar.extractfile("index.json").read())  # type: ignore[union-attr]
            descriptor = index["manifests"][0]
            manifest_bytes = blob(descriptor["digest"])
            manifest = json.loads(manifest_bytes)
            for item in (manifest["config"], *manifest["layers"]):
                with self._request("POST", f"/v2/{repository}/blobs/uploads/") as response:
                    location = response.headers["Location"]
                location = location if location.startswith("http") else f"http://{self.host}{location}"
                separator = "&" if "?" in location else "?"
                with self._request("PUT", f"{location}{separator}digest={item['digest']}", blob(item["digest"]),
                                   {"Content-Type": "application/octet-stream"}) as response:
                    assert response.status == 201, response.status
            with self._request("PUT", f"/v2/{repository}/manifests/{tag}", manifest_bytes,
                               {"Content-Type": descriptor["mediaType"]}) as response:
                assert response.status == 201, response.status
        return f"{self.host}/{repository}:{tag}"
