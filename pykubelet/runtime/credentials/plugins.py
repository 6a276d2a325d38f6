"""Credential provider plugins, run as the kubelet runs them: for an image one of its matchImages
globs matches, <bin dir>/<name> <args> gets a CredentialProviderRequest on stdin and answers a
CredentialProviderResponse on stdout, within a minute. The response's `auth` map (registry glob ->
username and password) is cached per image, per registry or once for all (cacheKeyType), for
cacheDuration (absent: the provider's defaultCacheDuration; zero: not cached). Concurrent requests
for one image share one run. A plugin that fails is logged and gives nothing: the pull goes on
with the other credentials. Every plugin's entries go into one keyring, earlier plugins first.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from typing import Callable

from pykubelet.runtime.credentials.docker_config import Credential, DockerConfigError, registry_entries
from pykubelet.runtime.credentials.image_refs import registry_of
from pykubelet.runtime.credentials.keyring import Keyring, urls_match
from pykubelet.runtime.credentials.plugin_config import ProviderSpec
from pykubelet.util.durations import parse_duration
from pykubelet.util.log import get_logger
from pykubelet.util.timeouts import within

log = get_logger(__name__)

EXEC_TIMEOUT = 60.0
GLOBAL_CACHE_KEY = "global"
MAX_OUTPUT_BYTES = 1 << 20
Entries = list[tuple[str, Credential]]


class PluginError(Exception):
    """The plugin gave no usable answer; the message never holds its stdout (credentials)."""


def parse_response(stdout: bytes, spec: ProviderSpec, source: str) -> tuple[str, float | None, Entries]:
    """(cacheKeyType, cacheDuration seconds or None for the default, entries) of a response."""
    try:
        response = json.loads(stdout)
    except ValueError:
        raise PluginError("error decoding credential provider plugin response from stdout") from None
    if not isinstance(response, dict):
        raise PluginError("error decoding credential provider plugin response from stdout")
    if response.get("apiVersion") != spec.api_version:
        raise PluginError(f"apiVersion from credential plugin response did not match expected apiVersion:"
                          f"{spec.api_version}, actual apiVersion:{response.get('apiVersion')}")
    if response.get("kind") != "CredentialProviderResponse":
        raise PluginError(f"failed to decode CredentialProviderResponse, unexpected Kind: {response.get('kind')!r}")
    key_type = response.get("cacheKeyType")
    if key_type not in ("Image", "Registry", "Global"):
        raise PluginError(f"credential provider plugin did not return a valid cacheKeyType: {key_type}")
    duration = response.get("cacheDuration")
    try:
        seconds = None if duration is None else parse_duration(duration)
        entries = registry_entries(response.get("auth"), "auth", source)
    except (ValueError, DockerConfigError) as e:
        raise PluginError(f"error decoding credential provider plugin response from stdout: {e}") from None
    return key_type, seconds, entries


class ExecProvider:
    def __init__(self, spec: ProviderSpec, bin_dir: str, clock: Callable[[], float] = time.monotonic,
                 timeout: float = EXEC_TIMEOUT):
        self.spec, self.program = spec, os.path.join(bin_dir, spec.name)
        self.source = f'plugin "{spec.name}"'
        self.clock, self.timeout = clock, timeout
        self._cache: dict[str, tuple[float, Entries]] = {}  # cache key -> (expires at, entries)
        self._running: dict[str, asyncio.Task[Entries]] = {}

    def _cached(self, image: str) -> Entries | None:
        now = self.clock()
        for key in [k for k, (expires, _) in self._cache.items() if expires < now]:
            del self._cache[key]
        for key in (image, registry_of(image), GLOBAL_CACHE_KEY):
            if key in self._cache:
                return self._cache[key][1]
        return None

    async def provide(self, image: str) -> Entries:
        """The plugin's entries for a qualified repository; empty when it does not apply or fails."""
        if not any(urls_match(glob, image) for glob in self.spec.match_images):
            return []
        cached = self._cached(image)
        if cached is not None:
            return cached
        task = self._running.get(image)
        if task is None:
            task = self._running[image] = asyncio.create_task(self._fetch(image))
            task.add_done_callback(lambda _: self._running.pop(image, None))
        try:
            return await asyncio.shield(task)  # one waiter cancelled leaves the run to the others
        except PluginError as e:
            log.error("Failed to provide credentials for image", provider=self.spec.name, image=image, err=str(e))
            return []

    async def _fetch(self, image: str) -> Entries:
        key_type, seconds, entries = parse_response(await self._run(image), self.spec, self.source)
        if seconds is None:
            seconds = self.spec.default_cache_duration
        if seconds > 0:
            key = {"Image": image, "Registry": registry_of(image), "Global": GLOBAL_CACHE_KEY}[key_type]
            self._cache[key] = (self.clock() + seconds, entries)
        return entries

    async def _run(self, image: str) -> bytes:
        request = json.dumps({"apiVersion": self.spec.api_version, "kind": "CredentialProviderRequest",
                              "image": image})
        env = {**os.environ, **dict(self.spec.env)}  # the config's variables over the agent's
        try:
            process = await asyncio.create_subprocess_exec(
                self.program, *self.spec.args, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE, env=env)
        except OSError as e:
            raise PluginError(f"error execing credential provider plugin {self.spec.name} for image {image}: "
                              f"{e.strerror}") from None
        try:
            stdout, stderr = await within(process.communicate(request.encode()), self.timeout)
        except asyncio.TimeoutError:
            process.kill()
            await process.wait()
            raise PluginError(f"error execing credential provider plugin {self.spec.name} for image {image}: "
                              "context deadline exceeded") from None
        except BaseException:
            if process.returncode is None:  # cancelled: the plugin goes with the request
                process.kill()
                await process.wait()
            raise
        if process.returncode != 0:
            raise PluginError(f"error execing credential provider plugin {self.spec.name} for image {image}: "
                              f"exit status {process.returncode}: {stderr[:2000].decode(errors='replace')}")
        if len(stdout) > MAX_OUTPUT_BYTES:
            raise PluginError(f"credential provider plugin {self.spec.name} wrote more than {MAX_OUTPUT_BYTES} bytes")
        return stdout


class CredentialPlugins:
    """Every configured plugin, asked in order; their entries matched together as one keyring."""

    def __init__(self, providers: list[ExecProvider]):
        self.providers = providers

    async def lookup(self, repository: str) -> list[Credential]:
        keyring = Keyring()
        for provider in self.providers:
            keyring.add(await provider.provide(repository))
        return keyring.lookup(repository)


def plugins_from(specs: list[ProviderSpec], bin_dir: str) -> CredentialPlugins:
    return CredentialPlugins([ExecProvider(spec, bin_dir) for spec in specs])
