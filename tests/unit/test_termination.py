"""A finished container's termination message: the file, or the log's tail on error."""

from __future__ import annotations

from pykubelet.cri.v1 import api_pb2 as api
from pykubelet.runtime import labels
from pykubelet.runtime.termination import log_messages, termination_message


def status(tmp_path, message: bytes | None, policy: str = "File", exit_code: int = 1, log: str = "",
           state=api.CONTAINER_EXITED) -> api.ContainerStatus:
    mounts = []
    if message is not None:
        (tmp_path / "msg").write_bytes(message)
        mounts.append(api.Mount(container_path="/dev/termination-log", host_path=str(tmp_path / "msg")))
    (tmp_path / "0.log").write_text(log)
    return api.ContainerStatus(state=state, exit_code=exit_code, mounts=mounts, log_path=str(tmp_path / "0.log"),
                               annotations={labels.TERMINATION_MESSAGE_PATH: "/dev/termination-log",
                                            labels.TERMINATION_MESSAGE_POLICY: policy})


def cri_log(*lines: str) -> str:
    return "".join(f"2026-01-01T00:00:00.000000000Z stdout F {line}\n" for line in lines)


def test_the_file_wins_and_is_cut_to_its_last_4096_bytes(tmp_path):
    assert termination_message(status(tmp_path, b"bye")) == "bye"
    long = b"x" * 5000 + b"END"
    message = termination_message(status(tmp_path, long))
    assert len(message) == 4096 and message.endswith("END")


def test_running_containers_have_no_message(tmp_path):
    assert termination_message(status(tmp_path, b"bye", state=api.CONTAINER_RUNNING)) == ""


def test_fallback_to_logs_only_for_a_failed_container_with_an_empty_file(tmp_path):
    log = cri_log(*(str(i) for i in range(1, 101)))
    message = termination_message(status(tmp_path, b"", "FallbackToLogsOnError", exit_code=2, log=log))
    assert message == "".join(f"{i}\n" for i in range(21, 101))  # the last 80 lines
    assert termination_message(status(tmp_path, b"", "FallbackToLogsOnError", exit_code=0, log=log)) == ""
    assert termination_message(status(tmp_path, b"", "File", exit_code=2, log=log)) == ""
    assert termination_message(status(tmp_path, b"own", "FallbackToLogsOnError", exit_code=2, log=log)) == "own"
    assert termination_message(status(tmp_path, None, "FallbackToLogsOnError", exit_code=2, log=log)) != ""


def test_the_log_tail_is_at_most_2048_bytes(tmp_path):
    log = cri_log(*("y" * 100 for _ in range(50)))
    message = termination_message(status(tmp_path, b"", "FallbackToLogsOnError", exit_code=1, log=log))
    assert len(message) == 2048


def test_partial_log_lines_are_joined():
    log = (b"2026-01-01T00:00:00Z stdout P abc\n2026-01-01T00:00:00Z stdout F def\n"
           b"2026-01-01T00:00:01Z stderr F ghi\n")
    assert log_messages(log) == [b"abcdef\n", b"ghi\n"]


def test_output_without_a_final_newline_is_the_message_as_written(tmp_path):
    # `echo -n DONE; false`: containerd logs the unfinished line as partial (P) when the stream ends.
    log = "2026-01-01T00:00:00.000000000Z stdout P DONE\n"
    assert termination_message(status(tmp_path, b"", "FallbackToLogsOnError", exit_code=1, log=log)) == "DONE"
