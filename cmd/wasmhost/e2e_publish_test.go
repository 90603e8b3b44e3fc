package main

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/wasmhost/wasmhost/internal/config"
	"github.com/wasmhost/wasmhost/internal/daemon"
	"github.com/wasmhost/wasmhost/internal/publish"
	"github.com/wasmhost/wasmhost/internal/reconciler"
	"github.com/wasmhost/wasmhost/internal/registration/registrationtest"
)

// featureLabels reads dir as nfd-worker does and returns the labels it would make.
func featureLabels(t *testing.T, dir string) map[string]string {
	t.Helper()
	labels := map[string]string{}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		ff, err := publish.ParseFeatureFile(b, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		maps.Copy(labels, ff.Labels)
	}
	return labels
}

// TestE2EPublishFeatureFile: a plugin registered becomes node labels in nfd-worker's
// features.d, a value that is not a label value is refused as one and said so by `wasmhost
// status`; the plugin gone, its labels go; a restarted daemon keeps them meanwhile.
func TestE2EPublishFeatureFile(t *testing.T) {
	dirs := newE2EDirs(t, "/tmp")
	features := filepath.Join(dirs.Base, "features.d")
	if err := os.Mkdir(features, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := e2eConfig(dirs)
	cfg.Publish.FeatureFile.Dir = features
	cfg.Publish.Coalesce = config.Duration(50 * time.Millisecond)
	cfg.Handlers.Types = map[string]config.TypeConfig{"CSIPlugin": {Publish: config.TypePublish{
		Namespace: "csi.wasmhost.dev", Labels: []string{"node_id", "topology"}, Attributes: []string{"max_volumes_per_node"},
	}}}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	h := registrationtest.NewRecordingHandler()
	h.SetPublished(map[string]string{"node_id": "node-1", "topology": "topology.example.com/zone=z1", "max_volumes_per_node": "16"})
	start := func() *runningDaemon {
		return startDaemon(t, cfg, testLog(t), func(d *daemon.Daemon) { d.SetHandler("CSIPlugin", h) })
	}
	rd := start()
	sock := filepath.Join(dirs.Socket, "csi.sock")
	p := registrationtest.Serve(t, sock, pluginInfo("CSIPlugin", "csi.example.com"), registrationtest.Options{})
	rd.waitState(sock, reconciler.StateRegistered)
	want := map[string]string{"csi.wasmhost.dev/csi.example.com": "true", "csi.wasmhost.dev/csi.example.com_node_id": "node-1"}
	waitFor(t, "the plugin's labels in features.d", func() bool { return maps.Equal(featureLabels(t, features), want) })

	var out string
	waitFor(t, "status to show the write", func() bool {
		var err error
		out, _, err = runClient(t.Context(), "status", "--admin-socket", rd.d.AdminSocket())
		return err == nil && strings.Contains(out, "2 labels, 3 attributes, 1 instances")
	})
	for _, s := range []string{"publish featureFile: ok " + filepath.Join(features, "wasmhost") + ", 2 labels, 3 attributes, 1 instances",
		"1 keys not published as asked, e.g. key topology of plugin csi.example.com (type CSIPlugin): not a label (still an attribute): value \"topology.example.com/zone=z1\": '/' is not allowed in a label value"} {
		if !strings.Contains(out, s) {
			t.Errorf("status lacks %q:\n%s", s, out)
		}
	}

	// A restart: the labels stay while the plugin registers again (its registration held
	// up by the handler until the publisher has written the file at least once).
	if err := rd.stop(); err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	h.SetHook(func(ctx context.Context, c registrationtest.Call) error {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil
	})
	rd = start()
	waitFor(t, "the restarted publisher to write", func() bool {
		out, _, err := runClient(t.Context(), "status", "--admin-socket", rd.d.AdminSocket(), "-o", "json")
		return err == nil && strings.Contains(out, `"writes": 1`) && strings.Contains(out, `"holding": true`)
	})
	if got := featureLabels(t, features); !maps.Equal(got, want) {
		t.Errorf("labels while the plugin registers again %v, want %v", got, want)
	}
	close(release)
	h.SetHook(nil)
	rd.waitState(sock, reconciler.StateRegistered)
	waitFor(t, "the publisher to take what is registered", func() bool {
		out, _, err := runClient(t.Context(), "status", "--admin-socket", rd.d.AdminSocket(), "-o", "json")
		return err == nil && !strings.Contains(out, `"holding": true`)
	})
	if got := featureLabels(t, features); !maps.Equal(got, want) {
		t.Errorf("labels after the restart %v, want %v", got, want)
	}

	p.Close()
	waitFor(t, "the plugin's labels to go", func() bool { return len(featureLabels(t, features)) == 0 })
}

// TestConfigCheckSaysWhatASinkNeeds: a file that is valid but whose sink cannot work as it
// stands is accepted with notes that say what is missing.
func TestConfigCheckSaysWhatASinkNeeds(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "features.d")
	out, err := runRoot(t, "config", "check", writeConfig(t, configHeader+"publish:\n  featureFile:\n    dir: "+missing+"\n"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{": ok\n", "note: publish.featureFile is set, but no plugin type publishes anything",
		"note: publish.featureFile.dir " + missing + " is not a directory here"} {
		if !strings.Contains(out, want) {
			t.Errorf("config check lacks %q:\n%s", want, out)
		}
	}
	_, err = runRoot(t, "config", "check", writeConfig(t, configHeader+"handlers:\n  types:\n    CSIPlugin:\n      publish:\n        namespace: csi.wasmhost.dev\n"))
	if err == nil || !strings.Contains(err.Error(), "no sink is: set publish.featureFile.dir") {
		t.Errorf("a type that publishes without a sink: %v", err)
	}
}
