package daemon

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/wasmhost/wasmhost/internal/config"
	"github.com/wasmhost/wasmhost/internal/publish"
	"github.com/wasmhost/wasmhost/internal/registration/registrationtest"
	"github.com/wasmhost/wasmhost/internal/state"
)

// TestKilledPluginOneEventWithSeries (issue 29): a plugin killed with its socket left behind is
// retried many times (a short backoff here stands for the 8 retries of 90 s): that is one
// PluginLost Event, whose note says nothing that changes from one retry to the next. Started
// again and killed again, it is the same Event, its series counting the losses. A plugin that
// comes and goes (its socket removed) writes no Event at all.
func TestKilledPluginOneEventWithSeries(t *testing.T) {
	cfg, base := testDaemonConfig(t)
	api, kubeconfig := startFakeAPI(t, base)
	cfg.Publish.NodeName, cfg.Publish.Kubeconfig = "node-a", kubeconfig
	cfg.Publish.Events.Enabled = true
	cfg.Reconciler.InitialBackoff = config.Duration(10 * time.Millisecond)
	cfg.Reconciler.MaxBackoff = config.Duration(40 * time.Millisecond)
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	d, err := New(ctx, cfg, nil, "test")
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	d.events.Flush = 20 * time.Millisecond
	d.SetHandler("CSIPlugin", registrationtest.NewRecordingHandler())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})

	path := filepath.Join(cfg.SocketDir, "a.sock")
	info := registrationtest.Info{Type: "CSIPlugin", Name: "a", Versions: []string{"1.0.0"}}
	const losses, retries = 3, 8
	for loss := 1; loss <= losses; loss++ {
		p, err := registrationtest.Start(path, info, registrationtest.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if n := p.WaitNotification(t, time.Minute); !n.Registered {
			t.Fatalf("loss %d: told %+v, want registered", loss, n)
		}
		waitUntil(t, "the plugin registered", func() bool {
			st, ok := d.state.StatusOf(path)
			return ok && st.State == state.StateRegistered
		})
		p.Kill()
		waitUntil(t, "the killed plugin's stale socket retried", func() bool {
			st, ok := d.state.StatusOf(path)
			return ok && st.State == state.StateFailing && strings.HasPrefix(st.LastError, "plugin gone") && st.Attempts >= retries
		})
		waitUntil(t, "the loss counted on the Event", func() bool {
			_, counts, _ := api.eventSeries(publish.ReasonPluginLost)
			return slices.Equal(counts, []int{loss})
		})
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
	}
	notes, _, writes := api.eventSeries(publish.ReasonPluginLost)
	if want := "plugin a of type CSIPlugin at " + path + ": its server stopped answering and its socket file stays; registered again when something answers there"; len(notes) != 1 || notes[0] != want {
		t.Errorf("PluginLost notes %q, want one: %q", notes, want)
	}
	// One create, then at most one patch of the series per loss after the first.
	t.Logf("%d losses, each retried %d times or more: %d Event writes", losses, retries, writes)
	if writes > losses {
		t.Errorf("%d Event writes for %d losses, want at most %d", writes, losses, losses)
	}

	// A plugin that comes and goes, its socket removed each time: no Event.
	for range 5 {
		p, err := registrationtest.Start(filepath.Join(cfg.SocketDir, "b.sock"), registrationtest.Info{Type: "CSIPlugin", Name: "b", Versions: []string{"1.0.0"}}, registrationtest.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if n := p.WaitNotification(t, time.Minute); !n.Registered {
			t.Fatalf("b: told %+v, want registered", n)
		}
		waitUntil(t, "b registered", func() bool {
			st, ok := d.state.StatusOf(p.Path())
			return ok && st.State == state.StateRegistered
		})
		p.Close()
		waitUntil(t, "b gone", func() bool { _, ok := d.state.StatusOf(p.Path()); return !ok })
	}
	if _, _, w := api.eventSeries(""); w != writes {
		t.Errorf("a plugin coming and going 5 times: %d Event writes, want none", w-writes)
	}
	if es := d.events.Stats(); es.Failed != 0 || es.Dropped != 0 {
		t.Errorf("events %+v", es)
	}
}
