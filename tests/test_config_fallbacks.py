"""No reader of a config falls back to a default of its own: a key's default is declared once, with the key
(``retrieval.config_keys``), and a stored run's ``config.json`` is read through ``config_keys.Settled`` (docs/design.md,
"Declarations beside their owners"). Two fallbacks could disagree with the declaration, and did (the seed's 0 where
42 is declared, the bootstrap's 1000 where 200 is)."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONFIG_NAMES = ("config", "configured", "settings")  # what a config, a section of it or a stored one is called


def fallbacks(source: str) -> list[str]:
    """``x.get(key, default)`` calls whose receiver is named like a config or a section of one."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
                and len(node.args) == 2):
            receiver = ast.unparse(node.func.value)
            if any(name in receiver.lower() for name in CONFIG_NAMES):
                found.append(f"line {node.lineno}: {ast.unparse(node)}")
    return found


def test_no_reader_of_a_config_falls_back_to_a_default_of_its_own():
    found = {str(path.relative_to(ROOT)): hits for path in sorted((ROOT / "retrieval").rglob("*.py"))
             if (hits := fallbacks(path.read_text()))}
    assert found == {}


def test_the_scan_finds_the_fallbacks_it_is_for():
    assert fallbacks('seed = config.get("seed", 0)\nk = configured.get(key, default)\n'
                     'p = (config.get("index") or {}).get("factory", "auto")\nm = manifest.get("metric", "ip")\n') == [
        "line 1: config.get('seed', 0)", "line 2: configured.get(key, default)",
        "line 3: (config.get('index') or {}).get('factory', 'auto')"]
