// Package fleet is the fleet view: what the wasmhost daemons of every node published to the
// cluster, read from their NodeFeature objects (internal/kube) in pages and handed on one
// node at a time, so that `wasmhost cluster plugins` shows its first line before the last
// page arrives and holds one page at a time however large the fleet. Each node says when its
// daemon last renewed its object and how often it does (kube.Renewal): a node that missed
// two renewals is stale, shown beside the Node's own Ready condition. Prune deletes what is
// stale for longer: the objects of a daemon stopped for good expire.
//
// This package is part of the wasmhost command, not a stable API.
package fleet

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/client-go/dynamic"

	"github.com/wasmhost/wasmhost/internal/kube"
	"github.com/wasmhost/wasmhost/internal/publish"
	"github.com/wasmhost/wasmhost/internal/state"
)

// DefaultChunkSize is how many objects a page holds, as kubectl's --chunk-size: at about
// 3.5 KiB an object, some 2 MB a response.
const DefaultChunkSize = 500

// ErrFleet: the fleet view could not be read.
var ErrFleet = errors.New("fleet")

// Plugin is one plugin as its node's NodeFeature says.
type Plugin struct {
	Type      string            `json:"type"`
	Name      string            `json:"name"`
	State     string            `json:"state"`
	Versions  []string          `json:"versions,omitempty"`
	Socket    string            `json:"socket,omitempty"`
	Handler   string            `json:"handler,omitempty"`
	Published map[string]string `json:"published,omitempty"`
}

// Node is one node's NodeFeature as the fleet view shows it.
type Node struct {
	Name      string
	Namespace string
	// Ready is the Node's Ready condition as kubectl shows it (Ready, NotReady, Unknown),
	// NodeMissing when there is no such Node, "" when the Nodes were not read.
	Ready string
	// Renewal is when its daemon last wrote the object and how often it does; Renewed is
	// false when the object does not say (then it is never stale, nor pruned).
	Renewal kube.Renewal
	Renewed bool
	// Missed is how many renewals are missed; Stale: at least kube.StaleAfterRenewals.
	Missed int
	Stale  bool
	// Plugins are its plugins (those the filter takes), by type, name and socket.
	Plugins []Plugin
}

// NodeMissing is Node.Ready for a node that is not in the cluster.
const NodeMissing = "NotFound"

// Filter says which nodes and plugins to show. Empty fields take everything.
type Filter struct {
	// Nodes are node names (asked of the API server: only their objects are read).
	Nodes []string
	// Types and States are plugin types and states.
	Types, States []string
	// Stale: only stale nodes (true) or only fresh ones (false); nil: both.
	Stale *bool
}

// Options configures List and Prune.
type Options struct {
	// Client reads the NodeFeatures. Required.
	Client dynamic.Interface
	// Nodes reads the Nodes' Ready condition; nil: not read (Node.Ready is "").
	Nodes NodeReader
	// Namespace of the objects; "" is every namespace.
	Namespace string
	// ChunkSize is the page size; 0 takes DefaultChunkSize, a negative one reads all in
	// one response.
	ChunkSize int64
	Filter    Filter
	// PageDone, if not nil, is called by List after the nodes of each page were handed on
	// (a table's writer lines up a page's rows, then writes them).
	PageDone func() error
	// Now is the clock staleness is judged by. Defaults to time.Now.
	Now func() time.Time
}

// NodeReader returns the Ready condition of nodes (as Node.Ready).
type NodeReader interface {
	// Ready returns the Ready condition of the named nodes, or of every node when names is
	// empty; a node not in the cluster is left out.
	Ready(ctx context.Context, names []string) (map[string]string, error)
}

// Stats says what List read.
type Stats struct {
	Pages, Objects, Nodes, Plugins int
	// NodesErr is why the Nodes' Ready condition could not be read (the view goes on
	// without it); nil when it was, or not asked.
	NodesErr error
}

func (o Options) now() time.Time {
	if o.Now == nil {
		return time.Now()
	}
	return o.Now()
}

// selector is what the API server is asked for: wasmhost's objects, of the named nodes.
func (o Options) selector() (string, error) {
	sel := labels.NewSelector()
	r, err := labels.NewRequirement(kube.ManagedByLabel, selection.Equals, []string{kube.ManagedBy})
	if err != nil {
		return "", err
	}
	sel = sel.Add(*r)
	op, vals := selection.Exists, []string(nil)
	if len(o.Filter.Nodes) > 0 {
		op, vals = selection.In, o.Filter.Nodes
	}
	r, err = labels.NewRequirement(kube.NodeNameLabel, op, vals)
	if err != nil {
		return "", fmt.Errorf("%w: --node: %w", ErrFleet, err)
	}
	return sel.Add(*r).String(), nil
}

// pages calls page with each page of wasmhost's NodeFeatures.
func (o Options) pages(ctx context.Context, page func([]unstructured.Unstructured) error) (int, error) {
	sel, err := o.selector()
	if err != nil {
		return 0, err
	}
	limit := o.ChunkSize
	switch {
	case limit == 0:
		limit = DefaultChunkSize
	case limit < 0:
		limit = 0
	}
	ri := o.Client.Resource(kube.NodeFeatureResource).Namespace(o.Namespace)
	opts := metav1.ListOptions{LabelSelector: sel, Limit: limit}
	for n := 1; ; n++ {
		list, err := ri.List(ctx, opts)
		if err != nil {
			return n - 1, fmt.Errorf("%w: listing NodeFeatures (page %d): %w", ErrFleet, n, err)
		}
		if err := page(list.Items); err != nil {
			return n, err
		}
		if opts.Continue = list.GetContinue(); opts.Continue == "" {
			return n, nil
		}
	}
}

// List reads wasmhost's NodeFeatures page by page and calls each with every node the filter
// takes, in the API server's order (namespace, then name), before it reads the next page.
// An error of each ends it.
func List(ctx context.Context, o Options, each func(Node) error) (Stats, error) {
	var st Stats
	// The Nodes are read while the first page is: both before the first node is handed on.
	var ready map[string]string
	var nodesErr error
	readyDone := make(chan struct{})
	if o.Nodes != nil {
		go func() {
			defer close(readyDone)
			ready, nodesErr = o.Nodes.Ready(ctx, o.Filter.Nodes)
			if nodesErr != nil {
				ready = nil // unknown, not NotFound
			}
		}()
	} else {
		close(readyDone)
	}
	defer func() { <-readyDone }()
	now := o.now()
	pages, err := o.pages(ctx, func(items []unstructured.Unstructured) error {
		<-readyDone
		st.NodesErr = nodesErr
		for i := range items {
			st.Objects++
			n := Of(&items[i], now)
			if ready != nil {
				if n.Ready = ready[n.Name]; n.Ready == "" {
					n.Ready = NodeMissing
				}
			}
			if !o.Filter.takes(&n) {
				continue
			}
			st.Nodes++
			st.Plugins += len(n.Plugins)
			if err := each(n); err != nil {
				return err
			}
		}
		if o.PageDone != nil {
			return o.PageDone()
		}
		return nil
	})
	st.Pages = pages
	return st, err
}

// takes reports whether f takes n, and leaves in it only the plugins f takes. A node without
// plugins is taken only if no plugin type or state is asked for.
func (f Filter) takes(n *Node) bool {
	if f.Stale != nil && *f.Stale != n.Stale {
		return false
	}
	if len(f.Nodes) > 0 && !slices.Contains(f.Nodes, n.Name) {
		return false
	}
	if len(f.Types) == 0 && len(f.States) == 0 {
		return true
	}
	n.Plugins = slices.DeleteFunc(n.Plugins, func(p Plugin) bool {
		return len(f.Types) > 0 && !slices.Contains(f.Types, p.Type) || len(f.States) > 0 && !slices.Contains(f.States, p.State)
	})
	return len(n.Plugins) > 0
}

// Of returns the node a NodeFeature object describes, its staleness judged at now.
func Of(obj *unstructured.Unstructured, now time.Time) Node {
	n := Node{Name: obj.GetLabels()[kube.NodeNameLabel], Namespace: obj.GetNamespace()}
	if n.Name == "" {
		n.Name = obj.GetName()
	}
	n.Renewal, n.Renewed = kube.RenewalOf(obj)
	if n.Renewed {
		n.Missed = max(n.Renewal.Missed(now), 0)
		n.Stale = n.Renewal.Stale(now)
	}
	n.Plugins = Plugins(kube.FromNodeFeature(obj))
	return n
}

// Plugins returns the plugins a node's NodeFeature holds: the instances the daemon wrote,
// with what the handler published: an active plugin's keys are its type's attributes
// <plugin>_<key> (publish.KeyName), a standby's the instance's keys besides the daemon's own.
// They are sorted by type, name and socket.
func Plugins(n publish.Node) []Plugin {
	var out []Plugin
	for ns, in := range n.Instances {
		byPlugin := map[string]map[string]string{}
		for name, v := range n.Attributes[ns] {
			if plugin, key, ok := publish.SplitKeyName(name); ok {
				if byPlugin[plugin] == nil {
					byPlugin[plugin] = map[string]string{}
				}
				byPlugin[plugin][key] = v
			}
		}
		for _, m := range in {
			typ, ok := m[publish.InstanceType]
			if !ok {
				continue // not one of wasmhost's
			}
			p := Plugin{Type: typ, Name: m[publish.InstanceName], State: m[publish.InstanceState],
				Socket: m[publish.InstanceSocket], Handler: m[publish.InstanceHandler], Published: map[string]string{}}
			if v := m[publish.InstanceVersions]; v != "" {
				p.Versions = strings.Split(v, ",")
			}
			if p.State == string(state.StateRegistered) {
				maps.Copy(p.Published, byPlugin[p.Name])
			}
			for k, v := range m {
				if !strings.HasPrefix(k, "wasmhost.dev/") {
					p.Published[k] = v
				}
			}
			out = append(out, p)
		}
	}
	slices.SortFunc(out, func(a, b Plugin) int {
		return cmp.Or(strings.Compare(a.Type, b.Type), strings.Compare(a.Name, b.Name), strings.Compare(a.Socket, b.Socket))
	})
	return out
}
