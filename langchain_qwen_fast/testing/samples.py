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


# -- natural headlines, written by hand -----------------------------------------------------
# Written apart from the generator above (not composed from its phrase lists) and apart from
# the tests' own headlines, so that a model trained on generated rows is checked here on
# language it was not trained on the like of.
NATURAL_NEWS: tuple[tuple[str, str], ...] = (
    ("Floods displace tens of thousands across northern Bangladesh", "World"),
    ("Opposition leader jailed days before the vote, her party says", "World"),
    ("NATO allies pledge more air defence systems for Kyiv", "World"),
    ("Hostages freed after a week of negotiations in the Sahel", "World"),
    ("Japan and South Korea hold their first summit in twelve years", "World"),
    ("Coup leaders suspend the constitution and close the borders", "World"),
    ("Pope calls for a truce during a visit to South Sudan", "World"),
    ("Voters in Chile reject the proposed new constitution", "World"),
    ("Gunmen attack a police station near the Afghan border", "World"),
    ("European leaders agree on a common asylum policy after all-night talks", "World"),
    ("Cyclone batters the coast of Mozambique, cutting power to millions", "World"),
    ("The king opens parliament with a speech setting out the government's plans", "World"),
    ("Israel and Egypt reopen the crossing for aid lorries", "World"),
    ("Mass grave found outside the city, investigators say", "World"),
    ("Quarterback throws four touchdowns in a playoff rout", "Sports"),
    ("Verstappen wins the Monaco Grand Prix from pole position", "Sports"),
    ("Injured midfielder will miss the rest of the season", "Sports"),
    ("Golfer sinks a long putt on the 18th to win the Masters", "Sports"),
    ("Australia bowled out for 152 on the opening day of the Test", "Sports"),
    ("Cyclist takes the yellow jersey after a brutal mountain stage", "Sports"),
    ("Boxer retains his heavyweight belt with a knockout in the ninth round", "Sports"),
    ("Serena Williams announces her retirement from tennis", "Sports"),
    ("Manager sacked after the club slips into the bottom three", "Sports"),
    ("Swimmer wins her fifth gold medal of the Games", "Sports"),
    ("The Warriors clinch the series with a win in game six", "Sports"),
    ("Rugby side names an unchanged fifteen for the Six Nations opener", "Sports"),
    ("Referee's decision sparks fury as the visitors snatch a draw", "Sports"),
    ("Ski champion crashes out of the downhill in Kitzbühel", "Sports"),
    ("Shares in the carmaker slump after it cuts its sales forecast", "Business"),
    ("Supermarket chain to close forty stores and cut two thousand jobs", "Business"),
    ("Dollar weakens as traders bet on a slower economy", "Business"),
    ("Bank agrees to pay a $3 billion fine to settle fraud charges", "Business"),
    ("Housing prices fall for the sixth month in a row", "Business"),
    ("Brewer buys a craft beer maker for 1.2 billion euros", "Business"),
    ("Factory orders drop sharply as exports slow", "Business"),
    ("The pharmaceutical group raises its dividend after strong sales", "Business"),
    ("Gold hits a record high as investors seek safety", "Business"),
    ("Union and employers reach a wage deal, ending the strike at the ports", "Business"),
    ("Startup raises $200 million from venture investors at a higher valuation", "Business"),
    ("Mortgage rates climb to the highest level since 2008", "Business"),
    ("Steelmaker files for bankruptcy protection", "Business"),
    ("Consumer prices rose 3.1 percent in the year to March", "Business"),
    ("Researchers build a robot that learns to walk in an hour", "Sci/Tech"),
    ("Apple unveils a headset for mixed reality", "Sci/Tech"),
    ("Comet visible to the naked eye for the first time in decades", "Sci/Tech"),
    ("Virus spreads through email attachments, security firms warn", "Sci/Tech"),
    ("Google opens its chatbot to more users", "Sci/Tech"),
    ("Fossil of a feathered dinosaur unearthed in China", "Sci/Tech"),
    ("Engineers test a reactor that could make fusion power practical", "Sci/Tech"),
    ("Open-source developers release a new version of the Linux kernel", "Sci/Tech"),
    ("Study finds that coral reefs can recover from bleaching", "Sci/Tech"),
    ("The new console sells out within minutes of going on sale", "Sci/Tech"),
    ("Telescope captures the sharpest image yet of a black hole", "Sci/Tech"),
    ("Wireless carriers begin switching on faster 5G networks", "Sci/Tech"),
    ("Doctors use a gene therapy to restore sight in blind patients", "Sci/Tech"),
    ("Spacecraft crashes into an asteroid in a test of planetary defence", "Sci/Tech"),
)
"""56 natural news headlines written by hand, 14 per :data:`AG_NEWS_LABELS` class: the held-out
set on which a model trained on :func:`labelled_news` is checked for reading language."""

NATURAL_REVIEW_POOL: tuple[tuple[str, str], ...] = (
    ("Troops pull back from the disputed island after talks", "World"),
    ("Thousands march in the capital against the new security law", "World"),
    ("The ambassador is expelled over spying claims", "World"),
    ("Drought leaves millions facing hunger in the Horn of Africa", "World"),
    ("Monarch dies at 96 after seventy years on the throne", "World"),
    ("Militants seize a town on the highway to the port", "World"),
    ("Ministers from both Koreas meet at the border village", "World"),
    ("Rescue ships pick up migrants in the Mediterranean", "World"),
    ("Pitcher throws a no-hitter against the Red Sox", "Sports"),
    ("Jockey rides the favourite to victory in the Derby", "Sports"),
    ("Fans invade the pitch after the final whistle", "Sports"),
    ("Point guard scores 50 in an overtime win", "Sports"),
    ("Team doctor says the winger needs knee surgery", "Sports"),
    ("Runner sets a course record at the Boston Marathon", "Sports"),
    ("The club's owner puts the team up for sale after relegation", "Sports"),
    ("Batsman hits a century as England level the series", "Sports"),
    ("Chipmaker's sales beat forecasts, lifting its shares", "Business"),
    ("Bank of England leaves interest rates unchanged", "Business"),
    ("Carmaker recalls half a million vehicles over faulty brakes", "Business"),
    ("Oil firm agrees to sell its refineries for $4 billion", "Business"),
    ("Jobless claims rise for a third week", "Business"),
    ("Luxury group reports a jump in sales in China", "Business"),
    ("The euro falls against the dollar after weak factory data", "Business"),
    ("Shipping costs soar as the canal stays closed", "Business"),
    ("Scientists grow human cells inside a pig embryo", "Sci/Tech"),
    ("Software flaw lets attackers take over routers", "Sci/Tech"),
    ("Probe lands on the far side of the Moon", "Sci/Tech"),
    ("Tech firm launches a phone with a folding screen", "Sci/Tech"),
    ("Physicists measure the mass of the neutrino more precisely", "Sci/Tech"),
    ("Self-driving taxis start carrying passengers in Phoenix", "Sci/Tech"),
    ("Archaeologists use lasers to map a lost Maya city", "Sci/Tech"),
    ("Web browser adds protection against tracking", "Sci/Tech"),
)
"""32 more natural headlines written by hand, 8 per class, apart from :data:`NATURAL_NEWS`: the
pool a review round labels (a person's answers: these labels) for the next training run."""
