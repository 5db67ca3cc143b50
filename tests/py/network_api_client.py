#!/usr/bin/python3
"""A client of plexus's network API built independently of plexus's own code.

The gRPC client is generated at each run from the proto file (grpc_tools, as
`python3 -m grpc_tools.protoc` does) into a temporary directory, then imported: what is
tested is the wire that file describes, as any other grpcio client would speak it.

    network_api_client.py --proto proto/network.proto --socket PATH set < network.json
    network_api_client.py --proto ... --socket ... list
    network_api_client.py --proto ... --socket ... remove NAME [NAMESPACE]
    network_api_client.py --proto ... --socket ... ips SANDBOX_ID

`set` reads a NetworkConfig in the proto's JSON mapping on stdin. Every verb prints its
response in the proto's JSON mapping (lowerCamelCase names, fields at their default values
included). An RPC error prints {"code": "<gRPC status name>", "details": "..."} and exits 3;
a usage or input error exits 2.
"""

import argparse
import importlib
import json
import os
import sys
import tempfile

RPC_ERROR_EXIT = 3
USAGE_EXIT = 2


def generate(proto_path, out_dir):
    """Generates network_pb2 and network_pb2_grpc from `proto_path` into `out_dir`."""
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


def to_json(message):
    from google.protobuf import json_format

    try:
        as_dict = json_format.MessageToDict(
            message, including_default_value_fields=True
        )
    except TypeError:  # protobuf >= 5 renamed the option
        as_dict = json_format.MessageToDict(
            message, always_print_fields_with_no_presence=True
        )
    return json.dumps(as_dict, sort_keys=True)


def main():
    parser = argparse.ArgumentParser(description="plexus network API client (tests)")
    parser.add_argument("--proto", required=True, help="the network API's .proto file")
    parser.add_argument("--socket", required=True, help="the agent's network API socket")
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds per RPC")
    verbs = parser.add_subparsers(dest="verb", required=True)
    verbs.add_parser("set", help="SetPodNetwork with the NetworkConfig JSON on stdin")
    verbs.add_parser("list", help="ListPodNetwork")
    remove = verbs.add_parser("remove", help="RemovePodNetwork")
    remove.add_argument("name")
    remove.add_argument("namespace", nargs="?", default="")
    ips = verbs.add_parser("ips", help="PodSandboxNetworks")
    ips.add_argument("sandbox_id")
    args = parser.parse_args()

    import grpc
    from google.protobuf import json_format

    with tempfile.TemporaryDirectory(prefix="plexus-netapi-py-") as out_dir:
        pb, pb_grpc = generate(args.proto, out_dir)
        with grpc.insecure_channel("unix:" + os.path.abspath(args.socket)) as channel:
            stub = pb_grpc.RuntimeServiceStub(channel)
            try:
                if args.verb == "set":
                    config = pb.NetworkConfig()
                    try:
                        json_format.Parse(sys.stdin.read(), config)
                    except json_format.ParseError as e:
                        sys.stderr.write("stdin is not a NetworkConfig: %s\n" % e)
                        return USAGE_EXIT
                    response = stub.SetPodNetwork(
                        pb.SetPodNetworkRequest(config=config), timeout=args.timeout
                    )
                elif args.verb == "list":
                    response = stub.ListPodNetwork(pb.ListPodNetworkRequest(), timeout=args.timeout)
                elif args.verb == "remove":
                    response = stub.RemovePodNetwork(
                        pb.RemovePodNetworkRequest(name=args.name, namespace=args.namespace),
                        timeout=args.timeout,
                    )
                else:
                    response = stub.PodSandboxNetworks(
                        pb.PodSandboxNetworksRequest(pod_sandbox_id=args.sandbox_id),
                        timeout=args.timeout,
                    )
            except grpc.RpcError as e:
                print(json.dumps({"code": e.code().name, "details": e.details() or ""}))
                return RPC_ERROR_EXIT
            print(to_json(response))
            return 0


if __name__ == "__main__":
    sys.exit(main())
