package main

import (
	"bufio"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/wasmhost/wasmhost/internal/fleet"
	"github.com/wasmhost/wasmhost/internal/kube"
)

func fleetNodes(now time.Time) []fleet.Node {
	return []fleet.Node{
		{Name: "node-a", Namespace: "wasmhost", Ready: "Ready", Renewed: true, Renewal: kube.Renewal{At: now.Add(-3 * time.Minute), Every: 10 * time.Minute},
			Plugins: []fleet.Plugin{{Type: "CSIPlugin", Name: "csi-a", State: "registered", Versions: []string{"1.0.0"}, Published: map[string]string{"node_id": "a"}}}},
		{Name: "node-b", Namespace: "wasmhost", Ready: "NotReady", Renewed: true, Missed: 2, Stale: true, Renewal: kube.Renewal{At: now.Add(-25 * time.Minute), Every: 10 * time.Minute}},
	}
}

// TestClusterPluginsJSONIsOneDocument: -o json is one JSON document however many nodes (none
// included), with a plugin a line, each carrying its node's readiness and staleness.
func TestClusterPluginsJSONIsOneDocument(t *testing.T) {
	now := time.Now()
	for _, nodes := range [][]fleet.Node{nil, fleetNodes(now)} {
		var b strings.Builder
		d := &pluginDoc{w: bufio.NewWriter(&b)}
		for _, n := range nodes {
			if err := d.node(n); err != nil {
				t.Fatal(err)
			}
		}
		if err := d.end(); err != nil {
			t.Fatal(err)
		}
		var doc struct{ Plugins []clusterPlugin }
		if err := json.Unmarshal([]byte(b.String()), &doc); err != nil {
			t.Fatalf("%v:\n%s", err, b.String())
		}
		lines := 1
		if len(nodes) > 0 {
			lines = len(nodes) + 2
		}
		if len(doc.Plugins) != len(nodes) || strings.Count(b.String(), "\n") != lines {
			t.Errorf("%d plugins, want %d, one a line:\n%s", len(doc.Plugins), len(nodes), b.String())
		}
		if len(nodes) > 0 && (doc.Plugins[0].Name != "csi-a" || doc.Plugins[0].Stale || doc.Plugins[0].NodeReady != "Ready" ||
			!doc.Plugins[1].Stale || doc.Plugins[1].Type != "" || doc.Plugins[1].MissedRenewals != 2 || doc.Plugins[1].RenewInterval != "10m0s") {
			t.Errorf("-o json:\n%s", b.String())
		}
	}
}

// TestClusterPluginsTable: the table marks a stale node and shows its Node's Ready beside it;
// a node without plugins is a line; the columns line up across what was written so far.
func TestClusterPluginsTable(t *testing.T) {
	now := time.Now()
	var b strings.Builder
	tb := &pluginTable{w: &b, now: now}
	for _, n := range fleetNodes(now) {
		if err := tb.node(n); err != nil {
			t.Fatal(err)
		}
	}
	if b.Len() != 0 {
		t.Errorf("a page's rows written before the page ended:\n%s", b.String())
	}
	if err := tb.pageDone(); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "NODE") {
		t.Fatalf("table:\n%s", b.String())
	}
	if f := strings.Fields(lines[1]); f[0] != "node-a" || f[1] != "Ready" || f[2] != "3m" || f[4] != "CSIPlugin" || f[6] != "registered" || strings.Contains(lines[1], "stale") {
		t.Errorf("node-a's line: %q", lines[1])
	}
	if !strings.Contains(lines[2], "NotReady") || !strings.Contains(lines[2], "25m ago (stale)") {
		t.Errorf("node-b's line: %q", lines[2])
	}
	if strings.Index(lines[0], "TYPE") != strings.Index(lines[1], "CSIPlugin") || strings.Index(lines[0], "STATE") != strings.Index(lines[1], "registered") ||
		strings.Index(lines[0], "RENEWED") != strings.Index(lines[2], "25m") {
		t.Errorf("columns do not line up:\n%s", b.String())
	}
	// No node at all: the header alone.
	b.Reset()
	if err := (&pluginTable{w: &b, now: now}).end(); err != nil || !strings.HasPrefix(b.String(), "NODE ") || strings.Count(b.String(), "\n") != 1 {
		t.Errorf("an empty fleet's table (%v): %q", err, b.String())
	}
}

// TestClusterPluginsYAMLIsOneDocument: -o yaml, written a plugin at a time, is the same
// document as -o json.
func TestClusterPluginsYAMLIsOneDocument(t *testing.T) {
	now := time.Now()
	for _, nodes := range [][]fleet.Node{nil, fleetNodes(now)} {
		var b strings.Builder
		d := &pluginDoc{w: bufio.NewWriter(&b), yaml: true}
		for _, n := range nodes {
			if err := d.node(n); err != nil {
				t.Fatal(err)
			}
		}
		if err := d.end(); err != nil {
			t.Fatal(err)
		}
		var doc struct{ Plugins []map[string]any }
		if err := yaml.Unmarshal([]byte(b.String()), &doc); err != nil {
			t.Fatalf("%v:\n%s", err, b.String())
		}
		if len(doc.Plugins) != len(nodes) || (len(nodes) > 0 && (doc.Plugins[0]["node"] != "node-a" || doc.Plugins[1]["stale"] != true)) {
			t.Errorf("-o yaml:\n%s", b.String())
		}
	}
}
