# shellcheck shell=bash
# Sourced by the provisioning scripts (node.sh, proxy.sh): Debian packages installed when missing.
# install_missing PACKAGE...: apt-get installs those of them dpkg does not list as installed;
# nothing at all (no `apt-get update`) when every one is, as on the test bed's box.
install_missing() {
    local package missing=()
    for package in "$@"; do
        [ "$(dpkg-query -W -f='${db:Status-Status}' "$package" 2>/dev/null || true)" = installed ] ||
            missing+=("$package")
    done
    [ "${#missing[@]}" -gt 0 ] || return 0
    printf '[%s] installing %s\n' "$(hostname)" "${missing[*]}" >&2
    DEBIAN_FRONTEND=noninteractive apt-get update -q
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
}
