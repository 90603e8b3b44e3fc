package kube_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/wasmhost/wasmhost/internal/config"
	"github.com/wasmhost/wasmhost/internal/kube"
	"github.com/wasmhost/wasmhost/internal/publish"
	"github.com/wasmhost/wasmhost/internal/registration/registrationtest"
	"github.com/wasmhost/wasmhost/internal/state"
)

// lostEvents returns the PluginLost Events about node, as an admin reads them.
func (c *cluster) lostEvents(node string) []unstructured.Unstructured {
	list, err := c.dynamic().Resource(kube.EventResource).Namespace("default").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		return nil
	}
	var out []unstructured.Unstructured
	for _, e := range list.Items {
		reg, _, _ := unstructured.NestedString(e.Object, "regarding", "name")
		if e.Object["reason"] == publish.ReasonPluginLost && reg == node {
			out = append(out, e)
		}
	}
	return out
}

// TestKilledPluginOneEventWithSeries (issue 29, done when): a plugin killed with its socket
// left behind, retried many times (a short backoff stands for the 8 retries of 90 s), is one
// PluginLost Event; lost while the API server is down, the Event waits and is written when it
// returns; started again and killed again, twice, it is the same Event, its series counting 3.
func TestKilledPluginOneEventWithSeries(t *testing.T) {
	c := startCluster(t)
	c.setUp()
	td := startDaemon(t, "node-a", c.kubeconfig(c.nodeToken("wasmhost", "node-a")),
		map[string]*registrationtest.RecordingHandler{"CSIPlugin": csiHandler()}, func(cfg *config.Config) {
			cfg.Reconciler.InitialBackoff = config.Duration(10 * time.Millisecond)
			cfg.Reconciler.MaxBackoff = config.Duration(40 * time.Millisecond)
		})
	path := filepath.Join(td.sockets, "a.sock")
	// lose starts the plugin, waits until it is registered, kills it and waits until its
	// stale socket was tried again at least 8 times.
	lose := func() {
		t.Helper()
		os.Remove(path)
		p, err := registrationtest.Start(path, registrationtest.Info{Type: "CSIPlugin", Name: "a", Versions: []string{"1.0.0"}}, registrationtest.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		status := func() state.Status { st, _ := td.d.State().StatusOf(path); return st }
		waitFor(t, "the plugin registered", func() bool { return status().State == state.StateRegistered })
		p.Kill()
		waitFor(t, "the stale socket tried 8 times", func() bool {
			st := status()
			return st.State == state.StateFailing && strings.HasPrefix(st.LastError, "plugin gone") && st.Attempts >= 8
		})
	}

	c.apiserver.stop()
	lose()
	waitFor(t, "the PluginLost Event waiting while the API server is down", func() bool {
		es := td.d.PublishStatus().Events
		return es != nil && es.Pending == 1 && es.Failed > 0
	})
	c.startAPIServer()
	waitFor(t, "the PluginLost Event written when the API server is back", func() bool { return len(c.lostEvents("node-a")) == 1 })

	for range 2 {
		recorded := td.d.PublishStatus().Events.Recorded
		lose()
		waitFor(t, "the loss recorded (publish.LostGrace after it)", func() bool { return td.d.PublishStatus().Events.Recorded == recorded+1 })
	}
	waitFor(t, "one PluginLost Event with a series count of 3", func() bool {
		es := c.lostEvents("node-a")
		if len(es) != 1 {
			return len(es) > 1 // fails below
		}
		n, _, _ := unstructured.NestedInt64(es[0].Object, "series", "count")
		return n == 3
	})
	es := c.lostEvents("node-a")
	want := "plugin a of type CSIPlugin at " + path + ": its server stopped answering and its socket file stays; registered again when something answers there"
	if len(es) != 1 || es[0].Object["note"] != want {
		var notes []string
		for _, e := range es {
			notes = append(notes, fmt.Sprint(e.Object["note"]))
		}
		t.Fatalf("PluginLost Events %q, want one: %q", notes, want)
	}
	st := td.d.PublishStatus().Events
	t.Logf("3 losses, each retried 8 times or more, one during an outage: %d requests about Events answered, %d failed while the API server was down", st.Requests, st.Failed)
	if st.Requests > 3 || st.Dropped != 0 || st.Pending != 0 {
		t.Errorf("events %+v: want at most 3 requests (a create, a series update per flush that saw a new loss), none dropped", st)
	}
}

// TestEventWritesUnderChurn measures (WASMHOST_EVENTS_CHURN=1; it takes 3 minutes) the Event
// requests one node makes, with the daemon's own backoffs, while three plugins churn: one
// killed at the start whose socket stays (tried again 8 times in 90 s), one that comes and
// goes every minute (its socket removed), one killed every minute and started again 30 s
// later (a crash loop). docs/benchmarks.md has the figures.
func TestEventWritesUnderChurn(t *testing.T) {
	if os.Getenv("WASMHOST_EVENTS_CHURN") == "" {
		t.Skip("set WASMHOST_EVENTS_CHURN=1 to measure (3 minutes)")
	}
	c := startCluster(t)
	c.setUp()
	td := startDaemon(t, "node-a", c.kubeconfig(c.nodeToken("wasmhost", "node-a")),
		map[string]*registrationtest.RecordingHandler{"CSIPlugin": csiHandler()})
	start := func(name string) *registrationtest.Plugin {
		path := filepath.Join(td.sockets, name+".sock")
		os.Remove(path)
		p, err := registrationtest.Start(path, registrationtest.Info{Type: "CSIPlugin", Name: name, Versions: []string{"1.0.0"}}, registrationtest.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		waitFor(t, name+" registered", func() bool {
			st, _ := td.d.State().StatusOf(path)
			return st.State == state.StateRegistered
		})
		return p
	}
	stale, flap, crash := start("stale"), start("flap"), start("crash")
	before := td.d.PublishStatus().Events.Requests
	stale.Kill()
	begin := time.Now()
	for minute := 1; minute <= 3; minute++ {
		crash.Kill()
		time.Sleep(30*time.Second - time.Since(begin)%time.Minute)
		flap.Close()
		crash = start("crash")
		time.Sleep(time.Minute - time.Since(begin)%time.Minute)
		flap = start("flap")
		st := td.d.PublishStatus().Events
		st8, _ := td.d.State().StatusOf(filepath.Join(td.sockets, "stale.sock"))
		t.Logf("minute %d: %d requests about Events (%d recorded, %d pending); the stale socket tried %d times", minute, st.Requests-before, st.Recorded, st.Pending, st8.Attempts)
	}
	// The stale socket and the crash loop are one Event each, the crash loop's series counting
	// its 3 losses. The plugin that comes and goes is none: it stops serving, then removes its
	// socket, within publish.LostGrace.
	perPlugin := map[string]int{}
	list, err := c.dynamic().Resource(kube.EventResource).Namespace("default").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range list.Items {
		n, _, _ := unstructured.NestedInt64(e.Object, "series", "count")
		t.Logf("Event %s %s: series %d: %s", e.Object["reason"], e.GetName(), n, e.Object["note"])
		note := fmt.Sprint(e.Object["note"])
		plugin := strings.Fields(note)[1]
		perPlugin[plugin]++
		if e.Object["reason"] != publish.ReasonPluginLost || plugin == "crash" && n != 3 {
			t.Errorf("Event %s: series %d, want a PluginLost (the crash loop's with a series of 3)", note, n)
		}
	}
	if perPlugin["stale"] != 1 || perPlugin["crash"] != 1 || perPlugin["flap"] != 0 {
		t.Errorf("Events per plugin %v, want one for stale and crash, none for flap", perPlugin)
	}
}
