"""Ship the data benchctl reads at run time (``sql/``, ``state_machines/``) inside the package of a built
wheel, as ``benchctl/_data/<name>``, where ``benchctl.resources.data_dir`` looks first. In the work tree
(and an editable install) they stay where they are, next to the package. Everything else is in
``pyproject.toml``."""

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
DATA = {"sql": ("**/*.sql",), "state_machines": ("*.json",)}


class BuildPyWithData(build_py):
    def run(self) -> None:
        super().run()
        for name, patterns in DATA.items():
            for pattern in patterns:
                for src in sorted((ROOT / name).glob(pattern)):
                    dest = Path(self.build_lib) / "benchctl" / "_data" / name / src.relative_to(ROOT / name)
                    dest.parent.mkdir(parents=True, exist_ok=True)
                    self.copy_file(str(src), str(dest))


setup(cmdclass={"build_py": BuildPyWithData})
