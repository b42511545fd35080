"""Types of the extension normcheck._core (src/python/core_module.cpp), built by ``pip install .``."""

from typing import List, Tuple

version: str

def check_paths_json(paths: List[str], require_gate: bool, jobs: int) -> Tuple[str, List[str]]: ...
def check_text_json(text: str, source: str, require_gate: bool) -> str: ...
