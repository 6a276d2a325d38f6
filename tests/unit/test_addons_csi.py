"""`make addons` writes build/addons/csi-hostpath.yaml: csi-driver-host-path's own deployment cut to
the driver and the sidecars built here, under the driver release's image tags, with the sidecars'
RBAC and the csi-hostpath-sc StorageClass; and packs each CSI program as upstream's image does."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.bed import addon_csi, addon_manifests, images_addons_csi

TAGS = {"hostpathplugin": "v1.17.1", "csi-node-driver-registrar": "v2.17.0", "livenessprobe": "v2.19.0",
        "csi-attacher": "v4.12.0", "csi-provisioner": "v6.3.0"}


def binding(component: str, role: str) -> str:
    return f"""\
kind: ClusterRoleBinding
metadata:
  labels:
    app.kubernetes.io/component: {component}
  name: csi-hostpathplugin-{component}
roleRef:
  name: {role}
"""


def container(name: str, image: str, extra: str = "") -> str:
    return (f"        - name: {name}\n          image: registry.k8s.io/sig-storage/{image}\n"
            f"          args:\n            - --csi-address=/csi/csi.sock\n{extra}\n")


# The driver's csi-hostpath-plugin.yaml, in its shape: a ServiceAccount, a binding per sidecar,
# and the StatefulSet with every sidecar and a volume only the snapshot-metadata sidecar uses.
PLUGIN = "---\n".join([
    "kind: ServiceAccount\nmetadata:\n  name: csi-hostpathplugin-sa\n",
    binding("attacher-cluster-role", "external-attacher-runner"),
    binding("resizer-cluster-role", "external-resizer-runner"),
    binding("snapshotter-role", "external-snapshotter-leaderelection"),
    "kind: StatefulSet\nmetadata:\n  name: csi-hostpathplugin\nspec:\n  template:\n    spec:\n      containers:\n"
    + container("hostpath", "hostpathplugin:v1.17.1", "          securityContext:\n            privileged: true")
    + container("csi-external-health-monitor-controller", "csi-external-health-monitor-controller:v0.17.0")
    + container("node-driver-registrar", "csi-node-driver-registrar:v2.16.0")
    + "        - name: liveness-probe\n          volumeMounts:\n          - mountPath: /csi\n            name: socket-dir\n"
      "          image: registry.k8s.io/sig-storage/livenessprobe:v2.18.0\n\n"
    + container("csi-attacher", "csi-attacher:v4.11.0")
    + container("csi-provisioner", "csi-provisioner:v6.1.1", "            # end csi-provisioner args")
    + container("csi-resizer", "csi-resizer:v2.1.0")
    + container("csi-snapshotter", "csi-snapshotter:v8.5.0")
    + container("csi-snapshot-metadata", "csi-snapshot-metadata:v0.2.0",
                "          volumeMounts:\n          - mountPath: /tmp/certificates\n            name: csi-snapshot-metadata-server-certs")
    + "        # end csi containers\n\n      volumes:\n"
      "        - hostPath:\n            path: /var/lib/kubelet/plugins/csi-hostpath\n          name: socket-dir\n"
      "        - name: csi-snapshot-metadata-server-certs\n          secret:\n            secretName: csi-snapshot-metadata-server-certs\n"
      "        # end csi volumes\n",
])


def statefulset(text: str) -> dict:
    return next(d for d in yaml.safe_load_all(text) if d and d["kind"] == "StatefulSet")


def test_only_the_driver_and_the_sidecars_built_here_are_kept_with_their_settings():
    spec = statefulset(addon_csi.plugin(PLUGIN, TAGS, "x"))["spec"]["template"]["spec"]
    assert [c["name"] for c in spec["containers"]] == list(addon_csi.KEPT_CONTAINERS)
    assert spec["containers"][0]["securityContext"] == {"privileged": True}
    assert [c["args"] for c in spec["containers"] if c["name"] != "liveness-probe"] == [["--csi-address=/csi/csi.sock"]] * 4
    assert [v["name"] for v in spec["volumes"]] == ["socket-dir"]


def test_every_image_gets_the_releases_tag():
    spec = statefulset(addon_csi.plugin(PLUGIN, TAGS, "x"))["spec"]["template"]["spec"]
    assert [c["image"] for c in spec["containers"]] == [f"registry.k8s.io/sig-storage/{name}:{tag}"
                                                        for name, tag in TAGS.items()]


def test_the_dropped_sidecars_bindings_go_and_the_rest_stay_as_shipped():
    text = addon_csi.plugin(PLUGIN, TAGS, "x")
    kinds = [(d["kind"], d["metadata"]["name"]) for d in yaml.safe_load_all(text) if d]
    assert kinds == [("ServiceAccount", "csi-hostpathplugin-sa"),
                     ("ClusterRoleBinding", "csi-hostpathplugin-attacher-cluster-role"),
                     ("StatefulSet", "csi-hostpathplugin")]
    assert "            # end csi-provisioner args\n" in text and "        # end csi containers\n" in text


@pytest.mark.parametrize("change, complaint", [
    (("- name: csi-resizer", "- name: csi-resizer2"), "no item named csi-resizer in the StatefulSet"),
    (("- name: csi-attacher", "- name: attacher"), r"the StatefulSet's containers are \[.*'attacher'"),
    (("csi-attacher:v4.11.0", "csi-attacher-ng:v1"), "no tag given for the image registry.k8s.io/sig-storage/csi-attacher-ng"),
    (("kind: StatefulSet", "kind: DaemonSet"), "0 StatefulSets, want 1"),
])
def test_an_upstream_file_the_edits_do_not_fit_is_an_error_naming_it(change, complaint):
    with pytest.raises(SystemExit, match="k8s 1.99: csi-hostpath-plugin.yaml: " + complaint):
        addon_csi.plugin(PLUGIN.replace(*change), TAGS, "k8s 1.99: csi-hostpath-plugin.yaml")


def test_a_tag_no_image_uses_is_an_error():
    with pytest.raises(SystemExit, match="want one each of"):
        addon_csi.plugin(PLUGIN, {**TAGS, "csi-resizer": "v2.2.1"}, "x")


def test_tags_are_read_from_name_equals_tag_words():
    assert addon_csi.parse_tags("csi-attacher=v4.12.0 livenessprobe=v2.19.0") == {"csi-attacher": "v4.12.0",
                                                                                  "livenessprobe": "v2.19.0"}
    for bad in ("", "csi-attacher", "csi-attacher= x=y"):
        with pytest.raises(SystemExit, match="ADDONS_CSI_TAGS"):
            addon_csi.parse_tags(bad)


def fake_sources(root: Path) -> tuple[Path, dict[str, Path]]:
    copy = root / "k8s" / addon_csi.K8S_COPY
    copy.mkdir(parents=True)
    (copy / addon_csi.PLUGIN_FILE).write_text(PLUGIN)
    (copy / addon_csi.DRIVERINFO_FILE).write_text("apiVersion: storage.k8s.io/v1\nkind: CSIDriver\nmetadata:\n"
                                                  "  name: hostpath.csi.k8s.io\n")
    sidecars = {}
    for runner in ("attacher", "provisioner"):
        rbac = root / runner / addon_csi.SIDECAR_RBAC
        rbac.parent.mkdir(parents=True)
        rbac.write_text(f"kind: ClusterRole\nmetadata:\n  name: external-{runner}-runner\n")
        sidecars[f"github.com/kubernetes-csi/external-{runner}@v9"] = root / runner
    return root / "k8s", sidecars


def test_the_manifest_holds_the_driver_the_sidecars_rbac_the_plugin_and_the_storage_class(tmp_path):
    k8s, sidecars = fake_sources(tmp_path)
    manifest = addon_csi.hostpath(k8s, "k8s.io/kubernetes@v1.99.0", sidecars, TAGS)
    assert addon_manifests.write(manifest, tmp_path / "addons")
    text = (tmp_path / "addons" / "csi-hostpath.yaml").read_text()
    docs = [d for d in yaml.safe_load_all(text) if d]
    assert [(d["kind"], d["metadata"]["name"]) for d in docs] == [
        ("CSIDriver", "hostpath.csi.k8s.io"), ("ClusterRole", "external-attacher-runner"),
        ("ClusterRole", "external-provisioner-runner"), ("ServiceAccount", "csi-hostpathplugin-sa"),
        ("ClusterRoleBinding", "csi-hostpathplugin-attacher-cluster-role"), ("StatefulSet", "csi-hostpathplugin"),
        ("StorageClass", "csi-hostpath-sc")]
    assert docs[-1]["provisioner"] == "hostpath.csi.k8s.io" and docs[-1]["volumeBindingMode"] == "Immediate"
    policies = {c["imagePullPolicy"] for c in statefulset(text)["spec"]["template"]["spec"]["containers"]}
    assert policies == {"Never"}
    header = text.split("\n---\n", 1)[0]
    assert "k8s.io/kubernetes@v1.99.0" in header and "github.com/kubernetes-csi/external-attacher@v9" in header
    assert "csi-snapshotter" in header and "csi-provisioner:v6.3.0" in header and "Nothing else" not in header


K8S_SOURCE = Path("/var/cache/pykubelet/go/mod/k8s.io/kubernetes@v1.36.3")


@pytest.mark.skipif(not (K8S_SOURCE / addon_csi.K8S_COPY).is_dir(), reason="k8s.io/kubernetes@v1.36.3 not downloaded")
def test_the_drivers_manifest_kubernetes_v1_36_3_ships_fits_the_edits():
    text = addon_csi.plugin((K8S_SOURCE / addon_csi.K8S_COPY / addon_csi.PLUGIN_FILE).read_text(), TAGS, "v1.36.3")
    spec = statefulset(text)["spec"]["template"]["spec"]
    assert [c["name"] for c in spec["containers"]] == list(addon_csi.KEPT_CONTAINERS)
    registrar = spec["containers"][1]
    assert "--kubelet-registration-path=/var/lib/kubelet/plugins/csi-hostpath/csi.sock" in registrar["args"]
    assert {v["name"] for v in spec["volumes"]} == {"socket-dir", "mountpoint-dir", "registration-dir", "plugins-dir",
                                                   "csi-data-dir", "dev-dir"}


def test_a_sidecar_image_is_its_program_at_the_root_as_upstreams_dockerfile_copies_it(tmp_path):
    binary = tmp_path / "csi-attacher"
    binary.write_bytes(b"\x7fELF attacher")
    spec = images_addons_csi.spec("csi-attacher", "registry.k8s.io/sig-storage/csi-attacher:v4.12.0", binary, tmp_path)
    assert spec.config["Entrypoint"] == ["/csi-attacher"] and "User" not in spec.config
    program = next(e for e in spec.layer(tmp_path) if e.path == "csi-attacher")
    assert program.data == b"\x7fELF attacher" and program.mode == 0o755


def test_the_hostpath_image_carries_the_tools_upstreams_alpine_image_installs():
    # losetup (Debian's mount), util-linux, coreutils, socat, tar; a shell from the Debian base.
    assert {"mount", "util-linux", "coreutils", "socat", "tar", "dash"} <= set(images_addons_csi.HOSTPATH_DEBS)


def test_the_image_is_named_after_the_reference_the_manifest_runs():
    assert images_addons_csi.base_name("registry.k8s.io/sig-storage/csi-node-driver-registrar:v2.17.0") == \
        "csi-node-driver-registrar"
