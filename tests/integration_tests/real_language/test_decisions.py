"""Decision answers checked for meaning on real language: SmolLM2-135M-Instruct, a real
pretrained model, on natural headlines written by hand
(:data:`~langchain_qwen_fast.testing.samples.NATURAL_NEWS`).

What a model of 135 M parameters gives zero-shot through ``QwenDecisionModel`` (prompts in its
own chat template) is weak, and the tests say how weak: a ``Noul`` that ranks sport headlines
above the rest better than chance, but not by much (an AUC); a ``Choice`` among the four topics
whose probabilities move the right way (each topic's mean probability higher on its own
headlines than on the others') and whose probability of Sports ranks sport headlines clearly
above the rest (an AUC), though its choice itself is often wrong; and a ``Score`` of a review's
sentiment that moves the right way (higher on good reviews than on bad ones, by little). A
``Choice`` that is right most of the time comes from a classifier trained on generated
headlines (:meth:`~langchain_qwen_fast.QwenClassifier.as_decision_model`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from statistics import fmean
from typing import Any

import pytest
from langchain_core.decisions import Choice, Noul, Question, Score

from langchain_qwen_fast import QwenClassifier, QwenDecisionModel
from langchain_qwen_fast.testing.samples import NATURAL_NEWS
from tests.integration_tests.real_language.conftest import LABELS, SMOLLM2_NAME, background_jobs

__all__ = ["background_jobs"]  # the integration conftest plans the package's training runs through it

pytestmark = pytest.mark.filterwarnings("ignore::langchain_core._api.beta_decorator.LangChainBetaWarning")

SPORT = Noul(instructions="Is this headline about sport?")
TOPIC = Choice(
    instructions="Which section of the newspaper is this headline for?",
    criteria={
        "World": "World news and politics.",
        "Sports": "Sport.",
        "Business": "Business and the economy.",
        "Sci/Tech": "Science and technology.",
    },
)
SENTIMENT = Score(
    instructions="How positive is this review?",
    criteria=["Very negative.", "Negative.", "Neutral.", "Positive.", "Very positive."],
)
#: Short reviews written by hand for this test, with the stars their writer would give (1-5).
REVIEWS: tuple[tuple[str, int], ...] = (
    ("Terrible. It broke after two days and support never answered.", 1),
    ("Awful food, rude staff, and we waited an hour. Never again.", 1),
    ("A complete waste of money; the worst purchase I have made.", 1),
    ("Disappointing. The battery barely lasts a morning.", 2),
    ("Not great: the room was noisy and the bed was hard.", 2),
    ("It works, but the instructions were confusing and it feels cheap.", 2),
    ("Okay for the price. Nothing special, nothing wrong.", 3),
    ("Average film; a few good scenes but too long.", 3),
    ("Decent coffee, slow service, fair prices.", 3),
    ("Good value and it arrived quickly. I'm happy with it.", 4),
    ("Nice hotel with friendly staff and a great breakfast.", 4),
    ("Solid headphones; comfortable and the sound is clear.", 4),
    ("Absolutely wonderful! The best meal I have had in years.", 5),
    ("I love it. Perfect in every way, highly recommended!", 5),
    ("Brilliant book, I could not put it down. A masterpiece.", 5),
)
#: The least AUC of the sport question's probability of yes over the natural headlines: better
#: than chance (0.5) by a margin that 56 headlines can show, no more (a yes/no question is what
#: a small model answers worst zero-shot).
MIN_NOUL_AUC = 0.58
#: The least AUC of the topic Choice's probability of Sports over the natural headlines.
MIN_CHOICE_SPORT_AUC = 0.85
#: The least accuracy of the trained classifier's Choice on the natural headlines.
MIN_TRAINED_CHOICE_ACCURACY = 0.85


def _auc(scores: list[float], positive: list[bool]) -> float:
    """The area under the ROC curve: the chance that a positive item scores above a negative one
    (ties count half)."""
    pos = [s for s, p in zip(scores, positive) if p]
    neg = [s for s, p in zip(scores, positive) if not p]
    wins = sum((a > b) + 0.5 * (a == b) for a in pos for b in neg)
    return wins / (len(pos) * len(neg))


@pytest.fixture(scope="module")
def answers(smollm2_url: str) -> dict[str, list[Any]]:
    """Each question's answers, zero-shot, over the natural headlines (the Noul, the Choice) or the
    reviews (the Score): each question asked on its own (a set of one question is asked right
    after the text, as a classifier's prompt is)."""
    decisions = QwenDecisionModel(base_url=smollm2_url, model=SMOLLM2_NAME)
    asked: dict[str, tuple[Question, Sequence[tuple[str, Any]]]] = {
        "sport": (SPORT, NATURAL_NEWS),
        "topic": (TOPIC, NATURAL_NEWS),
        "sentiment": (SENTIMENT, REVIEWS),
    }
    return {
        name: decisions.batch([{"state": text, "questions": {name: question}} for text, _ in states])
        for name, (question, states) in asked.items()
    }


def test_a_noul_ranks_sport_headlines_above_the_others(answers: dict[str, list[Any]]) -> None:
    """The probability of yes to "about sport?" is higher on sport headlines than on the others
    more often than chance would have it."""
    yes = [a.nouls["sport"].noul for a in answers["sport"]]
    auc = _auc(yes, [label == "Sports" for _, label in NATURAL_NEWS])
    print(f"Noul 'sport?': AUC {auc:.3f}, mean P(yes) {fmean(yes):.3f}")
    assert auc >= MIN_NOUL_AUC


def test_a_choice_s_probabilities_move_the_right_way(answers: dict[str, list[Any]]) -> None:
    rows = [(a.choices["topic"].probabilities, y) for a, (_, y) in zip(answers["topic"], NATURAL_NEWS)]
    for label in LABELS:
        own = fmean(p[label] for p, y in rows if y == label)
        others = fmean(p[label] for p, y in rows if y != label)
        print(f"Choice {label:<9} own {own:.3f} others {others:.3f}")
        assert own > others, label


def test_a_choice_s_probability_of_sports_ranks_sport_headlines_first(answers: dict[str, list[Any]]) -> None:
    """The topic Choice's probability of Sports separates sport headlines from the rest well, even
    where its choice is another topic."""
    chosen = [a.choices["topic"] for a in answers["topic"]]
    right = sum(c.choice == label for c, (_, label) in zip(chosen, NATURAL_NEWS))
    auc = _auc([c.probabilities["Sports"] for c in chosen], [label == "Sports" for _, label in NATURAL_NEWS])
    print(f"Choice: {right} of {len(NATURAL_NEWS)} right; P(Sports) AUC {auc:.3f}")
    assert auc >= MIN_CHOICE_SPORT_AUC


def test_a_score_moves_the_right_way(answers: dict[str, list[Any]]) -> None:
    rows = [(a.scores["sentiment"].score, stars) for a, (_, stars) in zip(answers["sentiment"], REVIEWS)]
    good = fmean(score for score, stars in rows if stars >= 4)
    bad = fmean(score for score, stars in rows if stars <= 2)
    print(f"Score 'how positive': 4-5 star reviews {good:.3f}, 1-2 star reviews {bad:.3f} (levels 0-4)")
    assert good > bad


def test_a_trained_classifier_s_choice_is_mostly_right(
    sft_adapter: tuple[Path, dict[str, Any]], smollm2_url: str
) -> None:
    classifier = QwenClassifier.load(sft_adapter[0], base_url=smollm2_url)
    decisions = classifier.as_decision_model()
    question = {"topic": Choice(instructions="Which section?", criteria=dict.fromkeys(LABELS))}
    answered = decisions.batch([{"state": text, "questions": question} for text, _ in NATURAL_NEWS])
    right = sum(a.choices["topic"].choice == label for a, (_, label) in zip(answered, NATURAL_NEWS))
    print(f"trained classifier's Choice: {right} of {len(NATURAL_NEWS)} natural headlines")
    assert right / len(NATURAL_NEWS) >= MIN_TRAINED_CHOICE_ACCURACY
