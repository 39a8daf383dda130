//! The CSI Identity service: who the plugin is and that it is ready.

use tonic::{Request, Response, Status};

use super::proto::identity_server::Identity;
use super::proto::{
    GetPluginCapabilitiesRequest, GetPluginCapabilitiesResponse, GetPluginInfoRequest,
    GetPluginInfoResponse, PluginCapability, ProbeRequest, ProbeResponse,
};

/// Answers GetPluginInfo, GetPluginCapabilities (none: a node-only plugin) and Probe.
#[derive(Debug, Clone)]
pub struct IdentityService {
    /// The driver name (what `driver:` in a volume names).
    pub driver_name: String,
    /// Test only: report CONTROLLER_SERVICE (served by a stub, for csi-sanity).
    pub advertise_controller_service: bool,
}

#[tonic::async_trait]
impl Identity for IdentityService {
    async fn get_plugin_info(
        &self,
        _request: Request<GetPluginInfoRequest>,
    ) -> Result<Response<GetPluginInfoResponse>, Status> {
        Ok(Response::new(GetPluginInfoResponse {
            name: self.driver_name.clone(),
            vendor_version: env!("CARGO_PKG_VERSION").to_string(),
            manifest: [("commit".to_string(), env!("SHARDFS_GIT_COMMIT").to_string())]
                .into_iter()
                .collect(),
        }))
    }

    async fn get_plugin_capabilities(
        &self,
        _request: Request<GetPluginCapabilitiesRequest>,
    ) -> Result<Response<GetPluginCapabilitiesResponse>, Status> {
        // No CONTROLLER_SERVICE: volumes are datasets that already exist; nothing to provision.
        let capabilities = if self.advertise_controller_service {
            use super::proto::plugin_capability::{service, Service, Type};
            vec![PluginCapability {
                r#type: Some(Type::Service(Service {
                    r#type: service::Type::ControllerService as i32,
                })),
            }]
        } else {
            Vec::new()
        };
        Ok(Response::new(GetPluginCapabilitiesResponse {
            capabilities,
        }))
    }

    async fn probe(
        &self,
        _request: Request<ProbeRequest>,
    ) -> Result<Response<ProbeResponse>, Status> {
        Ok(Response::new(ProbeResponse { ready: Some(true) }))
    }
}
