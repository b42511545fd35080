"""Not a way to install normcheck: its package builds from the repository's top folder."""

import sys

sys.exit("normcheck installs from the repository's top folder, which holds the C++ sources its executable is "
         "built from: run `pip install .` there (python/ alone cannot build it)")
