#!/usr/bin/python3
"""A container runtime's CRI server for tests (ListPodSandbox only), built independently of
plexus's own code and proto files.

The proto below is transcribed from the CRI (k8s.io/cri-api, pkg/apis/runtime/v1/api.proto):
package runtime.v1, service RuntimeService, and the messages ListPodSandbox uses with their
field numbers. It is compiled at each run (grpc_tools, as `python3 -m grpc_tools.protoc` does)
into a temporary directory, then imported: the wire is the one kubelet's runtime speaks.

    cri_server.py --socket PATH --sandboxes FILE

FILE holds a JSON list of sandboxes, [{"id", "name", "namespace", "state": "READY"|"NOTREADY"}];
it is read again for every call, so a test changes what the runtime says by rewriting it. Every
call is appended to FILE.calls, one method name per line. "serving" is printed once the socket
accepts calls; SIGTERM stops the server.
"""

import argparse
import importlib
import json
import os
import signal
import sys
import tempfile
import threading
from concurrent import futures

USAGE_EXIT = 2

CRI_PROTO = """
syntax = "proto3";
package runtime.v1;

service RuntimeService {
    rpc ListPodSandbox(ListPodSandboxRequest) returns (ListPodSandboxResponse) {}
}

message PodSandboxMetadata {
    string name = 1;
    string uid = 2;
    string namespace = 3;
    uint32 attempt = 4;
}

enum PodSandboxState {
    SANDBOX_READY    = 0;
    SANDBOX_NOTREADY = 1;
}

message PodSandboxStateValue {
    PodSandboxState state = 1;
}

message PodSandboxFilter {
    string id = 1;
    PodSandboxStateValue state = 2;
    map<string, string> label_selector = 3;
}

message ListPodSandboxRequest {
    PodSandboxFilter filter = 1;
}

message PodSandbox {
    string id = 1;
    PodSandboxMetadata metadata = 2;
    PodSandboxState state = 3;
    int64 created_at = 4;
    map<string, string> labels = 5;
    map<string, string> annotations = 6;
    string runtime_handler = 7;
}

message ListPodSandboxResponse {
    repeated PodSandbox items = 1;
}
"""


def generate(out_dir):
    """Generates api_pb2 and api_pb2_grpc from CRI_PROTO into `out_dir`."""
    from grpc_tools import protoc

    proto = os.path.join(out_dir, "api.proto")
    with open(proto, "w") as f:
        f.write(CRI_PROTO)
    args = [
        "grpc_tools.protoc",
        "-I" + out_dir,
        "--python_out=" + out_dir,
        "--grpc_python_out=" + out_dir,
        proto,
    ]
    if protoc.main(args) != 0:
        sys.stderr.write("grpc_tools.protoc could not compile the CRI subset\n")
        sys.exit(USAGE_EXIT)
    sys.path.insert(0, out_dir)
    return importlib.import_module("api_pb2"), importlib.import_module("api_pb2_grpc")


def main():
    parser = argparse.ArgumentParser(description="CRI ListPodSandbox server (tests)")
    parser.add_argument("--socket", required=True, help="the Unix socket to serve on")
    parser.add_argument("--sandboxes", required=True, help="a JSON list of sandboxes")
    args = parser.parse_args()

    import grpc

    with tempfile.TemporaryDirectory(prefix="plexus-cri-py-") as out_dir:
        pb, pb_grpc = generate(out_dir)
        lock = threading.Lock()

        def record(method):
            with lock:
                with open(args.sandboxes + ".calls", "a") as f:
                    f.write(method + "\n")

        class Runtime(pb_grpc.RuntimeServiceServicer):
            def ListPodSandbox(self, request, context):
                record("ListPodSandbox")
                with open(args.sandboxes) as f:
                    listed = json.load(f)
                items = []
                for s in listed:
                    state = pb.SANDBOX_NOTREADY if s.get("state") == "NOTREADY" else pb.SANDBOX_READY
                    items.append(
                        pb.PodSandbox(
                            id=s["id"],
                            metadata=pb.PodSandboxMetadata(
                                name=s.get("name", ""), namespace=s.get("namespace", ""), uid="uid-" + s["id"]
                            ),
                            state=state,
                            created_at=1,
                            labels={"io.kubernetes.pod.name": s.get("name", "")},
                            runtime_handler="runc",
                        )
                    )
                return pb.ListPodSandboxResponse(items=items)

        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        pb_grpc.add_RuntimeServiceServicer_to_server(Runtime(), server)
        if server.add_insecure_port("unix:" + os.path.abspath(args.socket)) == 0:
            sys.stderr.write("cannot serve on %s\n" % args.socket)
            return USAGE_EXIT
        server.start()
        stop = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        signal.signal(signal.SIGINT, lambda *_: stop.set())
        print("serving", flush=True)
        stop.wait()
        server.stop(grace=None)
        return 0


if __name__ == "__main__":
    sys.exit(main())
