"""The `pykubelet` command: the agent by default; `pods`, `cri` and `leaks` to look at a node;
`explain pod` and `doctor` to ask it what is wrong; `proxy` for kube-proxy's job (Service IPs to
endpoints) on the node."""

from __future__ import annotations

import asyncio
import sys

from pykubelet.util import tls_buffers
from pykubelet.util.log import get_logger, setup_logging
from pykubelet.util.tasks import cancel_on_signals

log = get_logger("pykubelet")

EXIT_CONFIG = 2  # bad flags or configuration, as the kubelet and argparse use it


async def _run_agent(settings) -> int:
    from pykubelet.agent import Agent, LoopDied

    cancel_on_signals()
    try:
        await Agent(settings).run()
    except asyncio.CancelledError:
        log.info("Agent stopped by signal; pods keep running")
        return 0
    except LoopDied as e:
        log.error("Agent stopping", err=str(e))
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    tls_buffers.bound_read_buffers()  # every command's TLS connections (the agent's, the proxy's)
    if argv and argv[0] in ("pods", "cri"):
        from pykubelet.tools import inspect

        return inspect.main(argv)
    if argv and argv[0] == "proxy":
        from pykubelet.proxy import server

        return server.main(argv[1:])
    if argv and argv[0] == "explain":
        from pykubelet.diagnose import explain

        return explain.main(argv[1:])
    if argv and argv[0] == "doctor":
        from pykubelet.diagnose import doctor

        return doctor.main(argv[1:])
    if argv and argv[0] == "leaks":
        from pykubelet.tools import leaks

        return leaks.main(argv[1:])
    # The agent's settings, imported here so the commands above never load them.
    from pykubelet.config import ConfigError, build_parser, settings_from_args

    args = build_parser().parse_args(argv)
    setup_logging(0)  # until the settings are read: their warnings show at the default level
    try:
        settings = settings_from_args(args)
    except ConfigError as e:
        print(f"pykubelet: invalid configuration: {e}", file=sys.stderr)
        return EXIT_CONFIG
    setup_logging(settings.verbosity)
    if not settings.cluster.kubeconfig:  # no apiserver to talk to: aiohttp's client only for httpGet probes
        from pykubelet.util import http_client

        http_client.defer_client()
    return asyncio.run(_run_agent(settings))


if __name__ == "__main__":
    sys.exit(main())
