"""The models' state feed (GET /models/sse follows it) and a load's progress reports: every
change in order, a follower asleep until one comes, the feed closed at the drain, a record's
states and progress published as they change, progress throttled as llama-server's."""

from __future__ import annotations

import threading
import time

from localserve.models.load_progress import LOAD_PROGRESS_INTERVAL, LoadProgress, load_stages
from localserve.models.record import Record
from localserve.models.state_feed import StateFeed
from localserve.models.states import LOADED, LOADING, UNLOADED
from localserve.settings import Settings


class Entry:
    name = "m"


def test_a_follower_sees_every_change_from_where_it_started_in_order():
    feed = StateFeed()
    feed.publish("a", LOADING)
    since = feed.latest()
    feed.publish("a", LOADED)
    feed.publish("b", UNLOADED, "bad file")
    changes = feed.wait(since, 0)
    assert [(c.model, c.state, c.error) for c in changes] == [("a", LOADED, None), ("b", UNLOADED, "bad file")]
    assert feed.wait(changes[-1].number + 1, 0) == []


def test_a_follower_sleeps_until_a_change_and_wakes_at_once():
    feed = StateFeed()
    since = feed.latest()
    woke: list = []
    follower = threading.Thread(target=lambda: woke.append((feed.wait(since, 30), time.monotonic())))
    follower.start()
    time.sleep(0.2)
    assert not woke                 # asleep: no poll ends its wait
    published = time.monotonic()
    feed.publish("a", LOADING)
    follower.join(5)
    changes, at = woke[0]
    assert [c.state for c in changes] == [LOADING] and at - published < 1


def test_closing_the_feed_wakes_every_follower():
    feed = StateFeed()
    since = feed.latest()
    done = []
    followers = [threading.Thread(target=lambda: done.append(feed.wait(since, 30))) for _ in range(3)]
    for f in followers:
        f.start()
    feed.close()
    for f in followers:
        f.join(5)
    assert done == [[], [], []] and feed.closed


def test_a_follower_far_behind_gets_the_newest_kept():
    feed = StateFeed(kept=4)
    for i in range(10):
        feed.publish("a", LOADING, progress={"value": i})
    assert [c.number for c in feed.wait(0, 0)] == [6, 7, 8, 9]


def test_a_record_publishes_its_states_and_a_failure_once():
    feed = StateFeed()
    record = Record(Entry(), 300, feed)
    record.enter(LOADING)
    record.report_progress(["text_model"], "text_model", 0.25)
    record.enter(UNLOADED, failure="bad file")
    assert record.last_error == "bad file" and record.progress is None
    record.enter(LOADING)
    record.enter(LOADED)
    assert record.last_error is None
    assert [(c.state, c.error, c.progress) for c in feed.wait(0, 0)] == [
        (LOADING, None, None),
        (LOADING, None, {"stages": ["text_model"], "current": "text_model", "value": 0.25}),
        (UNLOADED, "bad file", None), (LOADING, None, None), (LOADED, None, None)]


def test_progress_reports_first_and_last_always_the_rest_throttled():
    now = [100.0]
    reports = []
    progress = LoadProgress(["text_model", "mmproj_model"], lambda *r: reports.append(r), clock=lambda: now[0])
    progress("text_model", 0.0)
    progress("text_model", 0.1)        # within the interval: dropped
    now[0] += LOAD_PROGRESS_INTERVAL
    progress.stage("text_model")(0.6)
    progress("text_model", 1.0)        # the last always goes out
    progress("mmproj_model", 0.0)      # another stage's first
    progress("spec_model", 0.0)        # not a stage of this load
    assert [(stage, value) for _, stage, value in reports] == [
        ("text_model", 0.0), ("text_model", 0.6), ("text_model", 1.0), ("mmproj_model", 0.0)]
    assert reports[0][0] == ["text_model", "mmproj_model"]


def test_the_stages_are_what_the_load_reads_in_its_order():
    assert load_stages(Settings()) == ["text_model"]
    assert load_stages(Settings(mmproj="p.gguf", speculative="draft")) == ["text_model", "mmproj_model", "spec_model"]
