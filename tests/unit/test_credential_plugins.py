"""Credential provider plugins: the CredentialProviderConfig checked as the kubelet checks it, the
exec protocol (request on stdin, response on stdout, a timeout), and the response cache."""

from __future__ import annotations

import asyncio
import json
import pathlib
import sys

import pytest

from pykubelet.runtime.credentials.plugin_config import CredentialProviderConfigError, ProviderSpec, load
from pykubelet.runtime.credentials.plugins import CredentialPlugins, ExecProvider

V1 = "credentialprovider.kubelet.k8s.io/v1"


def write_plugin(bin_dir: pathlib.Path, name: str, response: dict | str, sleep: float = 0.0, exit_code: int = 0):
    """A plugin that records each request (one line per run) and answers `response`."""
    body = response if isinstance(response, str) else json.dumps(response)
    script = bin_dir / name
    script.write_text(f"""#!{sys.executable}
import sys, time
request = sys.stdin.read()
with open({str(bin_dir / (name + '.requests'))!r}, "a") as f:
    f.write(request.replace("\\n", " ") + "\\n")
time.sleep({sleep})
sys.stdout.write({body!r})
sys.stderr.write("stderr of the plugin")
sys.exit({exit_code})
""")
    script.chmod(0o755)
    return bin_dir / (name + ".requests")


def requests(log: pathlib.Path) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def response(auth: dict, key_type: str = "Image", duration: str | None = "5m") -> dict:
    out = {"apiVersion": V1, "kind": "CredentialProviderResponse", "cacheKeyType": key_type, "auth": auth}
    if duration is not None:
        out["cacheDuration"] = duration
    return out


def spec(name: str = "ecr", match: tuple[str, ...] = ("*.example.com",), default: float = 60.0) -> ProviderSpec:
    return ProviderSpec(name, match, default, V1)


async def test_the_plugin_gets_the_request_and_its_answer_is_cached_per_image(tmp_path):
    log = write_plugin(tmp_path, "ecr", response({"reg.example.com": {"username": "u", "password": "p"}}))
    clock = [0.0]
    plugins = CredentialPlugins([ExecProvider(spec(), str(tmp_path), clock=lambda: clock[0])])
    credentials = await plugins.lookup("reg.example.com/team/app")
    assert [(c.username, c.password, c.source) for c in credentials] == [("u", "p", 'plugin "ecr"')]
    assert requests(log) == [{"apiVersion": V1, "kind": "CredentialProviderRequest",
                              "image": "reg.example.com/team/app"}]
    await plugins.lookup("reg.example.com/team/app")
    assert len(requests(log)) == 1  # cached
    await plugins.lookup("reg.example.com/team/other")
    assert len(requests(log)) == 2  # cacheKeyType Image: another image runs it again
    clock[0] = 301.0
    await plugins.lookup("reg.example.com/team/app")
    assert len(requests(log)) == 3  # expired after cacheDuration
    assert await plugins.lookup("quay.io/team/app") == [] and len(requests(log)) == 3  # matchImages


@pytest.mark.parametrize("key_type, duration, default, runs", [
    ("Registry", "5m", 60.0, 1), ("Global", "5m", 60.0, 1), ("Image", "5m", 60.0, 2),
    ("Image", "0s", 60.0, 3),  # "0s": never cached
    ("Image", None, 60.0, 2), ("Image", None, 0.0, 3),  # no duration: the provider's default
])
async def test_cache_key_types_and_durations(tmp_path, key_type, duration, default, runs):
    log = write_plugin(tmp_path, "p", response({"*.example.com": {"username": "u", "password": "p"}},
                                                key_type, duration))
    provider = ExecProvider(spec("p", default=default), str(tmp_path))
    for image in ("a.example.com/x", "a.example.com/x", "a.example.com/y"):
        assert await provider.provide(image)
    assert len(requests(log)) == runs


async def test_concurrent_requests_for_one_image_share_one_run(tmp_path):
    log = write_plugin(tmp_path, "p", response({"a.example.com": {"username": "u", "password": "p"}},
                                                duration="0s"), sleep=0.3)
    provider = ExecProvider(spec("p"), str(tmp_path))
    results = await asyncio.gather(*(provider.provide("a.example.com/x") for _ in range(5)))
    assert all(r == results[0] and r for r in results)
    assert len(requests(log)) == 1


@pytest.mark.parametrize("answer, exit_code", [
    ("not json", 0),
    (json.dumps(response({}) | {"apiVersion": "credentialprovider.kubelet.k8s.io/v1beta1"}), 0),
    (json.dumps(response({}, key_type="Forever")), 0),
    (json.dumps(response({"a.example.com": {"username": 1}})), 0),
    (json.dumps(response({"a.example.com": {"username": "u", "password": "p"}})), 1),
])
async def test_a_failing_plugin_gives_nothing_and_the_pull_goes_on(tmp_path, answer, exit_code):
    write_plugin(tmp_path, "p", answer, exit_code=exit_code)
    assert await ExecProvider(spec("p"), str(tmp_path)).provide("a.example.com/x") == []


async def test_a_plugin_that_hangs_is_stopped_at_the_timeout(tmp_path):
    write_plugin(tmp_path, "p", response({}), sleep=30)
    provider = ExecProvider(spec("p"), str(tmp_path), timeout=0.5)
    assert await asyncio.wait_for(provider.provide("a.example.com/x"), 10) == []


async def test_plugins_entries_are_matched_together_earlier_plugins_first(tmp_path):
    write_plugin(tmp_path, "first", response({"a.example.com": {"username": "first", "password": "1"}}))
    write_plugin(tmp_path, "second", response({"a.example.com/team": {"username": "second", "password": "2"},
                                               "a.example.com": {"username": "second-host", "password": "3"}}))
    plugins = CredentialPlugins([ExecProvider(spec("first"), str(tmp_path)),
                                 ExecProvider(spec("second"), str(tmp_path))])
    assert [c.username for c in await plugins.lookup("a.example.com/team/app")] == ["second", "first", "second-host"]


CONFIG = {"apiVersion": "kubelet.config.k8s.io/v1", "kind": "CredentialProviderConfig",
          "providers": [{"name": "ecr", "matchImages": ["*.example.com", "reg.io:5000/team"],
                         "defaultCacheDuration": "12h", "apiVersion": V1, "args": ["get-credentials"],
                         "env": [{"name": "REGION", "value": "eu"}]}]}


def test_the_config_file_and_a_directory_of_them(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    write_plugin(bin_dir, "ecr", "{}")
    write_plugin(bin_dir, "gcr", "{}")
    (tmp_path / "config.yaml").write_text(json.dumps(CONFIG))
    [provider] = load(str(tmp_path / "config.yaml"), str(bin_dir))
    assert provider == ProviderSpec("ecr", ("*.example.com", "reg.io:5000/team"), 43200.0, V1, ("get-credentials",),
                                    (("REGION", "eu"),))
    conf_dir = tmp_path / "conf.d"
    conf_dir.mkdir()
    (conf_dir / "b.json").write_text(json.dumps(CONFIG))
    second = json.loads(json.dumps(CONFIG))
    second["providers"][0]["name"] = "gcr"
    (conf_dir / "a.yml").write_text(json.dumps(second))
    (conf_dir / "ignored.txt").write_text("not a config")
    assert [p.name for p in load(str(conf_dir), str(bin_dir))] == ["gcr", "ecr"]


@pytest.mark.parametrize("change, error", [
    ({"name": "a/b"}, "providers[0].name: Invalid value: \"a/b\": provider name cannot contain '/'"),
    ({"name": ".."}, "providers[0].name: Invalid value: \"..\": provider name cannot be '..'"),
    ({"matchImages": []}, "providers[0].matchImages: Required value"),
    ({"defaultCacheDuration": None}, "providers[0].defaultCacheDuration: Required value"),
    ({"defaultCacheDuration": "-1m"}, "providers[0].defaultCacheDuration: must be greater than or equal to 0"),
    ({"apiVersion": "v9"}, "providers[0].apiVersion: Unsupported value: \"v9\""),
    ({"tokenAttributes": {"serviceAccountTokenAudience": "x"}}, "providers[0].tokenAttributes: service account"),
    ({"name": "missing"}, "plugin binary executable"),
])
def test_a_bad_config_is_refused_naming_the_file_and_field(tmp_path, change, error):
    write_plugin(tmp_path, "ecr", "{}")
    config = json.loads(json.dumps(CONFIG))
    config["providers"][0].update(change)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    with pytest.raises(CredentialProviderConfigError) as e:
        load(str(path), str(tmp_path))
    assert error in str(e.value)
    if "binary" not in error:
        assert str(e.value).startswith(str(path))


def test_the_config_needs_its_kind_and_the_bin_dir(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**CONFIG, "kind": "KubeletConfiguration"}))
    with pytest.raises(CredentialProviderConfigError, match="wrong Kind"):
        load(str(path), str(tmp_path))
    with pytest.raises(CredentialProviderConfigError, match="plugin binary directory .* did not exist"):
        load(str(path), str(tmp_path / "nowhere"))


async def test_a_config_the_agent_cannot_use_stops_its_start(tmp_path):
    from pykubelet.assembly.parts import credential_plugins
    from pykubelet.config import Settings
    from pykubelet.util.tasks import LoopDied

    settings = Settings()
    assert await credential_plugins(settings) is None
    settings.runtime.image_credential_provider_config = str(tmp_path / "missing.yaml")
    settings.runtime.image_credential_provider_bin_dir = str(tmp_path)
    with pytest.raises(LoopDied, match="Failed to register CRI auth plugins: .*missing.yaml: cannot read the credential provider config"):
        await credential_plugins(settings)
    write_plugin(tmp_path, "ecr", "{}")
    (tmp_path / "missing.yaml").write_text(json.dumps(CONFIG))
    plugins = await credential_plugins(settings)
    assert [p.spec.name for p in plugins.providers] == ["ecr"]
