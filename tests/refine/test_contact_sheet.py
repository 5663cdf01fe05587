"""The demo's contact sheet marks each candidate with the shapes checker's verdict."""

from __future__ import annotations

import io

import numpy as np

from genloop import shapes
from genloop.sdk import ScoredCandidate
from genloop.sdk.models import RoundSummary
from genloop.workers.cli.contact_sheet import RIGHT, WRONG, contact_sheet
from genloop.workers.cli.demo import shapes_verdict

CAPTION = "a large red circle in the centre, black background"


def _png(image) -> bytes:
    buf = io.BytesIO()
    image.save(buf, format="PNG")
    return buf.getvalue()


def test_the_sheet_prints_the_checkers_verdict_beside_each_score():
    right = shapes.dataset.render(shapes.parse_caption(CAPTION))
    wrong = shapes.dataset.render(shapes.parse_caption(CAPTION.replace("red", "blue")))
    store = {"right": _png(right), "wrong": _png(wrong)}
    cands = [ScoredCandidate(index=i, prompt=CAPTION, seed=i, model="shapes", artifact=key,
                             width=32, height=32, steps=20, score=s, evaluator="shapes-clip")
             for i, (key, s) in enumerate([("right", 30.0), ("wrong", 31.0)])]
    rounds = [RoundSummary(round=1, best_score=31.0, best=cands[1], candidates=cands)]
    grade = shapes_verdict(CAPTION)

    plain = np.asarray(contact_sheet(rounds, store.__getitem__))
    sheet = np.asarray(contact_sheet(rounds, store.__getitem__, grade))

    assert grade(right).ok and grade(wrong) == (False, "wrong colour")
    assert sheet.shape[0] > plain.shape[0]
    def text_pixels(img, colour):  # the font is anti-aliased: count pixels close to the ink
        return int((np.abs(img.astype(int) - colour).sum(axis=-1) < 60).sum())

    assert text_pixels(sheet, RIGHT) > text_pixels(plain, RIGHT)
    assert text_pixels(sheet, WRONG) > text_pixels(plain, WRONG)


def test_free_text_prompts_get_no_verdict():
    assert shapes_verdict("a red sneaker") is None


def test_two_object_prompts_get_a_verdict_naming_the_wrong_clause():
    pair = "a small red star left of a large blue square, white background"
    right = shapes.dataset.render(shapes.parse_caption(pair))
    swapped = shapes.dataset.render(shapes.parse_caption(pair.replace("left of", "right of")))
    grade = shapes_verdict(pair)

    assert grade(right).ok
    assert grade(swapped) == (False, "wrong relation")
