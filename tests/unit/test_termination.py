"""A finished container's termination message: the agent's own file, or the log's tail on error."""

from __future__ import annotations

import os
import threading

from pykubelet.cri.v1 import api_pb2 as api
from pykubelet.runtime import labels, paths
from pykubelet.runtime.termination import log_messages, termination_message

UID = "uid-1"
MESSAGE_PATH = "/dev/termination-log"


def own_file(root, name: str = "main", instance: str = "0123abcd") -> str:
    directory = paths.termination_message_dir(str(root), UID, name)
    os.makedirs(directory, exist_ok=True)
    return os.path.join(directory, instance)


def status(tmp_path, message: bytes | None, policy: str = "File", exit_code: int = 1, log: str = "",
           state=api.CONTAINER_EXITED, mounts: list[api.Mount] | None = None) -> api.ContainerStatus:
    mounts = list(mounts or [])
    if message is not None:
        path = own_file(tmp_path / "root")
        with open(path, "wb") as f:
            f.write(message)
        mounts.append(api.Mount(container_path=MESSAGE_PATH, host_path=path))
    (tmp_path / "0.log").write_text(log)
    return api.ContainerStatus(metadata=api.ContainerMetadata(name="main"), state=state, exit_code=exit_code,
                               mounts=mounts, log_path=str(tmp_path / "0.log"),
                               annotations={labels.TERMINATION_MESSAGE_PATH: MESSAGE_PATH,
                                            labels.TERMINATION_MESSAGE_POLICY: policy})


def message_of(tmp_path, s: api.ContainerStatus) -> str:
    return termination_message(s, str(tmp_path / "root"), UID)


def within(seconds: float, fn):
    """fn()'s result, failing if it does not return within `seconds` (it would hang forever)."""
    result: list = []
    worker = threading.Thread(target=lambda: result.append(fn()), daemon=True)
    worker.start()
    worker.join(seconds)
    assert not worker.is_alive(), "reading the termination message blocked"
    return result[0]


def cri_log(*lines: str) -> str:
    return "".join(f"2026-01-01T00:00:00.000000000Z stdout F {line}\n" for line in lines)


def test_the_file_wins_and_is_cut_to_its_last_4096_bytes(tmp_path):
    assert message_of(tmp_path, status(tmp_path, b"bye")) == "bye"
    long = b"x" * 5000 + b"END"
    message = message_of(tmp_path, status(tmp_path, long))
    assert len(message) == 4096 and message.endswith("END")


def test_a_huge_file_gives_only_its_last_4096_bytes(tmp_path):
    s = status(tmp_path, b"")
    with open(s.mounts[0].host_path, "wb") as f:
        f.truncate(64 << 20)  # sparse: 64 MiB of zeros
        f.seek(0, os.SEEK_END)
        f.write(b"tail")
    message = within(5, lambda: message_of(tmp_path, s))
    assert len(message) == 4096 and message.endswith("tail")


def test_running_containers_have_no_message(tmp_path):
    assert message_of(tmp_path, status(tmp_path, b"bye", state=api.CONTAINER_RUNNING)) == ""


def test_fallback_to_logs_only_for_a_failed_container_with_an_empty_file(tmp_path):
    log = cri_log(*(str(i) for i in range(1, 101)))
    message = message_of(tmp_path, status(tmp_path, b"", "FallbackToLogsOnError", exit_code=2, log=log))
    assert message == "".join(f"{i}\n" for i in range(21, 101))  # the last 80 lines
    assert message_of(tmp_path, status(tmp_path, b"", "FallbackToLogsOnError", exit_code=0, log=log)) == ""
    assert message_of(tmp_path, status(tmp_path, b"", "File", exit_code=2, log=log)) == ""
    assert message_of(tmp_path, status(tmp_path, b"own", "FallbackToLogsOnError", exit_code=2, log=log)) == "own"
    assert message_of(tmp_path, status(tmp_path, None, "FallbackToLogsOnError", exit_code=2, log=log)) != ""


def test_a_fifo_the_pod_mounted_at_the_path_is_never_opened(tmp_path):
    # An init container made a FIFO in an emptyDir; the app mounted it at /dev/termination-log
    # through a subPath. Opening it would wait for a writer forever.
    fifo = str(tmp_path / "emptydir-fifo")
    os.mkfifo(fifo)
    theirs = api.Mount(container_path=MESSAGE_PATH, host_path=fifo)
    s = status(tmp_path, b"mine", mounts=[theirs])  # theirs comes first, as volume mounts do
    assert within(5, lambda: message_of(tmp_path, s)) == "mine"
    alone = status(tmp_path, None, "FallbackToLogsOnError", exit_code=1, log=cri_log("from the log"),
                   mounts=[theirs])
    assert within(5, lambda: message_of(tmp_path, alone)) == "from the log\n"


def test_a_mount_outside_the_agents_own_directory_is_not_read(tmp_path):
    secret = tmp_path / "host-secret"
    secret.write_text("root's secret")
    s = status(tmp_path, None, mounts=[api.Mount(container_path=MESSAGE_PATH, host_path=str(secret))])
    assert message_of(tmp_path, s) == ""


def test_a_link_or_a_fifo_in_the_agents_own_place_is_an_error_not_a_hang(tmp_path):
    s = status(tmp_path, b"")
    own = s.mounts[0].host_path
    os.unlink(own)
    os.symlink("/etc/hostname", own)
    message = within(5, lambda: message_of(tmp_path, s))
    assert message.startswith(f"Error on reading termination log {own}:"), message
    os.unlink(own)
    os.mkfifo(own)
    message = within(5, lambda: message_of(tmp_path, s))
    assert message.startswith(f"Error on reading termination log {own}:") and "not a regular file" in message


def test_a_linked_directory_on_the_way_is_not_followed(tmp_path):
    s = status(tmp_path, b"")
    pod_dir = paths.pod_dir(str(tmp_path / "root"), UID)
    elsewhere = tmp_path / "elsewhere"
    os.rename(pod_dir, elsewhere)
    os.symlink(elsewhere, pod_dir)
    (elsewhere / "containers" / "main" / os.path.basename(s.mounts[0].host_path)).write_text("through a link")
    assert "through a link" not in message_of(tmp_path, s)


def test_the_log_tail_is_at_most_2048_bytes(tmp_path):
    log = cri_log(*("y" * 100 for _ in range(50)))
    message = message_of(tmp_path, status(tmp_path, b"", "FallbackToLogsOnError", exit_code=1, log=log))
    assert len(message) == 2048


def test_partial_log_lines_are_joined():
    log = (b"2026-01-01T00:00:00Z stdout P abc\n2026-01-01T00:00:00Z stdout F def\n"
           b"2026-01-01T00:00:01Z stderr F ghi\n")
    assert log_messages(log) == [b"abcdef\n", b"ghi\n"]


def test_output_without_a_final_newline_is_the_message_as_written(tmp_path):
    # `echo -n DONE; false`: containerd logs the unfinished line as partial (P) when the stream ends.
    log = "2026-01-01T00:00:00.000000000Z stdout P DONE\n"
    assert message_of(tmp_path, status(tmp_path, b"", "FallbackToLogsOnError", exit_code=1, log=log)) == "DONE"
