"""Sample data shared by the examples, the tests and the benchmark: one home for each.

* :data:`AG_NEWS_LABELS`: the four AG News classes, the label set of every demo.
* :data:`SAMPLE_HEADLINES`: a few real-looking headlines, one or more per class.
* :data:`SAMPLE_EXAMPLES`: eight labelled headlines, two per class, for few-shot prompts.
* :func:`headlines`: short synthetic headlines, distinct, as many as asked.
* :func:`news_items`: distinct news paragraphs of about 60 tokens (a classifier prompt of
  about 100 tokens), the benchmark's texts.
* :func:`labelled_news`: generated (headline, label) pairs over :data:`AG_NEWS_LABELS`.
* :func:`multi_labelled_news`: generated headlines that mention one to three of those topics,
  each with the list of topics it mentions.
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


def news_items(n: int, start: int = 0) -> list[str]:
    """``n`` distinct news-like paragraphs of about 60 tokens (a prompt of about 100 tokens
    with the classifier's instructions); no two alike, so the prefix cache gets no free hits.
    ``start`` picks where in the (endless, fixed) sequence they begin."""
    return [
        f"{_HEADS[i % len(_HEADS)]}, report {i}. {_SOURCES[i % len(_SOURCES)]}, {_OUTLOOKS[i % len(_OUTLOOKS)]}"
        f" Filed from {_CITIES[i % len(_CITIES)]} at {i % 24:02d}:{i % 60:02d} local time, updated later."
        for i in range(start, start + n)
    ]


# -- a generated, labelled news data set ----------------------------------------------------
# Each class has its own phrases; a headline joins two of its class's phrases with a neutral
# verb and, often, a neutral tail. The label is learnable from the words (the phrases), so a
# model trained on it labels AG News-style headlines, SAMPLE_HEADLINES included, sensibly.
_TOPIC_PHRASES: dict[str, tuple[str, ...]] = {
    "World": (
        "the UN Security Council",
        "border clashes",
        "ceasefire talks",
        "the prime minister",
        "parliament",
        "envoys",
        "the embassy",
        "rebels",
        "refugees",
        "the foreign minister",
        "a peace deal",
        "sanctions",
        "the election",
        "troops",
        "the president",
        "protesters",
        "the capital",
        "diplomats",
        "the summit",
        "a coalition government",
        "the opposition leader",
        "aid convoys",
        "the military junta",
        "a referendum",
    ),
    "Sports": (
        "the striker",
        "a late goal",
        "the Champions League",
        "the coach",
        "the final",
        "the holders",
        "the title race",
        "the goalkeeper",
        "a hat-trick",
        "the World Cup",
        "the champions",
        "the captain",
        "the league leaders",
        "a penalty shoot-out",
        "the tennis star",
        "the semi-final",
        "the Olympic team",
        "the marathon",
        "the relegation battle",
        "the transfer window",
        "a world record",
        "the home crowd",
    ),
    "Business": (
        "stocks",
        "the central bank",
        "rate cuts",
        "quarterly profit",
        "the oil giant",
        "shareholders",
        "the merger",
        "investors",
        "inflation",
        "the retailer",
        "bond yields",
        "the stock market",
        "record earnings",
        "the bank",
        "a takeover bid",
        "the chief executive",
        "oil prices",
        "the IPO",
        "consumer spending",
        "the trade deficit",
        "the airline",
        "revenue",
        "the hedge fund",
        "a rally",
    ),
    "Sci/Tech": (
        "a new chip",
        "the rover",
        "Mars",
        "battery life",
        "laptops",
        "the space telescope",
        "the software update",
        "researchers",
        "a quantum computer",
        "the smartphone",
        "the satellite",
        "ancient water",
        "the AI model",
        "the chipmaker",
        "a vaccine trial",
        "the search engine",
        "robots",
        "the browser",
        "a data breach",
        "the physicists",
        "gene editing",
        "the processor",
        "the app",
        "the launch of a rocket",
    ),
}
_NEUTRAL_VERBS = (
    "meets",
    "faces",
    "welcomes",
    "rejects",
    "backs",
    "surprises",
    "joins",
    "doubles",
    "signals",
    "finds",
    "reports",
    "sends",
    "questions",
    "boosts",
    "delays",
    "confirms",
    "beats",
    "warns",
)
_NEUTRAL_TAILS = (
    "",
    "",
    "",
    " on Tuesday",
    " after weeks of talks",
    ", sources say",
    " amid uncertainty",
    " again",
    ", officials say",
    " for the first time",
    " this week",
    " despite doubts",
    " in a surprise move",
)


def labelled_news(n: int, seed: int = 0) -> list[tuple[str, str]]:
    """``n`` generated (headline, label) pairs over :data:`AG_NEWS_LABELS`, classes in turn,
    reproducible from ``seed``. The label follows from the headline's topic phrases (two from
    its class), so a model can learn it; different seeds give different headlines."""
    import random

    rng = random.Random(seed)
    items = []
    for i in range(n):
        label = AG_NEWS_LABELS[i % len(AG_NEWS_LABELS)]
        first, second = rng.sample(_TOPIC_PHRASES[label], 2)
        text = f"{first} {rng.choice(_NEUTRAL_VERBS)} {second}{rng.choice(_NEUTRAL_TAILS)}"
        items.append((text[0].upper() + text[1:], label))
    return items


def multi_labelled_news(n: int, seed: int = 0) -> list[tuple[str, tuple[str, ...]]]:
    """``n`` generated (headline, labels) pairs over :data:`AG_NEWS_LABELS`, reproducible from
    ``seed``: a headline mentions one topic (two of its phrases, as in :func:`labelled_news`),
    two (one phrase each, two in five headlines) or three (one in five), and its labels are the
    topics it mentions, in :data:`AG_NEWS_LABELS` order. Each label applies to about 45 % of
    the headlines; different seeds give different headlines."""
    import random

    rng = random.Random(seed)
    items = []
    for _ in range(n):
        count = rng.choice((1, 1, 2, 2, 3))
        topics = rng.sample(AG_NEWS_LABELS, count)
        if count == 1:
            phrases = rng.sample(_TOPIC_PHRASES[topics[0]], 2)
        else:
            phrases = [rng.choice(_TOPIC_PHRASES[topic]) for topic in topics]
        text = f"{phrases[0]} {rng.choice(_NEUTRAL_VERBS)} {phrases[1]}"
        if count == 3:
            text += f" {rng.choice(('over', 'with', 'and'))} {phrases[2]}"
        text += rng.choice(_NEUTRAL_TAILS)
        items.append((text[0].upper() + text[1:], tuple(x for x in AG_NEWS_LABELS if x in topics)))
    return items
