"""Real source text, found offline, cut into token-counted pieces for the synthetic generator.

Each language has a list of places where such files usually live on a Linux machine with
Python (the standard library for Python; /usr/include for C and C++; Perl's library; the
vim runtime; CMake modules; PostgreSQL's SQL scripts; Tcl/Tk; awk; shell scripts in
/usr/bin; ...). Directories are walked in sorted order with caps on entries visited, files
taken and bytes taken, so discovery is bounded and deterministic for a given machine.

A language with no files here falls back to Python standard-library text "translated" into
that language's comment syntax (every line prefixed with its comment marker): the tokens
stay realistic code-like text, and the language label stays available. Each language's
``source`` says which it got ("files" or "translated-stdlib").

Pieces are cut only before a line that does not start with a line break. cl100k's
pre-tokenizer never joins text across such a boundary, so the token count of a
concatenation of pieces is exactly the sum of their counts: every piece is counted once.
"""

from __future__ import annotations

import hashlib
import os
import sysconfig
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from agentperf.engine.tokens import TokenCounter

# language -> (comment marker, [(root, extensions)]); "#!" in extensions means "a script
# whose first line is a shebang naming one of the listed interpreters".
_STDLIB = sysconfig.get_paths()["stdlib"]
LANGUAGE_SOURCES: dict[str, tuple[str, tuple[tuple[str, tuple[str, ...]], ...]]] = {
    "python": ("#", ((_STDLIB, (".py",)),)),
    "c": ("//", (("/usr/include", (".h",)), ("/usr/share/doc", (".c",)))),
    "cpp": ("//", (("/usr/include/c++", (".hpp", ".tcc", ".h")), ("/usr/include", (".hpp",)))),
    "javascript": (
        "//",
        (("/usr/lib/node_modules", (".js",)), ("/usr/share/nodejs", (".js",))),
    ),
    "typescript": ("//", (("/usr/lib/node_modules", (".ts",)), ("/usr/share/nodejs", (".ts",)))),
    "perl": ("#", (("/usr/share/perl", (".pm", ".pl")), ("/usr/share/perl5", (".pm",)))),
    "shell": ("#", (("/usr/bin", ("#!", "sh", "bash", "dash")), ("/usr/share", (".sh",)))),
    "sql": ("--", (("/usr/share/postgresql", (".sql",)), ("/usr/share/mysql", (".sql",)))),
    "tcl": ("#", (("/usr/share/tcltk", (".tcl",)),)),
    "cmake": ("#", (("/usr/share", (".cmake",)),)),
    "vimscript": ('"', (("/usr/share/vim", (".vim",)),)),
    "awk": ("#", (("/usr/share/awk", (".awk",)),)),
    "go": ("//", (("/usr/lib/go", (".go",)), ("/usr/share/go", (".go",)))),
    "rust": ("//", (("/usr/src", (".rs",)), ("/usr/lib/rustlib", (".rs",)))),
    "java": ("//", (("/usr/share/java", (".java",)), ("/usr/lib/jvm", (".java",)))),
    "ruby": ("#", (("/usr/lib/ruby", (".rb",)), ("/usr/share/ruby", (".rb",)))),
    "lua": ("--", (("/usr/share/lua", (".lua",)), ("/usr/lib/lua", (".lua",)))),
    "erlang": ("%", (("/usr/lib/erlang", (".erl",)),)),
}

MAX_FILES = 12
MAX_BYTES = 256 * 1024
MIN_FILE_BYTES = 1024
MAX_FILE_BYTES = 96 * 1024
MAX_ENTRIES_VISITED = 30_000
PIECE_LINES = 8


@dataclass(frozen=True, slots=True)
class Piece:
    text: str
    tokens: int


@dataclass(frozen=True, slots=True)
class SourceFile:
    path: str  # as shown to the model: relative to its root
    pieces: tuple[Piece, ...]

    @property
    def tokens(self) -> int:
        return sum(p.tokens for p in self.pieces)


@dataclass(frozen=True, slots=True)
class LanguageCorpus:
    language: str
    comment: str
    source: str  # "files" or "translated-stdlib"
    files: tuple[SourceFile, ...]


@dataclass(frozen=True, slots=True)
class Corpus:
    languages: tuple[LanguageCorpus, ...]
    fingerprint: str  # sha256 over every language, path and piece: same corpus, same output

    def language(self, name: str) -> LanguageCorpus:
        for lang in self.languages:
            if lang.language == name:
                return lang
        raise KeyError(name)


def split_pieces(text: str, lines_per_piece: int = PIECE_LINES) -> list[str]:
    """Cut ``text`` into pieces of about ``lines_per_piece`` lines, only before a line that
    does not itself start with a line break (see the module docstring)."""
    lines = text.splitlines(keepends=True)
    pieces: list[str] = []
    current: list[str] = []
    for line in lines:
        if len(current) >= lines_per_piece and line[:1] not in ("\n", "\r"):
            pieces.append("".join(current))
            current = []
        current.append(line)
    if current:
        pieces.append("".join(current))
    return pieces


def _read_text(path: str) -> str | None:
    try:
        size = os.path.getsize(path)
        if not MIN_FILE_BYTES <= size <= MAX_FILE_BYTES:
            return None
        with open(path, "rb") as fh:
            data = fh.read()
        text = data.decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    if "\x00" in text:
        return None
    text = text.replace("\r\n", "\n")
    return text if text.endswith("\n") else text + "\n"


def _is_shell_script(path: str, interpreters: Sequence[str]) -> bool:
    try:
        with open(path, "rb") as fh:
            first = fh.readline(128)
    except OSError:
        return False
    if not first.startswith(b"#!"):
        return False
    words = first[2:].decode("latin-1").replace("/", " ").split()
    return any(w in interpreters for w in words[-2:])


def _walk_sorted(root: str) -> Iterator[str]:
    """Files under ``root`` in sorted order, depth first, visiting at most a fixed number."""
    visited = 0
    stack = [root]
    while stack:
        directory = stack.pop()
        try:
            entries = sorted(os.scandir(directory), key=lambda e: e.name)
        except OSError:
            continue
        subdirs: list[str] = []
        for entry in entries:
            visited += 1
            if visited > MAX_ENTRIES_VISITED:
                return
            try:
                if entry.is_dir(follow_symlinks=False):
                    if entry.name not in ("test", "tests", "__pycache__", "site-packages"):
                        subdirs.append(entry.path)
                elif entry.is_file(follow_symlinks=False):
                    yield entry.path
            except OSError:
                continue
        stack.extend(reversed(subdirs))


def _discover(language: str) -> list[tuple[str, str]]:
    """(display path, text) of up to MAX_FILES files of ``language`` found on this machine."""
    _comment, sources = LANGUAGE_SOURCES[language]
    found: list[tuple[str, str]] = []
    total = 0
    for root, exts in sources:
        if not os.path.isdir(root):
            continue
        shebang = exts[0] == "#!"
        for path in _walk_sorted(root):
            if shebang:
                if not _is_shell_script(path, exts[1:]):
                    continue
            elif not path.endswith(exts):
                continue
            text = _read_text(path)
            if text is None:
                continue
            found.append((os.path.relpath(path, root), text))
            total += len(text)
            if len(found) >= MAX_FILES or total >= MAX_BYTES:
                return found
    return found


def _translated(
    comment: str, python_files: Sequence[tuple[str, str]], ext: str
) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for path, text in python_files:
        body = "".join(
            f"{comment} {line}" if line.strip() else line for line in text.splitlines(keepends=True)
        )
        out.append((str(Path(path).with_suffix(ext)), body))
    return out


_EXTENSIONS = {
    "go": ".go",
    "rust": ".rs",
    "java": ".java",
    "ruby": ".rb",
    "lua": ".lua",
    "erlang": ".erl",
    "typescript": ".ts",
    "javascript": ".js",
    "c": ".c",
    "cpp": ".cpp",
    "perl": ".pl",
    "shell": ".sh",
    "sql": ".sql",
    "tcl": ".tcl",
    "cmake": ".cmake",
    "vimscript": ".vim",
    "awk": ".awk",
    "python": ".py",
}


def build_corpus(
    counter: TokenCounter,
    languages: Sequence[str] | None = None,
    *,
    discover: bool = True,
) -> Corpus:
    """Find text for every language and count each piece's tokens once.

    ``discover=False`` skips the filesystem (Python stdlib only, every other language
    translated), which gives the same corpus on every machine with the same Python.
    """
    names = list(languages) if languages is not None else list(LANGUAGE_SOURCES)
    python_files = _discover("python")
    if not python_files:
        raise RuntimeError("no Python standard library source found to build a corpus from")
    h = hashlib.sha256()
    result: list[LanguageCorpus] = []
    for name in names:
        comment = LANGUAGE_SOURCES[name][0]
        if name == "python":
            files, source = python_files, "files"
        else:
            files = _discover(name) if discover else []
            source = "files"
            if not files:
                files = _translated(comment, python_files, _EXTENSIONS.get(name, ".txt"))
                source = "translated-stdlib"
        built: list[SourceFile] = []
        for path, text in files:
            pieces = tuple(Piece(p, counter.count(p)) for p in split_pieces(text))
            built.append(SourceFile(path, pieces))
            h.update(f"{name}\0{path}\0".encode())
            h.update(text.encode())
        result.append(LanguageCorpus(name, comment, source, tuple(built)))
    return Corpus(tuple(result), h.hexdigest())
