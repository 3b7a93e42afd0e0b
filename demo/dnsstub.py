"""A few-line DNS server for the e2e tier (standard library only, so the agent image's
Python runs it too).

It answers A queries for the names it is given (``name=address`` arguments; a name
``*`` answers every A query with that address), NOERROR with no answer for other
types of a known name, NXDOMAIN for any other name (RFC 1035 section 4.1). Two uses:

* the node's resolver, the stand-in for the VPC's (AmazonProvidedDNS), answering the
  local stack's endpoint name: the agent reaches "AWS" by name, as on EC2;
* the cluster DNS Deployment's server (the stand-in for CoreDNS), whose pods get their
  addresses from warmpool in the cold-start test.

``python dnsstub.py HOST PORT name=address ...`` serves until killed.
"""

from __future__ import annotations

import socket
import struct
import sys
import threading
from collections.abc import Mapping

TYPE_A, CLASS_IN = 1, 1
RCODE_NXDOMAIN = 3


def _qname(packet: bytes, at: int) -> tuple[str, int]:
    labels: list[str] = []
    while True:
        n = packet[at]
        at += 1
        if n == 0:
            return ".".join(labels).lower(), at
        if n & 0xC0:  # a pointer never appears in a question of a query
            raise ValueError("compressed name in a question")
        labels.append(packet[at : at + n].decode("ascii", "replace"))
        at += n


def answer(query: bytes, names: Mapping[str, str]) -> bytes | None:
    """The response to one query packet, or None for a packet that is not a query."""
    if len(query) < 12:
        return None
    qid, flags, qdcount = struct.unpack("!HHH", query[:6])
    if flags & 0x8000 or qdcount != 1:
        return None
    try:
        name, at = _qname(query, 12)
        qtype, qclass = struct.unpack("!HH", query[at : at + 4])
    except (IndexError, ValueError, struct.error):
        return None
    question = query[12 : at + 4]
    address = names.get(name, names.get("*"))
    rd = flags & 0x0100
    if address is None:
        return struct.pack("!HHHHHH", qid, 0x8080 | rd | RCODE_NXDOMAIN, 1, 0, 0, 0) + question
    if qtype != TYPE_A or qclass != CLASS_IN:
        return struct.pack("!HHHHHH", qid, 0x8480 | rd, 1, 0, 0, 0) + question
    record = struct.pack("!HHHIH", 0xC00C, TYPE_A, CLASS_IN, 30, 4) + socket.inet_aton(address)
    return struct.pack("!HHHHHH", qid, 0x8480 | rd, 1, 1, 0, 0) + question + record


class DnsStub:
    """The server on one UDP address, in a daemon thread."""

    def __init__(self, host: str, port: int, names: Mapping[str, str]) -> None:
        self.names = {k.lower().rstrip("."): v for k, v in names.items()}
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind((host, port))
        self.queries: list[str] = []
        self._thread = threading.Thread(target=self.serve, name="dns-stub", daemon=True)

    def start(self) -> DnsStub:
        self._thread.start()
        return self

    def serve(self) -> None:
        while True:
            try:
                packet, peer = self.sock.recvfrom(512)
            except OSError:
                return
            reply = answer(packet, self.names)
            if reply is not None:
                self.queries.append(_qname(packet, 12)[0])
                self.sock.sendto(reply, peer)

    def close(self) -> None:
        self.sock.close()


def main(argv: list[str]) -> None:
    host, port, *pairs = argv
    names = dict(p.split("=", 1) for p in pairs)
    stub = DnsStub(host, int(port), names)
    print(f"dns stub on {host}:{port} for {sorted(names)}", flush=True)
    stub.serve()


if __name__ == "__main__":
    main(sys.argv[1:])
