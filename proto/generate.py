"""Generate the committed gRPC modules from the .proto files in this directory.

    python proto/generate.py [OUT_DIR]     (default: the repository root)

The .proto files are laid out like the Python package (proto/pykubelet/cri/v1/api.proto ->
pykubelet/cri/v1/api_pb2.py), so protoc writes package-relative imports.
tests/unit/test_proto.py regenerates into a temporary directory and fails on any difference.
"""

from __future__ import annotations

import importlib.resources
import pathlib
import sys

from grpc_tools import protoc

PROTO_ROOT = pathlib.Path(__file__).resolve().parent


def proto_files() -> list[pathlib.Path]:
    return sorted(PROTO_ROOT.rglob("*.proto"))


def generate(out_dir: pathlib.Path) -> list[pathlib.Path]:
    """Run protoc on every .proto; returns the files written, relative to out_dir."""
    files = [str(p.relative_to(PROTO_ROOT)) for p in proto_files()]
    well_known = importlib.resources.files("grpc_tools") / "_proto"  # google/protobuf/*.proto
    code = protoc.main(["grpc_tools.protoc", f"-I{PROTO_ROOT}", f"-I{well_known}", f"--python_out={out_dir}",
                        f"--pyi_out={out_dir}", f"--grpc_python_out={out_dir}", *files])
    if code != 0:
        raise RuntimeError(f"protoc failed with exit code {code}")
    return sorted(p.relative_to(out_dir) for p in out_dir.rglob("*_pb2*.py*"))


if __name__ == "__main__":
    out = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else PROTO_ROOT.parent)
    for path in generate(out):
        print(path)
