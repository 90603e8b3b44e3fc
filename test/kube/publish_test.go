package kube_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/wasmhost/wasmhost/internal/config"
	"github.com/wasmhost/wasmhost/internal/daemon"
	"github.com/wasmhost/wasmhost/internal/kube"
	"github.com/wasmhost/wasmhost/internal/publish"
	"github.com/wasmhost/wasmhost/internal/registration"
	"github.com/wasmhost/wasmhost/internal/registration/registrationtest"
	"github.com/wasmhost/wasmhost/internal/state"
)

// testDaemon is a wasmhost daemon run in the test, publishing as node with kubeconfig.
type testDaemon struct {
	d       *daemon.Daemon
	sockets string
	log     *lockedBuffer
	stop    func()
}

func startDaemon(t *testing.T, node, kubeconfig string, handlers map[string]*registrationtest.RecordingHandler, opts ...func(*config.Config)) *testDaemon {
	t.Helper()
	base, err := os.MkdirTemp("/tmp", "wh")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	for _, d := range []string{"s", "h", "st"} {
		if err := os.Mkdir(filepath.Join(base, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	return runDaemon(t, base, node, kubeconfig, handlers, opts...)
}

// restartDaemon starts a daemon again on the directories of td (stopped).
func restartDaemon(t *testing.T, td *testDaemon, node, kubeconfig string, handlers map[string]*registrationtest.RecordingHandler) *testDaemon {
	t.Helper()
	return runDaemon(t, filepath.Dir(td.sockets), node, kubeconfig, handlers)
}

func runDaemon(t *testing.T, base, node, kubeconfig string, handlers map[string]*registrationtest.RecordingHandler, opts ...func(*config.Config)) *testDaemon {
	t.Helper()
	cfg := config.Default()
	cfg.SocketDir, cfg.HandlerDir, cfg.StateDir = filepath.Join(base, "s"), filepath.Join(base, "h"), filepath.Join(base, "st")
	cfg.Metrics.Listen = "off"
	cfg.Publish.NodeName = node
	cfg.Publish.Kubeconfig = kubeconfig
	cfg.Publish.NodeFeature.Namespace = "wasmhost"
	cfg.Publish.Events.Enabled = true
	cfg.Publish.InitialBackoff = config.Duration(200 * time.Millisecond)
	cfg.Publish.MaxBackoff = config.Duration(2 * time.Second)
	// 1,000 plugins take about 420 KiB: the most publish.maxBytes allows.
	cfg.Publish.MaxBytes = config.MaxPublishMaxBytes
	cfg.Handlers.Types = map[string]config.TypeConfig{"CSIPlugin": {Publish: config.TypePublish{
		Namespace: "csi.wasmhost.dev", Labels: []string{"node_id"}, Attributes: []string{"topology"},
	}}}
	for _, o := range opts {
		o(&cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	log := &lockedBuffer{}
	d, err := daemon.New(context.Background(), cfg, slog.New(slog.NewTextHandler(log, &slog.HandlerOptions{Level: slog.LevelDebug})), "v0.0.0-test")
	if err != nil {
		t.Fatal(err)
	}
	for typ, h := range handlers {
		d.SetHandler(typ, h)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	td := &testDaemon{d: d, sockets: cfg.SocketDir, log: log}
	var once sync.Once
	td.stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("daemon: %v", err)
			}
		})
	}
	t.Cleanup(func() {
		td.stop()
		if t.Failed() {
			t.Logf("daemon log (last 8 KiB):\n%s", tail(log.String(), 8<<10))
		}
	})
	return td
}

// sink returns the NodeFeature sink's status.
func (td *testDaemon) sink() publish.SinkStatus {
	for _, s := range td.d.PublishStatus().Sinks {
		if s.Sink == "nodeFeature" {
			return s
		}
	}
	return publish.SinkStatus{}
}

func csiHandler() *registrationtest.RecordingHandler {
	h := registrationtest.NewRecordingHandler()
	h.SetPublished(map[string]string{"node_id": "node-a", "topology": "zone=z1"})
	return h
}

// startPlugins starts n plugins of type CSIPlugin named prefix-i in dir.
func startPlugins(t *testing.T, dir, prefix string, n int) []*registrationtest.Plugin {
	t.Helper()
	var ps []*registrationtest.Plugin
	for i := range n {
		p, err := registrationtest.Start(filepath.Join(dir, fmt.Sprintf("%s-%d.sock", prefix, i)),
			registrationtest.Info{Type: "CSIPlugin", Name: fmt.Sprintf("%s-%d", prefix, i), Versions: []string{"1.0.0"}}, registrationtest.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		ps = append(ps, p)
	}
	return ps
}

// published reads node's NodeFeature as an admin.
func (c *cluster) published(node string) (publish.Node, error) {
	obj, err := c.dynamic().Resource(nodeFeatures).Namespace("wasmhost").Get(context.Background(), node, metav1.GetOptions{})
	if err != nil {
		return publish.Node{}, err
	}
	return kube.FromNodeFeature(obj), nil
}

func labelsWith(n publish.Node, prefix string) int {
	var k int
	for l := range n.Labels {
		if strings.HasPrefix(l, prefix) {
			k++
		}
	}
	return k
}

// TestThousandPlugins: 1,000 plugins registered are 2,000 labels, their attributes and 1,000
// instances in the node's NodeFeature, written in a handful of requests; a plugin refused is
// an Event on the Node; when the plugins go, so do their labels.
func TestThousandPlugins(t *testing.T) {
	c := startCluster(t)
	c.setUp()
	refusing := registrationtest.NewRecordingHandler()
	refusing.SetError(registrationtest.MethodValidate, fmt.Errorf("%w: version 0.1 is too old", registration.ErrRejected))
	td := startDaemon(t, "node-a", c.kubeconfig(c.nodeToken("wasmhost", "node-a")),
		map[string]*registrationtest.RecordingHandler{"CSIPlugin": csiHandler(), "OldPlugin": refusing})
	waitFor(t, "the first write", func() bool { return td.sink().Writes > 0 })
	before := td.sink().Writes

	plugins := startPlugins(t, td.sockets, "csi", 1000)
	old, err := registrationtest.Start(filepath.Join(td.sockets, "old.sock"), registrationtest.Info{Type: "OldPlugin", Name: "old", Versions: []string{"0.1"}}, registrationtest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(old.Close)
	var n publish.Node
	waitFor(t, "2,000 labels on the NodeFeature", func() bool {
		n, err = c.published("node-a")
		return err == nil && len(n.Labels) == 2000
	})
	if n.Labels["csi.wasmhost.dev/csi-7_node_id"] != "node-a" || n.Labels["csi.wasmhost.dev/csi-7"] != "true" ||
		n.Attributes["csi.wasmhost.dev"]["csi-7_topology"] != "zone=z1" || len(n.Instances["csi.wasmhost.dev"]) != 1000 {
		t.Errorf("NodeFeature: label %q, attribute %q, %d instances", n.Labels["csi.wasmhost.dev/csi-7_node_id"], n.Attributes["csi.wasmhost.dev"]["csi-7_topology"], len(n.Instances["csi.wasmhost.dev"]))
	}
	waitFor(t, "the daemon to have written it all", func() bool { return td.sink().Labels == 2000 })
	writes := td.sink().Writes - before
	t.Logf("1,000 registrations: %d writes of the NodeFeature", writes)
	if writes > 15 {
		t.Errorf("%d writes for 1,000 registrations, want a handful", writes)
	}

	waitFor(t, "an Event about the refused plugin", func() bool {
		list, err := c.dynamic().Resource(kube.EventResource).Namespace("default").List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return false
		}
		for _, e := range list.Items {
			reg, _ := e.Object["regarding"].(map[string]any)
			if e.Object["reason"] == publish.ReasonPluginRejected && reg["kind"] == "Node" && reg["name"] == "node-a" &&
				strings.Contains(fmt.Sprint(e.Object["note"]), "version 0.1 is too old") {
				return true
			}
		}
		return false
	})

	if es := td.d.PublishStatus().Events; es == nil || es.Recorded == 0 || es.Failed != 0 {
		t.Errorf("events status %+v, want recorded and none failed", es)
	}

	for _, p := range plugins {
		p.Close()
	}
	waitFor(t, "the labels to go with the plugins", func() bool {
		n, err = c.published("node-a")
		return err == nil && len(n.Labels) == 0 && len(n.Instances["csi.wasmhost.dev"]) == 0
	})
}

// TestAPIServerRestartedMidBurst: the API server goes away during a burst of registrations;
// the registrations go on, the sink shows the failure, and when the API server is back the
// NodeFeature catches up with all of them.
func TestAPIServerRestartedMidBurst(t *testing.T) {
	c := startCluster(t)
	c.setUp()
	td := startDaemon(t, "node-a", c.kubeconfig(c.nodeToken("wasmhost", "node-a")),
		map[string]*registrationtest.RecordingHandler{"CSIPlugin": csiHandler()})
	startPlugins(t, td.sockets, "first", 300)
	waitFor(t, "the first 300 on the NodeFeature", func() bool {
		n, err := c.published("node-a")
		return err == nil && labelsWith(n, "csi.wasmhost.dev/first-") == 600
	})
	c.apiserver.stop()
	startPlugins(t, td.sockets, "second", 300)
	waitFor(t, "the second 300 to register while the API server is down", func() bool {
		var k int
		for _, v := range td.d.State().Plugins() {
			if v.State == state.StateRegistered {
				k++
			}
		}
		return k == 600
	})
	waitFor(t, "the sink to say it fails", func() bool { return td.sink().State == publish.SinkFailing })
	if e := td.sink().LastError; !strings.Contains(e, "connection refused") && !strings.Contains(e, "apply NodeFeature wasmhost/node-a") {
		t.Errorf("last error %q", e)
	}
	c.startAPIServer()
	waitFor(t, "the NodeFeature to catch up", func() bool {
		n, err := c.published("node-a")
		return err == nil && labelsWith(n, "csi.wasmhost.dev/second-") == 600 && labelsWith(n, "csi.wasmhost.dev/first-") == 600
	})
	waitFor(t, "the sink to be ok again", func() bool { return td.sink().State == publish.SinkOK })
}

// TestRBACMissing: a daemon whose identity may not write NodeFeatures registers its plugins
// all the same, and its status says what the API server refused and what to grant.
func TestRBACMissing(t *testing.T) {
	c := startCluster(t)
	c.setUp()
	td := startDaemon(t, "node-a", c.kubeconfig(c.nodeToken("no-grants", "node-a")),
		map[string]*registrationtest.RecordingHandler{"CSIPlugin": csiHandler()})
	startPlugins(t, td.sockets, "csi", 20)
	waitFor(t, "the plugins to register", func() bool {
		var k int
		for _, v := range td.d.State().Plugins() {
			if v.State == state.StateRegistered {
				k++
			}
		}
		return k == 20
	})
	waitFor(t, "the sink to fail", func() bool { return td.sink().State == publish.SinkFailing })
	e := td.sink().LastError
	for _, want := range []string{"forbidden", "system:serviceaccount:wasmhost:no-grants",
		"the daemon's identity needs get, create and update of nodefeatures.nfd.k8s-sigs.io named node-a in namespace wasmhost: apply examples/kubernetes/publish.yaml"} {
		if !strings.Contains(e, want) {
			t.Errorf("last error %q lacks %q", e, want)
		}
	}
}

// TestRestartDoesNotFlap: a daemon restarted while its plugins stay reads its NodeFeature
// first and keeps what it holds until the plugins registered again: no update in between
// takes a label off the node. The plugins' registrations are held up in the handler so that
// the restarted daemon has written before they are back.
func TestRestartDoesNotFlap(t *testing.T) {
	c := startCluster(t)
	c.setUp()
	kubeconfig := c.kubeconfig(c.nodeToken("wasmhost", "node-a"))
	h := csiHandler()
	td := startDaemon(t, "node-a", kubeconfig, map[string]*registrationtest.RecordingHandler{"CSIPlugin": h})
	startPlugins(t, td.sockets, "csi", 20)
	waitFor(t, "the 20 plugins on the NodeFeature", func() bool {
		n, err := c.published("node-a")
		return err == nil && len(n.Labels) == 40
	})
	td.stop()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w, err := c.dynamic().Resource(nodeFeatures).Namespace("wasmhost").Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=node-a"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	release := make(chan struct{})
	h.SetHook(func(ctx context.Context, _ registrationtest.Call) error {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil
	})
	// The same socket directory: the plugins are there when it starts.
	td2 := restartDaemon(t, td, "node-a", kubeconfig, map[string]*registrationtest.RecordingHandler{"CSIPlugin": h})
	waitFor(t, "the restarted daemon to write", func() bool { return td2.sink().Writes > 0 })
	if !td2.sink().Holding {
		t.Error("status does not say the restarted daemon keeps what it read")
	}
	close(release)
	h.SetHook(nil)
	waitFor(t, "the restarted daemon to publish what is registered", func() bool {
		s := td2.sink()
		return s.State == publish.SinkOK && !s.Holding && s.Labels == 40 || t.Failed()
	})
	// Every version of the object the API server stored meanwhile had all 40 labels.
	var updates int
	for {
		select {
		case ev := <-w.ResultChan():
			obj, ok := ev.Object.(*unstructured.Unstructured)
			if !ok {
				t.Fatalf("watch: %v", ev.Object)
			}
			updates++
			if n := kube.FromNodeFeature(obj); len(n.Labels) != 40 {
				t.Errorf("an update of the NodeFeature during the restart had %d labels, not 40", len(n.Labels))
			}
			continue
		case <-time.After(2 * time.Second):
		}
		break
	}
	t.Logf("%d updates of the NodeFeature seen during the restart", updates)
}
