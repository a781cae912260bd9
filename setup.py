"""Builds the C core in csrc/ through cffi's out-of-line API mode (see pravega_embedded/_native/_build.py)."""

from setuptools import setup

setup(cffi_modules=["pravega_embedded/_native/_build.py:ffi"])
