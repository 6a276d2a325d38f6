"""pykubelet: a small, readable kubelet-like node agent."""

__version__ = "0.1.0"

# The Kubernetes minor version we follow (probes' and hooks' User-Agent: kube-probe/1.36).
KUBE_MINOR_VERSION = "1.36"
# What the Node reports as kubeletVersion: the Kubernetes API level we follow, marked as ours.
KUBELET_VERSION = f"v{KUBE_MINOR_VERSION}.0-pykubelet.{__version__}"
