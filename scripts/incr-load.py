#!/usr/bin/env python3
"""Send N memcached `incr c 1` requests to 127.0.0.1:PORT, pipelined in batches of 1,000 on one
connection (each batch's replies are read before the next batch is sent), after `set c 0 0 1`
with the value 0. Prints the counter at the end. Used to count the server's allocations per
increment (docs/BENCHMARKS.md, "Heap allocations per request, measured with dhat").

Usage: python3 scripts/incr-load.py PORT N
"""
import socket
import sys


def main() -> None:
    port, n = int(sys.argv[1]), int(sys.argv[2])
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"set c 0 0 1\r\n0\r\n")
    if not s.recv(100).startswith(b"STORED"):
        sys.exit("set failed")
    batch = b"incr c 1\r\n" * 1000
    for _ in range(n // 1000):
        s.sendall(batch)
        buf = b""
        while buf.count(b"\r\n") < 1000:
            chunk = s.recv(65536)
            if not chunk:
                sys.exit("connection closed")
            buf += chunk
    s.sendall(b"get c\r\n")
    print(s.recv(100).decode().split("\r\n")[1])


if __name__ == "__main__":
    main()
