"""Packaging glue: the repository root is the package `hotloop`, and every folder under it with an
`__init__.py` (tests, benchmarks and screenshots have none) is a subpackage, found here.

Setuptools' own discovery can only name packages after their folders, not put them under
`hotloop`; everything else about the distribution is in pyproject.toml.
"""

from setuptools import find_packages, setup
from setuptools.command.build_py import build_py


class BuildPy(build_py):
    """Leaves this file out of the `hotloop` package it sits in."""

    def find_package_modules(self, package: str, package_dir: str) -> list[tuple[str, str, str]]:
        modules = super().find_package_modules(package, package_dir)
        return [module for module in modules if (module[0], module[1]) != ("hotloop", "setup")]


setup(packages=["hotloop", *(f"hotloop.{name}" for name in find_packages())], cmdclass={"build_py": BuildPy})
