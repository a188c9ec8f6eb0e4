package csi

import (
	"context"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// PluginName is the driver's name (GetPluginInfo): the CSIDriver object's
// and a StorageClass's provisioner.
const PluginName = "iser-attach.io"

// Identity is the CSI Identity service.
type Identity struct {
	csipb.UnimplementedIdentityServer
	// Version is the vendor version GetPluginInfo reports.
	Version string
	// Controller says whether this process serves the Controller service.
	Controller bool
}

// GetPluginInfo: PluginName and the version.
func (i *Identity) GetPluginInfo(context.Context, *csipb.GetPluginInfoRequest) (*csipb.GetPluginInfoResponse, error) {
	return &csipb.GetPluginInfoResponse{Name: PluginName, VendorVersion: i.Version}, nil
}

// GetPluginCapabilities: the Controller service (when served) and online
// volume expansion. No topology: every node is taken to reach the pool.
func (i *Identity) GetPluginCapabilities(context.Context, *csipb.GetPluginCapabilitiesRequest) (*csipb.GetPluginCapabilitiesResponse, error) {
	resp := &csipb.GetPluginCapabilitiesResponse{}
	if i.Controller {
		resp.Capabilities = append(resp.Capabilities, &csipb.PluginCapability{Type: &csipb.PluginCapability_Service_{
			Service: &csipb.PluginCapability_Service{Type: csipb.PluginCapability_Service_CONTROLLER_SERVICE}}})
	}
	resp.Capabilities = append(resp.Capabilities, &csipb.PluginCapability{Type: &csipb.PluginCapability_VolumeExpansion_{
		VolumeExpansion: &csipb.PluginCapability_VolumeExpansion{Type: csipb.PluginCapability_VolumeExpansion_ONLINE}}})
	return resp, nil
}

// Probe is ready: the pool is scanned and the state directory locked
// before the socket is served.
func (i *Identity) Probe(context.Context, *csipb.ProbeRequest) (*csipb.ProbeResponse, error) {
	return &csipb.ProbeResponse{Ready: wrapperspb.Bool(true)}, nil
}
