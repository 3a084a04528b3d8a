#!/usr/bin/env python3
"""Byte relay between a TCP address and a Unix socket, for .ci/schemathesis.sh.

The schemathesis run puts `idem serve` in a network namespace that has only its own loopback,
so the effects it is asked to make cannot leave the machine. A Unix socket is a file, and
files are shared across network namespaces: one relay in the machine's namespace listens on a
socket file and connects to PostgreSQL; one inside the namespace listens on 127.0.0.1 and
connects to that file. Bytes are copied unchanged both ways; nothing is read or logged.

  pg-relay.py unix-to-tcp SOCKET HOST:PORT   # listen on SOCKET, connect to HOST:PORT
  pg-relay.py tcp-to-unix HOST:PORT SOCKET   # listen on HOST:PORT, connect to SOCKET
"""
import asyncio
import sys


async def pipe(reader, writer):
    try:
        while True:
            data = await reader.read(65536)
            if not data:
                break
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        try:
            writer.close()
        except (ConnectionError, OSError):
            pass


def hostport(text):
    host, port = text.rsplit(":", 1)
    return host.strip("[]"), int(port)


async def main():
    mode, listen, target = sys.argv[1:4]

    async def handle(reader, writer):
        try:
            if mode == "unix-to-tcp":
                r2, w2 = await asyncio.open_connection(*hostport(target))
            else:
                r2, w2 = await asyncio.open_unix_connection(target)
        except OSError:
            writer.close()
            return
        await asyncio.gather(pipe(reader, w2), pipe(r2, writer))

    if mode == "unix-to-tcp":
        server = await asyncio.start_unix_server(handle, listen)
    elif mode == "tcp-to-unix":
        server = await asyncio.start_server(handle, *hostport(listen))
    else:
        sys.exit(f"unknown mode {mode!r}")
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main())
