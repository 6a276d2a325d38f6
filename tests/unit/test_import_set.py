"""Each command imports what it needs and no more, for its start-up time and its memory: no
command loads kubernetes_asyncio's typed API and model classes (~0.3 s and ~30 MB; the apiserver
client sends and receives plain dicts), a standalone agent loads no apiserver client at all nor
pyroute2's unused families nor cryptography, and `pykubelet proxy` none of the kubelet's modules. Each case runs in
a fresh interpreter, as the command does, and starts no daemon."""

from __future__ import annotations

import datetime
import json
import pathlib
import subprocess
import sys
import textwrap

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization

REPO = pathlib.Path(__file__).resolve().parents[2]

MODELS = "kubernetes_asyncio.client.models"
# What the generated API and model classes load: their modules, or the packages' own __init__ run.
TYPED_API_LOADED = textwrap.dedent(f"""
    import sys

    def typed_api_loaded():
        names = [m for m in sys.modules if m.startswith(("{MODELS}.", "kubernetes_asyncio.client.api."))]
        models, client = sys.modules.get("{MODELS}"), sys.modules.get("kubernetes_asyncio.client")
        if models is not None and "V1Pod" in vars(models):
            names.append("{MODELS} (its __init__ ran)")
        if client is not None and "CoreV1Api" in vars(client):
            names.append("kubernetes_asyncio.client (its __init__ ran)")
        return names
""")

KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "http://127.0.0.1:%d"}}]
users: [{name: u, user: {token: the-token}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
"""


def _run(code: str) -> dict:
    """What the code prints last (a JSON object), run in a fresh interpreter from the repository,
    with typed_api_loaded() at hand."""
    result = subprocess.run([sys.executable, "-c", TYPED_API_LOADED + textwrap.dedent(code)], cwd=REPO,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.splitlines()[-1])


def test_a_standalone_agent_loads_no_apiserver_client(tmp_path):
    """The command line as `pykubelet` reads it, the agent made (not run: no runtime here), and what
    phase start imports to serve the kubelet API."""
    loaded = _run(f"""
        import asyncio, json, sys
        from pykubelet import cli

        async def made_not_run(settings):
            from pykubelet.agent import Agent  # where cli._run_agent imports it: after the settings
            Agent(settings)
            return 0
        cli._run_agent = made_not_run
        assert cli.main(["--root-dir", "{tmp_path}", "--pod-manifest-path", "{tmp_path}/manifests"]) == 0
        import pykubelet.server.kubelet_api, pykubelet.server.host
        print(json.dumps(sorted(sys.modules)))
    """)
    assert "pykubelet.agent" in loaded and "pykubelet.assembly.parts" in loaded
    assert [m for m in loaded if m.startswith("kubernetes_asyncio") or m == "pykubelet.kube.client"] == []
    assert "pyroute2.iproute" in loaded
    assert [m for m in loaded if m.startswith(("pyroute2.ndb", "pyroute2.ipdb"))] == []
    # pyroute2 imports unittest.mock; the unittest package's __init__ (runner, loader, difflib) never runs.
    assert [m for m in loaded if m in ("unittest.case", "unittest.main", "unittest.runner", "difflib")] == []
    # A restart serves its stored self-signed pair with ssl alone; cryptography makes or reads one.
    assert [m for m in loaded if m.startswith("cryptography")] == []
    # aiohttp serves, but its client (and the CA bundle its connector reads) waits for an httpGet probe.
    assert "aiohttp.web" in loaded
    assert [m for m in loaded if m in ("aiohttp.client", "aiohttp.connector")] == []


def test_a_standalone_agents_http_probe_loads_the_client_off_the_event_loop(tmp_path):
    """The agent's command line read as `pykubelet` reads it (which leaves aiohttp's client out),
    then an httpGet probe against a local server: it answers, the client was imported in another
    thread than the event loop's, and aiohttp's package __init__ never ran."""
    out = _run(f"""
        import asyncio, importlib, json, sys, threading
        from pykubelet import cli

        async def made_not_run(settings):
            from pykubelet.agent import Agent  # where cli._run_agent imports it: after the settings
            Agent(settings)
            return 0
        cli._run_agent = made_not_run
        assert cli.main(["--root-dir", "{tmp_path}", "--pod-manifest-path", "{tmp_path}/manifests"]) == 0
        from aiohttp import web
        from pykubelet.api.probe import HTTPGetAction, Probe
        from pykubelet.probes.check import run_probe
        before = "aiohttp.client" in sys.modules
        imported_in = []
        real_import = importlib.import_module

        def watched_import(name, *args):
            imported_in.append((name, threading.current_thread() is threading.main_thread()))
            return real_import(name, *args)
        importlib.import_module = watched_import

        async def main():
            async def healthz(request):
                return web.Response(status=500, text="broken")
            app = web.Application()
            app.router.add_get("/healthz", healthz)
            runner = web.AppRunner(app)
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            port = site._server.sockets[0].getsockname()[1]
            try:
                probe = Probe(HTTPGetAction(port=port, path="/healthz"), timeout_seconds=2)
                return await run_probe(None, probe, (), "", "127.0.0.1")
            finally:
                await runner.cleanup()
        probe = asyncio.run(main())
        print(json.dumps({{"before": before, "probe": probe, "imported_in": imported_in,
                          "package_init_ran": "ClientSession" in vars(sys.modules["aiohttp"])}}))
    """)
    assert out["before"] is False
    assert out["probe"] == [False, "HTTP probe failed with statuscode: 500 broken"]
    assert out["imported_in"] == [["aiohttp.client", False]]  # once, not in the event loop's thread
    assert out["package_init_ran"] is False  # neither serving nor probing needed the package's __init__


def test_the_apiserver_client_works_without_the_typed_api(tmp_path):
    """Every module of pykubelet imported, then a client made from a kubeconfig GETs from a local
    server with the kubeconfig's token: the typed API classes are still not loaded."""
    out = _run(f"""
        import asyncio, json, pkgutil, importlib, sys
        import pykubelet
        for module in pkgutil.walk_packages(pykubelet.__path__, "pykubelet."):
            importlib.import_module(module.name)
        from aiohttp import web
        from pykubelet.kube.client import KubeClient
        UNUSED_PARTS = [["kubernetes_asyncio", part] for part in ("dynamic", "stream", "utils", "watch")]

        async def main():
            seen = []

            async def nodes(request):
                seen.append(request.headers.get("Authorization"))
                return web.json_response({{"kind": "NodeList", "items": []}})
            app = web.Application()
            app.router.add_get("/api/v1/nodes", nodes)
            runner = web.AppRunner(app)
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            port = site._server.sockets[0].getsockname()[1]
            with open("{tmp_path}/kubeconfig", "w") as f:
                f.write({KUBECONFIG!r} % port)
            kube = await KubeClient.from_kubeconfig("{tmp_path}/kubeconfig")
            try:
                listed = await kube.get("/api/v1/nodes")
            finally:
                await kube.close()
                await runner.cleanup()
            unused = [m for m in sys.modules if m.split(".")[:2] in UNUSED_PARTS
                      or m.startswith(("urllib3.", "importlib.metadata"))]
            return {{"listed": listed, "seen": seen, "typed_api": typed_api_loaded(), "unused": unused}}
        print(json.dumps(asyncio.run(main())))
    """)
    assert out["listed"] == {"kind": "NodeList", "items": []}
    assert out["seen"] == ["Bearer the-token"]
    assert out["typed_api"] == []
    # Nor the parts of the library its own __init__ imports and the agent never calls, nor urllib3
    # (kubernetes_asyncio builds only a basic-auth header with it), nor importlib.metadata (which
    # aiolimiter's __init__ reads its version with).
    assert out["unused"] == []


def test_the_proxy_loads_none_of_the_kubelets_modules(tmp_path):
    """`pykubelet proxy` as the command dispatches it, its settings read, and its apiserver client made."""
    out = _run(f"""
        import asyncio, contextlib, io, json, sys
        from pykubelet import cli
        with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
            cli.main(["proxy", "--help"])
        from pykubelet.proxy import server
        with open("{tmp_path}/kubeconfig", "w") as f:
            f.write({KUBECONFIG!r} % 1)
        settings = server.settings_from_args(["--kubeconfig", "{tmp_path}/kubeconfig"], print)
        server.ProxyServer(settings)
        from pykubelet.kube.client import KubeClient

        async def connect():
            await (await KubeClient.from_kubeconfig(settings.kubeconfig)).close()
        asyncio.run(connect())
        print(json.dumps({{"modules": sorted(sys.modules), "typed_api": typed_api_loaded()}}))
    """)
    ours = [m for m in out["modules"] if m.startswith("pykubelet")]
    assert "pykubelet.proxy.server" in ours and "pykubelet.kube.client" in ours
    shared = ("pykubelet.proxy.", "pykubelet.kube.", "pykubelet.util.")
    assert [m for m in ours if m not in ("pykubelet", "pykubelet.cli", "pykubelet.proxy", "pykubelet.kube",
                                          "pykubelet.util") and not m.startswith(shared)] == []
    assert "grpc" not in out["modules"]
    assert out["typed_api"] == []


def test_the_libraries_still_give_everything_when_asked():
    """Deferred, not removed: code that asks kubernetes_asyncio for a model or an API class gets it,
    ApiClient still deserializes into a model, Configuration still makes a basic-auth header
    (urllib3's), pyroute2 and unittest still have all of their names, and aiohttp (its client
    deferred, as for a standalone agent) all of its own, its version the installed one."""
    out = _run("""
        import asyncio, json
        from importlib import metadata
        from pykubelet.util import http_client
        http_client.defer_client()
        from aiohttp import web
        from pykubelet.kube.rest_layer import ApiClient, Configuration
        import pykubelet.util.netlink
        import aiolimiter
        import kubernetes_asyncio
        import unittest
        import urllib3
        from kubernetes_asyncio.client import CoreV1Api, V1Pod
        import pyroute2

        basic = Configuration(username="u", password="p").get_basic_auth_token()

        async def deserialize():
            api = ApiClient()
            try:
                return api._ApiClient__deserialize({"metadata": {"name": "web"}}, "V1Pod").metadata.name
            finally:
                await api.close()
        import aiohttp
        print(json.dumps({"api": CoreV1Api.__name__, "model": V1Pod.__name__,
                          "watch": kubernetes_asyncio.watch.Watch.__name__, "pod": asyncio.run(deserialize()),
                          "ndb": pyroute2.NDB.__name__, "session": aiohttp.ClientSession.__name__,
                          "aiohttp": aiohttp.__version__ == metadata.version("aiohttp"),
                          "kubernetes_asyncio": kubernetes_asyncio.__version__ == metadata.version("kubernetes_asyncio"),
                          "stream": kubernetes_asyncio.stream.WsApiClient.__name__, "basic": basic,
                          "urllib3": urllib3.__version__ == metadata.version("urllib3"),
                          "unittest": unittest.TestCase.__name__,
                          "aiolimiter": aiolimiter.__version__ == metadata.version("aiolimiter")}))
    """)
    assert out == {"api": "CoreV1Api", "model": "V1Pod", "watch": "Watch", "pod": "web", "ndb": "NDB",
                   "session": "ClientSession", "aiohttp": True, "kubernetes_asyncio": True,
                   "stream": "WsApiClient", "basic": "Basic dTpw", "urllib3": True, "unittest": "TestCase",
                   "aiolimiter": True}


def test_a_node_with_a_certificate_checks_and_schedules_its_rotation_without_cryptography(tmp_path):
    """kubeadm's layout after init: kubelet.conf names kubelet-client-current.pem, rotateCertificates
    on. The start's credential check, the client made with the pair, and the rotation's first
    decision (the certificate still names the node; its deadline) load no cryptography: it is
    8 MiB of RSS for as long as the agent runs, and needed only to make a key or a CSR."""
    from pykubelet.kube.certstore import CertStore
    from pykubelet.kube.csr_keys import key_pem_of, new_key, node_subject

    key = new_key()
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(node_subject("n1")).issuer_name(node_subject("n1"))
            .public_key(key.public_key()).serial_number(1).not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=365)).sign(key, hashes.SHA256()))
    cert_pem = cert.public_bytes(serialization.Encoding.PEM)
    CertStore(str(tmp_path / "pki")).save(cert_pem, key_pem_of(key))
    current = tmp_path / "pki" / "kubelet-client-current.pem"
    (tmp_path / "kubelet.conf").write_text(KUBECONFIG.replace("server: \"http://127.0.0.1:%d\"", "server: https://127.0.0.1:6443")
                                            .replace("{token: the-token}", f"{{client-certificate: {current}, client-key: {current}}}"))
    out = _run(f"""
        import asyncio, json, random, sys, time
        from pykubelet.config.settings import ClusterSettings
        from pykubelet.kube import bootstrap, csr
        from pykubelet.kube.certstore import CertStore
        from pykubelet.kube.client import KubeClient
        from pykubelet.kube.rotation import ClientCertificateRotation, rotation_deadline

        async def main():
            cluster = ClusterSettings(kubeconfig="{tmp_path}/kubelet.conf", cert_dir="{tmp_path}/pki",
                                      rotate_certificates=True)
            credentials = await bootstrap.node_credentials(cluster, "n1", "test")
            kube = await KubeClient.from_kubeconfig(credentials.kubeconfig, client_pem=credentials.client_pem)
            try:
                store = CertStore(cluster.cert_dir)
                ClientCertificateRotation(kube, store, "n1")
                pair = store.current()
                deadline = rotation_deadline(pair, random.Random(1))
            finally:
                await kube.close()
            return {{"rotate": credentials.rotate, "names_the_node": csr.satisfies(pair.cert, "n1", csr.CLIENT),
                    "deadline_in_days": (deadline - time.time()) / 86400,
                    "cryptography": [m for m in sys.modules if m.startswith("cryptography")]}}
        print(json.dumps(asyncio.run(main())))
    """)
    assert out["rotate"] is True and out["names_the_node"] is True
    assert 0.7 * 365 - 1 < out["deadline_in_days"] < 0.9 * 365
    assert out["cryptography"] == []
