"""Zero-shot classification on real language: SmolLM2-135M-Instruct, a real pretrained model
(not Qwen3), served by vLLM through the project's launcher.

The headlines below were written by hand for this test, apart from any generator in the
project (:mod:`langchain_qwen_fast.testing.samples` makes the others), so the check is of the
model reading language: for each label, its mean probability over the headlines of that label
is higher than over the headlines of the other labels.
"""

from __future__ import annotations

import math
from statistics import fmean

from langchain_qwen_fast import Classification, QwenClassifier
from tests.integration_tests.conftest import NEWS_LABELS
from tests.integration_tests.real_language.conftest import SMOLLM2_NAME, background_jobs

__all__ = ["background_jobs"]  # the integration conftest plans the package's training runs through it

#: Six natural headlines per AG News label, written by hand.
HEADLINES: dict[str, list[str]] = {
    "World": [
        "Earthquake in central Turkey kills hundreds as rescuers dig through rubble",
        "Prime minister resigns after losing confidence vote in parliament",
        "Thousands flee their homes as rebels advance on the capital",
        "Peace talks between the government and the rebels resume in Geneva",
        "Election observers report widespread fraud in the presidential vote",
        "Foreign ministers meet in Brussels to discuss sanctions on the regime",
    ],
    "Sports": [
        "Striker scores twice as United beat City in the derby",
        "Defending champion advances to the Wimbledon quarter-finals",
        "Lakers rally in the fourth quarter to beat the Celtics",
        "Sprinter breaks the world record in the 100 metres final",
        "Coach fired after the team's fifth straight defeat",
        "Yankees sign star pitcher to a record contract",
    ],
    "Business": [
        "Oil prices climb as OPEC agrees to cut production",
        "Retailer's shares tumble after weak quarterly earnings",
        "Central bank raises interest rates to fight inflation",
        "Airline agrees to buy its rival in a $2 billion deal",
        "Unemployment falls to its lowest level in a decade",
        "Stocks close higher on Wall Street as investors cheer strong profits",
    ],
    "Sci/Tech": [
        "NASA probe sends back the first images from the surface of Mars",
        "Microsoft releases a security patch for a critical Windows flaw",
        "Scientists sequence the genome of the honeybee",
        "New smartphone chip promises twice the battery life",
        "Astronomers discover a planet orbiting a nearby star",
        "Hackers steal millions of passwords from a social network",
    ],
}


def _table(means: dict[str, tuple[float, float]]) -> str:
    rows = [f"{label:<9} {own:.3f} {others:.3f}" for label, (own, others) in means.items()]
    return "\n".join(["label     own   others", *rows])


def test_zero_shot_probabilities_move_the_right_way(smollm2_url: str) -> None:
    assert set(HEADLINES) == set(NEWS_LABELS)
    classifier = QwenClassifier(labels=NEWS_LABELS, base_url=smollm2_url, model=SMOLLM2_NAME)
    texts = [(label, text) for label, group in HEADLINES.items() for text in group]
    results = classifier.batch([text for _, text in texts])
    for result in results:
        assert isinstance(result, Classification) and result.scores is not None
        assert math.isclose(sum(result.scores.values()), 1.0, rel_tol=1e-9)
    # (mean probability of the label over its own headlines, over the other labels' headlines)
    means = {
        label: (
            fmean(r.scores[label] for (truth, _), r in zip(texts, results) if truth == label and r.scores),
            fmean(r.scores[label] for (truth, _), r in zip(texts, results) if truth != label and r.scores),
        )
        for label in NEWS_LABELS
    }
    print(_table(means))
    wrong = [label for label, (own, others) in means.items() if own <= others]
    assert not wrong, f"labels whose probability is no higher on their own headlines: {wrong}\n{_table(means)}"
