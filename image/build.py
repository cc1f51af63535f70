#!/usr/bin/env python3
"""Builds the fleetnet-hub container image without a container registry or a Docker daemon.

    python3 image/build.py BINARY [--out fleetnet-hub-oci.tar] [--tag fleetnet-hub:<appVersion>]

BINARY is a fleetnet-hub executable: the static musl release build (`cargo build --release
--no-default-features --target x86_64-unknown-linux-musl --bin fleetnet-hub`), or any glibc build
(then the shared libraries `ldd` names go into the image too). The output is ONE tar that is at
the same time an OCI image layout (oci-layout, index.json, blobs/sha256/...) and a `docker save`
archive (manifest.json), so `docker load -i`, `podman load -i`, `kind load image-archive`,
`skopeo copy oci-archive:...` and `umoci unpack` (after untarring) all read it.

The image is what the Dockerfile builds (distroless/static:nonroot + the binary), assembled from
this machine's files instead of a base image:
  - /fleetnet-hub (debug info stripped unless --no-strip; symbol names stay for backtraces),
  - /etc/ssl/certs/ca-certificates.crt (Azure ARM is reached over rustls with the native roots),
  - /etc/passwd and /etc/group with root and nonroot (65532), /home/nonroot, /tmp,
  - for a dynamically linked binary, the loader and the libraries ldd resolves;
  User 65532:65532, Entrypoint ["/fleetnet-hub"], Cmd ["run"], ports 8080 and 8081, and the
  Dockerfile's LABELs (read from it, so the two images never disagree).

Reproducible: every entry sorted, owned by 0:0 (nonroot's home by 65532), mtime SOURCE_DATE_EPOCH
(default 0), gzip without name or time; the same binary and CA bundle give the same digest. The
last line printed is the manifest digest.
"""

import argparse
import gzip
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NONROOT = 65532
PASSWD = "root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"
GROUP = "root:x:0:\nnonroot:x:65532:\n"
CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"
ENV = [
    "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "SSL_CERT_FILE=" + CA_BUNDLE,
]
MANIFEST_TYPE = "application/vnd.oci.image.manifest.v1+json"
CONFIG_TYPE = "application/vnd.oci.image.config.v1+json"
LAYER_TYPE = "application/vnd.oci.image.layer.v1.tar+gzip"


def app_version():
    """The chart's appVersion: the tag the chart's default image reference uses."""
    with open(os.path.join(ROOT, "charts/fleetnet-hub/Chart.yaml"), encoding="utf-8") as f:
        m = re.search(r'^appVersion:\s*"?([^"\s]+)"?', f.read(), re.M)
    if not m:
        sys.exit("build.py: no appVersion in charts/fleetnet-hub/Chart.yaml")
    return m.group(1)


def dockerfile_labels():
    """The org.opencontainers.image.* LABELs of the Dockerfile (the published image's)."""
    with open(os.path.join(ROOT, "Dockerfile"), encoding="utf-8") as f:
        text = f.read()
    return dict(re.findall(r'(org\.opencontainers\.image\.[a-z.]+)="([^"]*)"', text))


def shared_libraries(binary):
    """The files the dynamic loader maps for `binary` (loader included); none for a static one."""
    out = subprocess.run(["ldd", binary], capture_output=True, text=True)
    if out.returncode != 0 or "statically linked" in out.stdout + out.stderr:
        return []
    libs = []
    for line in out.stdout.splitlines():
        # "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)" or "/lib64/ld-linux-x86-64.so.2 (0x...)"
        m = re.search(r"(?:=>\s*)?(/\S+)\s+\(0x", line)
        if m:
            libs.append(m.group(1))
        elif "not found" in line:
            sys.exit(f"build.py: {binary}: {line.strip()}")
    return sorted(set(libs))


def stripped_copy(binary, workdir, strip):
    """The binary as it goes into the image: debug info removed (deterministic) unless not asked."""
    dest = os.path.join(workdir, "fleetnet-hub")
    if strip and shutil.which("strip"):
        subprocess.run(["strip", "--strip-debug", "-o", dest, binary], check=True)
    else:
        shutil.copyfile(binary, dest)
    return dest


class Layer:
    """An uncompressed tar built in memory with fixed metadata; parents are added on demand."""

    def __init__(self, mtime):
        self.mtime = mtime
        self.entries = {}

    def parents(self, path):
        """Every missing parent directory of `path`, 0755 and owned by root."""
        parts = path.split("/")[:-1]
        for i in range(1, len(parts) + 1):
            self.entries.setdefault("/".join(parts[:i]), ("dir", None, 0o755, 0))

    def dir(self, path, mode=0o755, owner=0):
        path = path.strip("/")
        self.parents(path)
        self.entries[path] = ("dir", None, mode, owner)

    def file(self, path, data=None, source=None, mode=0o644):
        path = path.strip("/")
        self.parents(path)
        self.entries[path] = ("file", (data, source), mode, 0)

    def tar(self):
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for path in sorted(self.entries):
                kind, content, mode, owner = self.entries[path]
                info = tarfile.TarInfo(path)
                info.mode, info.uid, info.gid, info.mtime = mode, owner, owner, self.mtime
                info.uname = info.gname = ""
                if kind == "dir":
                    info.type = tarfile.DIRTYPE
                    tar.addfile(info)
                    continue
                data, source = content
                if source is not None:
                    info.size = os.path.getsize(source)
                    with open(source, "rb") as f:
                        tar.addfile(info, f)
                else:
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
        return buf.getvalue()


def gzip_bytes(data, level):
    buf = io.BytesIO()
    # filename="" and mtime=0: nothing of this machine or this moment in the header.
    with gzip.GzipFile(filename="", mode="wb", fileobj=buf, compresslevel=level, mtime=0) as gz:
        gz.write(data)
    return buf.getvalue()


def digest(data):
    return "sha256:" + hashlib.sha256(data).hexdigest()


def canonical(obj):
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def image_blobs(binary, args, mtime, workdir):
    """(layer, config, manifest) bytes of the image."""
    layer = Layer(mtime)
    layer.file("fleetnet-hub", source=stripped_copy(binary, workdir, not args.no_strip), mode=0o755)
    layer.file("etc/passwd", PASSWD.encode())
    layer.file("etc/group", GROUP.encode())
    with open(args.ca_bundle, "rb") as f:
        layer.file(CA_BUNDLE, f.read())
    layer.dir("home/nonroot", mode=0o700, owner=NONROOT)
    layer.dir("tmp", mode=0o1777)
    for lib in shared_libraries(binary):
        # The path ldd names, holding the file it resolves to (symlinks followed).
        layer.file(lib, source=os.path.realpath(lib), mode=0o755)
    raw = layer.tar()
    compressed = gzip_bytes(raw, args.compress_level)
    created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(mtime))
    config = canonical({
        "created": created,
        "architecture": "amd64",
        "os": "linux",
        "config": {
            "User": f"{NONROOT}:{NONROOT}",
            "Env": ENV,
            "Entrypoint": ["/fleetnet-hub"],
            "Cmd": ["run"],
            "WorkingDir": "/",
            "ExposedPorts": {"8080/tcp": {}, "8081/tcp": {}},
            "Labels": dockerfile_labels(),
        },
        "rootfs": {"type": "layers", "diff_ids": [digest(raw)]},
        "history": [{"created": created, "created_by": "image/build.py"}],
    })
    manifest = canonical({
        "schemaVersion": 2,
        "mediaType": MANIFEST_TYPE,
        "config": {"mediaType": CONFIG_TYPE, "digest": digest(config), "size": len(config)},
        "layers": [{"mediaType": LAYER_TYPE, "digest": digest(compressed), "size": len(compressed)}],
    })
    return compressed, config, manifest


def normalized(name):
    """A name as docker and containerd spell it in full: fleetnet-hub is
    docker.io/library/fleetnet-hub, me/fleetnet-hub is docker.io/me/fleetnet-hub, a name whose
    first part is a host (a dot, a port or localhost) stays as it is."""
    first, _, rest = name.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        return name
    return f"docker.io/{name}" if rest else f"docker.io/library/{name}"


def archive(out, tag, blobs, mtime):
    """Writes the OCI layout + docker-archive tar to `out` (via a temporary file, then renamed)."""
    layer, config, manifest = blobs
    name, _, version = tag.rpartition(":")
    full = normalized(name)
    index = canonical({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [{
            "mediaType": MANIFEST_TYPE,
            "digest": digest(manifest),
            "size": len(manifest),
            "annotations": {
                # containerd/docker name the loaded image after this one ...
                "io.containerd.image.name": f"{full}:{version}",
                # ... and umoci, skopeo and podman after this one (the tag, as `docker save` writes it).
                "org.opencontainers.image.ref.name": version,
            },
        }],
    })
    def blob(data):
        return "blobs/sha256/" + digest(data).split(":")[1]

    docker_manifest = canonical([{
        "Config": blob(config), "RepoTags": [tag], "Layers": [blob(layer)],
    }])
    files = {
        "oci-layout": canonical({"imageLayoutVersion": "1.0.0"}),
        "index.json": index,
        "manifest.json": docker_manifest,
        blob(layer): layer,
        blob(config): config,
        blob(manifest): manifest,
    }
    tmp = out + ".tmp"
    with tarfile.open(tmp, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for d in ("blobs", "blobs/sha256"):
            info = tarfile.TarInfo(d)
            info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, mtime
            tar.addfile(info)
        for path in sorted(files):
            info = tarfile.TarInfo(path)
            info.size, info.mode, info.mtime = len(files[path]), 0o644, mtime
            tar.addfile(info, io.BytesIO(files[path]))
    os.replace(tmp, out)
    return digest(manifest)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("binary", help="the fleetnet-hub executable to put in the image")
    p.add_argument("--out", default="fleetnet-hub-oci.tar", help="the archive to write")
    p.add_argument("--tag", default=None, help="image name:tag (default fleetnet-hub:<chart appVersion>)")
    p.add_argument("--ca-bundle", default=CA_BUNDLE, help="PEM bundle of trusted CAs")
    p.add_argument("--compress-level", type=int, default=6, help="gzip level of the layer (1-9)")
    p.add_argument("--no-strip", action="store_true", help="keep the binary's debug info")
    args = p.parse_args()
    tag = args.tag or f"fleetnet-hub:{app_version()}"
    if ":" not in tag.rsplit("/", 1)[-1]:
        sys.exit(f"build.py: --tag {tag}: give name:tag")
    mtime = int(os.environ.get("SOURCE_DATE_EPOCH", "0"))
    with tempfile.TemporaryDirectory() as workdir:
        blobs = image_blobs(args.binary, args, mtime, workdir)
    manifest = archive(args.out, tag, blobs, mtime)
    print(f"{args.out}: {tag}, {len(blobs[0])} bytes of layer")
    print(manifest)


if __name__ == "__main__":
    main()
