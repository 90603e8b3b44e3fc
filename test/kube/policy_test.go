package kube_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/wasmhost/wasmhost/internal/kube"
	"github.com/wasmhost/wasmhost/internal/publish"
)

func nodeFeature(name, nodeLabel string) *unstructured.Unstructured {
	n := publish.Empty()
	n.Labels["csi.wasmhost.dev/d"] = "true"
	obj := kube.ToNodeFeature("wasmhost", name, n)
	obj.SetLabels(map[string]string{kube.NodeNameLabel: nodeLabel})
	return obj
}

func nodeEvent(node string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "events.k8s.io/v1", "kind": "Event",
		"metadata":            map[string]any{"name": fmt.Sprintf("%s.%x", node, time.Now().UnixNano()), "namespace": "default"},
		"eventTime":           time.Now().UTC().Format("2006-01-02T15:04:05.000000Z07:00"),
		"regarding":           map[string]any{"apiVersion": "v1", "kind": "Node", "name": node, "uid": node},
		"reportingController": kube.ReportingController, "reportingInstance": "wasmhost-test",
		"action": "Register", "reason": publish.ReasonPluginRejected, "note": "test", "type": "Warning",
	}}
}

// TestOnlyItsOwnNode: with the Roles and the ValidatingAdmissionPolicy of
// examples/kubernetes/publish.yaml, node A's token writes node A's NodeFeature and Events
// about node A, and is refused everything of node B's, old object and new, and nodes.
func TestOnlyItsOwnNode(t *testing.T) {
	c := startCluster(t)
	c.setUp()
	ctx := context.Background()
	a := c.as(c.nodeToken("wasmhost", "node-a"))
	nf := a.Resource(nodeFeatures).Namespace("wasmhost")
	create := func(obj *unstructured.Unstructured) error {
		_, err := nf.Create(ctx, obj, metav1.CreateOptions{})
		return err
	}
	own := &kube.NodeFeature{Client: a, Namespace: "wasmhost", Node: "node-a"}
	n := publish.Empty()
	n.Labels["csi.wasmhost.dev/d"] = "true"
	if err := own.Write(ctx, n); err != nil {
		t.Fatalf("node A creating its own NodeFeature: %v", err)
	}
	n.Labels["csi.wasmhost.dev/e"] = "true"
	if err := own.Write(ctx, n); err != nil {
		t.Fatalf("node A updating its own NodeFeature: %v", err)
	}
	if _, err := a.Resource(kube.EventResource).Namespace("default").Create(ctx, nodeEvent("node-a"), metav1.CreateOptions{}); err != nil {
		t.Fatalf("node A recording an Event on its own Node: %v", err)
	}

	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"NodeFeature named after node B", (&kube.NodeFeature{Client: a, Namespace: "wasmhost", Node: "node-b"}).Write(ctx, n), "writes only the NodeFeature named after its own node (node-a)"},
		{"NodeFeature labelled for node B", create(nodeFeature("node-a2", "node-b")), "writes only the NodeFeature named after its own node (node-a)"},
		{"its own NodeFeature relabelled for node B", func() error {
			obj, err := nf.Get(ctx, "node-a", metav1.GetOptions{})
			if err != nil {
				return err
			}
			obj.SetLabels(map[string]string{kube.NodeNameLabel: "node-b"})
			_, err = nf.Update(ctx, obj, metav1.UpdateOptions{})
			return err
		}(), "labelled nfd.node.kubernetes.io/node-name=node-a"},
		{"Event about node B", func() error {
			_, err := a.Resource(kube.EventResource).Namespace("default").Create(ctx, nodeEvent("node-b"), metav1.CreateOptions{})
			return err
		}(), "records Events only about its own Node (node-a)"},
		{"a node's labels", func() error {
			_, err := c.as(c.nodeToken("wasmhost", "node-a")).Resource(corev1.SchemeGroupVersion.WithResource("nodes")).Patch(ctx, "node-a",
				types.MergePatchType, []byte(`{"metadata":{"labels":{"csi.wasmhost.dev/d":"true"}}}`), metav1.PatchOptions{})
			return err
		}(), "forbidden"},
		{"a NodeFeature in another namespace", (&kube.NodeFeature{Client: a, Namespace: "default", Node: "node-a"}).Write(ctx, n), "forbidden"},
		{"deleting its NodeFeature", nf.Delete(ctx, "node-a", metav1.DeleteOptions{}), "forbidden"},
	} {
		if !contains(tc.err, tc.want) {
			t.Errorf("%s: got %v, want a refusal saying %q", tc.name, tc.err, tc.want)
		}
	}

	// An object that claims node B (its label), updated by node A to claim node A: the new
	// object alone would pass; the old one says it is node B's.
	admin := c.dynamic().Resource(nodeFeatures).Namespace("wasmhost")
	claimed := nodeFeature("node-c", "node-b")
	if _, err := admin.Create(ctx, claimed, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// node-c's daemon may not take it over: named after node-c, but labelled for node B.
	err := (&kube.NodeFeature{Client: c.as(c.nodeToken("wasmhost", "node-c")), Namespace: "wasmhost", Node: "node-c"}).Write(ctx, n)
	if !contains(err, "updates only the NodeFeature of its own node (node-c)") {
		t.Errorf("updating an object whose old self names another node: %v", err)
	}
}

// TestEventSeries: like Events recorded by node A's daemon are one Event whose series the
// API server takes (a patch, through the Role and the policy's update checks).
func TestEventSeries(t *testing.T) {
	c := startCluster(t)
	c.setUp()
	r := kube.NewRecorder(c.as(c.nodeToken("wasmhost", "node-a")), "node-a", nil)
	r.Flush = 100 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- r.Run(ctx) }()
	for range 3 {
		r.Record(publish.Event{Warning: true, Reason: publish.ReasonPluginLost, Action: "Watch", Note: "plugin csi.example.com lost"})
	}
	waitFor(t, "one Event with a series of 3", func() bool {
		list, err := c.dynamic().Resource(kube.EventResource).Namespace("default").List(ctx, metav1.ListOptions{})
		if err != nil || len(list.Items) != 1 {
			return false
		}
		count, _, _ := unstructured.NestedInt64(list.Items[0].Object, "series", "count")
		return count == 3
	})
	if st := r.Stats(); st.Failed != 0 {
		t.Errorf("stats %+v", st)
	}
	cancel()
	<-done

	// The daemon started again on node A records the same: the Event's series grows to 4
	// (read and written with patches the Role and the policy allow), no second Event.
	again := kube.NewRecorder(c.as(c.nodeToken("wasmhost", "node-a")), "node-a", nil)
	ctx2, cancel2 := context.WithCancel(context.Background())
	done2 := make(chan error)
	go func() { done2 <- again.Run(ctx2) }()
	defer func() { cancel2(); <-done2 }()
	again.Record(publish.Event{Warning: true, Reason: publish.ReasonPluginLost, Action: "Watch", Note: "plugin csi.example.com lost"})
	waitFor(t, "the event recorded after the restart", func() bool { st := again.Stats(); return st.Recorded+st.Failed > 0 })
	if st := again.Stats(); st.Failed != 0 {
		t.Fatalf("after the restart: stats %+v", st)
	}
	list, err := c.dynamic().Resource(kube.EventResource).Namespace("default").List(ctx2, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 {
		t.Fatalf("after the restart: %d Events, want 1", len(list.Items))
	}
	if count, _, _ := unstructured.NestedInt64(list.Items[0].Object, "series", "count"); count != 4 {
		t.Errorf("after the restart: series count %d, want 4", count)
	}
}
