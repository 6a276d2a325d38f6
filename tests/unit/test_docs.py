"""The docs (README.md and docs/*.md) tell the truth about the repository: every relative link
leads to a file, and a heading, that exist; every `make` target they name is one of the Makefile's;
every `pykubelet` command they show is one the CLI accepts, with flags it knows; every repository
path they name exists; every flag of the configuration table is one the agent takes.

A doc that moves a section, or code that renames a command, a flag or a file, fails here naming
the doc, the line and what it refers to."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import io
import pathlib
import re

import pytest

from pykubelet import cli

REPO = pathlib.Path(__file__).resolve().parents[2]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
# Top-level directories whose paths the docs name as they are in the repository.
REPO_DIRS = ("pykubelet/", "tests/", "systemd/", "cni/", "vagrant/", "proto/", "manifests/", "docs/", ".ci/")
PLACEHOLDER = re.compile(r"^(\[|<|\.\.\.|…|\||NAME$|D$|NS$)")


@dataclasses.dataclass(frozen=True)
class Code:
    """A piece of code in a doc: a fenced block's line (`block` says which block) or an inline span."""
    doc: pathlib.Path
    line: int
    text: str
    block: int | None  # None: an inline `span`

    def where(self) -> str:
        return f"{self.doc.relative_to(REPO)}:{self.line}"


@dataclasses.dataclass
class Markdown:
    prose: list[tuple[int, str]]  # (line number, text outside code)
    code: list[Code]
    headings: list[str]


# An inline code span: backticks to the same number of backticks, across line breaks but not
# across a blank line (the end of a paragraph).
SPAN = re.compile(r"(`+)((?:(?!\n[ \t]*\n).)+?)\1", re.S)


def parse(doc: pathlib.Path, text: str | None = None) -> Markdown:
    md = Markdown([], [], [])
    fence, blocks = "", 0
    outside: list[str] = []  # every line, fenced ones blanked, so offsets keep their line numbers
    for number, line in enumerate((doc.read_text() if text is None else text).splitlines(), 1):
        marker = re.match(r"\s*(```|~~~)", line)
        if marker and (not fence or marker.group(1) == fence):
            fence = "" if fence else marker.group(1)
            blocks += bool(fence)
            outside.append("")
        elif fence:
            md.code.append(Code(doc, number, line, blocks))
            outside.append("")
        else:
            outside.append(line)
            if re.match(r"#{1,6} ", line):
                md.headings.append(line.lstrip("#").strip())
    joined = "\n".join(outside)
    for span in SPAN.finditer(joined):
        md.code.append(Code(doc, joined.count("\n", 0, span.start()) + 1, " ".join(span.group(2).split()), None))
    prose = SPAN.sub(lambda span: "\n" * span.group(0).count("\n"), joined)
    md.prose = list(enumerate(prose.split("\n"), 1))
    return md


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "").lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(headings: list[str]) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for heading in headings:
        base = slug(heading)
        out.add(f"{base}-{seen[base]}" if base in seen else base)
        seen[base] = seen.get(base, 0) + 1
    return out


def broken_links(doc: pathlib.Path, text: str | None = None) -> list[str]:
    broken = []
    markdown = parse(doc, text)
    for number, prose in markdown.prose:
        for target in re.findall(r"\]\(([^)\s]+)\)", prose):
            if re.match(r"[a-z]+:", target):
                continue  # a URL, not a file of the repository
            path, _, anchor = target.partition("#")
            linked = (doc.parent / path).resolve() if path else doc
            where = f"{doc.relative_to(REPO)}:{number}: {target}"
            if not linked.exists():
                broken.append(f"{where}: no file {linked}")
            elif anchor and anchor not in anchors(parse(linked).headings if path else markdown.headings):
                broken.append(f"{where}: no heading #{anchor} in {linked.relative_to(REPO)}")
    return broken


def all_code() -> list[Code]:
    return [code for doc in DOCS for code in parse(doc).code]


def commands(program: str) -> list[tuple[Code, list[str]]]:
    """Every command line of `program` in the docs, as its arguments. In a transcript (a block that
    starts with `$ `) only the `$ ` lines are commands; in any other block, each line that starts
    with the program; inline, each span that does. A line ending in a backslash goes on."""
    found: list[tuple[Code, list[str]]] = []
    code = all_code()
    first_lines = {}
    for c in code:
        first_lines.setdefault((c.doc, c.block), c.text)
    transcripts = {key for key, first in first_lines.items() if key[1] and first.startswith("$ ")}
    pending = ""
    for c in code:
        text = pending + c.text.strip()
        pending = text[:-1] + " " if text.endswith("\\") and c.block else ""
        if pending:
            continue
        if (c.doc, c.block) in transcripts and not text.startswith("$ "):
            continue  # what a command printed
        text = text.removeprefix("$ ")
        words = text.split(" #")[0].split()
        if words and (words[0] == program or words[0].endswith("/" + program)):
            found.append((c, words[1:]))
    return found


def makefile_targets() -> set[str]:
    return set(re.findall(r"^([A-Za-z0-9][\w.-]*)\s*:(?!=)", (REPO / "Makefile").read_text(), re.M))


def is_subcommand(word: str) -> bool:
    """`pykubelet WORD --help` is that subcommand's help (the agent's own help when WORD is none)."""
    return help_of([word]).startswith(f"usage: pykubelet {word} ")


def help_of(argv: list[str]) -> str:
    return _help(tuple(argv))


@functools.cache
def _help(argv: tuple[str, ...]) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        cli.main([*argv, "--help"])
    return out.getvalue()


def subcommands_in(help_text: str) -> set[str]:
    """The subcommands a help text lists (argparse shows them as the first positional, {a,b})."""
    listed = re.search(r"positional arguments:\n\s+\{([\w,-]+)\}", help_text)
    return set(listed.group(1).split(",")) if listed else set()


def has_flag(help_text: str, flag: str) -> bool:
    return re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", help_text) is not None


def test_every_relative_link_leads_to_a_file_and_heading():
    broken = [b for doc in DOCS for b in broken_links(doc)]
    assert not broken, "\n".join(broken)


def test_the_link_check_finds_a_broken_link_and_a_missing_heading():
    readme = REPO / "README.md"
    text = "# Title\n\n[gone](docs/no-such-page.md), [here](#title), [moved](docs/test-bed.md#no-such-section)\n"
    broken = broken_links(readme, text)
    assert len(broken) == 2 and "no-such-page.md" in broken[0] and "#no-such-section" in broken[1]


def test_anchors_are_githubs():
    assert slug("The caches, and a new machine (`make fresh-check`)") == "the-caches-and-a-new-machine-make-fresh-check"
    assert slug("Kubernetes' node conformance tests (`make conformance`)") == \
        "kubernetes-node-conformance-tests-make-conformance"


def test_the_docs_link_every_page():
    linked = {(REPO / target.partition("#")[0]).resolve()
              for _, prose in parse(REPO / "README.md").prose for target in re.findall(r"\]\(([^)#\s]+)", prose)}
    unlinked = [doc.relative_to(REPO) for doc in DOCS[1:] if doc not in linked]
    assert not unlinked, f"pages the README does not lead to: {unlinked}"


def test_every_page_starts_with_a_title_and_what_it_is_for():
    for doc in DOCS[1:]:
        lines = doc.read_text().splitlines()
        assert lines[0].startswith("# ") and not lines[1] and lines[2], \
            f"{doc.relative_to(REPO)}: a title, a blank line, then one line saying what the page is for"


def test_every_make_target_named_is_the_makefiles():
    targets = makefile_targets()
    assert {"run", "test", "unit", "install"} <= targets  # the parse itself finds them
    unknown = [f"{code.where()}: make {words[0]}" for code, words in commands("make")
               if words and not PLACEHOLDER.match(words[0]) and "=" not in words[0] and words[0] not in targets]
    assert not unknown, "\n".join(unknown)


def test_the_two_commands_of_the_front_page_are_make_targets():
    front = [words[0] for code, words in commands("make") if code.doc.name == "README.md" and code.block]
    assert front[:2] == ["run", "test"]


def test_every_pykubelet_command_shown_is_the_clis_with_its_flags():
    wrong = []
    for code, words in commands("pykubelet"):
        path = []
        if words and not words[0].startswith("-") and not PLACEHOLDER.match(words[0]):
            if not is_subcommand(words[0]):
                wrong.append(f"{code.where()}: pykubelet {words[0]}: no such subcommand")
                continue
            path.append(words[0])
            nested = subcommands_in(help_of(path))
            bare = re.sub(r"\[[^\]]*\]", "", " ".join(words[1:])).split()  # [optional parts] left out
            rest = [w for w in bare if not w.startswith("-") and not PLACEHOLDER.match(w)]
            if nested and rest:
                if rest[0] not in nested:
                    wrong.append(f"{code.where()}: pykubelet {words[0]} {rest[0]}: not one of {sorted(nested)}")
                    continue
                path.append(rest[0])
        helps = help_of(path) + (help_of(path[:1]) if len(path) > 1 else "")
        for word in words:
            flag = word.strip("[]").split("=")[0]
            if flag.startswith("--") and not has_flag(helps, flag):
                wrong.append(f"{code.where()}: pykubelet {' '.join(path)}: no flag {flag}")
    assert not wrong, "\n".join(wrong)


def test_the_command_check_refuses_a_made_up_subcommand_and_flag():
    assert all(map(is_subcommand, ["pods", "cri", "explain", "doctor", "proxy"])) and not is_subcommand("frobnicate")
    assert not has_flag(help_of(["proxy"]), "--no-such-flag") and has_flag(help_of(["proxy"]), "--cleanup")
    assert "ps" in subcommands_in(help_of(["cri"])) and not subcommands_in(help_of(["doctor"]))


def test_every_repository_path_named_exists():
    missing = []
    for code in all_code():
        for word in code.text.split():
            path = word.strip("`'\"(),;:")
            # an image name with a version tag (pykubelet/kind-node:v1.36.3) is not a path
            if path.startswith(REPO_DIRS) and not re.search(r"[*{<…]|\.\.\.|:v\d+\.\d+", path) \
                    and not (REPO / path).exists():
                missing.append(f"{code.where()}: {path}")
    assert not missing, "\n".join(missing)


def test_every_flag_of_the_configuration_table_is_the_agents():
    agent_help = help_of([])
    rows = [line for line in (REPO / "docs" / "configuration.md").read_text().splitlines() if line.startswith("| `--")]
    assert len(rows) > 40
    flags = [flag for row in rows for flag in re.findall(r"`(--[\w-]+)`", row.split("|")[1])]
    unknown = [flag for flag in flags if not has_flag(agent_help, flag)]
    assert not unknown, f"docs/configuration.md names flags the agent does not take: {unknown}"
