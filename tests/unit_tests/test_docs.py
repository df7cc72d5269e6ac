"""The docs stay true: every relative link and anchor resolves, every raw result file a page
cites exists and is listed in docs/results/README.md, and every ``qwen-fast`` command and
option a page shows exists in that subcommand's parser (what its ``--help`` prints).

The pages: README.md, docs/**/*.md, server/README.md, benchmarks/README.md, examples/**/*.md
(``tests.support.docs.DOC_GLOBS``). Each check's failure lists every broken item as
``file:line: what``. The checker's own tests below run it on small made-up pages, so that each
check is seen to fail."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.docs import (
    Page,
    Problem,
    cli_options,
    command_problems,
    doc_pages,
    link_problems,
    raw_file_problems,
    shown_commands,
    slug,
)


def fail_on(problems: list[Problem]) -> None:
    """Fail with every broken item, one ``file:line: what`` a line."""
    if problems:
        pytest.fail(f"{len(problems)} broken:\n" + "\n".join(map(str, problems)), pytrace=False)


@pytest.fixture(scope="module")
def pages() -> list[Page]:
    return doc_pages()


def test_the_check_reads_every_page(pages: list[Page]) -> None:
    names = {page.name for page in pages}
    assert {"README.md", "docs/performance.md", "docs/results/README.md", "server/README.md"} <= names
    assert "benchmarks/README.md" in names


def test_every_relative_link_and_anchor_resolves(pages: list[Page]) -> None:
    fail_on(link_problems(pages))


def test_every_cited_raw_file_exists_and_is_listed(pages: list[Page]) -> None:
    fail_on(raw_file_problems(pages))


def test_every_qwen_fast_command_and_option_shown_exists(pages: list[Page]) -> None:
    fail_on(command_problems(pages, cli_options()))


# -- the checker itself, on made-up pages -----------------------------------------------------
def write(root: Path, files: dict[str, str]) -> list[Page]:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return [Page.read(root / name, root) for name in files if name.endswith(".md")]


def lines(problems: list[Problem]) -> list[str]:
    return [f"{p.file}:{p.line}" for p in problems]


def test_slugs_are_githubs() -> None:
    assert slug("GPU profile: each flag before/after") == "gpu-profile-each-flag-beforeafter"
    assert slug("Labelling a file: `qwen-fast classify`") == "labelling-a-file-qwen-fast-classify"
    assert (
        slug("Servers without a tokenizer (`--skip-tokenizer-init`)")
        == "servers-without-a-tokenizer---skip-tokenizer-init"
    )
    assert slug("[Linked](x.md) *and* **bold** snake_case") == "linked-and-bold-snake_case"


def test_the_link_check_finds_missing_files_and_anchors(tmp_path: Path) -> None:
    pages = write(
        tmp_path,
        {
            "README.md": (
                "# Top\n\n## Twice\n\n## Twice\n\n"
                "[ok](docs/a.md#a-heading) [ok](#twice-1) [ok](https://example.com/x.md#nope) [ok](docs/)\n"
                "[gone](docs/missing.md) and\n"
                "[bad anchor](docs/a.md#no-such-heading) ![bad image](img/none.png)\n"
                "`[not a link](nowhere.md)` [bad here](#twice-2)\n\n"
                "```md\n[in code](nowhere.md)\n```\n\n"
                "[ref]: docs/gone.md\n"
            ),
            "docs/a.md": "# A heading\n\n[up](../README.md#top) [wrapped\ntext](../nothing.md)\n",
        },
    )
    problems = link_problems(pages, root=tmp_path)
    assert lines(problems) == [
        "README.md:8",
        "README.md:9",
        "README.md:9",
        "README.md:10",
        "README.md:16",
        "docs/a.md:3",
    ]
    assert "docs/missing.md" in str(problems[0]) and "anchor" in problems[1].what


def test_the_raw_file_check_finds_missing_and_unlisted_files(tmp_path: Path) -> None:
    pages = write(
        tmp_path,
        {
            "docs/results/README.md": (
                "| file |\n| --- |\n| `cpu-2026-01-01-a.json`, `.png` |\n| `cpu-2026-01-02-gone.json` |\n"
            ),
            "docs/results/cpu-2026-01-01-a.json": "{}",
            "docs/results/cpu-2026-01-01-a.png": "",
            "docs/results/h200-2026-01-03-unlisted.json": "{}",
            "docs/results/history.md": "[a](cpu-2026-01-01-a.json)\n",
            "docs/perf.md": (
                "[a](results/cpu-2026-01-01-a.json), the [chart](results/cpu-2026-01-01-a.png), "
                "[history](results/history.md)\n"
                "[unlisted](results/h200-2026-01-03-unlisted.json)\n"
                "named only: `h200-2026-01-04-nowhere.json`\n"
            ),
        },
    )
    problems = raw_file_problems(pages, root=tmp_path)
    assert [str(p) for p in problems] == [
        "docs/results/README.md:4: cites a raw file that does not exist: docs/results/cpu-2026-01-02-gone.json",
        "docs/perf.md:2: cites a raw file docs/results/README.md does not list: h200-2026-01-03-unlisted.json",
        "docs/perf.md:3: cites a raw file that does not exist: docs/results/h200-2026-01-04-nowhere.json",
        "docs/results/README.md:1: does not list the raw file h200-2026-01-03-unlisted.json",
    ]


def test_the_command_check_finds_unknown_subcommands_and_options(tmp_path: Path) -> None:
    pages = write(
        tmp_path,
        {
            "README.md": (
                "Run `qwen-fast serve --model M --no-such-flag`, or `qwen-fast\nbench-scale --gpus 0`.\n"
                "`pip install langchain-qwen-fast` and `/etc/qwen-fast/urls.txt` are no commands.\n\n"
                "```bash\n"
                ".venv/bin/qwen-fast serve --model M --mps \\\n    --gone=1 -- --max-num-seqs 8   # vLLM's flag\n"
                "qwen-fast train FILE --out DIR | tee log  # --not-read\n"
                "qwen-fast --version && qwen-fast --nope\n"
                "```\n"
            ),
        },
    )
    options = {"": {"--help", "--version"}, "serve": {"--model", "--mps"}, "train": {"--out"}}
    assert [(line, words[:1]) for line, words in shown_commands(pages[0])] == [
        (1, ["serve"]),
        (1, ["bench-scale"]),
        (6, ["serve"]),
        (8, ["train"]),
        (9, ["--version"]),
        (9, ["--nope"]),
    ]
    assert [str(p) for p in command_problems(pages, options)] == [
        "README.md:1: `qwen-fast serve` has no option --no-such-flag",
        "README.md:1: `qwen-fast bench-scale`: no such subcommand",
        "README.md:6: `qwen-fast serve` has no option --gone",
        "README.md:9: `qwen-fast` has no option --nope",
    ]


def test_the_cli_options_are_the_parsers() -> None:
    options = cli_options()
    assert {"serve", "train", "eval", "classify", "bench", "api", "build-test-model"} <= set(options)
    assert {"--model", "--gpus", "--mps", "--help"} <= options["serve"]
    assert "--version" in options[""]
