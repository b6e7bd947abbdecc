"""Every pointer in the README, docs/, data/README.md and the entry points' ``--help`` leads somewhere: a path of
this repository that exists, a ``python -m`` module that exists, a config key that the configs define, a flag that
the named entry point defines. A moved file or a renamed key fails here instead of misleading a reader."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

from retrieval.jobs import config_checks

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted([ROOT / "README.md", ROOT / "data" / "README.md", *(ROOT / "docs").glob("*.md")])
ENTRY_POINTS = sorted(p.stem for p in (ROOT / "pipelines").glob("*.py") if p.stem != "__init__")
TOP = ("retrieval", "pipelines", "configs", "docs", "tests", "benchmarks", "deploy", "data")
SECTIONS = ("data", "train", "eval", "index", "gate", "publish", "model", "item2vec")
# A repository path: a top-level directory, then path characters; placeholders such as <name> are left out.
PATH = re.compile(rf"(?<![\w./-])((?:{'|'.join(TOP)})/[\w./-]*\w/?)")
MODULE = re.compile(r"python -m ((?:pipelines|retrieval|benchmarks)(?:\.\w+)+)(<)?")
KEY = re.compile(rf"(?<![\w.<-])((?:{'|'.join(SECTIONS)})\.[a-z_]+(?:\.[a-z_]+)*)(?![\w(/*-])")
CONFIG_FLAG = re.compile(r"--config\.([\w.]+)")
FLAG = re.compile(r"python -m (pipelines\.\w+)((?: +[^\n`|]*?)?)(?=`|\n|$)")


def _help(module: str) -> str:
    return subprocess.run([sys.executable, "-m", module, "--helpfull"], cwd=ROOT, capture_output=True, text=True,
                          timeout=300).stdout


HELP = {}


def help_of(module: str) -> str:
    if module not in HELP:
        HELP[module] = _help(module)
    return HELP[module]


def texts() -> list[tuple[str, str]]:
    pages = [(str(page.relative_to(ROOT)), page.read_text()) for page in PAGES]
    return pages + [(f"pipelines.{name} --help", help_of(f"pipelines.{name}")) for name in ENTRY_POINTS]


EXTENSIONS = {"txt", "json", "py", "md", "parquet", "csv", "tsv", "sh", "png", "faiss", "npz", "bin", "dat", "log",
              "lock", "tmp", "service", "timer", "pb"}  # train.json, item2vec.py: file names, not keys
RUN_ARTIFACTS = re.compile(r"data/(train|test|validation)(_\w+)?\.parquet")  # inside a run directory


def _keys() -> set[str]:
    return set(config_checks.RULES)


def _exists(path: str) -> bool:
    path = path.rstrip("./")
    if (ROOT / path).exists():
        return True
    return bool(list(ROOT.glob(path + "*")))  # a stem such as benchmarks/bench_ of benchmarks/bench_<name>


@pytest.fixture(scope="module")
def every_text():
    return texts()


def test_every_repository_path_exists(every_text):
    missing = [(where, path) for where, text in every_text for path in PATH.findall(text)
               if not RUN_ARTIFACTS.fullmatch(path) and not _exists(path)]
    assert not missing, missing


def test_every_linked_page_exists():
    missing = []
    for page in PAGES:
        for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", page.read_text()):
            if not (page.parent / target).exists():
                missing.append((page.name, target))
    assert not missing, missing


def test_every_python_m_module_exists(every_text):
    missing = [(where, module) for where, text in every_text for module, stem in MODULE.findall(text)
               if not (ROOT / (module.replace(".", "/") + ".py")).is_file()
               and not (stem and list(ROOT.glob(module.replace(".", "/") + "*.py")))]  # bench_<name>
    assert not missing, missing


def test_every_config_key_exists(every_text):
    keys = _keys()
    sections = {key.split(".")[0] for key in keys}
    named = [(where, key) for where, text in every_text for key in KEY.findall(text) + CONFIG_FLAG.findall(text)]
    unknown = [(where, key) for where, key in named if key.split(".")[0] in sections and key not in keys
               and key.split(".")[-1] not in EXTENSIONS
               and not any(k.startswith(key + ".") for k in keys)]  # a section of keys, e.g. model.objective
    assert not unknown, unknown


def test_every_flag_of_an_entry_point_exists(every_text):
    unknown = []
    for where, text in every_text:
        for module, args in FLAG.findall(text):
            if module.split(".")[1] not in ENTRY_POINTS:
                continue
            flags = set(re.findall(r"--(\w+)", help_of(module)))
            if module == "pipelines.scheduled":  # it passes the rest through to its job (--job_module)
                job = re.search(r"--job_module=(\S+)", args)
                flags |= set(re.findall(r"--(\w+)", help_of(job.group(1) if job else "pipelines.train")))
            unknown += [(where, module, flag) for flag in re.findall(r"(?<![\w-])--(\w+)", args)
                        if flag not in flags and flag != "config"]
    assert not unknown, unknown


JOURNAL = ROOT / "benchmarks" / "JOURNAL.md"  # the index of the journal's pages (benchmarks/journal/*.md)
JOURNAL_PAGES = sorted((ROOT / "benchmarks" / "journal").glob("*.md"))
SOURCES = sorted([*PAGES, *(ROOT / "configs").glob("*.py"), *(ROOT / "retrieval").rglob("*.py"),
                  *(ROOT / "benchmarks").glob("*.py")])


CITED = r'`*[,;]?\s*\(?(?:sections?\s+)?(?=")'  # page`, "X" / page ("X", "Y") / page`, section "X"
QUOTED = re.compile(r'"([^"]+)"')
BETWEEN = re.compile(r"\s*(?:,\s*and|,|and)\s*")


def _cited(text: str, page: str) -> list[str]:
    """The quoted section names right after each mention of ``page``."""
    cited = []
    for match in re.finditer(re.escape(page) + '(?!")' + CITED, text):
        at = match.end()
        while quoted := QUOTED.match(text, at):
            cited.append(" ".join(quoted.group(1).split()))
            between = BETWEEN.match(text, quoted.end())
            if not between or not text.startswith('"', between.end()):
                break
            at = between.end()
    return cited


def _headings(path: Path, level: str = "#") -> list[str]:
    return [" ".join(line.lstrip("#").split()) for line in path.read_text().splitlines() if line.startswith(level)]


def test_the_journal_index_lists_every_section_of_every_page():
    listed = {" ".join(line[2:].split()) for line in JOURNAL.read_text().splitlines() if line.startswith("- ")}
    linked = set(re.findall(r"\]\((journal/[\w.-]+\.md)\)", JOURNAL.read_text()))
    assert JOURNAL_PAGES and linked == {f"journal/{page.name}" for page in JOURNAL_PAGES}
    unlisted = [(page.name, title) for page in JOURNAL_PAGES for title in _headings(page, "## ") if title not in listed]
    assert not unlisted, unlisted


def test_cited_journal_sections_exist():
    """A section cited as `benchmarks/JOURNAL.md, "Issue 36"` is a section of a journal page (the index lists it);
    RESULTS.md, the generated page of current figures, has no such sections to cite."""
    headings = [heading for page in JOURNAL_PAGES for heading in _headings(page)]
    missing, misplaced = [], []
    for path in SOURCES:
        text = path.read_text()
        where = str(path.relative_to(ROOT))
        missing += [(where, name) for name in _cited(text, "JOURNAL.md") if not any(name in h for h in headings)]
        misplaced += [(where, name) for name in _cited(text, "RESULTS.md")]
        misplaced += [(where, found) for found in re.findall(r"RESULTS\.md`*,? [Ii]ssue \d+", text)]
    assert not missing, missing
    assert not misplaced, misplaced


TEST_CITATION = re.compile(r"`(tests/[\w/]+\.py)`:")
DECIMAL = re.compile(r"(?<![\w.])\d+\.\d+(?![\w.])")


def _cited_from_tests(text: str) -> list[tuple[str, str]]:
    """(test file, what the page says it shows) for every "(`tests/....py`: ...)" of ``text``: the words after the
    colon up to the parenthesis that closes the citation."""
    out = []
    for match in TEST_CITATION.finditer(text):
        depth, end = 1, match.end()
        while end < len(text) and depth:
            depth += {"(": 1, ")": -1}.get(text[end], 0)
            end += 1
        out.append((match.group(1), text[match.end():end - 1]))
    return out


def test_numbers_cited_from_a_test_are_in_that_test():
    """A page that cites a test for a number (`tests/...py`: recall 0.084 ...) cites what the test asserts or sets,
    not a figure measured once and since changed."""
    missing = []
    for page in PAGES:
        for test, cited in _cited_from_tests(page.read_text()):
            source = (ROOT / test).read_text()
            missing += [(page.name, test, number) for number in DECIMAL.findall(cited) if number not in source]
    assert not missing, missing


def _extras() -> set[str]:
    import configparser

    setup = configparser.ConfigParser()
    setup.read(ROOT / "setup.cfg")
    return set(setup["options.extras_require"])


def test_every_extra_named_exists(every_text):
    named = [(where, extra) for where, text in every_text for group in re.findall(r'\.\[([\w,]+)\]"', text)
             for extra in group.split(",")]
    assert named and not [(where, extra) for where, extra in named if extra not in _extras()]


def test_a_page_says_how_to_view_the_tensorboard_logs():
    """Runs write TensorBoard event files (``tensorboard/``): a page says how to install TensorBoard and open them."""
    guide = (ROOT / "docs" / "guide.md").read_text()
    assert "tensorboard" in _extras() and '-e ".[tensorboard]"' in guide
    assert re.search(r"tensorboard --logdir \S+/tensorboard", guide)
