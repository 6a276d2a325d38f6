"""csi-driver-host-path's deployment, for build/addons/csi-hostpath.yaml.

The driver's own manifests are read where Kubernetes keeps its copy of them for the storage e2e
tests (k8s.io/kubernetes's test/e2e/testing-manifests/storage-csi/hostpath, refreshed from the
driver's deploy/kubernetes-latest): the CSIDriver object, the ServiceAccount with its bindings,
and the StatefulSet that runs the driver beside its sidecars. Three edits, each checked against
the text so that a changed upstream file is an error naming it instead of a silently wrong
manifest:

* only the driver and the four sidecars built here are kept (node-driver-registrar,
  livenessprobe, external-attacher, external-provisioner); the health monitor, resizer,
  snapshotter and snapshot-metadata sidecars go, with their bindings and volumes;
* every image gets the tag of the driver release that build-addons.sh builds for;
* the release's example StorageClass, csi-hostpath-sc, is added.

The sidecars' RBAC (their ClusterRoles, Roles, ServiceAccounts) comes from each sidecar's own
module at the version built, as the driver's deploy script takes it from each sidecar's release.
Everything else, comments and layout included, is left as shipped.
"""
from __future__ import annotations

import re
import sys
import textwrap
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from addon_manifests import Manifest  # noqa: E402

FILE_NAME = "csi-hostpath.yaml"
DRIVER = "hostpath.csi.k8s.io"
K8S_COPY = "test/e2e/testing-manifests/storage-csi/hostpath/hostpath"
PLUGIN_FILE = "csi-hostpath-plugin.yaml"
DRIVERINFO_FILE = "csi-hostpath-driverinfo.yaml"
SIDECAR_RBAC = "deploy/kubernetes/rbac.yaml"  # in external-attacher's and external-provisioner's modules
IMAGE_REPOSITORY = "registry.k8s.io/sig-storage/"
KEPT_CONTAINERS = ("hostpath", "node-driver-registrar", "liveness-probe", "csi-attacher", "csi-provisioner")
DROPPED_CONTAINERS = ("csi-external-health-monitor-controller", "csi-resizer", "csi-snapshotter",
                      "csi-snapshot-metadata")
# The dropped sidecars' bindings, by their app.kubernetes.io/component label, and their volume.
DROPPED_COMPONENTS = ("health-monitor-controller-cluster-role", "health-monitor-controller-role",
                      "resizer-cluster-role", "resizer-role", "snapshotter-cluster-role", "snapshotter-role",
                      "snapshot-metadata-cluster-role")
DROPPED_VOLUMES = ("csi-snapshot-metadata-server-certs",)
# The StatefulSet's list items (containers, volumes) sit at this indent in the driver's file.
ITEM_INDENT = 8
# The driver release's examples/csi-storageclass.yaml, as the e2e test-driver file names it.
STORAGE_CLASS = f"""\
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: csi-hostpath-sc
provisioner: {DRIVER}
reclaimPolicy: Delete
volumeBindingMode: Immediate
allowVolumeExpansion: true
"""


def hostpath(k8s_source: Path, k8s_module: str, sidecar_sources: dict[str, Path], tags: dict[str, str]) -> Manifest:
    """The manifest from `k8s_source` (where Go unpacked `k8s_module`), the sidecars' modules
    (module@version -> where Go unpacked it) and `tags` (image name -> tag)."""
    copy = k8s_source / K8S_COPY
    where = f"{k8s_module}: {K8S_COPY}/{PLUGIN_FILE}"
    parts = [(f"{k8s_module}: {K8S_COPY}/{DRIVERINFO_FILE}", (copy / DRIVERINFO_FILE).read_text())]
    parts += [(f"{module}: {SIDECAR_RBAC}", (source / SIDECAR_RBAC).read_text())
              for module, source in sidecar_sources.items()]
    parts += [(where + " (edited, see above)", plugin((copy / PLUGIN_FILE).read_text(), tags, where)),
              ("the driver release's examples/csi-storageclass.yaml", STORAGE_CLASS)]
    text = "".join(f"---\n# From {origin}\n{body.strip(chr(10))}\n" for origin, body in parts)
    source = (f"csi-driver-host-path's manifests as {k8s_module} ships them ({K8S_COPY}) and the "
              f"sidecars' {SIDECAR_RBAC} ({', '.join(sidecar_sources)})")
    return Manifest(FILE_NAME, source, text, changes=changes(tags))


def changes(tags: dict[str, str]) -> str:
    """The header's lines on what else differs from the sources."""
    said = (f"The StatefulSet keeps only the containers {', '.join(KEPT_CONTAINERS)}: the images built "
            f"here. The {', '.join(DROPPED_CONTAINERS)} containers, their bindings and their volume are left "
            f"out. Images tagged as the driver's release runs them: "
            f"{', '.join(f'{name}:{tag}' for name, tag in tags.items())}. Added: the StorageClass csi-hostpath-sc.")
    return "".join(f"# {line}\n" for line in textwrap.wrap(said, 96))


def plugin(text: str, tags: dict[str, str], source: str) -> str:
    """The driver's ServiceAccount, bindings and StatefulSet, edited as the module docstring says;
    a SystemExit naming `source` and what did not fit if the text is not as expected."""
    kept = [doc for doc in re.split(r"^---\n", text, flags=re.M)
            if doc.strip() and _component(doc) not in DROPPED_COMPONENTS]
    statefulsets = [i for i, doc in enumerate(kept) if re.search(r"^kind: StatefulSet$", doc, flags=re.M)]
    if len(statefulsets) != 1:
        raise SystemExit(f"addon_csi.py: {source}: {len(statefulsets)} StatefulSets, want 1")
    statefulset = drop_items(kept[statefulsets[0]], (*DROPPED_CONTAINERS, *DROPPED_VOLUMES), source)
    kept[statefulsets[0]] = retag(statefulset, tags, source)
    left = re.findall(rf"^ {{{ITEM_INDENT}}}- name: (\S+)$", kept[statefulsets[0]], flags=re.M)
    if tuple(left) != KEPT_CONTAINERS:
        raise SystemExit(f"addon_csi.py: {source}: the StatefulSet's containers are {left}, want {list(KEPT_CONTAINERS)}")
    return "---\n".join(kept)


def _component(document: str) -> str | None:
    found = re.search(r"^ +app\.kubernetes\.io/component: *(\S+)$", document, flags=re.M)
    return found[1] if found else None


def drop_items(document: str, names: tuple[str, ...], source: str) -> str:
    """`document` without the list items `- name: NAME` at ITEM_INDENT for each of `names`: an
    item runs to the next line (not blank) indented no deeper than its dash."""
    lines = document.splitlines(keepends=True)
    out: list[str] = []
    dropping = False
    found = set()
    for line in lines:
        indent = len(line) - len(line.lstrip(" "))
        if dropping and line.strip() and indent <= ITEM_INDENT:
            dropping = False
        item = re.match(rf"^ {{{ITEM_INDENT}}}- name: (\S+)$", line.rstrip("\n"))
        if item and item[1] in names:
            dropping = True
            found.add(item[1])
        if not dropping:
            out.append(line)
    if missing := [name for name in names if name not in found]:
        raise SystemExit(f"addon_csi.py: {source}: no item named {', '.join(missing)} in the StatefulSet")
    return "".join(out)


def retag(document: str, tags: dict[str, str], source: str) -> str:
    """Each `image: registry.k8s.io/sig-storage/NAME:TAG` with the tag `tags` gives NAME; every
    image must have one and every tag must be used."""
    used = []

    def new_tag(match: re.Match) -> str:
        name = match["name"]
        if name not in tags:
            raise SystemExit(f"addon_csi.py: {source}: no tag given for the image {IMAGE_REPOSITORY}{name}")
        used.append(name)
        return f"{match['lead']}{IMAGE_REPOSITORY}{name}:{tags[name]}"

    pattern = rf"^(?P<lead> *(?:- )?image: *){re.escape(IMAGE_REPOSITORY)}(?P<name>[^:\s]+):\S+$"
    document = re.sub(pattern, new_tag, document, flags=re.M)
    if sorted(used) != sorted(tags):
        raise SystemExit(f"addon_csi.py: {source}: the StatefulSet runs the images {used}, want one each of {sorted(tags)}")
    return document


def parse_tags(text: str) -> dict[str, str]:
    """`NAME=TAG NAME=TAG ...` (build-addons.sh's ADDONS_CSI_TAGS) as a dict, in order."""
    pairs = [word.split("=", 1) for word in text.split()]
    if not pairs or any(len(pair) != 2 or not all(pair) for pair in pairs):
        raise SystemExit(f"addon_csi.py: ADDONS_CSI_TAGS={text!r}: want NAME=TAG words")
    return dict(pairs)
