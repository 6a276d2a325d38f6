"""The test images only the cluster-wide [Conformance] specs run, beyond the [NodeConformance] ones
tests/bed/images_e2e.py builds (it builds these too, and is the program to run).

Each is rebuilt here from the software it holds, under the exact name e2e.test v1.36.3 asks for
(its test/utils/image/manifest.go), on the bed's own base images where upstream's Dockerfile
starts FROM one:

* ``e2e-test-images/agnhost:2.55`` (the suite's "previous agnhost": specs roll a Deployment,
  a StatefulSet or a pod from one agnhost to the other) -- the bed's agnhost 2.63.0 under the
  older tag. Its config carries a label saying so, which also gives it an image ID of its own:
  containerd reports a container's image as the first tag of its image ID, so two tags of one
  image would make a rolled pod report the wrong one.
* ``e2e-test-images/nginx:1.15-4`` -- upstream's is the official nginx:1.15-alpine image; here
  Debian 12's nginx package on a Debian slim base, configured as the official image is: the
  default page on port 80 from /usr/share/nginx/html, worker processes as user nginx (101),
  logs to the container's stdout and stderr, ``nginx -g 'daemon off;'`` and SIGTERM to stop.
* ``e2e-test-images/nautilus:1.8`` and ``kitten:1.8`` -- as their Dockerfiles: the agnhost image
  plus the picture and data.json from the k8s.io/kubernetes module's test/images/<name>/html,
  running ``agnhost test-webserver``. The ImageVolume spec that mounts kitten also expects the
  os-release of upstream's Alpine base; the bed's agnhost has Debian's (from base-files).
* ``e2e-test-images/sample-apiserver:1.29.2`` -- /sample-apiserver, built from the
  k8s.io/sample-apiserver module of the same release as the rest by
  tests/bed/build-conformance.sh (upstream builds a tagged checkout of that repository), on the
  bed's BusyBox (upstream: on Alpine).

The aggregator spec's other image, ``registry.k8s.io/etcd:3.6.8-0``, is kubeadm's
(tests/bed/images_control_plane.py), imported on every node of a cluster.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from images import PATH_ENV, Entry, ImageSpec  # tests/bed/images.py (images_e2e.py puts tests/bed on sys.path)
from images_e2e_debs import DEBIAN_BASE, debian_inputs, debian_layer, merge

E2E_REGISTRY = "registry.k8s.io/e2e-test-images"


@dataclass(frozen=True)
class Inputs:
    """Where the images' parts come from (images_e2e.py's paths, so one place decides them)."""

    debs: Path  # the Debian package cache
    layout_version: bytes  # part of every cache key
    program: Callable[[str], Path]  # a program build-conformance.sh built, by name (exits if missing)
    k8s_source: Callable[[str], Path]  # a file of the k8s.io/kubernetes module (exits if missing)


def _digest(path: Path) -> bytes:
    return hashlib.sha256(path.read_bytes()).digest()


def _on(base: ImageSpec, own_inputs: Callable[[], bytes],
        own: Callable[[], list[Entry]]) -> tuple[Callable[[], bytes], Callable[[Path], list[Entry]]]:
    """(inputs, layer) of an image built FROM `base`: its layer with `own` entries stacked on top."""
    return (lambda: base.inputs() + own_inputs(),
            lambda workdir: merge(base.layer(workdir), own()))


# ------------------------------------------------------------------------------- nginx

NGINX_DEBS = [*DEBIAN_BASE, "nginx"]
# The official image's user and group (its Dockerfile adds them with these IDs).
NGINX_USER = "nginx:x:101:101:nginx:/nonexistent:/usr/sbin/nologin\n"
NGINX_GROUP = "nginx:x:101:\n"
# The official 1.15 image's /etc/nginx/nginx.conf and conf.d/default.conf, in substance: one
# server on port 80 (IPv4 only, as that image's) serving the default page; Debian's own
# nginx.conf (sites-enabled/, which its postinst fills) is replaced. No error_page: the 50x.html
# it names is not in Debian's package.
NGINX_CONF = """\
user  nginx;
worker_processes  auto;

error_log  /var/log/nginx/error.log notice;
pid        /run/nginx.pid;

events {
    worker_connections  1024;
}

http {
    include       /etc/nginx/mime.types;
    default_type  application/octet-stream;

    log_format  main  '$remote_addr - $remote_user [$time_local] "$request" '
                      '$status $body_bytes_sent "$http_referer" '
                      '"$http_user_agent" "$http_x_forwarded_for"';
    access_log  /var/log/nginx/access.log  main;

    sendfile           on;
    keepalive_timeout  65;

    include /etc/nginx/conf.d/*.conf;
}
"""
NGINX_DEFAULT_SERVER = """\
server {
    listen       80;
    server_name  localhost;

    location / {
        root   /usr/share/nginx/html;
        index  index.html index.htm;
    }
}
"""


def nginx_layer(inputs: Inputs) -> list[Entry]:
    base = debian_layer(NGINX_DEBS, inputs.debs, "nginx")
    files = {e.path: e.data for e in base}
    return merge(base, [
        Entry("etc/nginx/nginx.conf", "file", 0o644, NGINX_CONF.encode()),
        Entry("etc/nginx/conf.d/default.conf", "file", 0o644, NGINX_DEFAULT_SERVER.encode()),
        Entry("etc/passwd", "file", 0o644, files["etc/passwd"] + NGINX_USER.encode()),
        Entry("etc/group", "file", 0o644, files["etc/group"] + NGINX_GROUP.encode()),
        # The official image sends its logs to the container's streams through these links.
        Entry("var/log/nginx/access.log", "symlink", target="/dev/stdout"),
        Entry("var/log/nginx/error.log", "symlink", target="/dev/stderr"),
        Entry("run", "dir", 0o755),  # the pid file's directory
        # The package's temp paths are under /var/lib/nginx, which nginx-common ships; the cache
        # directory the official image makes is not used by this build.
    ])


NGINX_CONFIG = {"Env": [PATH_ENV], "Cmd": ["nginx", "-g", "daemon off;"], "ExposedPorts": {"80/tcp": {}},
                "StopSignal": "SIGTERM"}


# ------------------------------------------------------------------- agnhost's children


def picture_image(agnhost: ImageSpec, inputs: Inputs, name: str, tag: str) -> ImageSpec:
    """nautilus or kitten: agnhost plus test/images/<name>/html's picture and data.json."""
    html = f"test/images/{name}/html/"
    files = (f"{name}.jpg", "data.json")
    build_inputs, layer = _on(
        agnhost,
        lambda: b"".join(_digest(inputs.k8s_source(html + f)) for f in files),
        lambda: [Entry(f, "file", 0o644, inputs.k8s_source(html + f).read_bytes()) for f in files])
    return ImageSpec(f"e2e-{name}", f"{E2E_REGISTRY}/{name}:{tag}", build_inputs, layer,
                     {**agnhost.config, "Cmd": ["test-webserver"]})


def previous_agnhost(agnhost: ImageSpec) -> ImageSpec:
    built_from = agnhost.name.rsplit(":", 1)[1]
    return ImageSpec("e2e-agnhost-prev", f"{E2E_REGISTRY}/agnhost:2.55", agnhost.inputs, agnhost.layer,
                     {**agnhost.config, "Labels": {
                         "org.opencontainers.image.description": f"agnhost {built_from} under the 2.55 tag"}})


def sample_apiserver(busybox: ImageSpec, inputs: Inputs) -> ImageSpec:
    build_inputs, layer = _on(
        busybox,
        lambda: _digest(inputs.program("sample-apiserver")),
        lambda: [Entry("sample-apiserver", "file", 0o755, inputs.program("sample-apiserver").read_bytes())])
    return ImageSpec("e2e-sample-apiserver", f"{E2E_REGISTRY}/sample-apiserver:1.29.2", build_inputs, layer,
                     {"Env": [PATH_ENV], "Entrypoint": ["/sample-apiserver"]})


def cluster_images(busybox: ImageSpec, agnhost: ImageSpec, inputs: Inputs) -> dict[str, ImageSpec]:
    """The images above by --only name, built on the bed's `busybox` and `agnhost` images."""
    return {
        "agnhost-prev": previous_agnhost(agnhost),
        "nginx": ImageSpec("e2e-nginx", f"{E2E_REGISTRY}/nginx:1.15-4",
                           lambda: debian_inputs(NGINX_DEBS, inputs.debs, inputs.layout_version)
                           + NGINX_CONF.encode() + NGINX_DEFAULT_SERVER.encode(),
                           lambda _: nginx_layer(inputs), NGINX_CONFIG),
        "nautilus": picture_image(agnhost, inputs, "nautilus", "1.8"),
        "kitten": picture_image(agnhost, inputs, "kitten", "1.8"),
        "sample-apiserver": sample_apiserver(busybox, inputs),
    }
