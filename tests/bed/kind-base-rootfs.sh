#!/usr/bin/env bash
# kind-base-rootfs.sh ROOTFS KIND_SOURCE CONTAINERD_BIN TOOLS: turns a Debian root filesystem that
# mmdebstrap has just made (with the packages kind's base image installs) into kind's base image
# (images/base/Dockerfile of the kind module at KIND_SOURCE), step by step as that Dockerfile does:
#
#   COPY of images/base/files: scripts and /kind/bin 0755, every other file 0644, directories 0755
#   clean-install's cleanup: debconf cache, logs, temporary files, documentation and manual pages
#   systemd trimmed to what a node container needs (no tmpfiles-setup at boot, no getty, udev,
#     initctl or other wanted units), journald not reading the kernel's log, /sbin/init = systemd
#   kubelet, containerd and undo-mount-hacks enabled; systemd-binfmt masked (binfmt_misc is
#     kernel-wide: a node must not register anything there)
#   /etc/kubernetes/manifests
#   the later stages' programs: containerd, ctr and containerd-shim-runc-v2 from CONTAINERD_BIN
#     into /usr/local/bin; crictl from TOOLS into /usr/local/bin; the CNI plugins from TOOLS/cni
#     into /opt/cni/bin (runc is Debian's package, /usr/sbin/runc, on containerd's PATH)
#   /etc/containerd/cri-base.json: `ctr oci spec` with kind's createContainer hook (the DMI
#     product files) added and the rlimits removed
#   one change to kind's containerd config: restrict_oom_score_adj = true (kind sets it only in a
#     user namespace). Every pod sandbox asks for oom_score_adj -998, and lowering it takes
#     CAP_SYS_RESOURCE, which this machine's bounding set lacks, so no node container has it:
#     runc's init then dies before it starts the container ("can't get final child's PID from
#     pipe"). Restricted, containerd keeps a pod's value no lower than its own (the test bed's
#     containerd.toml does the same).
#
# Run by build-kind.sh as mmdebstrap's customize hook (proc and sys are mounted in ROOTFS then, so
# systemctl works in the chroot). Also written here: the files mmdebstrap copies from this machine
# (its hostname and resolver), which Docker replaces in every container anyway.
set -euo pipefail

[ $# -eq 4 ] || { echo "usage: $0 ROOTFS KIND_SOURCE CONTAINERD_BIN TOOLS" >&2; exit 2; }
root=$1
files=$2/images/base/files
containerd_bin=$3
tools=$4
[ -d "$root/usr/lib/systemd" ] || { echo "kind-base-rootfs.sh: $root has no systemd" >&2; exit 1; }
[ -f "$files/usr/local/bin/entrypoint" ] || { echo "kind-base-rootfs.sh: no kind base files in $files" >&2; exit 1; }

# COPY --chmod: the module cache's copies are read-only, so the modes are set here.
(cd "$files" && find . -type f) | sort | while read -r rel; do
    rel=${rel#./}
    case $rel in
        usr/local/bin/* | kind/bin/*) mode=0755 ;;
        *) mode=0644 ;;
    esac
    install -D -m "$mode" "$files/$rel" "$root/$rel"
done
(cd "$files" && find . -mindepth 1 -type d) | while read -r rel; do chmod 0755 "$root/${rel#./}"; done

# clean-install's cleanup (mmdebstrap removes apt's lists and cache itself).
rm -rf "$root"/var/cache/debconf/* "$root"/var/log/* "$root"/tmp/* "$root"/var/tmp/* \
    "$root"/usr/share/doc/* "$root"/usr/share/doc-base/* "$root"/usr/share/man/*

find "$root/lib/systemd/system/sysinit.target.wants/" -name systemd-tmpfiles-setup.service -delete
rm -f "$root"/lib/systemd/system/multi-user.target.wants/* "$root"/etc/systemd/system/*.wants/* \
    "$root"/lib/systemd/system/local-fs.target.wants/* "$root"/lib/systemd/system/sockets.target.wants/*udev* \
    "$root"/lib/systemd/system/sockets.target.wants/*initctl* "$root"/lib/systemd/system/basic.target.wants/*
echo "ReadKMsg=no" >>"$root/etc/systemd/journald.conf"
ln -sfn /usr/lib/systemd/systemd "$root/sbin/init"

chroot "$root" systemctl enable kubelet.service containerd.service undo-mount-hacks.service
chroot "$root" systemctl mask systemd-binfmt.service
mkdir -p "$root/etc/kubernetes/manifests"

for b in containerd ctr containerd-shim-runc-v2; do install -m 0755 "$containerd_bin/$b" "$root/usr/local/bin/$b"; done
install -m 0755 "$tools/crictl" "$root/usr/local/bin/crictl"
install -d -m 0755 "$root/opt/cni/bin"
for b in "$tools"/cni/*; do install -m 0755 "$b" "$root/opt/cni/bin/"; done
chroot "$root" sh -c 'ctr oci spec | jq ".hooks.createContainer[.hooks.createContainer | length] |= . + {\"path\": \"/kind/bin/mount-product-files.sh\"}" | jq "del(.process.rlimits)" >/etc/containerd/cri-base.json'
sed -i 's/^\(\s*restrict_oom_score_adj = \)false$/\1true/' "$root/etc/containerd/config.toml"
grep -q '^\s*restrict_oom_score_adj = true$' "$root/etc/containerd/config.toml" ||
    { echo "kind-base-rootfs.sh: kind's containerd config has no restrict_oom_score_adj = false to turn on" >&2; exit 1; }
chroot "$root" containerd --version
chroot "$root" runc --version | head -n 1

echo localhost >"$root/etc/hostname"
: >"$root/etc/resolv.conf"
