"""Packaging detail pyproject.toml cannot express: install cases/ as conformance._cases."""

from setuptools import find_packages, setup

setup(
    packages=find_packages(include=["conformance", "conformance.*"]) + ["conformance._cases"],
    package_dir={"conformance._cases": "cases"},
    package_data={"conformance": ["py.typed", "data/*.json", "data/*.yaml"],
                  "conformance._cases": ["*.yaml", "model/*.yaml"]},
)
