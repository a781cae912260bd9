"""Tier-2 back ends for the contract suite: a local folder, fsspec's ``memory://``, and S3
through s3fs against moto's server (``s3helpers``)."""

from __future__ import annotations

import uuid

import pytest
from s3helpers import Backend, moto_server, new_bucket, s3_options


@pytest.fixture(scope="session")
def moto_endpoint():
    """moto's S3 server on 127.0.0.1 for the whole session."""
    yield from moto_server()


@pytest.fixture(params=["local", "memory", "s3"])
def backend(request, tmp_path):
    if request.param == "local":
        yield Backend("local", str(tmp_path / "tier2"))
    elif request.param == "memory":
        root = f"memory://t2-{uuid.uuid4().hex[:12]}"
        yield Backend("memory", root)
        import fsspec
        fs = fsspec.filesystem("memory")
        if fs.exists(root):
            fs.rm(root, recursive=True)
    else:
        endpoint = request.getfixturevalue("moto_endpoint")
        yield Backend("s3", f"s3://{new_bucket(endpoint)}/prefix", s3_options(endpoint))
