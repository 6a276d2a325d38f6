"""`pykubelet cri logs` text from CRI log files, and the `pykubelet pods` table."""

from __future__ import annotations

from pykubelet.tools.inspect import pods_table, read_cri_log


def test_cri_log_joins_partial_lines_and_keeps_full_ones(tmp_path):
    path = tmp_path / "0.log"
    path.write_text(
        "2024-05-01T10:00:00.000000001Z stdout P hello \n"
        "2024-05-01T10:00:00.000000002Z stdout P big \n"
        "2024-05-01T10:00:00.000000003Z stdout F world\n"
        "2024-05-01T10:00:01.000000000Z stderr F second  line, spaces kept\n"
        "2024-05-01T10:00:02.000000000Z stdout F \n"
        "2024-05-01T10:00:03.000000000Z stdout F last\n")
    assert read_cri_log(str(path)) == "hello big world\nsecond  line, spaces kept\n\nlast\n"


def test_cri_log_of_an_empty_file_is_empty(tmp_path):
    path = tmp_path / "0.log"
    path.write_text("")
    assert read_cri_log(str(path)) == ""


def pod(name: str, phase: str, ip: str, *containers: dict) -> dict:
    status = {"phase": phase, "containerStatuses": list(containers)}
    if ip:
        status["podIP"] = ip
    return {"metadata": {"name": name, "namespace": "default"}, "status": status}


def test_pods_table_has_a_row_per_pod_with_readiness_restarts_and_container_states():
    table = pods_table({"items": [
        pod("web-node1", "Running", "10.88.0.5",
            {"name": "httpd", "ready": True, "restartCount": 0, "state": {"running": {}}},
            {"name": "side", "ready": False, "restartCount": 4,
             "state": {"waiting": {"reason": "CrashLoopBackOff"}}}),
        pod("job-node1", "Failed", "",
            {"name": "main", "ready": False, "restartCount": 0,
             "state": {"terminated": {"reason": "Error", "exitCode": 3}}}),
    ]})
    header, web, job = table.splitlines()
    assert header.split() == ["NAMESPACE", "NAME", "PHASE", "READY", "RESTARTS", "IP", "CONTAINERS"]
    assert web.split() == ["default", "web-node1", "Running", "1/2", "4", "10.88.0.5",
                           "httpd=running", "side=waiting(CrashLoopBackOff)"]
    assert job.split() == ["default", "job-node1", "Failed", "0/1", "0", "main=terminated(Error:3)"]


def test_pods_table_columns_line_up():
    table = pods_table({"items": [pod("a-very-long-pod-name-node1", "Running", "10.88.0.5"),
                                  pod("b", "Pending", "10.88.0.6")]})
    header, first, second = table.splitlines()
    assert header.index("PHASE") == first.index("Running") == second.index("Pending")
    assert header.index("IP") == first.index("10.88.0.5") == second.index("10.88.0.6")


def test_pods_table_without_pods_is_only_the_header():
    assert pods_table({"items": []}).split() == ["NAMESPACE", "NAME", "PHASE", "READY", "RESTARTS", "IP",
                                                 "CONTAINERS"]
