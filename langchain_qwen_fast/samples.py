"""Sample data shared by the examples, the tests and the benchmark: one home for each.

* :data:`AG_NEWS_LABELS`: the four AG News classes, the label set of every demo.
* :data:`SAMPLE_HEADLINES`: a few real-looking headlines, one or more per class.
* :data:`SAMPLE_EXAMPLES`: eight labelled headlines, two per class, for few-shot prompts.
* :func:`headlines`: short synthetic headlines, distinct, as many as asked.
* :func:`news_items`: distinct news paragraphs of about 60 tokens (a classifier prompt of
  about 100 tokens), the benchmark's texts.
"""

from __future__ import annotations

AG_NEWS_LABELS: tuple[str, ...] = ("World", "Sports", "Business", "Sci/Tech")
"""AG News's classes, in its class-index order (1-4)."""

AG_NEWS_INDEX: dict[str, str] = {str(i + 1): label for i, label in enumerate(AG_NEWS_LABELS)}
"""AG News's CSV class index -> label."""

SAMPLE_HEADLINES: tuple[str, ...] = (
    "Stocks rally as the central bank signals rate cuts",
    "Champions League: late goal sends holders through to the final",
    "UN Security Council meets over border clashes",
    "New chip doubles battery life of laptops, maker says",
    "Oil giant reports record quarterly profit",
    "Rover finds signs of ancient water on Mars",
)

SAMPLE_EXAMPLES: tuple[tuple[str, str], ...] = (
    ("Ceasefire talks resume as envoys arrive in the capital", "World"),
    ("Parliament votes to hold an early election next spring", "World"),
    ("Late equaliser keeps the title race open", "Sports"),
    ("Veteran striker signs a two-year deal with the champions", "Sports"),
    ("Central bank holds rates as inflation cools", "Business"),
    ("Retailer's shares jump on a surprise profit", "Business"),
    ("New battery chemistry doubles charging speed", "Sci/Tech"),
    ("Space telescope spots water vapour on a distant planet", "Sci/Tech"),
)
"""Eight labelled AG News-style examples, two per class, for few-shot prompts."""

_SUBJECTS = ("Stocks", "The striker", "Parliament", "A new chip", "Oil prices", "The coach", "Rebels", "NASA")
_VERBS = ("rally after", "fall before", "surprise analysts with", "shrug off", "react to", "win")
_OBJECTS = ("the rate decision", "a late goal", "the ceasefire talks", "quarterly results", "a launch")
_SOURCES = (
    "Officials said on Tuesday that the move followed weeks of talks behind closed doors",
    "People familiar with the matter said the plan had been drafted over the summer",
    "A spokesperson declined to comment beyond a short written statement issued overnight",
    "Local reporters described crowded scenes outside the main building late in the evening",
)
_OUTLOOKS = (
    "and analysts expect further moves before the end of the quarter as markets adjust.",
    "while critics warned that the details could still change once the full text is published.",
    "and several rivals are expected to respond with announcements of their own next week.",
)
_CITIES = ("Geneva", "São Paulo", "Nairobi", "Seoul", "Chicago", "Madrid", "Jakarta")
_HEADS = tuple(f"{s} {v} {o}" for s in _SUBJECTS for v in _VERBS for o in _OBJECTS)


def headlines(n: int) -> list[str]:
    """``n`` distinct short headlines (the first 240 are plain; later ones are numbered)."""
    return [_HEADS[i] if i < len(_HEADS) else f"{_HEADS[i % len(_HEADS)]} ({i // len(_HEADS)})" for i in range(n)]


def news_items(n: int) -> list[str]:
    """``n`` distinct news-like paragraphs of about 60 tokens (a prompt of about 100 tokens
    with the classifier's instructions); no two alike, so the prefix cache gets no free hits."""
    return [
        f"{_HEADS[i % len(_HEADS)]}, report {i}. {_SOURCES[i % len(_SOURCES)]}, {_OUTLOOKS[i % len(_OUTLOOKS)]}"
        f" Filed from {_CITIES[i % len(_CITIES)]} at {i % 24:02d}:{i % 60:02d} local time, updated later."
        for i in range(n)
    ]
