"""`make addons` writes the add-ons' manifests as shipped except for imagePullPolicy: Never on every
container (nothing can be pulled here), and packs CoreDNS with the file capability that lets its
non-root process bind port 53."""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import tarfile
import zipfile

import pytest
import yaml

from tests.bed import addon_manifests, images, images_addons, images_pykubelet

KUBEADM_STYLE = """\
spec:
  template:
    spec:
      containers:
      - name: coredns
        image: registry.k8s.io/coredns/coredns:v1.14.2
        imagePullPolicy: IfNotPresent
        args: [ "-conf", "/etc/coredns/Corefile" ]
"""

FLANNEL_STYLE = """\
      initContainers:
      - name: install-cni-plugin
        image: ghcr.io/flannel-io/flannel-cni-plugin:v1.9.1-flannel3
        command:
        - cp
      - name: install-cni
        # a comment between keys
        image: ghcr.io/flannel-io/flannel:v0.28.10
        command:
        - /opt/bin/install-conf
      containers:
      - image: ghcr.io/flannel-io/flannel:v0.28.10
        name: kube-flannel
"""


def policies(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if "imagePullPolicy" in line]


def test_an_existing_policy_becomes_never_in_place():
    out = addon_manifests.never_pull(KUBEADM_STYLE)
    assert out == KUBEADM_STYLE.replace("IfNotPresent", "Never")


def test_a_container_without_a_policy_gets_never_right_after_its_image():
    out = addon_manifests.never_pull(FLANNEL_STYLE).splitlines()
    assert policies("\n".join(out)) == ["imagePullPolicy: Never"] * 3
    for i, line in enumerate(out):
        if "image:" in line:
            key_column = line.index("image:")
            assert out[i + 1] == " " * key_column + "imagePullPolicy: Never"


def test_a_policy_written_before_the_image_is_not_doubled():
    text = "containers:\n- imagePullPolicy: Always\n  image: x:1\n  name: a\n- name: b\n  image: y:2\n"
    out = addon_manifests.never_pull(text)
    assert out == ("containers:\n- imagePullPolicy: Never\n  image: x:1\n  name: a\n"
                   "- name: b\n  image: y:2\n  imagePullPolicy: Never\n")


def test_only_the_pull_policy_changes():
    out = addon_manifests.never_pull(FLANNEL_STYLE)
    assert [line for line in out.splitlines() if "imagePullPolicy" not in line] == FLANNEL_STYLE.splitlines()


def test_the_images_a_manifest_names_are_listed_once_each_in_order():
    assert addon_manifests.images_in(FLANNEL_STYLE) == ["ghcr.io/flannel-io/flannel-cni-plugin:v1.9.1-flannel3",
                                                        "ghcr.io/flannel-io/flannel:v0.28.10"]


def test_the_written_file_says_where_it_comes_from_and_what_changed(tmp_path):
    manifest = addon_manifests.Manifest("kube-flannel.yml", "github.com/flannel-io/flannel@v0.28.10: x", FLANNEL_STYLE)
    assert addon_manifests.write(manifest, tmp_path / "addons")
    text = (tmp_path / "addons" / "kube-flannel.yml").read_text()
    assert text.startswith("# Written by `make addons`")
    assert "github.com/flannel-io/flannel@v0.28.10" in text.splitlines()[0]
    assert text.endswith(addon_manifests.never_pull(FLANNEL_STYLE))


def test_a_second_write_of_the_same_manifest_leaves_the_file_alone(tmp_path):
    manifest = addon_manifests.Manifest("coredns.yaml", "kubeadm", KUBEADM_STYLE)
    assert addon_manifests.write(manifest, tmp_path)
    before = (tmp_path / "coredns.yaml").stat().st_mtime_ns
    assert not addon_manifests.write(manifest, tmp_path)
    assert (tmp_path / "coredns.yaml").stat().st_mtime_ns == before
    changed = addon_manifests.Manifest("coredns.yaml", "kubeadm", KUBEADM_STYLE.replace("v1.14.2", "v1.14.3"))
    assert addon_manifests.write(changed, tmp_path)
    assert "v1.14.3" in (tmp_path / "coredns.yaml").read_text()


@pytest.mark.skipif(shutil.which("setcap") is None, reason="setcap (libcap2-bin) is not installed")
def test_coredns_carries_the_capability_setcap_gives(tmp_path):
    target = tmp_path / "coredns"
    target.write_bytes(b"\x7fELF")
    result = subprocess.run(["setcap", "cap_net_bind_service=+ep", str(target)], capture_output=True, text=True)
    if result.returncode != 0:
        pytest.skip(f"setcap cannot set file capabilities here: {result.stderr.strip()}")
    assert images_addons.NET_BIND_SERVICE_CAP == os.getxattr(target, "security.capability")


def test_an_xattr_survives_the_layer_tar_byte_for_byte():
    entry = images.Entry("coredns", "file", 0o755, b"x", xattrs=(("security.capability", images_addons.NET_BIND_SERVICE_CAP),))
    with tarfile.open(fileobj=io.BytesIO(images.deterministic_tar([entry]))) as tar:
        member = tar.getmember("coredns")
    # Go's archive/tar (containerd's unpacker) reads the raw record bytes.
    value = member.pax_headers["SCHILY.xattr.security.capability"].encode("utf-8", "surrogateescape")
    assert value == images_addons.NET_BIND_SERVICE_CAP


def test_layers_without_xattrs_are_unchanged():
    plain = images.deterministic_tar([images.Entry("a", "file", 0o644, b"a")])
    assert b"SCHILY" not in plain


def test_iptables_names_point_at_the_nft_backend():
    links = {e.path: e.target for e in images_addons.iptables_on_nft()}
    assert links == {"usr/sbin/iptables": "iptables-nft", "usr/sbin/iptables-save": "iptables-nft-save",
                     "usr/sbin/iptables-restore": "iptables-nft-restore", "usr/sbin/ip6tables": "ip6tables-nft",
                     "usr/sbin/ip6tables-save": "ip6tables-nft-save",
                     "usr/sbin/ip6tables-restore": "ip6tables-nft-restore"}
    assert {e.kind for e in images_addons.iptables_on_nft()} == {"symlink"}


KUBEADM_PROXY = """\
---
apiVersion: v1
kind: ServiceAccount
metadata:
  name: kube-proxy
  namespace: kube-system
---
kind: ConfigMap
apiVersion: v1
metadata:
  name: kube-proxy
  namespace: kube-system
data:
  kubeconfig.conf: |-
    server: https://192.0.2.2:6443

---
apiVersion: apps/v1
kind: DaemonSet
metadata:
  labels:
    k8s-app: kube-proxy
  name: kube-proxy
  namespace: kube-system
spec:
  selector:
    matchLabels:
      k8s-app: kube-proxy
  template:
    metadata:
      labels:
        k8s-app: kube-proxy
    spec:
      containers:
      - name: kube-proxy
        image: registry.k8s.io/kube-proxy:v1.36.3
        imagePullPolicy: IfNotPresent
        command:
        - /usr/local/bin/kube-proxy
        - --config=/var/lib/kube-proxy/config.conf
        - --hostname-override=$(NODE_NAME)
      serviceAccountName: kube-proxy
      volumes:
      - name: kube-proxy
        configMap:
          name: kube-proxy
"""


def test_the_proxy_daemonset_runs_pykubelet_proxy_under_its_own_name_and_labels():
    text = addon_manifests.as_pykubelet_proxy(KUBEADM_PROXY, "localhost/pykubelet:9")
    docs = [d for d in yaml.safe_load_all(text) if d]
    ds = next(d for d in docs if d["kind"] == "DaemonSet")
    assert ds["metadata"]["name"] == "pykubelet-proxy"
    labels = {"k8s-app": "pykubelet-proxy"}
    assert ds["metadata"]["labels"] == ds["spec"]["selector"]["matchLabels"] == labels
    assert ds["spec"]["template"]["metadata"]["labels"] == labels
    container = ds["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == "localhost/pykubelet:9"
    assert container["command"] == ["/usr/local/bin/pykubelet", "proxy", "--config=/var/lib/kube-proxy/config.conf",
                                    "--hostname-override=$(NODE_NAME)"]
    # kubeadm's ServiceAccount and ConfigMap volume stay: the proxy reads the cluster's ConfigMap.
    assert ds["spec"]["template"]["spec"]["serviceAccountName"] == "kube-proxy"
    assert ds["spec"]["template"]["spec"]["volumes"][0]["configMap"]["name"] == "kube-proxy"


def test_the_proxy_manifest_leaves_out_kubeadms_placeholder_configmap_and_keeps_the_rest():
    text = addon_manifests.as_pykubelet_proxy(KUBEADM_PROXY, "localhost/pykubelet:9")
    assert [d["kind"] for d in yaml.safe_load_all(text) if d] == ["ServiceAccount", "DaemonSet"]
    assert "192.0.2.2" not in text
    original_sa = KUBEADM_PROXY.split("---\n")[1]
    assert original_sa in text


def test_a_kubeadm_manifest_the_edits_do_not_fit_is_an_error_naming_it():
    changed = KUBEADM_PROXY.replace("- /usr/local/bin/kube-proxy", "- /go-runner")
    with pytest.raises(SystemExit, match="kubeadm 1.99: the DaemonSet has 0 lines matching"):
        addon_manifests.as_pykubelet_proxy(changed, "localhost/pykubelet:9", "kubeadm 1.99")


def test_the_proxy_manifests_header_says_what_else_changed(tmp_path):
    manifest = addon_manifests.Manifest("pykubelet-proxy.yaml", "kubeadm", "kind: DaemonSet\n",
                                        addon_manifests.PROXY_CHANGES)
    addon_manifests.write(manifest, tmp_path)
    text = (tmp_path / "pykubelet-proxy.yaml").read_text()
    assert "Nothing else" not in text and "`pykubelet proxy`" in text.split("kind:")[0]


def test_the_pykubelet_image_is_named_after_the_wheels_version_under_localhost(tmp_path):
    (tmp_path / "pykubelet-1.2.3-py3-none-any.whl").write_bytes(b"")
    assert images_pykubelet.image_name(tmp_path) == "localhost/pykubelet:1.2.3"


def _wheel(path, files: dict[str, bytes], when=(2020, 1, 1, 0, 0, 0)):
    with zipfile.ZipFile(path, "w") as z:
        for name, data in files.items():
            z.writestr(zipfile.ZipInfo(name, when), data)


def test_the_pykubelet_images_key_follows_the_source_in_the_wheel_not_its_timestamps(tmp_path):
    wheel = tmp_path / "pykubelet-0.1.0-py3-none-any.whl"
    _wheel(wheel, {"pykubelet/a.py": b"x = 1\n"})
    before = images_pykubelet.wheel_inputs(tmp_path)
    _wheel(wheel, {"pykubelet/a.py": b"x = 1\n"}, when=(2024, 5, 5, 5, 5, 5))
    assert images_pykubelet.wheel_inputs(tmp_path) == before
    _wheel(wheel, {"pykubelet/a.py": b"x = 2\n"})
    assert images_pykubelet.wheel_inputs(tmp_path) != before
    _wheel(wheel, {"pykubelet/a.py": b"x = 1\n"})
    (tmp_path / "pyyaml-6.0.4-py3-none-any.whl").write_bytes(b"a dependency")
    assert images_pykubelet.wheel_inputs(tmp_path) != before


def test_the_pykubelet_image_uses_the_kube_proxy_images_userland_and_debians_python():
    assert images_addons.PYKUBELET_DEBS == [*images_addons.KUBE_PROXY_DEBS, "python3"]


def test_the_pykubelet_command_runs_the_cli_under_the_images_python():
    script = images_pykubelet.CONSOLE_SCRIPT.decode()
    assert script.startswith("#!/usr/bin/python3\n") and "from pykubelet.cli import main" in script
