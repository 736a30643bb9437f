"""Is ``parallel.dask_address`` a Dask scheduler? Asked before the prepare flow builds its Dask task
runner, which otherwise waits 30 s for an address where nothing listens and then fails with a
traceback, and waits for ever on a server that is not Dask (an HTTP server never answers Dask's
handshake). Within :data:`PROBE_TIMEOUT_S`: the address parses, a TCP connection opens, and the
peer answers Dask's ``identity`` call as a scheduler; otherwise a :class:`SettingsError` naming the
setting, its value and what was found there. Needs the optional ``[dask]`` extra (``distributed``)."""

from __future__ import annotations

import asyncio
import socket
from concurrent.futures import ThreadPoolExecutor

from pipeline.config.validation import SettingsError

PROBE_TIMEOUT_S = 10.0  # the most each step of the probe waits (connect; Dask's handshake and answer)
SETTING = "parallel.dask_address"


def check_dask_address(address, timeout: float = PROBE_TIMEOUT_S) -> None:
    """Refuse ``address`` unless a Dask scheduler answers there within ``timeout`` seconds each for
    the TCP connection and for Dask's handshake and ``identity`` answer."""
    # distributed is the optional [dask] extra; only this runner needs it (flows/prepare.py checks that)
    from distributed.comm import normalize_address, parse_address, parse_host_port, registry

    said = f"{SETTING} is {address!r}"
    try:
        scheme, location = parse_address(normalize_address(address))  # no scheme: tcp://
        registry.get_backend(scheme)  # an unknown scheme (http://: the dashboard's URL) is an error
        if scheme in ("ucx", "inproc"):  # not a TCP port: nothing this probe can ask
            return
        host, port = parse_host_port(location)
        if not 0 < int(port) < 65536:
            raise ValueError(f"port {port}")
    except (TypeError, ValueError) as err:
        raise SettingsError(
            f"{said}: not an address of a Dask scheduler ({err}); give host:port or tcp://host:port, e.g. "
            "tcp://10.0.0.5:8786 (what `dask scheduler` prints)"
        ) from None
    try:
        socket.create_connection((host, int(port)), timeout=timeout).close()
    except socket.gaierror as err:
        raise SettingsError(f"{said}: the host {host} does not resolve ({err.strerror}); correct the address") from None
    except OSError as err:  # refused, unreachable, no answer
        why = err.strerror or f"no answer within {timeout:g} s"
        raise SettingsError(
            f"{said}: nothing listening at {host}:{port} ({why}); start the scheduler (`dask scheduler`), "
            "or correct the address"
        ) from None
    if scheme != "tcp":  # tls:// and ws:// need the cluster's security settings to talk: the port is open
        return
    try:
        # a loop of its own, in a thread of its own: the caller's thread and event loop stay untouched
        with ThreadPoolExecutor(1) as thread:
            kind = thread.submit(asyncio.run, _identity(normalize_address(address), timeout)).result()
    except TimeoutError:
        kind = f"no answer to Dask's handshake within {timeout:g} s"
    except Exception as err:  # noqa: BLE001 -- whatever a server of another protocol made Dask's reader raise
        kind = f"its reply is not in Dask's protocol: {type(err).__name__}"
    if kind != "Scheduler":
        found = f"a Dask {kind}" if kind in ("Worker", "Nanny") else kind
        raise SettingsError(
            f"{said}: the server at {host}:{port} is not a Dask scheduler ({found}); give the scheduler's "
            "address (what `dask scheduler` prints, port 8786 by default; 8787 is its dashboard)"
        )


async def _identity(address: str, timeout: float) -> str:
    """The ``type`` the server at ``address`` gives in answer to Dask's ``identity`` call ("Scheduler")."""
    from distributed.comm import connect  # the optional [dask] extra, as above

    async def ask() -> object:
        comm = await connect(address, timeout=timeout)  # also exchanges Dask's handshake
        try:
            await comm.write({"op": "identity", "reply": True})
            return await comm.read()
        finally:
            comm.abort()

    reply = await asyncio.wait_for(ask(), timeout)  # the hard deadline: a peer that never answers
    return str(reply.get("type")) if isinstance(reply, dict) else f"a reply of type {type(reply).__name__}"
