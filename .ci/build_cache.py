#!/usr/bin/env python3
"""The cached Rust build across fresh clones: source times as the build saw them, and which
artefacts this run used (the rest is pruned).

Source times. A fresh clone's unchanged files get back the modification times the cached build saw.

Cargo decides that a workspace crate must be rebuilt when one of its sources is newer than its
last build, and a clone makes every file new: without this, a cached run recompiled and relinked
every workspace crate and test binary although nothing had changed. The cache keeps, per tracked
path, the content's hash and the time it was built with (`record`, after the build); `restore`
gives a file that time only when its content's hash is the one recorded, so a changed file keeps
its new time and is rebuilt, and no stale build is ever taken for a fresh one.

Artefacts used. Cargo prints every artefact of a build, fresh or rebuilt, with
`--message-format=json`; `used` lists them, and `prune` removes the executables of a deps
directory that are not listed: the test binaries of earlier commits, never one this run reused
(a reused binary removed would be rebuilt by the next run; touching them instead would make
every crate that depends on one look stale to cargo).

  build_cache.py record  MANIFEST   (from the checkout, after the build)
  build_cache.py restore MANIFEST   (from the checkout, before the build)
  cargo ... --message-format=json-render-diagnostics | build_cache.py used LIST
  build_cache.py prune LIST DEPS_DIR
"""

import json
import os
import subprocess
import sys


def tracked_hashes():
    """Each tracked file's path and the hash of its content in the working tree."""
    paths = subprocess.run(
        ["git", "ls-files", "-z"], check=True, capture_output=True
    ).stdout.decode().split("\0")
    paths = [p for p in paths if p and os.path.isfile(p) and not os.path.islink(p)]
    if not paths:
        return {}
    hashes = subprocess.run(
        ["git", "hash-object", "--stdin-paths"],
        input="\n".join(paths).encode(),
        check=True,
        capture_output=True,
    ).stdout.decode().split()
    return dict(zip(paths, hashes))


def record(manifest):
    entries = {
        path: [digest, os.stat(path).st_mtime_ns] for path, digest in tracked_hashes().items()
    }
    tmp = manifest + ".tmp"
    with open(tmp, "w") as out:
        json.dump(entries, out)
    os.replace(tmp, manifest)
    print(f"source times recorded: {len(entries)} files")


def restore(manifest):
    try:
        with open(manifest) as f:
            recorded = json.load(f)
    except (OSError, ValueError):
        print("source times: none recorded (cold cache)")
        return
    restored = changed = 0
    for path, digest in tracked_hashes().items():
        entry = recorded.get(path)
        if entry and entry[0] == digest:
            os.utime(path, ns=(entry[1], entry[1]))
            restored += 1
        else:
            changed += 1
    print(f"source times: {restored} files as built, {changed} new or changed")


def used(listing):
    paths = set()
    for line in sys.stdin:
        try:
            message = json.loads(line)
        except ValueError:
            continue
        if message.get("reason") == "compiler-artifact":
            paths.update(message.get("filenames", []))
            if message.get("executable"):
                paths.add(message["executable"])
    with open(listing, "w") as out:
        out.write("\n".join(sorted(paths)))
    print(f"build artefacts used by this run: {len(paths)}")


def prune(listing, deps):
    # Compared by inode: cargo names a binary by its uplifted path (target/debug/NAME), a hard
    # link of the deps/NAME-HASH file that is pruned here.
    with open(listing) as f:
        keep = {inode(p) for p in f.read().split("\n") if p and os.path.exists(p)}
    removed = 0
    for name in os.listdir(deps):
        path = os.path.join(deps, name)
        if "." in name or not os.path.isfile(path) or inode(path) in keep:
            continue
        os.remove(path)
        removed += 1
    print(f"executables of earlier builds removed: {removed}")


def inode(path):
    status = os.stat(path)
    return (status.st_dev, status.st_ino)


COMMANDS = {"record": record, "restore": restore, "used": used, "prune": prune}
ARITY = {"record": 1, "restore": 1, "used": 1, "prune": 2}

if __name__ == "__main__":
    command = sys.argv[1] if len(sys.argv) > 1 else ""
    if command not in COMMANDS or len(sys.argv) - 2 != ARITY[command]:
        sys.exit(__doc__)
    COMMANDS[command](*sys.argv[2:])
