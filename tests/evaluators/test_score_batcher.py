"""The evaluator batcher: requests of many callers merged per evaluator, each answered alone."""

from __future__ import annotations

import io

import pytest

from genloop.evaluators import ScoreBatcher, load_image
from genloop.sdk.errors import Cancelled, Permanent


@pytest.fixture
def batcher():
    # A long window: the batch forms when the cap is reached, so the batch log is exact.
    b = ScoreBatcher(window=30.0, max_images=6)
    yield b
    b.close()


def test_requests_with_different_prompts_share_one_call_and_match_scoring_alone(
        batcher, clip_judge, images):
    # Given three requests, two prompts, six images in all
    asks = [(images[:2], "a red square"), (images[2:5], "a blue square"),
            (images[5:6], "a red square")]

    futures = [batcher.submit(clip_judge, ims, text) for ims, text in asks]

    # Then each request got what scoring it alone gives, and one call scored them all
    for future, (ims, text) in zip(futures, asks, strict=True):
        alone = clip_judge.score(ims, text)
        assert future.result(30).values == pytest.approx(alone.values, abs=1e-4)
    assert batcher.batches == [(clip_judge.identity, 6, 3)]


def test_a_bad_request_fails_alone_and_a_cancelled_one_is_dropped(batcher, clip_judge, images):
    def cancelled():
        raise Cancelled("run was cancelled")

    good = batcher.submit(clip_judge, images[:3], "a red square")
    bad = batcher.submit(clip_judge, ["not an image"], "a red square")
    gone = batcher.submit(clip_judge, images[3:5], "a red square", check=cancelled)

    assert len(good.result(30).values) == 3
    with pytest.raises(Permanent):
        bad.result(30)
    with pytest.raises(Cancelled):
        gone.result(30)
    # the failed shared call, then each of its requests alone; the cancelled one never ran
    assert [n for _, n, _ in batcher.batches] == [4, 3, 1]


def test_an_image_from_memory_scores_as_its_png_does(clip_judge, images):
    # The image cache skips a PNG round trip; PNG is lossless, so the score cannot move.
    from genloop.workers.models.image_cache import ImageCache

    cache = ImageCache(maxsize=1)
    buf = io.BytesIO()
    images[6].save(buf, format="PNG")
    cache.put("k1", images[6])
    cache.put("k2", images[7])  # evicts k1

    assert cache.get("k1") is None and cache.get("k2") is images[7]
    decoded = load_image(buf.getvalue())
    assert clip_judge.score([images[6]], "noise").values == clip_judge.score(
        [decoded], "noise").values


def test_a_request_after_a_quiet_spell_is_scored_at_once(clip_judge, images):
    # Given a batcher whose window is long, timed by a clock moved by hand, and a first
    # request that fills a call at once
    now = [0.0]
    batcher = ScoreBatcher(window=2.0, max_images=4, clock=lambda: now[0])
    try:
        batcher.submit(clip_judge, images[:4], "a red square").result(30)
        now[0] += 2.01  # nothing comes for longer than the window: one loop between rounds
        # When a request comes that does not fill a call (one loop's next round)
        late = batcher.submit(clip_judge, images[4:5], "a red square")
        # Then it is scored alone at once: waiting for company (the window, by a clock that no
        # longer moves) would never end
        late.result(10)
        assert batcher.batches[-1] == (clip_judge.identity, 1, 1)
    finally:
        batcher.close()


def test_an_interactive_request_is_scored_before_batch_requests_queued_ahead_of_it(
        clip_judge, images):
    batcher = ScoreBatcher(window=0.2, max_images=4)
    try:
        # Given two batch-lane requests queued, then an interactive one, all at once
        with batcher._cond:  # the serving thread sees all three together
            queued = [batcher.submit(clip_judge, images[i:i + 3], "a red square",
                                     priority="batch") for i in (0, 3)]
            agent = batcher.submit(clip_judge, images[:2], "a red square")
        for future in [*queued, agent]:
            future.result(30)
        # Then the interactive one was scored first, and then the batch ones in their order
        assert [size for _, size, _ in batcher.batches] == [2, 3, 3]
    finally:
        batcher.close()
