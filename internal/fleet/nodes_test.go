package fleet

import (
	"context"
	"encoding/json"
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"k8s.io/client-go/rest"
)

// tableServer answers the Nodes' table as kube-apiserver does: pages of two rows, a Node
// by name, 404 for one it does not have; it records the requests.
func tableServer(t *testing.T, status map[string]string, order []string) (*NodeTable, *[]string) {
	var asked []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked = append(asked, r.URL.RequestURI())
		if !strings.Contains(r.Header.Get("Accept"), "as=Table") || r.URL.Query().Get("includeObject") != "None" {
			http.Error(w, "not a table request", http.StatusBadRequest)
			return
		}
		var names []string
		next := ""
		if name, ok := strings.CutPrefix(r.URL.Path, "/api/v1/nodes/"); ok {
			if _, ok := status[name]; !ok {
				w.WriteHeader(http.StatusNotFound)
				_ = json.NewEncoder(w).Encode(map[string]any{"kind": "Status", "message": "nodes \"" + name + "\" not found"})
				return
			}
			names = []string{name}
		} else {
			from := 0
			if c := r.URL.Query().Get("continue"); c != "" {
				from = strings.Count(c, "x")
			}
			names = order[from:min(from+2, len(order))]
			if from+2 < len(order) {
				next = strings.Repeat("x", from+2)
			}
		}
		var rows []map[string]any
		for _, n := range names {
			rows = append(rows, map[string]any{"cells": []any{n, status[n], "<none>", "5d", "v1.37.2"}})
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": map[string]any{"continue": next},
			"columnDefinitions": []map[string]any{{"name": "Name"}, {"name": "Status"}, {"name": "Roles"}, {"name": "Age"}, {"name": "Version"}}, "rows": rows})
	}))
	t.Cleanup(srv.Close)
	nt, err := NewNodeTable(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	return nt, &asked
}

// TestNodeTable: the Ready condition is the first word of the table's STATUS, read in pages
// for the fleet, one request a node for a few named ones; a node not there is left out.
func TestNodeTable(t *testing.T) {
	status := map[string]string{"a": "Ready", "b": "Ready,SchedulingDisabled", "c": "NotReady", "d": "Unknown", "e": "Ready"}
	nt, asked := tableServer(t, status, []string{"a", "b", "c", "d", "e"})
	nt.ChunkSize = 2
	got, err := nt.Ready(context.Background(), nil)
	want := map[string]string{"a": "Ready", "b": "Ready", "c": "NotReady", "d": "Unknown", "e": "Ready"}
	if err != nil || !maps.Equal(got, want) || len(*asked) != 3 {
		t.Errorf("all nodes: %v (%v) in %d requests %v, want %v in 3", got, err, len(*asked), *asked, want)
	}
	*asked = nil
	got, err = nt.Ready(context.Background(), []string{"c", "gone"})
	if err != nil || !maps.Equal(got, map[string]string{"c": "NotReady"}) || len(*asked) != 2 {
		t.Errorf("named nodes: %v (%v) in %v", got, err, *asked)
	}
}
