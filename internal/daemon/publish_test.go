package daemon

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPublishNeedsNodeAndCredentials: a daemon told to write to the cluster without a node
// name or credentials does not start, and says what is missing.
func TestPublishNeedsNodeAndCredentials(t *testing.T) {
	t.Setenv("NODE_NAME", "")
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	cfg, base := testDaemonConfig(t)
	cfg.Publish.NodeFeature.Namespace = "wasmhost"
	_, err := New(context.Background(), cfg, nil, "test")
	if err == nil || !strings.Contains(err.Error(), "need the node's name: set publish.nodeName, or NODE_NAME") {
		t.Errorf("New without a node name: %v", err)
	}
	cfg.Publish.NodeName = "node-a"
	_, err = New(context.Background(), cfg, nil, "test")
	if err == nil || !strings.Contains(err.Error(), "no credentials for the API server: not in a pod with a service-account token") || !strings.Contains(err.Error(), "set publish.kubeconfig") {
		t.Errorf("New without credentials: %v", err)
	}
	cfg.Publish.Kubeconfig = filepath.Join(base, "kubeconfig")
	if err := os.WriteFile(cfg.Publish.Kubeconfig, []byte("not: [a kubeconfig"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = New(context.Background(), cfg, nil, "test")
	if err == nil || !strings.Contains(err.Error(), "kubeconfig "+cfg.Publish.Kubeconfig) {
		t.Errorf("New with a broken kubeconfig: %v", err)
	}
}

// TestPublishOff: without a sink there is no publisher, and status says nothing of it.
func TestPublishOff(t *testing.T) {
	cfg, _ := testDaemonConfig(t)
	d := runTestDaemon(t, cfg, nil)
	if d.pub != nil || d.events != nil {
		t.Error("a publisher without a sink configured")
	}
	if st := d.PublishStatus(); len(st.Sinks) != 0 || st.Events != nil {
		t.Errorf("status %+v", st)
	}
}
