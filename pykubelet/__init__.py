"""pykubelet: a small, readable kubelet-like node agent."""

__version__ = "0.1.0"

# What the Node reports as kubeletVersion: the Kubernetes API level we follow, marked as ours.
KUBELET_VERSION = f"v1.36.0-pykubelet.{__version__}"
