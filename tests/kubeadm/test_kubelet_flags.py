"""Every flag of the real kubelet (the v1.36.3 binary the test bed builds) is one pykubelet accepts:
implemented, or checked and warned about. A flag a guide copies from `kubelet --help` never stops
the agent."""

from __future__ import annotations

import re
import subprocess

from pykubelet.config import build_parser, values
from pykubelet.config.options import OPTIONS
from tests.kubeadm.node import K8S_BIN

OURS_ONLY = {"config", "config-dir", "version", "help"}
# pflag shows a `quoted` word of a flag's help where the value's type goes, booleans included
BOOLEANS_SHOWN_WITH_A_WORD = {"seccomp-default"}


def real_kubelet_flags() -> dict[str, bool]:
    """flag -> takes a value, from the real kubelet's --help."""
    kubelet = K8S_BIN / "kubelet"
    assert kubelet.is_file(), f"{kubelet} missing: run `make control-plane` (tests/bed/build-control-plane.sh)"
    text = subprocess.run([str(kubelet), "--help"], capture_output=True, text=True, timeout=60).stdout
    flags = {}
    # "--address ip   The IP...": one space before the value's type, several before the description
    for match in re.finditer(r"^\s+(?:-\w, )?--([a-z0-9-]+)(?: (\S+))?\s", text, re.MULTILINE):
        flags[match.group(1)] = match.group(2) is not None and match.group(1) not in BOOLEANS_SHOWN_WITH_A_WORD
    assert len(flags) > 100, text[:2000]
    return flags


def test_every_flag_of_the_real_kubelet_is_accepted():
    ours = {o.flag: o for o in OPTIONS if o.flag}
    real = real_kubelet_flags()
    missing = sorted(set(real) - set(ours) - OURS_ONLY)
    assert not missing, f"kubelet flags pykubelet would refuse (exit 2): {missing}"
    for flag, takes_value in real.items():
        if flag in ours:
            is_bool = ours[flag].parse is values.boolean
            assert is_bool != takes_value, f"--{flag}: the kubelet's takes {'a value' if takes_value else 'none'}"
    parser = build_parser()
    for flag, takes_value in real.items():
        if flag not in OURS_ONLY:
            parser.parse_args([f"--{flag}=1" if takes_value else f"--{flag}"])
