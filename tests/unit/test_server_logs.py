"""CRI log files read as `kubectl logs` shows them: partial lines joined, tail, since, timestamps,
limitBytes; the query's options and the kubelet's choice of container instance."""

from __future__ import annotations

import pytest

from pykubelet.server import logs
from pykubelet.server.container_logs import LogError, choose_container

T0 = "2026-01-01T00:00:00.000000001Z"
T1 = "2026-01-01T00:00:01.500000000Z"
T2 = "2026-01-01T00:00:02.000000000Z"


def write(tmp_path, *lines: str):
    path = tmp_path / "0.log"
    path.write_text("".join(line + "\n" for line in lines))
    return str(path)


def read_all(path: str, **options) -> bytes:
    reader = logs.LogReader(path, logs.LogOptions(**options))
    out = b""
    while not reader.done:
        data, at_end = reader.read()
        out += data
        if at_end:
            break
    reader.close()
    return out


SAMPLE = (f"{T0} stdout F first", f"{T1} stderr P par", f"{T1} stderr P ti", f"{T1} stderr F al",
          f"{T2} stdout F last")


def test_partial_lines_are_joined_and_both_streams_kept(tmp_path):
    assert read_all(write(tmp_path, *SAMPLE)) == b"first\npartial\nlast\n"


def test_timestamps_prefix_each_logical_line_once(tmp_path):
    assert read_all(write(tmp_path, *SAMPLE), timestamps=True) == \
        f"{T0} first\n{T1} partial\n{T2} last\n".encode()


def test_tail_counts_lines_from_the_end(tmp_path):
    path = write(tmp_path, *(f"{T0} stdout F line-{i}" for i in range(1000)))
    assert read_all(path, tail_lines=2) == b"line-998\nline-999\n"
    assert read_all(path, tail_lines=0) == b""
    assert read_all(path, tail_lines=5000).count(b"\n") == 1000


def test_since_drops_older_lines(tmp_path):
    since = logs.line_time(T1.encode())
    assert read_all(write(tmp_path, *SAMPLE), since=since) == b"partial\nlast\n"


def test_limit_bytes_counts_the_prefixes_and_cuts_the_last_line(tmp_path):
    assert read_all(write(tmp_path, *SAMPLE), limit_bytes=9) == b"first\npar"
    assert len(read_all(write(tmp_path, *SAMPLE), limit_bytes=40, timestamps=True)) == 40


def test_lines_not_in_the_cri_format_are_skipped(tmp_path):
    assert read_all(write(tmp_path, "garbage", f"{T0} nowhere F x", f"{T0} stdout F ok")) == b"ok\n"


def test_an_incomplete_last_line_waits_for_its_end(tmp_path):
    path = tmp_path / "0.log"
    path.write_bytes(f"{T0} stdout F done\n{T0} stdout F hal".encode())
    reader = logs.LogReader(str(path), logs.LogOptions())
    assert reader.read() == (b"done\n", True)
    with open(path, "ab") as f:
        f.write(b"f\n")
    assert reader.read() == (b"half\n", True)


def test_large_files_stream_in_bounded_chunks(tmp_path):
    path = write(tmp_path, *(f"{T0} stdout F {'y' * 100}" for _ in range(20000)))
    reader = logs.LogReader(path, logs.LogOptions())
    sizes = []
    while True:
        data, at_end = reader.read()
        sizes.append(len(data))
        if at_end:
            break
    assert sum(sizes) == 20000 * 101 and max(sizes) <= logs.OUT_CHUNK + logs.CHUNK


def test_fixed_width_timestamps_from_other_forms():
    assert logs.output_timestamp(b"2026-01-01T00:00:00.5+02:00") == b"2026-01-01T00:00:00.500000000+02:00"
    assert logs.output_timestamp(T0.encode()) == T0.encode()


@pytest.mark.parametrize("query, expected", [
    ({"tail": "5"}, {"tail_lines": 5}),
    ({"tail": "all", "tailLines": "3"}, {"tail_lines": None}),
    ({"follow": "true", "previous": "true", "timestamps": "true"}, {"follow": True, "previous": True,
                                                                    "timestamps": True}),
    ({"limitBytes": "10"}, {"limit_bytes": 10}),
    ({"sinceSeconds": "10"}, {"since": 990.0}),
    ({"sinceTime": "1970-01-01T00:10:00Z"}, {"since": 600.0}),
])
def test_query_options(query, expected):
    options = logs.parse_options(query, now=1000.0)
    assert {k: getattr(options, k) for k in expected} == expected


@pytest.mark.parametrize("query, status", [
    ({"tailLines": "x"}, 400), ({"follow": "maybe"}, 400), ({"sinceTime": "yesterday"}, 400),
    ({"tailLines": "-1"}, 422), ({"limitBytes": "0"}, 422), ({"sinceSeconds": "0"}, 422),
    ({"sinceSeconds": "5", "sinceTime": "2026-01-01T00:00:00Z"}, 422), ({"stream": "Stdout"}, 422),
])
def test_bad_queries_get_the_kubelets_status(query, status):
    with pytest.raises(logs.InvalidLogOptions) as e:
        logs.parse_options(query, now=1000.0)
    assert e.value.status == status


def status_of(state: dict, last: dict | None = None, cid: str = "containerd://cur") -> dict:
    cs = {"name": "main", "state": state, "containerID": cid}
    if last:
        cs["lastState"] = {"terminated": last}
    return {"containerStatuses": [cs]}


def test_container_choice_follows_the_kubelet():
    prev = {"containerID": "containerd://old", "exitCode": 1}
    assert choose_container("p", status_of({"running": {}}, prev), "main", previous=False) == "cur"
    assert choose_container("p", status_of({"running": {}}, prev), "main", previous=True) == "old"
    assert choose_container("p", status_of({"terminated": {"containerID": "containerd://t"}}), "main", False) == "t"
    assert choose_container("p", status_of({"waiting": {"reason": "CrashLoopBackOff"}}, prev), "main", False) == "old"


@pytest.mark.parametrize("status, previous, message", [
    (status_of({"running": {}}), True, 'previous terminated container "main" in pod "p" not found'),
    (status_of({"waiting": {"reason": "ErrImagePull"}}), False,
     'container "main" in pod "p" is waiting to start: image can\'t be pulled'),
    (status_of({"waiting": {"reason": "ImagePullBackOff"}}), False,
     'container "main" in pod "p" is waiting to start: trying and failing to pull image'),
    (status_of({"waiting": {"reason": "ContainerCreating"}}), False,
     'container "main" in pod "p" is waiting to start: ContainerCreating'),
    ({"containerStatuses": []}, False, 'container "main" in pod "p" is not available'),
])
def test_no_log_yet_says_why(status, previous, message):
    with pytest.raises(LogError) as e:
        choose_container("p", status, "main", previous)
    assert (e.value.status, e.value.message) == (400, message)


def test_the_fast_path_reads_like_the_line_by_line_one(tmp_path):
    lines = (*SAMPLE, "garbage", f"{T0} stdout F", f"{T0} stdout F ", f"{T1} stdout P a", f"{T1} stdout F b c",
             f"{T0} other F x", f"{T0} stderr F:tag tagged")
    path = write(tmp_path, *lines)
    slow = read_all(path, since=0.0)  # `since` takes the line-by-line path
    assert slow == read_all(path) == b"first\npartial\nlast\n\n\nab c\ntagged\n"
    assert read_all(path, limit_bytes=7) == b"first\np"


def test_the_fixed_width_path_and_the_regex_path_agree(tmp_path):
    full = [f"{T0} stdout F line {i}" for i in range(10)] + [f"{T1} stderr F ", f"{T2} stdout F:x tagged"]
    assert read_all(write(tmp_path, *full)) == read_all(write(tmp_path, *full), since=0.0)
    mixed = [*full, f"2026-01-01T00:00:00.5+02:00 stdout F offset"]
    assert read_all(write(tmp_path, *mixed)) == read_all(write(tmp_path, *mixed), since=0.0)


def test_a_follower_finishes_the_rotated_file_then_reads_the_new_one(tmp_path):
    path = tmp_path / "0.log"
    path.write_text(f"{T0} stdout F one\n")
    reader = logs.LogReader(str(path), logs.LogOptions(follow=True))
    assert reader.read() == (b"one\n", True)
    path.rename(tmp_path / "0.log.20260101-000000")  # rotated: the runtime still writes to it until it reopens
    with open(tmp_path / "0.log.20260101-000000", "a") as old:
        old.write(f"{T0} stdout F two\n")
    assert not reader.follow_rotation()  # no new file yet: nothing to switch to
    assert reader.read() == (b"two\n", True)
    with open(tmp_path / "0.log.20260101-000000", "a") as old:
        old.write(f"{T0} stdout F three\n")
    path.write_text(f"{T1} stdout F four\n")  # reopened: the new file
    assert reader.follow_rotation()
    assert reader.read() == (b"three\nfour\n", True)
    assert not reader.follow_rotation()
    reader.close()
