#!/usr/bin/env python3
"""kind's default storage for the node images: its manifest, and the two images it runs, under
the names it gives them. tests/bed/build-kind-storage.sh builds the provisioner and calls this.

The manifest is kind's own (the default-storage manifest of kind's node-image build, read from
the kind module's source: local-path-provisioner in namespace local-path-storage and the default
StorageClass `standard`, provisioner rancher.io/local-path, volumes under
/var/local-path-provisioner on the node), with its two image names filled in:

* the provisioner image: local-path-provisioner built from its Go module
  (github.com/rancher/local-path-provisioner) on a distroless-like static base, as kind's image is
  (its program in /usr/local/bin); kind builds a later release than the one the module proxy
  serves here, which the build script names;
* the helper image the provisioner runs for each volume's setup and teardown (`sh`, `mkdir` and
  `rm`): kind's is distroless with Debian's shell and coreutils; here the test bed's BusyBox.

Each image is one deterministic layer packed by tests/bed/images.py (an OCI layout tar cached in
$PYKUBELET_CACHE/kind/images, keyed on its contents); build-kind-node.sh imports them into the
node images.

Usage: images_kind.py --kind-module DIR --provisioner BIN --manifest FILE [--cache DIR]
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import images as bed  # noqa: E402  (the OCI layout and cache)
from images import Entry, ImageSpec  # noqa: E402
from images_addons import distroless_static, file_digest  # noqa: E402

# Where kind's node-image build keeps the manifest and its image names, in kind's module.
STORAGE_SOURCE = "pkg/build/nodeimage/const_storage.go"
MANIFEST_CONSTANT = "defaultStorageManifest"
PROVISIONER_CONSTANT = "storageProvisionerImage"
HELPER_CONSTANT = "storageHelperImage"
# Part of every image's cache key: bump it when the way a layer is put together changes.
LAYOUT_VERSION = b"kind-storage-layout-1\0"


def storage_manifest(source: str) -> tuple[str, dict[str, str]]:
    """kind's default storage manifest, its Go string constants joined, and the string constants
    it refers to (the two image names), from const_storage.go's text."""
    constants = dict(re.findall(r'^const (\w+) = "([^"]*)"$', source, re.M))
    start = re.search(rf"^const {MANIFEST_CONSTANT} = ", source, re.M)
    if start is None:
        raise ValueError(f"{STORAGE_SOURCE}: no `const {MANIFEST_CONSTANT}`")
    # The constant is raw strings and constant names joined by `+`: read operand, `+`, operand...
    # up to an operand that no `+` follows.
    text, want_operand = [], True
    for token in re.finditer(r"`([^`]*)`|(\w+)|(\+)|(\S)", source[start.end():]):
        raw, name, plus, _ = token.groups()
        if not want_operand:
            if plus is None:
                break
            want_operand = True
        elif raw is not None:
            text.append(raw)
            want_operand = False
        elif name in constants:
            text.append(constants[name])
            want_operand = False
        else:
            raise ValueError(f"{STORAGE_SOURCE}: {MANIFEST_CONSTANT} has {token.group()!r} where a string goes")
    used = {k: v for k, v in constants.items() if k in (PROVISIONER_CONSTANT, HELPER_CONSTANT)}
    if len(used) != 2:
        raise ValueError(f"{STORAGE_SOURCE}: want {PROVISIONER_CONSTANT} and {HELPER_CONSTANT}, found {sorted(used)}")
    return "".join(text).lstrip("\n"), used


def specs(provisioner: Path, names: dict[str, str]) -> list[ImageSpec]:
    program = "usr/local/bin/local-path-provisioner"
    return [
        ImageSpec("kind-local-path-provisioner", names[PROVISIONER_CONSTANT],
                  lambda: LAYOUT_VERSION + file_digest(provisioner),
                  lambda _: [*distroless_static(), *[Entry(d, "dir", 0o755) for d in ("usr", "usr/local", "usr/local/bin")],
                             Entry(program, "file", 0o755, provisioner.read_bytes())],
                  {"Entrypoint": ["/" + program], "Env": [bed.PATH_ENV]}),
        ImageSpec("kind-local-path-helper", names[HELPER_CONSTANT],
                  lambda: LAYOUT_VERSION + bed.busybox_inputs(), bed.busybox_layer,
                  {"Env": [bed.PATH_ENV], "Cmd": ["sh"]}),
    ]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kind-module", type=Path, required=True, help="the kind module's source directory")
    ap.add_argument("--provisioner", type=Path, required=True, help="the local-path-provisioner program")
    ap.add_argument("--manifest", type=Path, required=True, help="where to write the storage manifest")
    ap.add_argument("--cache", type=Path, default=Path(bed.DEFAULT_CACHE), help="cache dir (default %(default)s)")
    args = ap.parse_args(argv)
    source = args.kind_module / STORAGE_SOURCE
    try:
        manifest, names = storage_manifest(source.read_text())
    except (OSError, ValueError) as e:
        raise SystemExit(f"images_kind.py: {e}") from e
    if not args.provisioner.is_file():
        raise SystemExit(f"images_kind.py: {args.provisioner} missing: run tests/bed/build-kind-storage.sh")
    args.manifest.write_text(manifest)
    for spec in specs(args.provisioner, names):
        print(bed.ensure(spec, args.cache / "kind", None), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
