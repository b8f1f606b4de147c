"""The library stands apart from its applications, files stay small, and the package says where to start."""

import ast
from pathlib import Path

LIBRARY = Path(__file__).resolve().parents[1] / "lit_rlhf"
ENTRY_POINTS = {"serve.py"}  # `python -m lit_rlhf.serve`: an app, like train.py


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_the_library_imports_nothing_from_the_app():
    offenders = {str(p.relative_to(LIBRARY)): sorted(m for m in imported_modules(p) if m.startswith("lit_rlhf.cli"))
                 for p in LIBRARY.rglob("*.py") if "cli" not in p.relative_to(LIBRARY).parts
                 and str(p.relative_to(LIBRARY)) not in ENTRY_POINTS}
    assert not {k: v for k, v in offenders.items() if v}


def test_no_module_is_over_400_lines():
    lengths = {str(p.relative_to(LIBRARY)): len(p.read_text().splitlines()) for p in LIBRARY.rglob("*.py")}
    assert not {name: n for name, n in lengths.items() if n > 400}


def test_the_docs_cite_no_path_outside_the_repository_and_every_link_resolves():
    import re

    root = LIBRARY.parent
    pages = [root / "README.md", *sorted((root / "docs").glob("*.md"))]
    for page in pages:
        text = page.read_text()
        assert "shared/" not in text and "../" not in text, page.name
        for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text):
            if not target.startswith("http"):
                assert (page.parent / target).exists(), (page.name, target)


def test_the_package_docstring_says_where_to_start_and_names_what_exists():
    import re

    import lit_rlhf
    import lit_rlhf.config

    text = lit_rlhf.__doc__
    assert "README.md" in text and "docs/" in text
    for page in re.findall(r"\b(\w+\.md)\b", text.split("docs/", 1)[1]):
        assert (LIBRARY.parent / "docs" / page).is_file(), page
    for name in re.findall(r"\b([A-Z]\w+(?:Module|Config))\b", text):
        assert hasattr(lit_rlhf, name) or hasattr(lit_rlhf.config, name), name


def test_the_tests_mirror_the_library_s_folders():
    """Every package folder of the library has a test folder of the same name, so the tests of a change are found
    where its code is."""
    tests = Path(__file__).resolve().parent
    packages = {p.parent.name for p in LIBRARY.glob("*/__init__.py")} - {"assets"}  # data and model files
    assert packages >= {"algos", "checkpoints", "cli", "statistics"}
    assert sorted(name for name in packages if not (tests / name / "__init__.py").is_file()) == []


def test_no_file_writes_a_module_s_attributes_from_outside_it():
    """A LightningModule's state, and that of the objects it holds (its Sampler), is set by their own code (their
    classes and methods), not by the files that hold or drive it: they call a method, or take what a method returns."""
    import re

    written = re.compile(r"\b(?:self\.)?module(?:\.\w+)+ = |setattr\((?:self\.)?module,")
    offenders = [f"{path.relative_to(LIBRARY)}:{number}" for path in sorted(LIBRARY.rglob("*.py"))
                 if path.name != "meta_loading.py"  # its `module` is a torch.nn.Module whose tensors it replaces
                 for number, line in enumerate(path.read_text().splitlines(), start=1) if written.search(line)]
    assert offenders == []
