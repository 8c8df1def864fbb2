"""The user documentation stays usable from a clone: every relative link in README.md,
cases/README.md and docs/*.md reaches a file of the repository (and a heading, when it names
one), no page sends the reader to design notes the repository does not hold, the docs index
lists every page, and docs/cases.md marks as required the keys the runner requires."""

import re
import unittest
from pathlib import Path
from urllib.parse import unquote

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
KINDS_SOURCE = REPO / "harness" / "runner" / "kinds"


def user_pages():
    return [REPO / "README.md", REPO / "cases" / "README.md"] + sorted(DOCS.glob("*.md"))


FENCE = re.compile(r"^ {0,3}(```|~~~).*?^ {0,3}\1[^\n]*$", re.M | re.S)
INLINE_CODE = re.compile(r"(`+)(.+?)\1", re.S)
INLINE_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE_LINK = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+\"[^\"]*\")?\s*$", re.M)
HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$", re.M)
EXTERNAL = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")

# What a reader of a clone cannot open: design notes kept outside the repository.
OUTSIDE_REFERENCES = [
    (re.compile(r"\bDESIGN\.md\b"), "DESIGN.md"),
    (re.compile(r"(?<![\w-])spec/"), "a spec/ file"),
    (re.compile(r"\bspec section\b|\bspec §"), "a spec section"),
    (re.compile(r"\.\./shared\b|/work/shared\b"), "the shared folder"),
]


def without_code(text: str) -> str:
    """The page without fenced blocks and inline code, where link syntax is only text."""
    text = FENCE.sub("", text)
    return INLINE_CODE.sub(lambda m: "x" * len(m.group(2)), text)


def links(text: str) -> list:
    prose = without_code(text)
    return INLINE_LINK.findall(prose) + REFERENCE_LINK.findall(prose)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: link text kept, lower case, punctuation dropped except
    '-' and '_', spaces as '-'."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set:
    found = set()
    seen = {}
    for _, title in HEADING.findall(FENCE.sub("", path.read_text(encoding="utf-8"))):
        base = slug(title)
        n = seen.get(base, 0)
        seen[base] = n + 1
        found.add(base if n == 0 else f"{base}-{n}")
    return found


def sections(text: str, level: str = "##") -> dict:
    """Heading text -> body, for the headings of exactly `level`."""
    pattern = re.compile(rf"^{level}\s+(.*)$", re.M)
    marks = [(m.start(), m.end(), m.group(1).strip()) for m in pattern.finditer(FENCE.sub("", text))]
    body = FENCE.sub("", text)
    out = {}
    for i, (_, end, title) in enumerate(marks):
        stop = marks[i + 1][0] if i + 1 < len(marks) else len(body)
        out[title] = body[end:stop]
    return out


def required_keys_marked(section: str) -> set:
    """The keys whose table row in `section` says **required** in its second column."""
    marked = set()
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")] if line.lstrip().startswith("|") else []
        if len(cells) >= 2 and "**required**" in cells[1]:
            marked.update(re.findall(r"`([^`]+)`", cells[0]))
    return marked


# Verified in harness/runner (case_file.cpp, validate.cpp, the kinds' sources in kinds/<kind>/,
# kinds/mesh_spec.cpp):
# a case without one of these is an input error that names it.
REQUIRED = {
    "layout": {"op", "args", "expect"},
    "mesh": {"mesh", "expect"},
    "collective": {"op", "mesh", "group", "dtype", "reduce", "bytes", "bytes.from", "bytes.to"},
    "redistribute": {"mesh", "tensor", "tensor.shape", "from", "to"},
    "gemm": {"m", "n", "k", "dtype", "epilogue"},
    "command": {"command"},
}
REQUIRED_COMMON = {"name", "kind"}
REQUIRED_FILE = {"cases"}
REQUIRED_MESH = {"mesh.shape", "mesh.layout"}

# How a kind's parser demands a key: node.required<T>("key") (tensor.required<T>("shape") for a
# key inside a mapping) and node.fail("key", "is required ...").
REQUIRED_CALL = re.compile(r"\b(\w+)\.required<[^;]*?>\(\s*\"([\w.]+)\"\s*\)")
REQUIRED_FAIL = re.compile(r"\bnode\.fail\(\s*\"([\w.]+)\",\s*\"is required")


def required_in_source(kind: str) -> set:
    # A kind is its folder kinds/<kind>/ (or, for a kind not yet moved there, kinds/<kind>_kind.cpp).
    sources = [KINDS_SOURCE / f"{kind}_kind.cpp", *sorted((KINDS_SOURCE / kind).glob("*.cpp"))]
    sources = [s for s in sources if s.is_file() and not s.name.endswith("_test.cpp")]
    if not sources:
        return set()
    text = "\n".join(s.read_text(encoding="utf-8") for s in sources)
    keys = {key if var == "node" else f"{var}.{key}" for var, key in REQUIRED_CALL.findall(text)}
    return keys | set(REQUIRED_FAIL.findall(text))


class LinksTest(unittest.TestCase):
    def test_relative_links_reach_files_and_headings(self):
        broken = []
        for page in user_pages():
            for target in links(page.read_text(encoding="utf-8")):
                if EXTERNAL.match(target):
                    continue
                path_part, _, anchor = target.partition("#")
                dest = page if not path_part else (page.parent / unquote(path_part)).resolve()
                name = f"{page.relative_to(REPO)}: {target}"
                if not dest.exists():
                    broken.append(f"{name} (no such file)")
                elif REPO.resolve() not in (dest, *dest.parents):
                    broken.append(f"{name} (outside the repository)")
                elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                    broken.append(f"{name} (no heading with that anchor)")
        self.assertEqual(broken, [], "links that lead nowhere")

    def test_the_pages_link_somewhere(self):
        # A link syntax the checks above stopped recognising would make them pass vacuously.
        for page in (REPO / "README.md", DOCS / "README.md", DOCS / "cases.md"):
            self.assertTrue(links(page.read_text(encoding="utf-8")), page)

    def test_no_page_points_outside_the_repository(self):
        found = []
        for page in user_pages():
            for n, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
                for pattern, what in OUTSIDE_REFERENCES:
                    if pattern.search(line):
                        found.append(f"{page.relative_to(REPO)}:{n}: mentions {what}: {line.strip()}")
        self.assertEqual(found, [], "pages that send the reader to files a clone does not have")

    def test_docs_index_lists_every_page(self):
        index = links((DOCS / "README.md").read_text(encoding="utf-8"))
        listed = {t.partition("#")[0] for t in index}
        missing = [p.name for p in DOCS.glob("*.md") if p.name != "README.md" and p.name not in listed]
        self.assertEqual(missing, [], "docs/README.md does not list these pages")


class RequiredKeysTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.sections = sections((DOCS / "cases.md").read_text(encoding="utf-8"))

    def section(self, word: str) -> str:
        matches = [body for title, body in self.sections.items() if word in title]
        self.assertEqual(len(matches), 1, f"docs/cases.md has no single '## ...{word}...' section")
        return matches[0]

    def assert_marked(self, word: str, keys: set):
        marked = required_keys_marked(self.section(word))
        self.assertEqual(sorted(keys - marked), [],
                         f"docs/cases.md, section '{word}': required keys not marked **required**")

    def test_each_kind_marks_its_required_keys(self):
        for kind, keys in REQUIRED.items():
            with self.subTest(kind=kind):
                self.assert_marked(f"`{kind}`", keys)

    def test_keys_the_kind_parsers_require_are_marked(self):
        for kind in REQUIRED:
            with self.subTest(kind=kind):
                self.assert_marked(f"`{kind}`", required_in_source(kind))

    def test_common_keys(self):
        self.assert_marked("The file", REQUIRED_FILE)
        self.assert_marked("Case keys", REQUIRED_COMMON)
        self.assert_marked("Meshes", REQUIRED_MESH)


if __name__ == "__main__":
    unittest.main()
