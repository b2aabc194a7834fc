#!/usr/bin/env python3
"""Send N copies of one memcached text request to 127.0.0.1:PORT, pipelined in batches of 1,000
on one connection (each batch's replies are read before the next batch is sent), after
`set c 0 0 1` with the value 0. REQUEST defaults to `incr c 1`; LINES is the number of reply
lines per request (default 1; `mg c v` answers with 2). Prints the last reply. Used to count
the server's allocations per request (docs/BENCHMARKS.md, "Heap allocations per request,
measured with dhat").

Usage: python3 scripts/pipeline-load.py PORT N [REQUEST [LINES]]
"""
import socket
import sys


def main() -> None:
    port, n = int(sys.argv[1]), int(sys.argv[2])
    request = (sys.argv[3] if len(sys.argv) > 3 else "incr c 1").encode() + b"\r\n"
    lines = int(sys.argv[4]) if len(sys.argv) > 4 else 1
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"set c 0 0 1\r\n0\r\n")
    if not s.recv(100).startswith(b"STORED"):
        sys.exit("set failed")
    batch = request * 1000
    buf = b""
    for _ in range(n // 1000):
        s.sendall(batch)
        buf = b""
        while buf.count(b"\r\n") < 1000 * lines:
            chunk = s.recv(65536)
            if not chunk:
                sys.exit("connection closed")
            buf += chunk
    print(buf.split(b"\r\n")[-1 - lines : -1])


if __name__ == "__main__":
    main()
