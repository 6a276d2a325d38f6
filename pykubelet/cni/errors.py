"""CNI errors: a plugin's error object ({"code", "msg", "details"}) or a failure to run it.

The codes are the spec's well-known ones (0-99); plugins use 100 and up for their own.
Code 0 means the plugin gave no code: it could not be found, timed out, or printed no error object.
"""

from __future__ import annotations

INCOMPATIBLE_CNI_VERSION = 1
UNSUPPORTED_FIELD = 2
UNKNOWN_CONTAINER = 3
INVALID_ENVIRONMENT_VARIABLES = 4
IO_FAILURE = 5
DECODING_FAILURE = 6
INVALID_NETWORK_CONFIG = 7
TRY_AGAIN_LATER = 11
PLUGIN_NOT_AVAILABLE = 50
PLUGIN_NOT_AVAILABLE_LIMITED_CONNECTIVITY = 51


class CNIError(Exception):
    """A plugin failed. `plugin` is its type, `command` ADD/DEL/CHECK/GC/STATUS/VERSION."""

    def __init__(self, plugin: str, command: str, code: int, msg: str, details: str = ""):
        self.plugin, self.command = plugin, command
        self.code, self.msg, self.details = code, msg, details
        text = f"cni plugin {plugin} {command} failed"
        if code:
            text += f" (code {code})"
        text += f": {msg}"
        if details:
            text += f": {details}"
        super().__init__(text)


class PluginNotFound(CNIError):
    """No executable named after the plugin's "type" in any of the bin dirs."""


class PluginTimeout(CNIError):
    """The plugin ran longer than the client's timeout and was killed."""
