#!/usr/bin/env python3
"""The dependency rule between the library's folders, read from the #include lines.

    layering.py ROOT               check the tree at ROOT; exit 0 when every include follows the layers
    layering.py ROOT --self-test   plant an upward include in a copy of the tree and require that it is caught

Layers, lowest first (docs/architecture.md): a folder may include its own headers and those of any
lower layer, never a higher one, and folders on the same layer do not include each other. The
command line (src/cli/) and the Python extension (src/python/) are the top and may include everything
but each other.
"""

import os
import re
import shutil
import sys
import tempfile

LAYERS = [
    ["core"],
    ["io"],
    ["documents"],
    ["gate", "recipes", "simulation", "collectives"],
    ["check"],
    ["teaching"],
    ["cli", "python"],
]
LEVEL = {folder: level for level, folders in enumerate(LAYERS) for folder in folders}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def folder_of(root, path):
    """The layer folder a source or header belongs to, or None for files outside the library."""
    relative = os.path.relpath(path, root).split(os.sep)
    if relative[:2] == ["include", "normcheck"] and len(relative) > 3:
        return relative[2]
    if relative[0] == "src" and len(relative) > 2:
        return relative[1]
    return None


def target_folder(including_folder, included):
    """The folder an include names: "normcheck/gate/gate.hpp" is gate, "core/x.hpp" (src-relative) is
    core, a bare "x.hpp" is the including file's own folder."""
    parts = included.split("/")
    if parts[0] == "normcheck" and len(parts) > 2:
        return parts[1]
    if len(parts) > 1 and parts[0] in LEVEL:
        return parts[0]
    if len(parts) == 1:
        return including_folder
    return None


def violations(root):
    """Every include that breaks the rule, as 'file:line: message'."""
    found = []
    for top in ("include", "src"):
        for directory, _, files in os.walk(os.path.join(root, top)):
            for name in sorted(files):
                if not name.endswith((".hpp", ".cpp", ".inc")):
                    continue
                path = os.path.join(directory, name)
                folder = folder_of(root, path)
                if folder is None:
                    continue
                if folder not in LEVEL:
                    found.append(f"{os.path.relpath(path, root)}: folder '{folder}' is not in a layer")
                    continue
                with open(path, encoding="utf-8") as source:
                    for number, line in enumerate(source, 1):
                        match = INCLUDE.match(line)
                        if not match:
                            continue
                        target = target_folder(folder, match.group(1))
                        if target is None or target == folder:
                            continue
                        where = f"{os.path.relpath(path, root)}:{number}"
                        if target not in LEVEL:
                            found.append(f"{where}: includes {match.group(1)} from '{target}', which is not in a layer")
                        elif LEVEL[target] > LEVEL[folder]:
                            found.append(f"{where}: {folder} (layer {LEVEL[folder]}) includes {match.group(1)} "
                                         f"from {target}, a higher layer ({LEVEL[target]})")
                        elif LEVEL[target] == LEVEL[folder]:
                            found.append(f"{where}: {folder} includes {match.group(1)} from {target}, a folder on "
                                         f"the same layer: siblings do not depend on each other")
    return found


def self_test(root):
    """A copy of the tree with core including a check header must be refused, and so must a sibling include."""
    for planted_in, planted in (("src/core/rational.cpp", '#include "normcheck/check/check.hpp"\n'),
                                ("src/gate/gate.cpp", '#include "normcheck/recipes/recipe.hpp"\n')):
        with tempfile.TemporaryDirectory() as scratch:
            copy = os.path.join(scratch, "tree")
            for top in ("include", "src"):
                shutil.copytree(os.path.join(root, top), os.path.join(copy, top))
            with open(os.path.join(copy, planted_in), "a", encoding="utf-8") as source:
                source.write(planted)
            caught = [v for v in violations(copy) if v.startswith(planted_in + ":")]
            if not caught:
                print(f"FAIL: the planted include {planted.strip()} in {planted_in} was not caught")
                return 1
            print(f"caught: {caught[0]}")
    return 0


def main():
    root = sys.argv[1]
    if "--self-test" in sys.argv[2:]:
        if violations(root):
            print("the tree itself breaks the rule; fix that first")
            return 1
        return self_test(root)
    found = violations(root)
    for line in found:
        print(line)
    print(f"{len(found)} include(s) break the layers" if found else "every include follows the layers")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
