"""CNI client: runs the standard CNI plugin binaries per the CNI spec (1.0.0, 1.1.0)."""

from pykubelet.cni.client import CNI, Attachment
from pykubelet.cni.config import ConfigError, NetworkConfigList, load_conflist, parse_conflist
from pykubelet.cni.errors import CNIError, PluginNotFound, PluginTimeout
from pykubelet.cni.result import Interface, IPConfig, Result, Route, parse_result

__all__ = ["CNI", "Attachment", "ConfigError", "NetworkConfigList", "load_conflist", "parse_conflist",
           "CNIError", "PluginNotFound", "PluginTimeout", "Interface", "IPConfig", "Result", "Route",
           "parse_result"]
