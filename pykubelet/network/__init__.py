"""The pod network: CNI through the agent's shim or through containerd, podCIDR, routes."""
