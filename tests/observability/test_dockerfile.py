"""The Dockerfile builds, proved without a Docker engine: its build stage's own COPY and RUN steps
run in a scratch directory standing for the image's root, in order (BuildKit cache mounts become
a cache directory kept between runs, as BuildKit keeps them), then the runtime stage's COPYs and
ENV, and the binary it built is run as the image runs it: `--version`, `check-contracts` on the
image's contracts, and `serve` (the image's CMD) answering its HEALTHCHECK and /readyz.

The runtime stage's RUN (apt-get, useradd) changes a Debian system and is not run here.

The first run compiles reckon's dependencies in release mode (several minutes on two cores);
later runs reuse them from the cache directory ($RECKON_DOCKERFILE_CACHE, default
target/dockerfile-cache), as a BuildKit builder does."""

import fnmatch
import os
import pathlib
import re
import shlex
import shutil
import socket
import subprocess
import time
import urllib.request

import pytest

import reckon_sql

ROOT = reckon_sql.ROOT


def instructions(text: str):
    """(stage name, instruction, arguments) for each instruction, continuation lines joined."""
    joined = re.sub(r"\\\n", " ", text)
    stage = None
    for line in joined.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        op, _, args = line.partition(" ")
        op = op.upper()
        if op == "FROM":
            m = re.match(r"(\S+)(?:\s+AS\s+(\S+))?", args, re.I)
            stage = m.group(2) or m.group(1)
        yield stage, op, args.strip()


def ignored(rel: str, patterns: list[str]) -> bool:
    parts = rel.split("/")
    return any(fnmatch.fnmatch(rel, p) or fnmatch.fnmatch(parts[0], p) or
               (p.startswith("**/") and any(fnmatch.fnmatch(x, p[3:]) for x in parts))
               for p in patterns)


def dockerignore() -> list[str]:
    lines = (ROOT / ".dockerignore").read_text().splitlines()
    return [l.strip() for l in lines if l.strip() and not l.startswith("#")]


def copy_into(sources: list[str], dest: str, root, workdir: str, context=ROOT):
    """COPY sources dest, relative to the build context, into the scratch root."""
    dest_abs = dest if dest.startswith("/") else os.path.join(workdir, dest)
    target = root / dest_abs.lstrip("/")
    patterns = dockerignore()
    for src in sources:
        path = context / src
        assert path.exists(), f"COPY source {src} does not exist"
        if ignored(src.rstrip("/"), patterns):
            pytest.fail(f"COPY {src}: excluded by .dockerignore, so the build would not see it")
        if path.is_dir():
            shutil.copytree(path, target, dirs_exist_ok=True,
                            ignore=lambda d, names: [n for n in names if ignored(
                                os.path.relpath(os.path.join(d, n), context), patterns)])
        else:
            to = target / path.name if dest.endswith("/") else target
            to.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, to)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def image(tmp_path_factory):
    """Run the Dockerfile's stages into scratch roots; returns (runtime root, ENV)."""
    text = (ROOT / "Dockerfile").read_text()
    cache = build_cache()
    roots, workdirs, envs = {}, {}, {}
    for stage, op, args in instructions(text):
        root = roots.setdefault(stage, tmp_path_factory.mktemp(f"stage-{stage.replace(':', '_')}"))
        workdir = workdirs.setdefault(stage, "/")
        env = envs.setdefault(stage, {})
        if op == "WORKDIR":
            workdirs[stage] = args
            (root / args.lstrip("/")).mkdir(parents=True, exist_ok=True)
        elif op == "ENV":
            for k, v in re.findall(r"(\w+)=(\S+)", args):
                env[k] = v
        elif op == "COPY":
            words = shlex.split(args)
            if words[0].startswith("--from="):
                src_root = roots[words[0].split("=", 1)[1]]
                src, dest = words[1], words[2]
                to = root / dest.lstrip("/")
                to.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src_root / src.lstrip("/"), to)
            else:
                copy_into(words[:-1], words[-1], root, workdir)
        elif op == "RUN" and stage == "build":
            command = args
            # Cache mounts: a directory kept between runs, linked where the step expects it.
            for target in re.findall(r"--mount=type=cache,target=(\S+)", command):
                keep = cache / target.strip("/").replace("/", "_")
                keep.mkdir(parents=True, exist_ok=True)
                at = root / target.lstrip("/")
                at.parent.mkdir(parents=True, exist_ok=True)
                if not at.exists():
                    at.symlink_to(keep)
            command = re.sub(r"--mount=\S+\s*", "", command)
            # The image's absolute paths, inside the scratch root.
            command = re.sub(r"(?<![\w./-])/(src|usr/local/bin)\b", lambda m: f"{root}/{m.group(1)}", command)
            (root / "usr/local/bin").mkdir(parents=True, exist_ok=True)
            run_env = dict(os.environ)
            # The registry mount stands for CARGO_HOME's registry in the rust image.
            run_env["CARGO_HOME"] = os.environ.get("CARGO_HOME", os.path.expanduser("~/.cargo"))
            r = subprocess.run(["bash", "-euo", "pipefail", "-c", command],
                               cwd=root / workdirs[stage].lstrip("/"), env=run_env,
                               capture_output=True, text=True, timeout=3600)
            assert r.returncode == 0, f"RUN {args[:80]}... failed:\n{r.stderr[-4000:]}"
    runtime = list(roots)[-1]
    return roots[runtime], envs[runtime]


def build_cache() -> pathlib.Path:
    """Where BuildKit's cache mounts are kept between runs."""
    path = pathlib.Path(os.environ.get("RECKON_DOCKERFILE_CACHE", ROOT / "target" / "dockerfile-cache"))
    path.mkdir(parents=True, exist_ok=True)
    return path


def in_root(root, path: str) -> str:
    return str(root / path.lstrip("/"))


def test_the_image_binary_runs(image):
    root, env = image
    binary = in_root(root, "/usr/local/bin/reckon")
    out = subprocess.run([binary, "--version"], capture_output=True, text=True, check=True).stdout
    assert out.startswith("reckon "), out
    contracts = in_root(root, env["RECKON_CONTRACTS_DIR"])
    r = subprocess.run([binary, "check-contracts", "--contracts", contracts], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "issue_refund" in r.stdout, r.stdout


def test_the_image_serves_as_its_cmd_and_healthcheck_say(image):
    root, env = image
    text = (ROOT / "Dockerfile").read_text()
    cmd = re.search(r'^CMD\s+\[(.*)\]', text, re.M).group(1)
    entry = re.search(r'^ENTRYPOINT\s+\[(.*)\]', text, re.M).group(1)
    argv = [a.strip().strip('"') for a in (entry + "," + cmd).split(",")]
    assert argv[0] == "reckon"
    ports = {name: free_port() for name in ("grpc", "http", "api")}
    run_env = {k: (in_root(root, v) if v.startswith("/") else v) for k, v in env.items()}
    # The image's listen addresses, on free loopback ports here.
    run_env.update(RECKON_GRPC_ADDR=f"127.0.0.1:{ports['grpc']}",
                   RECKON_HTTP_ADDR=f"127.0.0.1:{ports['http']}",
                   RECKON_API_ADDR=f"127.0.0.1:{ports['api']}",
                   PATH=os.environ["PATH"])
    for k in ("RECKON_GRPC_ADDR", "RECKON_HTTP_ADDR", "RECKON_API_ADDR"):
        assert k in env, f"the image sets {k}"
    workdir = root / re.findall(r"^WORKDIR\s+(\S+)", text, re.M)[-1].lstrip("/")
    workdir.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen([in_root(root, "/usr/local/bin/reckon")] + argv[1:], cwd=workdir,
                            env=run_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        health = re.search(r"HEALTHCHECK.*?CMD\s+(.*?)\s*\|\|", text.replace("\\\n", " "), re.S).group(1)
        health = health.replace("127.0.0.1:8080", f"127.0.0.1:{ports['api']}")
        deadline = time.time() + 60
        while True:
            if subprocess.run(health, shell=True, capture_output=True).returncode == 0:
                break
            assert proc.poll() is None, proc.stdout.read().decode()[-3000:]
            assert time.time() < deadline, "the HEALTHCHECK never passed"
            time.sleep(0.3)
        with urllib.request.urlopen(f"http://127.0.0.1:{ports['api']}/readyz", timeout=5) as r:
            assert r.status == 200
    finally:
        proc.terminate()
        proc.wait(timeout=30)
