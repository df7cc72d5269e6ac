"""What the docs check reads in the project's Markdown: the relative links and their anchors,
the raw result files a page cites, and the ``qwen-fast`` command lines a page shows.

Each ``*_problems`` function returns every broken item it finds as a :class:`Problem`
(``file:line: what``), so that one failing test lists them all. The parsing is what the pages
need, not a whole Markdown parser: fenced code blocks, inline code spans (which may wrap a
line), inline links and images, reference definitions, ATX headings and HTML anchors.
"""

from __future__ import annotations

import argparse
import re
import shlex
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote

ROOT = Path(__file__).resolve().parents[2]
RESULTS = Path("docs/results")
RESULTS_INDEX = RESULTS / "README.md"

#: the pages the check reads, as globs under the repository's root
DOC_GLOBS = ("README.md", "docs/**/*.md", "server/README.md", "benchmarks/README.md", "examples/**/*.md")

#: a raw result file's name: host, date, what it measured
RESULT_NAME = re.compile(r"(?<![\w.-])((?:cpu|h100|h200x2|h200)-\d{4}-\d\d-\d\d-[\w.-]*?\.(?:json|png))(?![\w-])")

_FENCE = re.compile(r"^\s{0,3}(`{3,}|~{3,})")
_HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)(?:\s+#+)?\s*$")
_CODE_SPAN = re.compile(r"(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)", re.DOTALL)
_LINK = re.compile(
    r"""!?\[(?:[^\[\]]|\[[^\]]*\])*\]                    # [text], with [brackets] inside
    \(\s*<?([^()\s<>]*(?:\([^()\s]*\)[^()\s<>]*)*)>?     # (target, with (parentheses) inside
    (?:\s+"[^"]*")?\s*\)                                 # an optional "title")
    """,
    re.VERBOSE,
)
_REFERENCE = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+\"[^\"]*\")?\s*$")
_HTML_ANCHOR = re.compile(r"<a\s[^>]*(?:id|name)=\"([^\"]+)\"")
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
#: ``qwen-fast`` as a command word (``.venv/bin/qwen-fast`` too): not inside ``langchain-qwen-fast``,
#: a path (``/etc/qwen-fast/``) or a longer name
_QWEN_FAST = re.compile(r"(?<![\w.-])qwen-fast(?=\s|$)")
_OPTION = re.compile(r"--?[A-Za-z][\w-]*")
#: words that end a ``qwen-fast`` command line: shell operators, and ``--``, after which the
#: words go to vLLM
_COMMAND_ENDS = {"|", "||", "&&", ";", "&", ">", ">>", "2>&1", "--"}


@dataclass(frozen=True)
class Problem:
    """One broken item of a page."""

    file: str
    line: int
    what: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.what}"


@dataclass(frozen=True)
class Block:
    """Consecutive lines of a page: a paragraph (or table) of prose, or one fenced code block's
    body. ``first_line`` is the 1-based number of its first line."""

    first_line: int
    text: str
    code: bool

    def line_of(self, offset: int) -> int:
        """The page's line number of the character at ``offset`` in :attr:`text`."""
        return self.first_line + self.text.count("\n", 0, offset)

    def code_spans(self) -> Iterator[tuple[int, str]]:
        """Every inline code span of this prose block: (line, its text on one line)."""
        for match in _CODE_SPAN.finditer(self.text):
            yield self.line_of(match.start()), " ".join(match.group(2).split())


@dataclass(frozen=True)
class Page:
    """One Markdown file, split into blocks."""

    path: Path
    name: str
    blocks: tuple[Block, ...]

    @classmethod
    def read(cls, path: Path, root: Path) -> Page:
        return cls.parse(path, path.relative_to(root).as_posix(), path.read_text(encoding="utf-8"))

    @classmethod
    def parse(cls, path: Path, name: str, text: str) -> Page:
        blocks: list[Block] = []
        lines: list[str] = []
        first = 0
        fence: str | None = None

        def close(code: bool) -> None:
            if lines or code:
                blocks.append(Block(first, "\n".join(lines), code))
            lines.clear()

        for number, line in enumerate(text.splitlines(), start=1):
            opening = _FENCE.match(line)
            if fence is None and opening:
                close(code=False)
                fence, first = opening.group(1), number + 1
            elif fence is not None and opening and opening.group(1).startswith(fence):
                close(code=True)
                fence = None
            elif fence is not None:
                lines.append(line)
            elif line.strip():
                if not lines:
                    first = number
                lines.append(line)
            else:
                close(code=False)
        close(code=fence is not None)
        return cls(path, name, tuple(blocks))

    def prose(self) -> Iterator[Block]:
        return (block for block in self.blocks if not block.code)

    def code_spans(self) -> Iterator[tuple[int, str]]:
        """Every inline code span of the prose: (line, its text)."""
        for block in self.prose():
            yield from block.code_spans()

    def link_targets(self) -> Iterator[tuple[int, str]]:
        """Every link, image and reference-definition target of the prose: (line, target)."""
        for block in self.prose():
            # Code spans are blanked, not removed, so that offsets keep their lines.
            text = _CODE_SPAN.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), block.text)
            for match in _LINK.finditer(text):
                yield block.line_of(match.start()), match.group(1)
            for offset, line in _line_offsets(text):
                reference = _REFERENCE.match(line)
                if reference:
                    yield block.line_of(offset), reference.group(1)

    def anchors(self) -> set[str]:
        """The ``#fragments`` GitHub gives this page: its headings' slugs and HTML anchors."""
        seen: dict[str, int] = {}
        anchors: set[str] = set()
        for block in self.prose():
            for line in block.text.splitlines():
                heading = _HEADING.match(line)
                if heading:
                    anchors.add(_unique(slug(heading.group(2)), seen))
                anchors.update(_HTML_ANCHOR.findall(line))
        return anchors


def _line_offsets(text: str) -> Iterator[tuple[int, str]]:
    offset = 0
    for line in text.split("\n"):
        yield offset, line
        offset += len(line) + 1


def _unique(base: str, seen: dict[str, int]) -> str:
    """GitHub's rule for repeated headings: the second ``x`` is ``x-1``, the third ``x-2``."""
    if base not in seen:
        seen[base] = 0
        return base
    seen[base] += 1
    return f"{base}-{seen[base]}"


def slug(heading: str) -> str:
    """A heading's anchor as GitHub makes it: the rendered text (markup dropped) lower-cased,
    every character but letters, digits, ``_``, ``-`` and spaces removed, spaces made ``-``."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = re.sub(r"<[^>]+>", "", text)
    text = text.replace("`", "").replace("**", "").replace("*", "")
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def doc_pages(root: Path = ROOT) -> list[Page]:
    """The pages the docs check reads."""
    paths = sorted({path for pattern in DOC_GLOBS for path in root.glob(pattern) if path.is_file()})
    return [Page.read(path, root) for path in paths]


# -- (a) relative links and anchors ----------------------------------------------------------
def link_problems(pages: Iterable[Page], root: Path = ROOT) -> list[Problem]:
    """Every relative link whose file or folder is missing, and every ``#anchor`` that names no
    heading of its page (the same page, or another Markdown file)."""
    pages = list(pages)
    anchors = {page.path.resolve(): page.anchors() for page in pages}
    problems = []
    for page in pages:
        for line, target in page.link_targets():
            if not target or _SCHEME.match(target):
                continue
            path_part, _, fragment = target.partition("#")
            path_part = unquote(path_part.split("?")[0])
            if path_part.startswith("/"):
                resolved = (root / path_part.lstrip("/")).resolve()
            elif path_part:
                resolved = (page.path.parent / path_part).resolve()
            else:
                resolved = page.path.resolve()
            if not resolved.exists() or not resolved.is_relative_to(root.resolve()):
                problems.append(Problem(page.name, line, f"link to a missing file: {target}"))
                continue
            if not fragment or resolved.suffix != ".md":
                continue
            if resolved not in anchors:
                anchors[resolved] = Page.read(resolved, root).anchors()
            if unquote(fragment) not in anchors[resolved]:
                problems.append(Problem(page.name, line, f"link to a missing anchor: {target}"))
    return problems


# -- (b) raw result files --------------------------------------------------------------------
def listed_results(index: Page) -> set[str]:
    """The raw files ``docs/results/README.md`` lists: each file name in code, and the ``.png``
    of a listed JSON file where its row says "`NAME.json`, `.png`"."""
    listed = set()
    for _, span in index.code_spans():
        listed.update(RESULT_NAME.findall(span))
    for block in index.prose():
        for json_name in re.findall(r"`([^`\s]+)\.json`,\s*`\.png`", block.text):
            listed.add(f"{json_name}.png")
    return listed


def raw_file_problems(pages: Iterable[Page], root: Path = ROOT) -> list[Problem]:
    """Every raw file a page cites (a link into ``docs/results/`` or a result file's name) that
    does not exist or that ``docs/results/README.md`` does not list, and every file in
    ``docs/results/`` that it does not list. A page there (``.md``: the index, the history) is
    no raw file."""
    results = root / RESULTS
    index = Page.read(root / RESULTS_INDEX, root)
    listed = listed_results(index)
    problems = []
    for page in pages:
        cited: list[tuple[int, str]] = []
        for line, target in page.link_targets():
            path_part = unquote(target.partition("#")[0])
            if not path_part or _SCHEME.match(path_part):
                continue
            resolved = (page.path.parent / path_part).resolve()
            if resolved.parent == results.resolve() and resolved.suffix != ".md":
                cited.append((line, resolved.name))
        for block in page.prose():
            for match in RESULT_NAME.finditer(block.text):
                cited.append((block.line_of(match.start()), match.group(1)))
        for line, name in sorted(set(cited)):
            if not (results / name).is_file():
                problems.append(Problem(page.name, line, f"cites a raw file that does not exist: {RESULTS / name}"))
            elif name not in listed:
                problems.append(Problem(page.name, line, f"cites a raw file {RESULTS_INDEX} does not list: {name}"))
    for path in sorted(results.iterdir()):
        if path.is_file() and path.suffix != ".md" and path.name not in listed:
            problems.append(Problem(index.name, 1, f"does not list the raw file {path.name}"))
    return problems


# -- (c) qwen-fast commands and options ------------------------------------------------------
def cli_options() -> dict[str, set[str]]:
    """Every ``qwen-fast`` subcommand's option strings, from the parser the command itself
    builds (``langchain_qwen_fast.cli.main.build_parser``); key ``""``: the top level's."""
    from langchain_qwen_fast.cli.main import build_parser

    parser = build_parser()
    # argparse has no public way to list a parser's options or subparsers.
    subcommands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    options = {name: set(sub._option_string_actions) for name, sub in subcommands.choices.items()}
    options[""] = set(parser._option_string_actions)
    return options


def shown_commands(page: Page) -> Iterator[tuple[int, list[str]]]:
    """Every ``qwen-fast`` command line the page shows, as (line, its words from the
    subcommand on, up to the first shell operator or ``--``): in code blocks (continued lines
    joined, comments dropped) and in inline code."""
    for block in page.blocks:
        if block.code:
            offset = 0
            for physical in re.split(r"(?<!\\)\n", block.text):
                line = block.line_of(offset)
                offset += len(physical) + 1
                yield from _commands_in(line, physical.replace("\\\n", " "))
        else:
            for line, span in block.code_spans():
                yield from _commands_in(line, span)


def _commands_in(line: int, text: str) -> Iterator[tuple[int, list[str]]]:
    text = re.sub(r"(^|\s)#.*", "", text)
    for match in _QWEN_FAST.finditer(text):
        rest = text[match.end() :]
        try:
            words = shlex.split(rest)
        except ValueError:
            words = rest.split()
        command = []
        for word in words:
            if word in _COMMAND_ENDS:
                break
            command.append(word.strip("[]"))
        yield line, command


def command_problems(pages: Iterable[Page], options: Mapping[str, set[str]]) -> list[Problem]:
    """Every shown ``qwen-fast`` command whose subcommand does not exist, and every option it
    gives that its subcommand's parser does not take."""
    problems = []
    for page in pages:
        for line, words in shown_commands(page):
            if not words:
                continue
            name, *rest = words
            if name.startswith("-"):
                name, rest = "", words
            elif name not in options:
                problems.append(Problem(page.name, line, f"`qwen-fast {name}`: no such subcommand"))
                continue
            for word in rest:
                option = _OPTION.fullmatch(word.split("=", 1)[0])
                if option and option.group(0) not in options[name]:
                    shown = f"qwen-fast {name}".rstrip()
                    problems.append(Problem(page.name, line, f"`{shown}` has no option {option.group(0)}"))
    return problems
