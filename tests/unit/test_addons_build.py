"""`make addons` writes the add-ons' manifests as shipped except for imagePullPolicy: Never on every
container (nothing can be pulled here), and packs CoreDNS with the file capability that lets its
non-root process bind port 53."""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import tarfile

import pytest

from tests.bed import addon_manifests, images, images_addons

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
