#!/usr/bin/python3
"""A kubelet PodResources API server for tests, built independently of plexus's own code.

The gRPC service is generated at each run from the proto file (grpc_tools, as
`python3 -m grpc_tools.protoc` does) into a temporary directory, then imported: the wire is the
one the kubelet's `v1` API describes, served by grpcio as any other server of it would be.

    podresources_server.py --proto proto/podresources.proto --socket PATH --resources FILE

FILE holds a ListPodResourcesResponse in the proto's JSON mapping
({"podResources": [{"name", "namespace", "containers": [{"name", "devices": [{"resourceName",
"deviceIds": [...]}]}]}]}); it is read again for every call, so a test changes what kubelet
says by rewriting it. `List` answers it whole, `Get` the pod asked for (NOT_FOUND when absent),
`GetAllocatableResources` every device listed. Every call is appended to FILE.calls, one method
name per line. "serving" is printed once the socket accepts calls; SIGTERM stops the server.
"""

import argparse
import importlib
import os
import signal
import sys
import tempfile
import threading
from concurrent import futures

USAGE_EXIT = 2


def generate(proto_path, out_dir):
    """Generates podresources_pb2 and podresources_pb2_grpc from `proto_path` into `out_dir`."""
    from grpc_tools import protoc

    include = os.path.dirname(os.path.abspath(proto_path))
    args = [
        "grpc_tools.protoc",
        "-I" + include,
        "--python_out=" + out_dir,
        "--grpc_python_out=" + out_dir,
        os.path.abspath(proto_path),
    ]
    if protoc.main(args) != 0:
        sys.stderr.write("grpc_tools.protoc could not compile %s\n" % proto_path)
        sys.exit(USAGE_EXIT)
    sys.path.insert(0, out_dir)
    base = os.path.splitext(os.path.basename(proto_path))[0]
    return importlib.import_module(base + "_pb2"), importlib.import_module(base + "_pb2_grpc")


def main():
    parser = argparse.ArgumentParser(description="kubelet PodResources API server (tests)")
    parser.add_argument("--proto", required=True, help="the PodResources API's .proto file")
    parser.add_argument("--socket", required=True, help="the Unix socket to serve on")
    parser.add_argument("--resources", required=True, help="a ListPodResourcesResponse as JSON")
    args = parser.parse_args()

    import grpc
    from google.protobuf import json_format

    with tempfile.TemporaryDirectory(prefix="plexus-podresources-py-") as out_dir:
        pb, pb_grpc = generate(args.proto, out_dir)
        lock = threading.Lock()

        def record(method):
            with lock:
                with open(args.resources + ".calls", "a") as f:
                    f.write(method + "\n")

        def current():
            response = pb.ListPodResourcesResponse()
            with open(args.resources) as f:
                json_format.Parse(f.read(), response)
            return response

        class Lister(pb_grpc.PodResourcesListerServicer):
            def List(self, request, context):
                record("List")
                return current()

            def Get(self, request, context):
                record("Get")
                for pod in current().pod_resources:
                    if pod.name == request.pod_name and pod.namespace == request.pod_namespace:
                        return pb.GetPodResourcesResponse(pod_resources=pod)
                context.abort(
                    grpc.StatusCode.NOT_FOUND,
                    "pod %s/%s not found" % (request.pod_namespace, request.pod_name),
                )

            def GetAllocatableResources(self, request, context):
                record("GetAllocatableResources")
                devices = [
                    d for pod in current().pod_resources for c in pod.containers for d in c.devices
                ]
                return pb.AllocatableResourcesResponse(devices=devices)

        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        pb_grpc.add_PodResourcesListerServicer_to_server(Lister(), server)
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
