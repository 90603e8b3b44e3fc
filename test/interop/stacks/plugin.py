#!/usr/bin/env python3
"""A kubelet registration plugin served by Python grpcio (Debian's python3-grpcio).

It serves pluginregistration.Registration (GetInfo, NotifyRegistrationStatus) on a unix socket
with grpc's generic handlers and protobuf encoded by hand (no generated code, nothing from
PyPI), and reports what it is told as JSON lines on stdout:

  {"event": "ready", "grpc": "1.51.1"}
  {"event": "notify", "registered": true, "error": ""}

The options make it behave as the plugins test/interop checks wasmhost against: a tiny HTTP/2
flow-control window, gzip-compressed answers, large response metadata.
"""

import argparse
import json
import signal
import sys
import threading

import grpc

SERVICE = "pluginregistration.Registration"


def varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def field_bytes(num, value):
    data = value.encode() if isinstance(value, str) else value
    return varint(num << 3 | 2) + varint(len(data)) + data


def encode_info(args):
    """PluginInfo: type = 1, name = 2, endpoint = 3, supported_versions = 4 (repeated)."""
    out = field_bytes(1, args.type) + field_bytes(2, args.name)
    if args.endpoint:
        out += field_bytes(3, args.endpoint)
    for v in args.versions.split(","):
        if v:
            out += field_bytes(4, v)
    return out


def read_varint(b, i):
    shift = n = 0
    while True:
        c = b[i]
        i += 1
        n |= (c & 0x7F) << shift
        if c < 0x80:
            return n, i
        shift += 7


def decode_status(b):
    """RegistrationStatus: plugin_registered = 1 (bool), error = 2 (string)."""
    registered, error, i = False, "", 0
    while i < len(b):
        tag, i = read_varint(b, i)
        num, typ = tag >> 3, tag & 7
        if typ == 0:
            v, i = read_varint(b, i)
            if num == 1:
                registered = v != 0
        elif typ == 2:
            n, i = read_varint(b, i)
            if num == 2:
                error = bytes(b[i:i + n]).decode("utf-8", "replace")
            i += n
        else:
            raise ValueError("unexpected wire type %d" % typ)
    return registered, error


def emit(event, **kw):
    kw["event"] = event
    sys.stdout.write(json.dumps(kw) + "\n")
    sys.stdout.flush()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--socket", required=True)
    p.add_argument("--type", required=True)
    p.add_argument("--name", required=True)
    p.add_argument("--endpoint", default="")
    p.add_argument("--versions", default="v1")
    p.add_argument("--window", type=int, default=0,
                   help="HTTP/2 stream window to advertise (grpc.http2.lookahead_bytes), 0: grpcio's default")
    p.add_argument("--gzip", action="store_true", help="compress every answer with gzip")
    p.add_argument("--header-bytes", type=int, default=0, help="send an x-big response header this long")
    p.add_argument("--trailer-bytes", type=int, default=0, help="send an x-big trailer this long")
    args = p.parse_args()

    info = encode_info(args)

    def metadata(context):
        if args.header_bytes:
            context.send_initial_metadata((("x-big", "h" * args.header_bytes),))
        if args.trailer_bytes:
            context.set_trailing_metadata((("x-big", "t" * args.trailer_bytes),))

    def get_info(request, context):
        emit("getinfo")
        metadata(context)
        return info

    def notify(request, context):
        registered, error = decode_status(request)
        emit("notify", registered=registered, error=error)
        metadata(context)
        return b""

    identity = lambda b: b
    handler = grpc.method_handlers_generic_handler(SERVICE, {
        "GetInfo": grpc.unary_unary_rpc_method_handler(
            get_info, request_deserializer=identity, response_serializer=identity),
        "NotifyRegistrationStatus": grpc.unary_unary_rpc_method_handler(
            notify, request_deserializer=identity, response_serializer=identity),
    })
    options = []
    if args.window:
        options += [("grpc.http2.lookahead_bytes", args.window), ("grpc.http2.bdp_probe", 0)]
    from concurrent import futures
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=4),
        handlers=(handler,),
        options=options,
        compression=grpc.Compression.Gzip if args.gzip else None,
    )
    server.add_insecure_port("unix:" + args.socket)
    server.start()
    emit("ready", grpc=grpc.__version__)

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    stop.wait()
    server.stop(0).wait()


if __name__ == "__main__":
    main()
