"""The render image (``render: browser``): whether this machine can build it for the function.

infra/render.py makes the render function ``ARM_64`` and builds its image asset for
``LINUX_ARM64``: the two agree by construction, and ``cdk deploy`` builds the image with the
local Docker (``cdk synth`` only stages the context). So what can go wrong is here: no Docker,
a daemon that is not running, or an x86_64 daemon that cannot build arm64 images (it needs
QEMU's binfmt handlers). What only the deploy can tell is whether the base image pulls and
the build succeeds; the result says so.

:func:`probe_docker` asks the Docker CLI (the boundary); :func:`check_render_image` judges
what it found.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from typing import Final

from stepcrawl.preflight.model import CheckResult, StackSettings, Status

__all__ = ["IMAGE_PLATFORM", "RENDER_CHECK", "DockerFacts", "check_render_image", "probe_docker"]

RENDER_CHECK: Final = "render image"
#: The render image's platform (infra/render.py: ``Platform.LINUX_ARM64``, the function's
#: ``Architecture.ARM_64``).
IMAGE_PLATFORM: Final = "linux/arm64"
#: Docker's names of an arm64 daemon (``docker version`` says arm64; some builds aarch64).
_ARM64: Final = frozenset({"arm64", "aarch64"})
_PROBE_TIMEOUT: Final = 20.0
_PLATFORM: Final = re.compile(r"\blinux/[a-z0-9_]+(?:/v\d)?")
#: Registers QEMU for arm64 with the kernel, so that an x86_64 daemon can build arm64 images.
INSTALL_EMULATION: Final = "docker run --privileged --rm tonistiigi/binfmt --install arm64"
_ONLY_AT_DEPLOY: Final = "pulling the base image and the build itself happen at cdk deploy"


@dataclass(frozen=True)
class DockerFacts:
    """What the local Docker said about itself."""

    #: The docker CLI's path; None: not installed.
    cli: str | None
    #: The daemon's architecture (``amd64``, ``arm64``); None: the daemon did not answer.
    server_arch: str | None = None
    #: Why the daemon did not answer (the CLI's message).
    error: str = ""
    #: The platforms the buildx builders offer; None: no buildx.
    platforms: tuple[str, ...] | None = None


def _run(args: list[str]) -> tuple[int, str]:
    """Exit status and output (stdout, else stderr) of a docker command; -1 if it hung."""
    try:
        done = subprocess.run(  # noqa: S603 - the docker CLI found on PATH, fixed arguments
            args, capture_output=True, text=True, timeout=_PROBE_TIMEOUT, check=False
        )
    except subprocess.TimeoutExpired:
        return -1, f"no answer in {_PROBE_TIMEOUT:g} s"
    except OSError as failed:
        return -1, str(failed)
    return done.returncode, (done.stdout.strip() or done.stderr.strip())


def probe_docker(cli: str | None = None) -> DockerFacts:
    """Ask the docker CLI (``cli``, or the one on PATH) for its daemon's architecture and its
    builders' platforms. Read-only: ``version`` and ``buildx ls`` start nothing."""
    cli = cli or shutil.which("docker")
    if cli is None:
        return DockerFacts(cli=None)
    status, said = _run([cli, "version", "--format", "{{.Server.Arch}}"])
    if status != 0 or not said:
        return DockerFacts(cli=cli, error=said or f"docker version exited {status}")
    listed, builders = _run([cli, "buildx", "ls"])
    platforms = tuple(dict.fromkeys(_PLATFORM.findall(builders))) if listed == 0 else None
    return DockerFacts(cli=cli, server_arch=said, platforms=platforms)


def check_render_image(settings: StackSettings, docker: DockerFacts | None) -> CheckResult:
    """Whether ``cdk deploy`` here can build the render image for an arm64 function
    (``docker`` None: not probed, because nothing renders)."""
    if not settings.renders_pages or docker is None:
        return CheckResult(
            RENDER_CHECK, Status.ok, "no deployed pipeline renders pages: no image is built"
        )
    if docker.cli is None or docker.server_arch is None:
        return _no_docker(docker)
    arch = docker.server_arch
    if arch in _ARM64:
        return CheckResult(
            RENDER_CHECK,
            Status.ok,
            f"the Docker daemon is {arch}: it builds {IMAGE_PLATFORM} natively ({_ONLY_AT_DEPLOY})",
        )
    return _emulated(arch, docker.platforms)


def _no_docker(docker: DockerFacts) -> CheckResult:
    without = (
        "or deploy only pipelines that do not render (-c pipelines_dir=DIR without the "
        "render: browser ones)"
    )
    if docker.cli is None:
        return CheckResult(
            RENDER_CHECK,
            Status.fail,
            f"cdk deploy builds the render image ({IMAGE_PLATFORM}) with Docker, and there is "
            "no docker on PATH",
            f"install Docker with buildx, {without}",
        )
    return CheckResult(
        RENDER_CHECK,
        Status.fail,
        f"cdk deploy builds the render image with Docker, whose daemon did not answer: "
        f"{docker.error}",
        f"start the Docker daemon (systemctl start docker, or Docker Desktop), {without}",
    )


def _emulated(arch: str, platforms: tuple[str, ...] | None) -> CheckResult:
    """A daemon of another architecture builds arm64 only with QEMU registered for it."""
    if not platforms:
        return CheckResult(
            RENDER_CHECK,
            Status.warn,
            f"the Docker daemon is {arch}, and without docker buildx (or a builder that lists "
            f"its platforms) preflight cannot tell whether it builds {IMAGE_PLATFORM}",
            f"install docker buildx, and QEMU for arm64: {INSTALL_EMULATION}",
        )
    if IMAGE_PLATFORM in platforms:
        return CheckResult(
            RENDER_CHECK,
            Status.ok,
            f"the Docker daemon is {arch} and builds {IMAGE_PLATFORM} under emulation (QEMU: "
            f"minutes, not seconds; {_ONLY_AT_DEPLOY})",
        )
    return CheckResult(
        RENDER_CHECK,
        Status.fail,
        f"the Docker daemon is {arch} and cannot build {IMAGE_PLATFORM} (its builders offer "
        f"{', '.join(platforms)})",
        INSTALL_EMULATION,
    )
