package kube

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/wasmhost/wasmhost/internal/publish"
)

// The NodeFeature API of node-feature-discovery.
var NodeFeatureResource = schema.GroupVersionResource{Group: "nfd.k8s-sigs.io", Version: "v1alpha1", Resource: "nodefeatures"}

const (
	// NodeNameLabel names the node a NodeFeature is about; nfd-master merges every object
	// with it into the node's labels.
	NodeNameLabel = "nfd.node.kubernetes.io/node-name"
	// FieldManager is the daemon's name in the objects' managed fields.
	FieldManager = "wasmhost"
	// ManagedByLabel = ManagedBy marks the objects the daemon writes, so that the fleet view
	// lists only those (not nfd-worker's own NodeFeatures, which carry the same node label).
	ManagedByLabel = "app.kubernetes.io/managed-by"
	ManagedBy      = "wasmhost"
	// RenewTimeAnnotation is when the daemon last wrote the object (RFC 3339, microseconds,
	// its own clock): at every change and at every renewal. RenewIntervalAnnotation is how
	// often it renews it (a Go duration), so that a reader can tell a node whose daemon
	// stopped: two renewals missed (Stale). A Lease's renewTime and leaseDurationSeconds,
	// on the object itself.
	RenewTimeAnnotation     = "wasmhost.dev/renew-time"
	RenewIntervalAnnotation = "wasmhost.dev/renew-interval"
	// RenewTimeFormat is how RenewTimeAnnotation is written (metav1.MicroTime's format).
	RenewTimeFormat = "2006-01-02T15:04:05.000000Z07:00"
	// StaleAfterRenewals: an object not renewed for this many of its intervals is stale.
	StaleAfterRenewals = 2
)

// NodeFeatureResync: the object is written again this often with nothing changed, which
// repairs it if someone changed or deleted it, and renews it (RenewTimeAnnotation). A
// variable only so that tests can shorten it; not a config key (docs/configuration.md says
// why).
var NodeFeatureResync = 10 * time.Minute

// NodeFeature is a publisher sink: one NodeFeature object named after the node, in
// Namespace, labelled with NodeNameLabel, holding the labels, the attributes (one feature per
// plugin type's namespace) and the instances (one per plugin). It is written whole: created,
// then replaced (an update with the resourceVersion last seen; on a conflict it is read
// again), so what the daemon no longer publishes goes. Not server-side apply: it turns an
// empty map into null, which the CRD refuses, and a node whose plugins all went has one.
type NodeFeature struct {
	Client    dynamic.Interface
	Namespace string
	Node      string
	// Resync is how often the object is renewed. Defaults to NodeFeatureResync.
	Resync time.Duration
	// Now is the clock of RenewTimeAnnotation. Defaults to time.Now.
	Now func() time.Time

	rv     string // the object's resourceVersion as last read or written; "" to read it again
	absent bool   // Load found no object: the first Write creates it without reading again
}

func (s *NodeFeature) SinkName() string { return "nodeFeature" }
func (s *NodeFeature) Target() string   { return s.Namespace + "/" + s.Node }
func (s *NodeFeature) RefreshAfter() time.Duration {
	if s.Resync > 0 {
		return s.Resync
	}
	return NodeFeatureResync
}

func (s *NodeFeature) grant() string {
	return "get, create and update of nodefeatures.nfd.k8s-sigs.io named " + s.Node + " in namespace " + s.Namespace
}

// Load reads what the object holds; none when it does not exist.
func (s *NodeFeature) Load(ctx context.Context) (publish.Node, error) {
	obj, err := s.Client.Resource(NodeFeatureResource).Namespace(s.Namespace).Get(ctx, s.Node, metav1.GetOptions{})
	if apierrors.IsNotFound(err) && !isResourceMissing(err) {
		s.rv, s.absent = "", true
		return publish.Empty(), nil
	}
	if err != nil {
		return publish.Node{}, s.explain(err, "read")
	}
	s.rv, s.absent = obj.GetResourceVersion(), false
	return FromNodeFeature(obj), nil
}

// Write makes the object hold n: creates it, or replaces it whole. A node's first write after
// a Load that found nothing is a create alone (one request, not a read and a create: a fleet
// rolled out at once makes one request fewer per node).
func (s *NodeFeature) Write(ctx context.Context, n publish.Node) error {
	ri := s.Client.Resource(NodeFeatureResource).Namespace(s.Namespace)
	obj := ToNodeFeature(s.Namespace, s.Node, n)
	now := time.Now
	if s.Now != nil {
		now = s.Now
	}
	SetRenewed(obj, now(), s.RefreshAfter())
	for attempt := 0; ; attempt++ {
		if s.rv == "" && !s.absent {
			cur, err := ri.Get(ctx, s.Node, metav1.GetOptions{})
			switch {
			case apierrors.IsNotFound(err) && !isResourceMissing(err):
				s.absent = true
			case err != nil:
				return s.explain(err, "read")
			default:
				s.rv = cur.GetResourceVersion()
			}
		}
		if s.absent {
			s.absent = false // whatever happens, read it again next time
			created, err := ri.Create(ctx, obj, metav1.CreateOptions{FieldManager: FieldManager})
			if apierrors.IsAlreadyExists(err) && attempt == 0 {
				continue // made since it was read: read it, and update it
			}
			if err != nil {
				return s.explain(err, "create")
			}
			s.rv = created.GetResourceVersion()
			return nil
		}
		obj.SetResourceVersion(s.rv)
		updated, err := ri.Update(ctx, obj, metav1.UpdateOptions{FieldManager: FieldManager})
		if err == nil {
			s.rv = updated.GetResourceVersion()
			return nil
		}
		s.rv = "" // whatever happened, read it again next time
		if !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) || attempt > 0 {
			return s.explain(err, "update")
		}
	}
}

func (s *NodeFeature) explain(err error, verb string) error {
	if isResourceMissing(err) {
		return fmt.Errorf("%s NodeFeature %s: %w: %w", verb, s.Target(), ErrNoCRD, err)
	}
	return explain(err, verb, "NodeFeature "+s.Target(), s.grant())
}

// NoCRDHint says that the API server does not serve NodeFeatures, and what to install.
const NoCRDHint = "NodeFeature CRD nfd.k8s-sigs.io/v1alpha1 not installed: install node-feature-discovery " +
	NFDVersion + " or later (its chart installs the CRD), or without it apply " + CRDManifest

// ErrNoCRD: the API server does not serve NodeFeatures.
var ErrNoCRD = errors.New("kube: " + NoCRDHint)

// isResourceMissing tells a 404 for the resource (no CRD) from one for the object.
func isResourceMissing(err error) bool {
	var st apierrors.APIStatus
	if !apierrors.IsNotFound(err) || !asStatus(err, &st) {
		return false
	}
	d := st.Status().Details
	return d == nil || d.Name == ""
}

func asStatus(err error, st *apierrors.APIStatus) bool {
	s, ok := err.(apierrors.APIStatus)
	if ok {
		*st = s
	}
	return ok
}

// ToNodeFeature returns the NodeFeature object that says what n holds about node.
func ToNodeFeature(namespace, node string, n publish.Node) *unstructured.Unstructured {
	attrs := map[string]any{}
	for f, a := range n.Attributes {
		if len(a) == 0 {
			continue
		}
		el := map[string]any{}
		for k, v := range a {
			el[k] = v
		}
		attrs[f] = map[string]any{"elements": el}
	}
	insts := map[string]any{}
	for f, in := range n.Instances {
		if len(in) == 0 {
			continue
		}
		var el []any
		for _, m := range in {
			a := map[string]any{}
			for k, v := range m {
				a[k] = v
			}
			el = append(el, map[string]any{"attributes": a})
		}
		insts[f] = map[string]any{"elements": el}
	}
	labels := map[string]any{}
	for k, v := range n.Labels {
		labels[k] = v
	}
	// Empty maps are left out: the object is replaced whole, so a field left out is gone.
	spec := map[string]any{}
	if len(labels) > 0 {
		spec["labels"] = labels
	}
	features := map[string]any{}
	if len(attrs) > 0 {
		features["attributes"] = attrs
	}
	if len(insts) > 0 {
		features["instances"] = insts
	}
	if len(features) > 0 {
		spec["features"] = features
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": NodeFeatureResource.GroupVersion().String(),
		"kind":       "NodeFeature",
		"metadata": map[string]any{
			"name":      node,
			"namespace": namespace,
			"labels":    map[string]any{NodeNameLabel: node, ManagedByLabel: ManagedBy},
		},
		"spec": spec,
	}}
}

// SetRenewed says on obj that it was written at, and is renewed every interval.
func SetRenewed(obj *unstructured.Unstructured, at time.Time, every time.Duration) {
	a := obj.GetAnnotations()
	if a == nil {
		a = map[string]string{}
	}
	a[RenewTimeAnnotation] = at.UTC().Format(RenewTimeFormat)
	a[RenewIntervalAnnotation] = every.String()
	obj.SetAnnotations(a)
}

// Renewal is when an object was last renewed, and how often it is.
type Renewal struct {
	At    time.Time
	Every time.Duration
}

// RenewalOf reads obj's renewal; ok is false when its annotations are missing or unreadable
// (an object written by a daemon before they existed, or edited by hand).
func RenewalOf(obj *unstructured.Unstructured) (r Renewal, ok bool) {
	a := obj.GetAnnotations()
	at, err := time.Parse(time.RFC3339Nano, a[RenewTimeAnnotation])
	if err != nil {
		return Renewal{}, false
	}
	every, err := time.ParseDuration(a[RenewIntervalAnnotation])
	if err != nil || every <= 0 {
		return Renewal{}, false
	}
	return Renewal{At: at, Every: every}, true
}

// Missed returns how many whole renewals are missed at now (0 when the last is not overdue).
func (r Renewal) Missed(now time.Time) int {
	return int(now.Sub(r.At) / r.Every)
}

// Stale reports whether StaleAfterRenewals renewals are missed at now: the daemon stopped,
// or cannot reach the API server.
func (r Renewal) Stale(now time.Time) bool { return r.Missed(now) >= StaleAfterRenewals }

// FromNodeFeature reads what a NodeFeature object holds.
func FromNodeFeature(obj *unstructured.Unstructured) publish.Node {
	n := publish.Empty()
	if l, ok, _ := unstructured.NestedStringMap(obj.Object, "spec", "labels"); ok {
		maps.Copy(n.Labels, l)
	}
	attrs, _, _ := unstructured.NestedMap(obj.Object, "spec", "features", "attributes")
	for f := range attrs {
		if el, ok, _ := unstructured.NestedStringMap(attrs, f, "elements"); ok {
			n.Attributes[f] = el
		}
	}
	insts, _, _ := unstructured.NestedMap(obj.Object, "spec", "features", "instances")
	for f := range insts {
		list, _, _ := unstructured.NestedSlice(insts, f, "elements")
		in := []map[string]string{}
		for _, e := range list {
			m, _ := e.(map[string]any)
			if a, ok, _ := unstructured.NestedStringMap(m, "attributes"); ok {
				in = append(in, a)
			}
		}
		n.Instances[f] = in
	}
	return n
}
