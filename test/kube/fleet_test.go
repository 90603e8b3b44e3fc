package kube_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wasmhost/wasmhost/internal/kube"
	"github.com/wasmhost/wasmhost/internal/publish"
	"github.com/wasmhost/wasmhost/internal/state"
)

// The fleet simulation (issue 29, docs/scale.md): N node publishers in this process, each the
// daemon's own publishing code (kube.RESTConfig from a kubeconfig with the node's own token,
// kube.Dynamic, the kube.NodeFeature sink, the kube.Recorder of Events, publish.Publisher
// over a state.Store), each with a connection of its own, against the real kube-apiserver and
// etcd with the Node authorizer, NodeRestriction and publish.yaml's policy. Only the plugins
// are simulated: they are put in each node's store as the registrar puts them.
//
//	cd test/kube && WASMHOST_FLEET=1000 go test -run '^TestFleet$' -v -timeout 40m
//
// runs 1,000 nodes through the phases docs/scale.md reports (WASMHOST_FLEET_STEADY shortens the
// steady state, 11m by default: one refresh of every node); unset, 20 nodes run short phases
// and the test asserts the write budget in counts.

// fleetPlan is how many nodes TestFleet runs, and how long its phases last.
type fleetPlan struct {
	nodes int
	// idle: before any node starts (the API server's own CPU). rollout: every node starts
	// within it, at a random time. steady: nothing changes.
	// churn: a plugin per node comes and goes every churnEvery. outage: the API server is
	// stopped for it.
	idle, rollout, steady, churn, churnEvery, outage time.Duration
}

func fleetPlanOf(t *testing.T) fleetPlan {
	t.Helper()
	p := fleetPlan{nodes: 20, idle: 3 * time.Second, rollout: 5 * time.Second, steady: 15 * time.Second, churn: 12 * time.Second, churnEvery: 4 * time.Second, outage: 5 * time.Second}
	if v := os.Getenv("WASMHOST_FLEET"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("WASMHOST_FLEET=%q: want a number of nodes", v)
		}
		p = fleetPlan{nodes: n, idle: 30 * time.Second, rollout: time.Minute, steady: 11 * time.Minute, churn: 5 * time.Minute, churnEvery: time.Minute, outage: time.Minute}
	}
	if v := os.Getenv("WASMHOST_FLEET_STEADY"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("WASMHOST_FLEET_STEADY=%q: %v", v, err)
		}
		p.steady = d
	}
	return p
}

// The plugin types the simulated nodes publish, as an operator's config would name them.
var fleetRules = map[string]publish.Rules{
	"CSIPlugin":    {Namespace: "csi.wasmhost.dev", Labels: []string{"node_id"}, Attributes: []string{"topology"}},
	"DevicePlugin": {Namespace: "devices.wasmhost.dev", Labels: []string{"model"}, Attributes: []string{"*"}},
}

const (
	churnSocket = "/var/lib/kubelet/plugins_registry/flaky.example.com-reg.sock"
	// outageSocket's plugin goes during the outage: the change the repair writes.
	outageSocket = "/var/lib/kubelet/device-plugins/sriov.sock"
	// fleetBase is how many plugins a node has when nothing churns.
	fleetBase = 4
)

// simNode is one node's publisher.
type simNode struct {
	name    string
	store   *state.Store
	counter *reqCounter
	pub     *publish.Publisher
	changed atomic.Int64 // when the churn last changed its plugins, in Unix nanoseconds
}

func (n *simNode) register(socket, typ, name string, published map[string]string) {
	n.store.Actual().Add(state.Plugin{Socket: socket, Type: typ, Name: name, Versions: []string{"1.0.0"}, Published: published})
	n.store.SetStatus(state.Status{Path: socket, State: state.StateRegistered, PluginType: typ, PluginName: name, PluginVersions: []string{"1.0.0"}})
}

// lose: the plugin's server stopped answering and its socket stays, as the reconciler says.
func (n *simNode) lose(socket, typ, name string) {
	n.store.Actual().Remove(socket)
	n.store.SetStatus(state.Status{Path: socket, State: state.StateFailing, PluginType: typ, PluginName: name, PluginVersions: []string{"1.0.0"},
		LastError: "plugin gone: its server stopped answering and its socket file stays; registered again when something answers at " + socket})
}

// remove: the socket is gone.
func (n *simNode) remove(socket string) {
	n.store.Actual().Remove(socket)
	n.store.DeleteStatus(socket, time.Now())
}

// newSimNode makes node i's store with its plugins: two CSI drivers and two device plugins,
// about 2 KiB of NodeFeature.
func newSimNode(i int, name string, fleet *perSecond) *simNode {
	n := &simNode{name: name, store: state.New(), counter: &reqCounter{by: map[string]int{}, fleet: fleet}}
	n.register("/var/lib/kubelet/plugins_registry/csi.example.com-reg.sock", "CSIPlugin", "csi.example.com",
		map[string]string{"node_id": name, "topology": fmt.Sprintf("topology.kubernetes.io/zone=zone-%d", i%3)})
	n.register("/var/lib/kubelet/plugins_registry/nfs.csi.k8s.io-reg.sock", "CSIPlugin", "nfs.csi.k8s.io", map[string]string{"node_id": name})
	n.register("/var/lib/kubelet/device-plugins/gpu.sock", "DevicePlugin", "gpu.example.com",
		map[string]string{"model": "a100", "memory": "80Gi", "count": "8", "driver": "550.54.15"})
	n.register(outageSocket, "DevicePlugin", "sriov.example.com", map[string]string{"model": "cx7", "vfs": "16"})
	return n
}

// start runs n's publisher and recorder as the daemon does, until ctx is done; wg is done
// when they returned.
func (n *simNode) start(ctx context.Context, wg *sync.WaitGroup, kubeconfig string) error {
	rc, err := kube.RESTConfig(kubeconfig)
	if err != nil {
		return err
	}
	// A connection of its own, as each daemon has: a Dial of its own keeps client-go from
	// sharing one transport among the nodes.
	rc.Dial = (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	rc.Wrap(n.counter.wrap)
	client, err := kube.Dynamic(rc)
	if err != nil {
		return err
	}
	rec := kube.NewRecorder(client, n.name, nil)
	n.pub, err = publish.New(publish.Config{
		Store:  n.store,
		Rules:  fleetRules,
		Sinks:  []publish.Sink{&kube.NodeFeature{Client: client, Namespace: "wasmhost", Node: n.name}},
		Events: rec,
	})
	if err != nil {
		return err
	}
	wg.Go(func() { _ = n.pub.Run(ctx) })
	wg.Go(func() { _ = rec.Run(ctx) })
	return nil
}

// holds reports whether n's sink wrote what it has now: instances plugins, no failure.
func (n *simNode) holds(instances int) bool {
	if n.pub == nil {
		return false
	}
	st := n.pub.Status()
	return len(st.Sinks) == 1 && st.Sinks[0].State == publish.SinkOK && st.Sinks[0].Instances == instances
}

// wroteAfter reports whether n's sink wrote, and holds it, after at.
func (n *simNode) wroteAfter(at time.Time) bool {
	st := n.pub.Status()
	return len(st.Sinks) == 1 && st.Sinks[0].State == publish.SinkOK && st.Sinks[0].LastWrite.After(at)
}

// reqCounter counts a node's requests as its client makes them. The API server's own count
// is the evidence; this one also sees what the outage refused, and the fleet's peak second.
type reqCounter struct {
	mu     sync.Mutex
	by     map[string]int // "PUT nodefeatures"
	failed int            // not answered, or answered 5xx or 429
	fleet  *perSecond
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func (c *reqCounter) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(r *http.Request) (*http.Response, error) {
		resp, err := rt.RoundTrip(r)
		c.mu.Lock()
		c.by[r.Method+" "+resourceOf(r.URL.Path)]++
		if err != nil || resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests {
			c.failed++
		}
		c.mu.Unlock()
		c.fleet.add(time.Now())
		return resp, err
	})
}

func (c *reqCounter) snapshot() (map[string]int, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]int, len(c.by))
	for k, v := range c.by {
		out[k] = v
	}
	return out, c.failed
}

// resourceOf returns the resource of a namespaced API path (/apis/g/v/namespaces/ns/r/...).
func resourceOf(path string) string {
	parts := strings.Split(path, "/")
	for i, p := range parts {
		if p == "namespaces" && i+2 < len(parts) {
			return parts[i+2]
		}
	}
	return path
}

// perSecond counts the fleet's requests in each second.
type perSecond struct {
	mu sync.Mutex
	n  map[int64]int
}

func (p *perSecond) add(at time.Time) {
	p.mu.Lock()
	p.n[at.Unix()]++
	p.mu.Unlock()
}

// peak is the most requests in one whole second of [from, to).
func (p *perSecond) peak(from, to time.Time) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	most := 0
	for s := from.Unix() + 1; s < to.Unix(); s++ { // whole seconds only
		most = max(most, p.n[s])
	}
	return most
}

// fleet is the simulated nodes and what is measured of them.
type fleet struct {
	t      *testing.T
	c      *cluster
	plan   fleetPlan
	nodes  []*simNode
	perSec *perSecond
	ctx    context.Context
	wg     sync.WaitGroup
	phases []phase
}

// newFleet makes the nodes, their Node objects, pods and tokens (bound to the pods, so that
// the API server knows their node) and their kubeconfigs.
func newFleet(t *testing.T, c *cluster, plan fleetPlan) (*fleet, []string) {
	f := &fleet{t: t, c: c, plan: plan, perSec: &perSecond{n: map[int64]int{}}}
	kubeconfigs := make([]string, plan.nodes)
	errs := make(chan error, plan.nodes)
	next := make(chan int)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			cs := c.clientset()
			for i := range next {
				token, err := c.newNodeToken(cs, "wasmhost", fleetNodeName(i))
				if err != nil {
					errs <- fmt.Errorf("node %d: %w", i, err)
					continue
				}
				kubeconfigs[i] = token
			}
		})
	}
	for i := range plan.nodes {
		f.nodes = append(f.nodes, newSimNode(i, fleetNodeName(i), f.perSec))
		next <- i
	}
	close(next)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for i, token := range kubeconfigs {
		kubeconfigs[i] = c.kubeconfig(token)
	}
	ctx, cancel := context.WithCancel(context.Background())
	f.ctx = ctx
	t.Cleanup(func() { cancel(); f.wg.Wait() })
	return f, kubeconfigs
}

func fleetNodeName(i int) string { return fmt.Sprintf("node-%05d", i) }

// waitAll waits until every node holds instances plugins in its NodeFeature.
func (f *fleet) waitAll(what string, instances int) {
	f.t.Helper()
	waitFor(f.t, what, func() bool {
		for _, n := range f.nodes {
			if !n.holds(instances) {
				return false
			}
		}
		return true
	})
}

// jittered runs do for every node, each at a random time within d, and returns when all ran.
func (f *fleet) jittered(d time.Duration, do func(i int, n *simNode)) {
	var wg sync.WaitGroup
	for i, n := range f.nodes {
		wait := time.Duration(rand.Int64N(int64(d)))
		wg.Go(func() {
			time.Sleep(wait)
			do(i, n)
		})
	}
	wg.Wait()
}

// TestFleet: N node publishers through a rollout, a steady state, churn and an outage
// (docs/scale.md); the requests the API server counted in each phase are within the write
// budget, and every node's object holds its state at the end.
func TestFleet(t *testing.T) {
	plan := fleetPlanOf(t)
	c := startCluster(t)
	c.setUp()
	f, kubeconfigs := newFleet(t, c, plan)
	t.Logf("%d nodes: Node objects, pods and tokens made", plan.nodes)

	f.measure("idle (no node started)", true, func() { time.Sleep(plan.idle) })
	rollout := f.measure("rollout", true, func() {
		var mu sync.Mutex
		var failed []error
		f.jittered(plan.rollout, func(i int, n *simNode) {
			if err := n.start(f.ctx, &f.wg, kubeconfigs[i]); err != nil {
				mu.Lock()
				failed = append(failed, fmt.Errorf("%s: %w", n.name, err))
				mu.Unlock()
			}
		})
		for _, err := range failed {
			t.Fatal(err)
		}
		f.waitAll("every node to publish its plugins", fleetBase)
	})
	// The steady state is a window of time in which nothing changes: what is written in it
	// is the refresh, and nothing else.
	steady := f.measure("steady state", true, func() { time.Sleep(plan.steady) })
	churn, comes, losses := f.churn()
	t.Logf("churn: plugins came %d times and were lost %d times", comes, losses)
	_, repair := f.outage()
	f.report()
	f.checkBudget(rollout, steady, churn, repair, comes, losses, steady.began.Sub(rollout.began))
}
