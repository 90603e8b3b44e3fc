package interop

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// probe is the smallest registering side there is: it dials a plugin's registration socket and
// makes the two calls of the kubelet's protocol, GetInfo and NotifyRegistrationStatus. The
// tests run each real plugin against it first, to pin down what the plugin sends and how it
// reacts, independently of the daemon.
type probe struct {
	conn   *grpc.ClientConn
	client registerapi.RegistrationClient
}

// probeTimeout bounds each probe call, as the daemon bounds its own.
const probeTimeout = 5 * time.Second

func dialProbe(t *testing.T, socket string) *probe {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("dial %s: %v", socket, err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return &probe{conn: conn, client: registerapi.NewRegistrationClient(conn)}
}

func (p *probe) getInfo(t *testing.T) *registerapi.PluginInfo {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), probeTimeout)
	defer cancel()
	info, err := p.client.GetInfo(ctx, &registerapi.InfoRequest{})
	if err != nil {
		t.Fatalf("GetInfo: %v", err)
	}
	return info
}

// notify sends NotifyRegistrationStatus with the given deadline and returns the call's error.
func (p *probe) notify(ctx context.Context, timeout time.Duration, registered bool, msg string) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	_, err := p.client.NotifyRegistrationStatus(ctx, &registerapi.RegistrationStatus{
		PluginRegistered: registered,
		Error:            msg,
	})
	return err
}
