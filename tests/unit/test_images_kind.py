"""kind's default storage manifest, read from kind's Go source (tests/bed/images_kind.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bed"))
import images_kind  # noqa: E402

# The shape of kind's const_storage.go: string constants, then the manifest as raw strings and
# constant names joined by `+`.
SOURCE = '''package nodeimage

const storageProvisionerImage = "docker.io/kindest/local-path-provisioner:v1"
const storageHelperImage = "docker.io/kindest/local-path-helper:v2"

// image we need to preload
var defaultStorageImages = []string{storageProvisionerImage, storageHelperImage}

const defaultStorageManifest = `
apiVersion: apps/v1
kind: Deployment
spec:
  template:
    spec:
      containers:
        - image: ` + storageProvisionerImage + `
          command: [local-path-provisioner, start, --helper-image, ` + storageHelperImage + `]
---
kind: StorageClass
metadata:
  name: standard
`
'''


def test_the_manifest_gets_the_image_names_the_constants_hold():
    manifest, names = images_kind.storage_manifest(SOURCE)
    assert names == {"storageProvisionerImage": "docker.io/kindest/local-path-provisioner:v1",
                     "storageHelperImage": "docker.io/kindest/local-path-helper:v2"}
    deployment, storage_class = yaml.safe_load_all(manifest)
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == "docker.io/kindest/local-path-provisioner:v1"
    assert container["command"][-1] == "docker.io/kindest/local-path-helper:v2"
    assert storage_class == {"kind": "StorageClass", "metadata": {"name": "standard"}}


def test_text_after_the_manifest_is_not_part_of_it():
    manifest, _ = images_kind.storage_manifest(SOURCE + "\nconst other = `kind: Secret`\n")
    assert "Secret" not in manifest


@pytest.mark.parametrize("source, complaint", [
    (SOURCE.replace("const defaultStorageManifest", "var defaultStorageManifest"), "no `const defaultStorageManifest`"),
    (SOURCE.replace("` + storageHelperImage + `", "` + helperImage() + `"), "'helperImage' where a string goes"),
    (SOURCE.replace('const storageHelperImage = "docker.io/kindest/local-path-helper:v2"\n', ""),
     "'storageHelperImage' where a string goes"),
])
def test_a_source_of_another_shape_is_refused_naming_the_file(source, complaint):
    with pytest.raises(ValueError) as refused:
        images_kind.storage_manifest(source)
    assert images_kind.STORAGE_SOURCE in str(refused.value) and complaint in str(refused.value)
