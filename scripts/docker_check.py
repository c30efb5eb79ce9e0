#!/usr/bin/env python3
"""docker/Dockerfile checked without a container engine (scripts/docker-check.sh runs this).

1. Reads the Dockerfile: stages, COPY, RUN, ENV, USER, WORKDIR, HEALTHCHECK, ENTRYPOINT/CMD.
2. Build stage: links (hard links: same bytes, same inode) exactly the files each `COPY` copies from the repository
   into a scratch tree and runs the stage's `swift build` in a private mount namespace where that tree is mounted
   over the repository's path. The tree's .build is kept from run to run, and SwiftPM keys its cache by absolute path
   and file identity, so a later run rebuilds only what changed. (It cannot start from CI's own release build:
   `--static-swift-stdlib` adds `-static-stdlib` to every module's compile command, so every module differs.)
3. Runtime stage: lays out every `COPY --from=build` target under a scratch root in /tmp (no Package.swift above it)
   and starts ENTRYPOINT + CMD from there with the image's ENV (absolute paths moved under the root, PARLEY_LISTEN on
   loopback) as the image's USER, in a mount namespace where the repository's path is an empty directory: the binary
   would otherwise find console/ and openapi/ in the checkout it was built from (RepositoryFile's #filePath fallback)
   and hide a missing COPY. Then checks /readyz, /console, /openapi.json and the HEALTHCHECK command.

Usage: docker_check.py REPO SCRATCH   (SCRATCH: the persistent build cache directory)
"""

import json
import os
import pwd
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

READY_TIMEOUT_S = 120


def fail(message):
    print(f"docker-check: FAILED: {message}", flush=True)
    sys.exit(1)


def say(message):
    print(f"docker-check: {message}", flush=True)


# -- Dockerfile ---------------------------------------------------------------------------------------------------------


def instructions(path):
    """(keyword, arguments) per instruction: continuation lines joined, comments dropped."""
    result, pending = [], ""
    with open(path) as handle:
        for raw in handle:
            line = raw.rstrip("\n")
            if not pending and (not line.strip() or line.lstrip().startswith("#")):
                continue
            if pending and line.lstrip().startswith("#"):
                continue
            if line.endswith("\\"):
                pending += line[:-1] + " "
                continue
            line = pending + line
            pending = ""
            keyword, _, rest = line.strip().partition(" ")
            result.append((keyword.upper(), rest.strip()))
    return result


def stages(path):
    """[{name, base, steps: [(keyword, args)]}] in order."""
    found = []
    for keyword, args in instructions(path):
        if keyword == "FROM":
            words = args.split()
            name = words[2] if len(words) >= 3 and words[1].upper() == "AS" else None
            found.append({"name": name, "base": words[0], "steps": []})
        elif not found:
            fail(f"{keyword} before the first FROM")
        else:
            found[-1]["steps"].append((keyword, args))
    return found


def exec_form(args):
    """A JSON array (exec form) as a list, a shell-form string as ["/bin/sh", "-c", string]."""
    if args.startswith("["):
        return json.loads(args)
    return ["/bin/sh", "-c", args]


def copy_parts(args):
    """(flags, sources, destination) of a COPY."""
    words = shlex.split(args)
    flags = {}
    while words and words[0].startswith("--"):
        key, _, value = words.pop(0)[2:].partition("=")
        flags[key] = value
    if len(words) < 2:
        fail(f"cannot read COPY {args}")
    return flags, words[:-1], words[-1]


def env_pairs(args):
    """ENV a=1 b=2 (or the legacy `ENV a 1`) as a dict."""
    words = shlex.split(args)
    if words and "=" not in words[0]:
        return {words[0]: " ".join(words[1:])}
    return dict(word.split("=", 1) for word in words)


def healthcheck_command(args):
    match = re.search(r"\bCMD\s+(.*)$", args)
    if not match:
        fail(f"cannot read HEALTHCHECK {args}")
    return exec_form(match.group(1).strip())


def apt_packages(run):
    """Package names of an `apt-get install` in a RUN (options dropped)."""
    names = []
    for command in re.split(r"&&|;", run):
        words = command.split()
        if len(words) >= 2 and words[0] == "apt-get" and "install" in words:
            names += [w for w in words[words.index("install") + 1 :] if not w.startswith("-")]
    return names


# -- copying ------------------------------------------------------------------------------------------------------------


def copy_tree(source, destination, wanted):
    """Records into `wanted` (destination path → source path) every file a COPY of `source` to `destination` makes."""
    if os.path.isdir(source):
        for directory, _, files in os.walk(source):
            for name in files:
                path = os.path.join(directory, name)
                wanted[os.path.join(destination, os.path.relpath(path, source))] = path
    elif os.path.isfile(source):
        wanted[destination] = source
    else:
        fail(f"COPY source {source} does not exist")


def link_tree(wanted, root):
    """Makes `root` hold exactly the files of `wanted`, as hard links to the repository's files, beside the `.build`
    of the previous run (kept: SwiftPM then rebuilds only what changed)."""
    if os.path.isdir(root):
        for name in os.listdir(root):
            if name != ".build":
                path = os.path.join(root, name)
                shutil.rmtree(path) if os.path.isdir(path) and not os.path.islink(path) else os.remove(path)
    for target, source in wanted.items():
        os.makedirs(os.path.dirname(target), exist_ok=True)
        try:
            os.link(source, target)
        except OSError:
            shutil.copy2(source, target)  # another file system: a copy (the build then finds nothing to reuse)


def in_namespace(mount_source, mount_point, argv, enter=False):
    """argv in a private mount namespace where `mount_source` is mounted over `mount_point` (same pid: exec), run in
    `mount_point` when `enter`, else in the caller's working directory."""
    script = 'mount --bind "$1" "$2" && ' + ('cd "$2" && ' if enter else "") + 'shift 2 && exec "$@"'
    return ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", script, "sh", mount_source, mount_point] + argv


def stage_copies(stage, repo, workdir, destination_root):
    """What the build stage's COPY lines put where: {path under destination_root: source path in the repository}."""
    wanted = {}
    for keyword, args in stage["steps"]:
        if keyword == "WORKDIR":
            workdir = os.path.join(workdir, args)
        elif keyword == "COPY":
            flags, sources, destination = copy_parts(args)
            if "from" in flags:
                fail(f"the build stage copies from another stage ({args}): docker-check.sh does not simulate that")
            target = destination if destination.startswith("/") else os.path.join(workdir, destination)
            for source in sources:
                path = os.path.normpath(os.path.join(repo, source))
                if not path.startswith(repo):
                    fail(f"COPY {source} leaves the build context")
                if os.path.isdir(path) or destination.endswith("/") or len(sources) > 1:
                    into = target if os.path.isdir(path) else os.path.join(target, os.path.basename(path))
                else:
                    into = target
                copy_tree(path, os.path.normpath(destination_root + into), wanted)
    return wanted


def check_libraries(binary, runtime):
    """Every shared library the binary loads must come from a package the runtime stage installs (or one those
    depend on): this machine has more installed than the image will."""
    packages = [name for keyword, args in runtime["steps"] if keyword == "RUN" for name in apt_packages(args)]
    closure = subprocess.run(
        ["apt-cache", "depends", "--recurse", "--no-recommends", "--no-suggests", "--no-conflicts", "--no-breaks",
         "--no-replaces", "--no-enhances", "--no-pre-depends"] + packages,
        capture_output=True, text=True,
    ).stdout
    provided = set(packages) | {line.strip().split(":", 1)[-1].strip().strip("<>") for line in closure.splitlines()}
    provided = {name.split(":")[0] for name in provided}
    listed = subprocess.run(["ldd", binary], capture_output=True, text=True).stdout
    libraries = {match.group(1): None for match in re.finditer(r"=>\s+(/\S+)", listed)}
    # Debian records some under /lib and some under /usr/lib (merged /usr): ask for every spelling, in one dpkg -S.
    spellings = {lib: {lib, os.path.realpath(lib)} for lib in libraries}
    for lib in libraries:
        spellings[lib] |= {p.replace("/usr/lib/", "/lib/", 1) for p in spellings[lib]}
        spellings[lib] |= {p.replace("/lib/", "/usr/lib/", 1) for p in spellings[lib] if p.startswith("/lib/")}
    owners_of = {}
    searched = subprocess.run(["dpkg", "-S"] + sorted(set().union(*spellings.values())), capture_output=True, text=True)
    for line in searched.stdout.splitlines():
        names, _, path = line.partition(": ")
        owners_of.setdefault(path.strip(), set()).update(n.split(":")[0].strip() for n in names.split(","))
    for lib, paths in spellings.items():
        owners = set().union(*(owners_of.get(p, set()) for p in paths))
        if not owners:
            fail(f"{lib}, loaded by the binary, belongs to no Debian package here")
        if not owners & provided:
            fail(f"{lib} (package {', '.join(sorted(owners))}) is not installed by the runtime stage's apt-get install")
    say(f"runtime stage: every library the binary loads comes from its packages ({len(packages)} named, {len(provided)} with dependencies)")


# -- the check ----------------------------------------------------------------------------------------------------------


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url):
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.headers.get("Content-Type", ""), response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.headers.get("Content-Type", ""), error.read()
    except OSError:
        return None, "", b""


def main():
    repo, scratch = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    dockerfile = os.path.join(repo, "docker", "Dockerfile")
    all_stages = stages(dockerfile)
    if len(all_stages) < 2:
        fail("docker/Dockerfile has one stage: the build and the runtime image must be separate stages")
    build, runtime = all_stages[0], all_stages[-1]
    if runtime["base"] != "debian:bookworm-slim":
        say(f"note: the runtime stage is FROM {runtime['base']}; this check runs it against this machine's libraries")

    # Package names, against this machine's (Debian bookworm) lists: a typo fails here, not at someone's docker build.
    lists = [n for n in os.listdir("/var/lib/apt/lists") if "_Packages" in n] if os.path.isdir("/var/lib/apt/lists") else []
    if not lists:
        say("note: no apt package lists here (apt-get update): the Dockerfile's package names are not checked")
    for stage in all_stages if lists else []:
        names = [name for keyword, args in stage["steps"] if keyword == "RUN" for name in apt_packages(args)]
        label = stage["name"] or stage["base"]
        # One call for all (each apt-cache or dpkg call reads every list). `apt-cache policy` prints a section per
        # name it knows, with a candidate version when a package (not only a virtual name) has it.
        policy = subprocess.run(["apt-cache", "policy"] + names, capture_output=True, text=True).stdout if names else ""
        sections = dict(re.findall(r"^(\S+):\n\s+Installed: .*\n\s+Candidate: (.*)$", policy, re.M))
        unknown = [n for n in names if sections.get(n, "(none)") == "(none)"]
        if unknown:
            fail(f"apt package {', '.join(unknown)} (stage {label}) unknown to apt-cache")
        if stage is runtime and names and subprocess.run(["dpkg", "-s"] + names, capture_output=True).returncode != 0:
            missing = [n for n in names if subprocess.run(["dpkg", "-s", n], capture_output=True).returncode != 0]
            fail(f"apt packages {', '.join(missing)} of the runtime image are not installed here: the check runs with this machine's libraries")

    # Build stage: its COPY lines into the scratch tree, then its `swift build` with the tree at the repository's path.
    source_tree = os.path.join(scratch, "src")
    workdir = workdir_of(build)
    wanted = stage_copies(build, repo, "/", os.path.join(scratch, "fs"))
    prefix = os.path.join(scratch, "fs") + workdir
    outside = [p for p in wanted if not p.startswith(prefix)]
    if outside:
        fail(f"the build stage copies outside its WORKDIR {workdir}: {outside[0]}")
    wanted = {os.path.join(source_tree, p[len(prefix) :]): s for p, s in wanted.items()}
    link_tree(wanted, source_tree)
    say(f"build stage: the {len(wanted)} files its COPY lines copy, in {source_tree}")
    builds = [args for keyword, args in build["steps"] if keyword == "RUN" and "swift build" in args]
    if len(builds) != 1:
        fail("the build stage needs exactly one RUN with `swift build`")
    started = time.monotonic()
    say(f"build stage: {builds[0]} (the scratch tree mounted at {repo})")
    completed = subprocess.run(in_namespace(source_tree, repo, ["sh", "-c", builds[0]], enter=True), capture_output=True, text=True)
    if completed.returncode != 0:
        print((completed.stdout + completed.stderr)[-4000:])
        fail(f"the build stage's `{builds[0]}` failed with only the COPY'd files (exit {completed.returncode})")
    say(f"build stage: built in {time.monotonic() - started:.0f} s")

    check_libraries(os.path.join(source_tree, ".build", "release", "parley"), runtime)

    # Runtime stage: its files under a scratch root, as the image holds them.
    root = tempfile.mkdtemp(prefix="parley-docker-root-")
    os.chmod(root, 0o755)
    process = None
    try:
        env, user, uid, runtime_workdir, entrypoint, command, health = {}, None, None, "/", [], [], None
        layout = []
        for keyword, args in runtime["steps"]:
            if keyword == "COPY":
                flags, sources, destination = copy_parts(args)
                if flags.get("from") != build["name"]:
                    fail(f"the runtime stage's COPY {args} does not come from the build stage")
                for source in sources:
                    if not source.startswith(workdir):
                        fail(f"COPY --from=build {source}: only paths under the build stage's WORKDIR are simulated")
                    local = os.path.join(source_tree, os.path.relpath(source, workdir))
                    if not os.path.exists(local):
                        fail(f"COPY --from=build {source}: the build stage has no such file (looked at {local})")
                    target = root + destination
                    if os.path.isdir(local):
                        shutil.copytree(local, target, dirs_exist_ok=True)
                    else:
                        os.makedirs(os.path.dirname(target), exist_ok=True)
                        shutil.copy2(local, target)
                    layout.append(destination)
            elif keyword == "ENV":
                env.update(env_pairs(args))
            elif keyword == "USER":
                user = args.split(":")[0]
            elif keyword == "WORKDIR":
                runtime_workdir = os.path.join(runtime_workdir, args)
            elif keyword == "ENTRYPOINT":
                entrypoint = exec_form(args)
            elif keyword == "CMD":
                command = exec_form(args)
            elif keyword == "HEALTHCHECK":
                health = healthcheck_command(args)
            elif keyword == "RUN":
                match = re.search(r"useradd\b[^&;]*--uid[ =](\d+)", args)
                if match:
                    uid = int(match.group(1))
        for path in ["/opt", "/var", "/var/lib"]:
            if os.path.isdir(root + path):
                os.chmod(root + path, 0o755)
        say(f"runtime stage: laid out {', '.join(layout)} under {root}")
        if not user or user in ("root", "0"):
            fail("the runtime image runs as root: add a USER")
        if health is None:
            fail("the runtime image has no HEALTHCHECK")
        if uid is None:
            fail(f"cannot find the uid of user {user} (a RUN useradd --uid N)")
        try:
            entry = pwd.getpwnam(user)
            if entry.pw_uid != uid:
                fail(f"user {user} exists here with uid {entry.pw_uid}, the image gives it {uid}")
        except KeyError:
            # initdb needs its user to have a name: the same user the image creates.
            say(f"creating user {user} (uid {uid}) here, as the image does")
            subprocess.run(["groupadd", "--system", "--gid", str(uid), user], check=True)
            subprocess.run(
                ["useradd", "--system", "--uid", str(uid), "--gid", str(uid), "--no-create-home", "--shell", "/usr/sbin/nologin", user],
                check=True,
            )

        port = free_port()
        # The image's ENV, its absolute paths under the scratch root; listening on loopback (a free port).
        env = {k: (root + v if v.startswith("/") else v) for k, v in env.items()}
        env["PARLEY_LISTEN"] = f"127.0.0.1:{port}"
        for key in ("PARLEY_DATA_DIR",):
            if key in env:
                os.makedirs(env[key], exist_ok=True)
                os.chown(env[key], uid, uid)
                os.chmod(env[key], 0o700)
        env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": env.get("PARLEY_DATA_DIR", root), **env}
        argv = (entrypoint + command) or fail("no ENTRYPOINT or CMD")
        argv = [root + argv[0] if argv[0].startswith("/") else argv[0]] + argv[1:]
        as_user = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--"]

        # The checkout the binary was built from must not be findable: the image does not have it.
        empty = os.path.join(root, "no-checkout")
        os.mkdir(empty)
        log_path = os.path.join(root, "serve.log")
        log = open(log_path, "w")
        started = time.monotonic()
        say(f"runtime stage: {' '.join(argv)} as {user} (uid {uid}), cwd {root + runtime_workdir}, PARLEY_LISTEN={env['PARLEY_LISTEN']}")
        process = subprocess.Popen(
            in_namespace(empty, repo, as_user + argv), cwd=root + runtime_workdir, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        base = f"http://127.0.0.1:{port}"

        def server_log():
            with open(log_path) as handle:
                return handle.read()

        while get(base + "/readyz")[0] != 200:
            if process.poll() is not None:
                print(server_log()[-3000:])
                fail(f"the server exited ({process.returncode}) before /readyz answered 200")
            if time.monotonic() - started > READY_TIMEOUT_S:
                print(server_log()[-3000:])
                fail(f"/readyz did not answer 200 within {READY_TIMEOUT_S} s")
            time.sleep(0.5)
        say(f"runtime stage: /readyz 200 after {time.monotonic() - started:.1f} s")

        text = server_log()
        if "console assets missing" in text:
            print(text[-2000:])
            fail("the server logged that console assets are missing")
        status, content_type, body = get(base + "/console")
        if status != 200 or not content_type.startswith("text/html"):
            fail(f"/console answered {status} {content_type}: {body[:300]!r} (is console/ copied into the image?)")
        for asset in ("console.js", "console.css"):
            status, _, body = get(f"{base}/console/{asset}")
            if status != 200:
                fail(f"/console/{asset} answered {status}: {body[:300]!r} (is console/ copied into the image?)")
        status, content_type, body = get(base + "/openapi.json")
        if status != 200:
            fail(f"/openapi.json answered {status}: {body[:300]!r} (is openapi/ copied into the image?)")
        json.loads(body)
        say("runtime stage: /console 200 (HTML, console.js, console.css), /openapi.json 200 (JSON)")

        checked = subprocess.run(as_user + health, env=env, cwd=root + runtime_workdir, capture_output=True, text=True, timeout=30)
        if checked.returncode != 0:
            fail(f"the HEALTHCHECK command {health} exited {checked.returncode}: {checked.stdout}{checked.stderr}")
        say(f"runtime stage: HEALTHCHECK {' '.join(health)} exited 0")
        owner = os.stat(env["PARLEY_DATA_DIR"]).st_uid if "PARLEY_DATA_DIR" in env else uid
        if owner != uid:
            fail(f"the data directory is owned by uid {owner}, not {user}")
    finally:
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=40)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        shutil.rmtree(root, ignore_errors=True)
    if process is not None and process.returncode not in (0, -signal.SIGTERM):
        fail(f"the server exited {process.returncode} on SIGTERM")
    say("passed")


def workdir_of(stage):
    workdir = "/"
    for keyword, args in stage["steps"]:
        if keyword == "WORKDIR":
            workdir = os.path.join(workdir, args)
    return workdir.rstrip("/") + "/"


if __name__ == "__main__":
    main()
