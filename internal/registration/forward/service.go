package forward

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	regapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// service answers the kubelet on every forward socket: one gRPC server serves them all, and
// a call is told from another by the address of the socket it came in on (the address the
// socket was bound at: the temporary name, which an accepted connection keeps).
type service struct {
	regapi.UnimplementedRegistrationServer
	f *Forwarder
}

func localAddr(ctx context.Context) string {
	p, ok := peer.FromContext(ctx)
	if !ok || p.LocalAddr == nil {
		return ""
	}
	return p.LocalAddr.String()
}

// GetInfo answers with the plugin's own answer: its type, name and versions, and its
// endpoint, which is its registration socket when it gave none (so the kubelet dials the
// plugin, never wasmhost).
func (s service) GetInfo(ctx context.Context, _ *regapi.InfoRequest) (*regapi.PluginInfo, error) {
	info, ok := s.f.infoAt(localAddr(ctx))
	if !ok {
		return nil, status.Error(codes.Unavailable, "wasmhost: this plugin is not registered any more")
	}
	return &regapi.PluginInfo{
		Type:              info.Type,
		Name:              info.Name,
		Endpoint:          info.Endpoint,
		SupportedVersions: info.Versions,
	}, nil
}

// NotifyRegistrationStatus records the kubelet's verdict.
func (s service) NotifyRegistrationStatus(ctx context.Context, st *regapi.RegistrationStatus) (*regapi.RegistrationStatusResponse, error) {
	if err := s.f.notified(localAddr(ctx), st.GetPluginRegistered(), st.GetError()); err != nil {
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	return &regapi.RegistrationStatusResponse{}, nil
}
