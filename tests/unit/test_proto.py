"""The committed gRPC modules are exactly what proto/generate.py produces, and expose CRI runtime.v1."""

from __future__ import annotations

import importlib.util
import pathlib

import pytest

from pykubelet.cri.v1 import api_pb2

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]


def load_generator():
    spec = importlib.util.spec_from_file_location("proto_generate", REPO_ROOT / "proto" / "generate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def generated(tmp_path_factory) -> tuple[pathlib.Path, list[pathlib.Path]]:
    out = tmp_path_factory.mktemp("proto")
    return out, load_generator().generate(out)


def test_generation_covers_the_cri_and_containerd_protos(generated):
    _, files = generated
    names = {str(p) for p in files}
    assert {"pykubelet/cri/v1/api_pb2.py", "pykubelet/cri/v1/api_pb2_grpc.py",
            "pykubelet/containerd/events_pb2.py"} <= names


def test_committed_modules_are_byte_identical_to_freshly_generated_ones(generated):
    out, files = generated
    differ = [str(p) for p in files
              if not (REPO_ROOT / p).is_file() or (REPO_ROOT / p).read_bytes() != (out / p).read_bytes()]
    assert differ == [], "run `make proto` and commit the result"


def test_no_committed_generated_module_is_left_without_its_proto(generated):
    _, files = generated
    committed = {p.relative_to(REPO_ROOT) for p in (REPO_ROOT / "pykubelet").rglob("*_pb2*")
                 if p.suffix in (".py", ".pyi")}
    assert committed == set(files)


@pytest.mark.parametrize("service, method", [
    ("RuntimeService", "RunPodSandbox"),
    ("RuntimeService", "CreateContainer"),
    ("ImageService", "PullImage"),
])
def test_cri_services_live_in_the_runtime_v1_package(service, method):
    descriptor = api_pb2.DESCRIPTOR.services_by_name[service]
    assert descriptor.full_name == f"runtime.v1.{service}"
    assert descriptor.methods_by_name[method].full_name == f"runtime.v1.{service}.{method}"
