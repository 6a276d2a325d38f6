"""What image garbage collection decides: which images are in use, what is remembered of each, which
unused ones go first, when age alone removes one, and how many bytes a full image filesystem must lose."""

from __future__ import annotations

import json

from pykubelet.config.settings import ImageGCSettings
from pykubelet.cri.v1 import api_pb2 as api
from pykubelet.runtime import image_gc_policy as policy
from pykubelet.runtime.image_gc_policy import Candidate, ImageRecord, ListedImage

GIB = 1 << 30


def record(first_detected: float = 0.0, last_used: float = 0.0, size: int = 100, pinned: bool = False):
    return ImageRecord(first_detected=first_detected, last_used=last_used, size=size, pinned=pinned)


def ids(candidates: list[Candidate]) -> list[str]:
    return [c.id for c in candidates]


def test_an_image_is_in_use_by_any_container_of_the_runtime_whatever_its_state():
    containers = [api.Container(id="a", image_id="sha256:run", state=api.CONTAINER_RUNNING),
                  api.Container(id="b", image_id="sha256:exited", state=api.CONTAINER_EXITED),
                  api.Container(id="c", image_id="sha256:created", state=api.CONTAINER_CREATED),
                  # a runtime older than CRI's image_id names the image in image_ref
                  api.Container(id="d", image_ref="sha256:old-runtime", state=api.CONTAINER_RUNNING)]
    assert policy.images_in_use(containers) == {"sha256:run", "sha256:exited", "sha256:created", "sha256:old-runtime"}


def test_new_images_are_first_detected_now_and_used_ones_last_used_now():
    records = policy.detect({}, [ListedImage("sha256:a", 10, False), ListedImage("sha256:b", 20, True)],
                            in_use={"sha256:b"}, now=100.0)
    assert records == {"sha256:a": record(100.0, 0.0, 10), "sha256:b": record(100.0, 100.0, 20, pinned=True)}


def test_a_known_image_keeps_its_first_detection_and_last_use_until_used_again():
    before = {"sha256:a": record(first_detected=10.0, last_used=50.0, size=10)}
    later = policy.detect(before, [ListedImage("sha256:a", 12, False)], in_use=set(), now=200.0)
    assert later["sha256:a"] == record(first_detected=10.0, last_used=50.0, size=12)
    used = policy.detect(later, [ListedImage("sha256:a", 12, False)], in_use={"sha256:a"}, now=300.0)
    assert used["sha256:a"] == record(first_detected=10.0, last_used=300.0, size=12)


def test_an_image_the_runtime_no_longer_lists_is_forgotten():
    before = {"sha256:gone": record(), "sha256:kept": record()}
    assert set(policy.detect(before, [ListedImage("sha256:kept", 1, False)], set(), 5.0)) == {"sha256:kept"}


def test_unused_unpinned_images_go_least_recently_used_first_then_first_detected_first():
    records = {"in-use": record(last_used=1.0), "pinned": record(pinned=True),
               "used-late": record(first_detected=0.0, last_used=90.0),
               "never-used-seen-late": record(first_detected=50.0),
               "never-used-seen-early": record(first_detected=10.0),
               "used-early": record(first_detected=0.0, last_used=40.0)}
    order = policy.eviction_order(records, in_use={"in-use"})
    assert ids(order) == ["never-used-seen-early", "never-used-seen-late", "used-early", "used-late"]


def test_maximum_age_removes_images_unused_for_longer_once_the_agent_has_run_that_long():
    candidates = [Candidate("never-used", record()), Candidate("stale", record(last_used=1000.0)),
                  Candidate("recent", record(last_used=3000.0))]
    # began at 0, now 3600: the agent has watched for an hour, longer than the maximum age of 30 minutes
    assert ids(policy.too_old(candidates, 1800.0, now=3600.0, began=0.0)) == ["never-used", "stale"]
    # started 20 minutes ago: too soon to know what has been unused for 30 minutes
    assert policy.too_old(candidates, 1800.0, now=3600.0, began=2400.0) == []
    assert policy.too_old(candidates, 0.0, now=3600.0, began=0.0) == []  # 0: off


def test_images_first_seen_less_than_the_minimum_age_ago_are_not_removed_for_space():
    candidates = [Candidate("old", record(first_detected=0.0)), Candidate("exactly", record(first_detected=880.0)),
                  Candidate("just-pulled", record(first_detected=990.0))]
    assert ids(policy.old_enough(candidates, 120.0, now=1000.0)) == ["old", "exactly"]
    assert ids(policy.old_enough(candidates, 0.0, now=1000.0)) == ["old", "exactly", "just-pulled"]


def test_usage_is_the_used_percent_rounded_down_on_what_is_available():
    assert policy.usage_percent(100 * GIB, 15 * GIB) == 85
    assert policy.usage_percent(100 * GIB, 15 * GIB + 1) == 85  # 84.99..% used is shown as 85, as the kubelet does
    assert policy.usage_percent(100 * GIB, 16 * GIB) == 84


def test_at_the_high_threshold_it_frees_down_to_the_low_one_and_below_it_nothing():
    gc = ImageGCSettings(high_threshold_percent=85, low_threshold_percent=80)
    assert policy.bytes_to_free(100 * GIB, 15 * GIB, gc) == 5 * GIB  # 85% used: to 80%
    assert policy.bytes_to_free(100 * GIB, 10 * GIB, gc) == 10 * GIB
    assert policy.bytes_to_free(100 * GIB, 16 * GIB, gc) == 0  # 84%: below the high threshold
    never = ImageGCSettings(high_threshold_percent=100, low_threshold_percent=80)
    assert policy.bytes_to_free(100 * GIB, 1 * GIB, never) == 0  # 99%
    assert policy.bytes_to_free(100 * GIB, 0, never) == 20 * GIB  # full


def test_collection_runs_unless_neither_usage_nor_age_can_trigger_it():
    assert policy.collection_enabled(ImageGCSettings())
    assert not policy.collection_enabled(ImageGCSettings(high_threshold_percent=100))
    assert policy.collection_enabled(ImageGCSettings(high_threshold_percent=100, maximum_age=3600.0))


def test_the_sandbox_image_is_read_from_containerd_1_and_2_status():
    assert policy.sandbox_image({"config": json.dumps({"sandboxImage": "registry.k8s.io/pause:3.9"})}) == \
        "registry.k8s.io/pause:3.9"
    assert policy.sandbox_image({"config": json.dumps({"pinnedImages": {"sandbox": "registry.k8s.io/pause:3.10"}})}) \
        == "registry.k8s.io/pause:3.10"
    for info in ({}, {"config": "not json"}, {"config": "[]"}, {"config": json.dumps({"sandboxImage": 3})}):
        assert policy.sandbox_image(info) == ""


def test_the_shortfall_message_is_the_kubelets():
    assert policy.shortfall_message(100 * GIB, 10 * GIB, 1234) == (
        "Insufficient free disk space on the node's image filesystem (90% of 100.0 GiB used). Failed to free "
        "sufficient space by deleting unused images (freed 1234 bytes). Investigate disk usage, as it could be "
        "used by active images, logs, volumes, or other data.")
    assert [policy.format_size(n) for n in (512, 1536, 5 << 20, 3 << 40)] == ["512 B", "1.5 KiB", "5.0 MiB",
                                                                            "3.0 TiB"]
