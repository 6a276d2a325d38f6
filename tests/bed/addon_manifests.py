"""The add-ons' manifests as their projects ship them, with the one change this machine forces.

Nothing can be pulled from a registry here, so every container gets ``imagePullPolicy: Never``:
the images are the ones tests/bed/build-addons.sh imported, and a node that lacks one reports
ErrImageNeverPull at once instead of retrying a pull that cannot succeed. Everything else,
comments and layout included, is left as shipped: the policy is edited in the text, not by
re-serialising the YAML.
"""
from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

PULL_POLICY = "Never"
# `image: X` as a mapping key, possibly the first key of a list item (`- image: X`).
IMAGE_LINE = re.compile(r"^(?P<indent> *)(?P<item>- )?image: *\S")
POLICY_LINE = re.compile(r"^(?P<lead> *(?:- )?)imagePullPolicy:.*$")


@dataclass(frozen=True)
class Manifest:
    file_name: str  # under build/addons/
    source: str  # where the text comes from, said in the file's header
    text: str  # as shipped, or as made from what was shipped (see `changes`)
    changes: str = ""  # what else differs from the source, for the header: whole comment lines


def never_pull(text: str) -> str:
    """`text` with every container's imagePullPolicy set to Never (added where it is missing)."""
    lines = text.splitlines(keepends=True)
    out: list[str] = []
    for i, line in enumerate(lines):
        if policy := POLICY_LINE.match(line.rstrip("\n")):
            out.append(f"{policy['lead']}imagePullPolicy: {PULL_POLICY}\n")
            continue
        out.append(line)
        if image := IMAGE_LINE.match(line):
            key_indent = len(image["indent"]) + len(image["item"] or "")
            if not _has_policy(lines, i, key_indent):
                out.append(" " * key_indent + f"imagePullPolicy: {PULL_POLICY}\n")
    return "".join(out)


def _has_policy(lines: list[str], image_at: int, key_indent: int) -> bool:
    """Whether the mapping holding the `image:` key at `image_at` also has an imagePullPolicy."""
    start = image_at
    while not _starts_item(lines[start], key_indent) and start > 0:
        # Backwards, the mapping starts at its `- ` item line, or after a less indented line.
        prev = lines[start - 1]
        if prev.strip() and not prev.lstrip().startswith("#") and _indent(prev) < key_indent \
                and not _starts_item(prev, key_indent):
            break
        start -= 1
    end = image_at + 1
    while end < len(lines):
        # Forwards, it ends before a less indented line or the next item.
        line = lines[end]
        if line.strip() and not line.lstrip().startswith("#") and \
                (_indent(line) < key_indent or _starts_item(line, key_indent)):
            break
        end += 1
    return any(line[key_indent:].startswith("imagePullPolicy:") and
               (_indent(line) == key_indent or _starts_item(line, key_indent))
               for line in lines[start:end])


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _starts_item(line: str, key_indent: int) -> bool:
    return key_indent >= 2 and line.startswith(" " * (key_indent - 2) + "- ")


def header(manifest: Manifest) -> str:
    return (f"# Written by `make addons` (tests/bed/build-addons.sh) from {manifest.source}.\n"
            f"# Changed: imagePullPolicy: {PULL_POLICY} on every container (no registry is reachable\n"
            "# here; the images are built locally under these names)."
            + (" Nothing else.\n" if not manifest.changes else "\n" + manifest.changes))


def write(manifest: Manifest, directory: Path) -> bool:
    """Write the manifest into `directory`, unless the file there already says the same; whether
    it wrote."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / manifest.file_name
    text = header(manifest) + never_pull(manifest.text)
    if path.is_file() and path.read_text() == text:
        return False
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)
    return True


def images_in(text: str) -> list[str]:
    """The image references a manifest names, in order, each once."""
    found = [line.split("image:", 1)[1].strip().strip("'\"") for line in text.splitlines()
             if IMAGE_LINE.match(line)]
    return list(dict.fromkeys(found))


def coredns(kubeadm: Path, k8s_version: str) -> Manifest:
    """kubeadm's own CoreDNS objects, printed by its addon phase (a default ClusterConfiguration:
    service CIDR 10.96.0.0/12, so the kube-dns Service is 10.96.0.10, domain cluster.local, as
    the test control plane of `make cluster` uses)."""
    text = _run([str(kubeadm), "init", "phase", "addon", "coredns", "--print-manifest",
                 "--kubernetes-version", k8s_version])
    return Manifest("coredns.yaml", f"`kubeadm init phase addon coredns --print-manifest` ({k8s_version})", text)


# kubeadm's kube-proxy DaemonSet turned into pykubelet proxy's: each (pattern, replacement, how
# many times kubeadm's text has it). Its own name and labels, so it can run beside or instead of
# kubeadm's kube-proxy without the two DaemonSets claiming each other's pods; the same
# ServiceAccount, mounts, privileges and arguments, since `pykubelet proxy` reads the same
# KubeProxyConfiguration and kubeconfig (with its tokenFile) from the same ConfigMap.
PROXY_DAEMONSET_EDITS = (
    (r"^(?P<i> *)k8s-app: kube-proxy$", r"\g<i>k8s-app: pykubelet-proxy", 3),
    (r"^  name: kube-proxy$", "  name: pykubelet-proxy", 1),  # metadata.name: the only key at indent 2
    (r"^(?P<i> *)- /usr/local/bin/kube-proxy$", r"\g<i>- /usr/local/bin/pykubelet\n\g<i>- proxy", 1),
)
PROXY_CHANGES = """\
# The DaemonSet is named and labelled pykubelet-proxy, runs the pykubelet image and its command is
# `pykubelet proxy` with kube-proxy's arguments. kubeadm's ConfigMap kube-system/kube-proxy is left
# out: printed without a cluster it names a placeholder apiserver, and the cluster's own (written
# by kubeadm's kube-proxy phase) holds the real endpoint and pod CIDR; the DaemonSet mounts that.
"""


def pykubelet_proxy(kubeadm: Path, k8s_version: str, image: str) -> Manifest:
    """kubeadm's kube-proxy objects (`kubeadm init phase addon kube-proxy --print-manifest`) with
    the DaemonSet running `pykubelet proxy` from `image` (see PROXY_CHANGES)."""
    source = f"`kubeadm init phase addon kube-proxy --print-manifest` ({k8s_version})"
    text = _run([str(kubeadm), "init", "phase", "addon", "kube-proxy", "--print-manifest",
                 "--kubernetes-version", k8s_version])
    return Manifest("pykubelet-proxy.yaml", source, as_pykubelet_proxy(text, image, source), PROXY_CHANGES)


def as_pykubelet_proxy(text: str, image: str, source: str = "kubeadm's output") -> str:
    """kubeadm's kube-proxy manifest without its ConfigMap and with its DaemonSet edited; a
    SystemExit naming `source` and the edit if kubeadm's text is not what the edits expect."""
    documents = [d for d in re.split(r"^---\n", text, flags=re.M) if d.strip()]
    kept = []
    for document in documents:
        kind = re.search(r"^kind: *(\S+)$", document, flags=re.M)
        if kind and kind[1] == "ConfigMap":
            continue
        if kind and kind[1] == "DaemonSet":
            document = _edit(document, source, (*PROXY_DAEMONSET_EDITS, (
                r"^(?P<i> *)image: *\S+$", lambda m: f"{m['i']}image: {image}", 1)))
        kept.append(document)
    if sum("kind: DaemonSet" in d for d in kept) != 1:
        raise SystemExit(f"addon_manifests.py: {source}: want exactly one DaemonSet")
    return "---\n" + "---\n".join(kept)


def _edit(document: str, source: str, edits) -> str:
    for pattern, replacement, want in edits:
        document, found = re.subn(pattern, replacement, document, flags=re.M)
        if found != want:
            raise SystemExit(f"addon_manifests.py: {source}: the DaemonSet has {found} lines matching "
                             f"{pattern!r}, want {want}: kubeadm's manifest changed, review PROXY_DAEMONSET_EDITS")
    return document


# The flannel CNI plugin built here is the one of containernetworking/plugins v0.9.1 (the module
# proxy serves no flannel-io/cni-plugin), which speaks CNI up to 0.4.0; the release's network
# config asks for 1.0.0 (flannel's own plugin speaks it). Nothing in the config needs 1.0.0.
FLANNEL_CNI_VERSION = "0.4.0"


def flannel(source: Path, module: str) -> Manifest:
    """The release's manifest, from its module (`source` is where Go unpacked `module`), with the
    CNI version its network config asks for lowered to what the plugin built here speaks."""
    text = (source / "Documentation" / "kube-flannel.yml").read_text()
    text, found = re.subn(r'^(?P<i> *)"cniVersion": "[0-9.]+",$', lambda m: f'{m["i"]}"cniVersion": "{FLANNEL_CNI_VERSION}",',
                          text, flags=re.M)
    if found != 1:
        raise SystemExit(f"addon_manifests.py: {module}: kube-flannel.yml has {found} cniVersion lines, want 1")
    return Manifest("kube-flannel.yml", f"{module}: Documentation/kube-flannel.yml", text,
                    changes=f"# cni-conf.json: cniVersion {FLANNEL_CNI_VERSION}, the newest the flannel CNI plugin built "
                            "here speaks (docs/addons.md)\n")


def metrics_server(source: Path, module: str, kubectl: Path) -> Manifest:
    """The release's components.yaml, made as its Makefile's release-manifests target makes it."""
    text = _run([str(kubectl), "kustomize", str(source / "manifests" / "overlays" / "release")])
    return Manifest("metrics-server.yaml",
                    f"{module}: `kubectl kustomize manifests/overlays/release` (the release's components.yaml)", text)


def _run(cmd: list[str]) -> str:
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"addon_manifests.py: `{' '.join(cmd)}` failed (rc={r.returncode}):\n{r.stderr.strip()}")
    return r.stdout
