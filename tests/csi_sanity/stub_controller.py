"""TEST ONLY: a stub CSI controller for running csi-sanity against `shardfs csi` (see run.sh).

shardfs has no Controller service (a volume is a dataset that already exists). csi-sanity's
Node suite creates its volumes through a controller, so this stub answers on a second socket:
CreateVolume returns a volume whose volume_context is the request's parameters (csi-sanity
passes --csi.testvolumeparameters, e.g. `source: <a local dataset>`), DeleteVolume forgets it.
Usage: python stub_controller.py unix:///path/controller.sock
"""
import os
import sys
import tempfile
import threading
from concurrent import futures

import grpc
from grpc_tools import protoc

here = os.path.dirname(os.path.abspath(__file__))
out = tempfile.mkdtemp(prefix="csi-stub-")
include = os.path.join(os.path.dirname(protoc.__file__), "_proto")
rc = protoc.main(["protoc", f"-I{here}", f"-I{include}", f"--python_out={out}",
                  f"--grpc_python_out={out}", os.path.join(here, "stub_controller.proto")])
if rc != 0:
    sys.exit(f"protoc failed: {rc}")
sys.path.insert(0, out)
import stub_controller_pb2 as pb  # noqa: E402
import stub_controller_pb2_grpc as rpc  # noqa: E402

volumes = {}
lock = threading.Lock()


class Identity(rpc.IdentityServicer):
    def GetPluginInfo(self, request, context):
        return pb.GetPluginInfoResponse(name="csi.shardfs.dev", vendor_version="stub")

    def GetPluginCapabilities(self, request, context):
        svc = pb.PluginCapability.Service(type=pb.PluginCapability.Service.CONTROLLER_SERVICE)
        return pb.GetPluginCapabilitiesResponse(capabilities=[pb.PluginCapability(service=svc)])

    def Probe(self, request, context):
        r = pb.ProbeResponse()
        r.ready.value = True
        return r


class Controller(rpc.ControllerServicer):
    def CreateVolume(self, request, context):
        if not request.name:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "name is required")
        size = request.capacity_range.required_bytes or 1 << 30
        with lock:
            volumes[request.name] = dict(request.parameters)
        return pb.CreateVolumeResponse(volume=pb.Volume(
            capacity_bytes=size, volume_id=request.name, volume_context=dict(request.parameters)))

    def DeleteVolume(self, request, context):
        if not request.volume_id:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "volume id is required")
        with lock:
            volumes.pop(request.volume_id, None)
        return pb.DeleteVolumeResponse()

    def ControllerGetCapabilities(self, request, context):
        cap = pb.ControllerServiceCapability.RPC(type=pb.ControllerServiceCapability.RPC.CREATE_DELETE_VOLUME)
        return pb.ControllerGetCapabilitiesResponse(
            capabilities=[pb.ControllerServiceCapability(rpc=cap)])


server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
rpc.add_IdentityServicer_to_server(Identity(), server)
rpc.add_ControllerServicer_to_server(Controller(), server)
server.add_insecure_port(sys.argv[1])
server.start()
print("stub controller serving on", sys.argv[1], flush=True)
server.wait_for_termination()
