"""/logs/ never leaves the log directory; streaming paths name pod, UID and container."""

from __future__ import annotations

import os

import pytest

from pykubelet.server import node_logs, streaming
from pykubelet.server.configz import go_duration


@pytest.fixture
def root(tmp_path):
    (tmp_path / "log" / "sub").mkdir(parents=True)
    (tmp_path / "log" / "sub" / "a.log").write_text("a")
    (tmp_path / "secret").write_text("s")
    os.symlink(tmp_path / "secret", tmp_path / "log" / "escape")
    os.symlink("sub/a.log", tmp_path / "log" / "inside")
    return str(tmp_path / "log")


@pytest.mark.parametrize("relative", ["..", "../secret", "sub/../../secret", "%2e%2e/secret", "sub/%2E%2E/..",
                                      "escape", "./sub", "a\x00b"])
def test_escapes_are_refused(root, relative):
    with pytest.raises(node_logs.Refused):
        node_logs.resolve(root, relative)


def test_paths_inside_resolve(root):
    assert node_logs.resolve(root, "") == os.path.realpath(root)
    assert node_logs.resolve(root, "sub/a.log").endswith("/log/sub/a.log")
    assert node_logs.resolve(root, "inside").endswith("/log/sub/a.log")  # a link that stays inside is fine
    assert 'href="sub/"' in node_logs.listing(root)


@pytest.mark.parametrize("kind, path, expected", [
    ("exec", "/exec/ns/pod/main", ("ns", "pod", "", "main")),
    ("exec", "/exec/ns/pod/uid-1/main", ("ns", "pod", "uid-1", "main")),
    ("attach", "/attach/ns/pod/main", ("ns", "pod", "", "main")),
    ("portForward", "/portForward/ns/pod", ("ns", "pod", "", "")),
    ("portForward", "/portForward/ns/pod/uid-1", ("ns", "pod", "uid-1", "")),
])
def test_stream_targets(kind, path, expected):
    assert streaming.parse_target(kind, path) == expected


@pytest.mark.parametrize("kind, path", [("exec", "/exec/ns/pod"), ("exec", "/exec/ns//main"),
                                        ("portForward", "/portForward/ns")])
def test_bad_stream_targets_are_404(kind, path):
    with pytest.raises(streaming.StreamError) as e:
        streaming.parse_target(kind, path)
    assert e.value.status == 404


@pytest.mark.parametrize("seconds, text", [(20, "20s"), (60, "1m0s"), (120, "2m0s"), (3600, "1h0m0s"),
                                           (0.5, "500ms"), (90, "1m30s")])
def test_go_durations(seconds, text):
    assert go_duration(seconds) == text
