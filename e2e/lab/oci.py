#!/usr/bin/env python3
"""Write an OCI image archive (oci-layout, index.json, blobs/sha256/...) from a root filesystem,
with Python's standard library and tar: no container engine, no registry.

    oci.py --rootfs DIR --name slurmpool.local/slurmd:22.05 --out slurmd.tar \
           [--entrypoint '["/entrypoint"]'] [--cmd '[]'] [--env K=V ...] [--user 65532:65532] \
           [--workdir /] [--label k=v ...]

One gzip layer holds the whole tree (numeric owners kept). The archive imports with
`ctr -n k8s.io images import FILE` (containerd reads the name from the index's
io.containerd.image.name annotation) and loads with any OCI tool (skopeo, podman, buildah).
Used by e2e/lab/real-nodes.sh (the pause image) and deploy/docker/build-images.sh.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import json
import os
import subprocess
import tarfile
import tempfile


class _HashWriter(io.RawIOBase):
    """A file that hashes and counts what is written to it, then passes it on."""

    def __init__(self, out):
        self.out, self.sha, self.size = out, hashlib.sha256(), 0

    def writable(self):
        return True

    def write(self, b):
        self.sha.update(b)
        self.size += len(b)
        self.out.write(b)
        return len(b)


def layer_from_dir(rootfs: str, blob_dir: str) -> tuple[str, str, int]:
    """Tar ROOTFS into a gzip blob. Returns (diff_id, digest, size)."""
    tmp = tempfile.NamedTemporaryFile(dir=blob_dir, delete=False)
    gz_hash = _HashWriter(tmp)
    # mtime 0 and no file name: the same tree gives the same compressed bytes.
    gz = gzip.GzipFile(fileobj=gz_hash, mode="wb", compresslevel=1, mtime=0, filename="")
    raw_sha = hashlib.sha256()
    tar = subprocess.Popen(["tar", "--numeric-owner", "--sort=name", "-C", rootfs, "-cf", "-", "."],
                           stdout=subprocess.PIPE)
    assert tar.stdout is not None
    while chunk := tar.stdout.read(1 << 20):
        raw_sha.update(chunk)
        gz.write(chunk)
    if tar.wait() != 0:
        raise SystemExit(f"tar of {rootfs} failed")
    gz.close()
    tmp.close()
    digest = gz_hash.sha.hexdigest()
    os.replace(tmp.name, os.path.join(blob_dir, digest))
    return "sha256:" + raw_sha.hexdigest(), "sha256:" + digest, gz_hash.size


def put_blob(blob_dir: str, data: bytes) -> tuple[str, int]:
    digest = hashlib.sha256(data).hexdigest()
    with open(os.path.join(blob_dir, digest), "wb") as f:
        f.write(data)
    return "sha256:" + digest, len(data)


def write_archive(rootfs: str, name: str, out: str, entrypoint=None, cmd=None, env=(), user="", workdir="",
                  labels=None, stop_signal="") -> str:
    """Write the archive OUT; returns the manifest digest."""
    with tempfile.TemporaryDirectory(dir=os.path.dirname(os.path.abspath(out))) as work:
        blobs = os.path.join(work, "blobs", "sha256")
        os.makedirs(blobs)
        diff_id, layer_digest, layer_size = layer_from_dir(rootfs, blobs)
        config: dict = {"Env": list(env) or ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]}
        if entrypoint is not None:
            config["Entrypoint"] = entrypoint
        if cmd is not None:
            config["Cmd"] = cmd
        if user:
            config["User"] = user
        if workdir:
            config["WorkingDir"] = workdir
        if labels:
            config["Labels"] = labels
        if stop_signal:
            config["StopSignal"] = stop_signal
        image_config = {
            "architecture": "amd64", "os": "linux", "created": "1970-01-01T00:00:00Z", "config": config,
            "rootfs": {"type": "layers", "diff_ids": [diff_id]},
            "history": [{"created": "1970-01-01T00:00:00Z", "created_by": "slurmpool oci.py"}],
        }
        cfg_digest, cfg_size = put_blob(blobs, json.dumps(image_config, sort_keys=True).encode())
        manifest = {
            "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": cfg_digest, "size": cfg_size},
            "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": layer_digest,
                        "size": layer_size}],
        }
        man_digest, man_size = put_blob(blobs, json.dumps(manifest, sort_keys=True).encode())
        tag = name.rsplit(":", 1)[1] if ":" in name.rsplit("/", 1)[-1] else "latest"
        index = {
            "schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
            "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": man_digest,
                           "size": man_size, "platform": {"architecture": "amd64", "os": "linux"},
                           "annotations": {"io.containerd.image.name": name,
                                           "org.opencontainers.image.ref.name": tag}}],
        }
        with open(os.path.join(work, "index.json"), "w") as f:
            json.dump(index, f)
        with open(os.path.join(work, "oci-layout"), "w") as f:
            json.dump({"imageLayoutVersion": "1.0.0"}, f)
        tmp_out = out + ".tmp"
        with tarfile.open(tmp_out, "w") as t:  # uncompressed: the layer is compressed already
            for entry in ("oci-layout", "index.json", "blobs"):
                t.add(os.path.join(work, entry), arcname=entry)
        os.replace(tmp_out, out)
    return man_digest


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rootfs", required=True)
    p.add_argument("--name", required=True, help="full image reference, e.g. slurmpool.local/slurmd:22.05")
    p.add_argument("--out", required=True)
    p.add_argument("--entrypoint", type=json.loads)
    p.add_argument("--cmd", type=json.loads)
    p.add_argument("--env", action="append", default=[])
    p.add_argument("--user", default="")
    p.add_argument("--workdir", default="")
    p.add_argument("--label", action="append", default=[])
    p.add_argument("--stop-signal", default="")
    a = p.parse_args()
    labels = dict(x.split("=", 1) for x in a.label)
    print(write_archive(a.rootfs, a.name, a.out, a.entrypoint, a.cmd, a.env, a.user, a.workdir, labels,
                        a.stop_signal))


if __name__ == "__main__":
    main()
