package kube_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/wasmhost/wasmhost/internal/kube"
	"github.com/wasmhost/wasmhost/internal/publish"
)

// phase is what was measured over one phase of the fleet simulation.
type phase struct {
	name         string
	began, ended time.Time
	// server: requests the API server counted (apiserver_request_total), by "VERB resource",
	// nodefeatures and events only; nil when it was down.
	server map[string]float64
	// client: requests the nodes' clients made, by "METHOD resource"; failed of them (refused
	// or answered with an error); nodeMax the most of one node; peak the fleet's most in one
	// second.
	client                map[string]int
	failed, nodeMax, peak int
	apiCPU, etcdCPU       float64 // seconds of CPU (user+system); NaN when not measured
	etcdRevs              int64   // etcd revisions: the writes etcd stored, the API server's own included
}

// mark is the counts at one moment.
type mark struct {
	at              time.Time
	server          map[string]float64
	client          []map[string]int
	failed          []int
	apiPid          int
	apiCPU, etcdCPU float64
	etcdRev         int64
}

// mark reads the counts now; the API server's only when up.
func (f *fleet) mark(up bool) mark {
	f.t.Helper()
	m := mark{at: time.Now(), apiCPU: math.NaN()}
	for _, n := range f.nodes {
		by, failed := n.counter.snapshot()
		m.client, m.failed = append(m.client, by), append(m.failed, failed)
	}
	if up {
		var err error
		if m.server, err = f.c.requestCounts(); err != nil {
			f.t.Fatal(err)
		}
		m.apiPid = f.c.apiserver.cmd.Process.Pid
		m.apiCPU = cpuSeconds(m.apiPid)
	}
	m.etcdCPU = cpuSeconds(f.c.etcd.cmd.Process.Pid)
	m.etcdRev = f.c.etcdRevision()
	return m
}

// measure runs a phase and records what it cost.
func (f *fleet) measure(name string, up bool, run func()) phase {
	a := f.mark(up)
	run()
	return f.record(name, a, f.mark(up))
}

func (f *fleet) record(name string, a, b mark) phase {
	p := phase{name: name, began: a.at, ended: b.at, client: map[string]int{}, etcdCPU: b.etcdCPU - a.etcdCPU,
		etcdRevs: b.etcdRev - a.etcdRev, apiCPU: math.NaN(), peak: f.perSec.peak(a.at, b.at)}
	if a.server != nil && b.server != nil {
		p.server = map[string]float64{}
		for k, v := range b.server {
			if d := v - a.server[k]; d > 0 {
				p.server[k] = d
			}
		}
	}
	if a.apiPid != 0 && a.apiPid == b.apiPid {
		p.apiCPU = b.apiCPU - a.apiCPU
	}
	for i := range f.nodes {
		node := 0
		for k, v := range b.client[i] {
			p.client[k] += v - a.client[i][k]
			node += v - a.client[i][k]
		}
		p.nodeMax = max(p.nodeMax, node)
		p.failed += b.failed[i] - a.failed[i]
	}
	f.phases = append(f.phases, p)
	return p
}

// isWrite: a verb or method that writes (the API server's metrics name create POST, and
// some versions CREATE).
func isWrite(verb string) bool {
	switch verb {
	case "POST", "CREATE", "PUT", "UPDATE", "PATCH", "APPLY", "DELETE":
		return true
	}
	return false
}

// count sums the requests of counts ("VERB resource") on resource, writes or reads: all of
// them; with refused, those the API server refused (5xx, 429: "VERB resource refused").
func count[V int | float64](counts map[string]V, resource string, writes, refused bool) int {
	n := 0
	for k, v := range counts {
		f := strings.Fields(k)
		if f[1] == resource && isWrite(f[0]) == writes && (len(f) == 3) == refused {
			n += int(v)
		}
	}
	return n
}

// churn: a plugin per node comes and goes every plan.churnEvery (registered, then lost half a
// period later: its server stopped and its socket stays), each node at its own offset. It
// returns the phase and how many times plugins came and were lost.
func (f *fleet) churn() (phase, int, int) {
	var comes, losses atomic.Int64
	every := f.plan.churnEvery
	p := f.measure("churn", true, func() {
		end := time.Now().Add(f.plan.churn)
		var wg sync.WaitGroup
		for _, n := range f.nodes {
			at := time.Now().Add(time.Duration(rand.Int64N(int64(every))))
			wg.Go(func() {
				for ; sleepUntil(at, end); at = at.Add(every) {
					n.register(churnSocket, "CSIPlugin", "flaky.example.com", map[string]string{"node_id": n.name})
					n.changed.Store(time.Now().UnixNano())
					comes.Add(1)
					if !sleepUntil(at.Add(every/2), end) {
						return
					}
					n.lose(churnSocket, "CSIPlugin", "flaky.example.com")
					n.changed.Store(time.Now().UnixNano())
					losses.Add(1)
				}
			})
		}
		wg.Wait()
		// The phase ends when every node wrote its last change.
		waitFor(f.t, "every node to write its last change", func() bool {
			for _, n := range f.nodes {
				if !n.wroteAfter(time.Unix(0, n.changed.Load()).Add(publish.DefaultCoalesce / 2)) {
					return false
				}
			}
			return true
		})
	})
	for _, n := range f.nodes {
		n.remove(churnSocket)
	}
	f.waitAll("every node to publish its plugins without the churned one", fleetBase)
	return p, int(comes.Load()), int(losses.Load())
}

// sleepUntil sleeps until at and returns true, or returns false at once if at is past end.
func sleepUntil(at, end time.Time) bool {
	if at.After(end) {
		return false
	}
	time.Sleep(time.Until(at))
	return true
}

// outage stops the API server for plan.outage; while it is down a plugin of each node goes
// (its socket removed), at a random time in the first half. Then the API server is started
// again, and every node repairs its object. It returns the outage and the repair.
func (f *fleet) outage() (phase, phase) {
	a := f.mark(true)
	f.c.apiserver.stop()
	f.jittered(f.plan.outage/2, func(_ int, n *simNode) { n.remove(outageSocket) })
	time.Sleep(time.Until(a.at.Add(f.plan.outage))) // the outage is this long
	r := f.mark(false)
	down := f.record("outage (API server stopped)", a, r)
	// The repair begins as the API server starts: the nodes' retries reach it before it says
	// it is ready. It counts from its start, so all it counted is the repair's; its CPU is
	// counted from when it is ready, without its own start.
	f.c.startAPIServer()
	ready := f.mark(true)
	r.server, r.apiPid, r.apiCPU = map[string]float64{}, ready.apiPid, ready.apiCPU
	f.waitAll("every node to repair its NodeFeature", fleetBase-1)
	return down, f.record("repair (after the outage)", r, f.mark(true))
}

// requestCounts reads the API server's apiserver_request_total of nodefeatures and events.
func (c *cluster) requestCounts() (map[string]float64, error) {
	body, err := c.get(c.admin.Host+"/metrics", true)
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	for _, s := range promSamples(body, "apiserver_request_total") {
		if r := s.labels["resource"]; r == "nodefeatures" || r == "events" {
			out[s.labels["verb"]+" "+r] += s.value
			if code := s.labels["code"]; strings.HasPrefix(code, "5") || code == "429" { // busy, or etcd slow
				out[s.labels["verb"]+" "+r+" refused"] += s.value
			}
		}
	}
	return out, nil
}

var insecureHTTP = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}

// get returns the body of url, as the admin when admin.
func (c *cluster) get(url string, admin bool) (string, error) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	if admin {
		req.Header.Set("Authorization", "Bearer "+adminToken)
	}
	resp, err := insecureHTTP.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return string(b), err
}

type promSample struct {
	labels map[string]string
	value  float64
}

var promLabel = regexp.MustCompile(`(\w+)="([^"]*)"`)

// promSamples returns the samples of metric name in a Prometheus text exposition.
func promSamples(body, name string) []promSample {
	var out []promSample
	for line := range strings.SplitSeq(body, "\n") {
		rest, ok := strings.CutPrefix(line, name)
		if !ok || (rest != "" && rest[0] != '{' && rest[0] != ' ') {
			continue
		}
		s := promSample{labels: map[string]string{}}
		if strings.HasPrefix(rest, "{") {
			end := strings.LastIndex(rest, "}")
			for _, m := range promLabel.FindAllStringSubmatch(rest[:end], -1) {
				s.labels[m[1]] = m[2]
			}
			rest = rest[end+1:]
		}
		v, err := strconv.ParseFloat(strings.Fields(rest)[0], 64)
		if err == nil {
			s.value = v
			out = append(out, s)
		}
	}
	return out
}

// cpuSeconds is the user and system CPU time of process pid (/proc/<pid>/stat, in ticks of
// 1/100 s, Linux's USER_HZ); NaN if it cannot be read.
func cpuSeconds(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return math.NaN()
	}
	fields := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	utime, _ := strconv.ParseFloat(fields[11], 64)
	stime, _ := strconv.ParseFloat(fields[12], 64)
	return (utime + stime) / 100
}

// etcdCall posts body to etcd's JSON gateway at path and decodes the answer into out.
func (c *cluster) etcdCall(path string, body, out any) {
	c.t.Helper()
	b, _ := json.Marshal(body)
	resp, err := insecureHTTP.Post(c.etcdURL+path, "application/json", bytes.NewReader(b))
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		c.t.Fatalf("etcd %s: %s: %s", path, resp.Status, raw)
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			c.t.Fatalf("etcd %s: %v: %s", path, err, raw)
		}
	}
}

// etcdRevision is etcd's current revision.
func (c *cluster) etcdRevision() int64 {
	var r struct {
		Header struct {
			Revision string `json:"revision"`
		} `json:"header"`
	}
	c.etcdCall("/v3/kv/range", map[string]any{"key": "Lw==", "count_only": true}, &r) // "/"
	rev, _ := strconv.ParseInt(r.Header.Revision, 10, 64)
	return rev
}

// etcdSize returns etcd's database size and the part of it in use.
func (c *cluster) etcdSize() (total, inUse float64) {
	c.t.Helper()
	body, err := c.get(c.etcdURL+"/metrics", false)
	if err != nil {
		c.t.Fatal(err)
	}
	for _, s := range promSamples(body, "etcd_mvcc_db_total_size_in_bytes") {
		total = s.value
	}
	for _, s := range promSamples(body, "etcd_mvcc_db_total_size_in_use_in_bytes") {
		inUse = s.value
	}
	return total, inUse
}

// etcdCompact compacts etcd's history up to now and defragments it.
func (c *cluster) etcdCompact() {
	c.etcdCall("/v3/kv/compaction", map[string]any{"revision": c.etcdRevision(), "physical": true}, nil)
	c.etcdCall("/v3/maintenance/defragment", map[string]any{}, nil)
}

// objects lists the NodeFeature objects as the admin, in pages, and checks that every node
// has one with instances plugins; it returns their count and their size in JSON.
func (f *fleet) objects(instances int) (n, size int) {
	f.t.Helper()
	ri := f.c.dynamic().Resource(nodeFeatures).Namespace("wasmhost")
	opts := metav1.ListOptions{Limit: 500}
	seen := map[string]bool{}
	for {
		list, err := ri.List(context.Background(), opts)
		if err != nil {
			f.t.Fatal(err)
		}
		for _, o := range list.Items {
			b, _ := o.MarshalJSON()
			size += len(b)
			got := 0
			for _, in := range kube.FromNodeFeature(&o).Instances {
				got += len(in)
			}
			if got != instances {
				f.t.Errorf("NodeFeature %s holds %d plugins, want %d", o.GetName(), got, instances)
			}
			seen[o.GetName()] = true
		}
		if opts.Continue = list.GetContinue(); opts.Continue == "" {
			break
		}
	}
	for _, node := range f.nodes {
		if !seen[node.name] {
			f.t.Errorf("no NodeFeature for %s", node.name)
		}
	}
	return len(seen), size
}

// report logs every phase as a row of docs/scale.md's table, and etcd's size.
func (f *fleet) report() {
	t, n := f.t, float64(len(f.nodes))
	t.Logf("| phase | s | at the API server: nodefeatures reads, writes; events writes | requests/s | writes per node | clients: requests (failed), most of one node, peak second | kube-apiserver CPU s (cores) | etcd CPU s | etcd revisions |")
	for _, p := range f.phases {
		secs := p.ended.Sub(p.began).Seconds()
		server, rate, perNode := "not counted (down)", "—", "—"
		if p.server != nil {
			total := 0.0
			for k, v := range p.server {
				if !strings.HasSuffix(k, " refused") {
					total += v
				}
			}
			w := count(p.server, "nodefeatures", true, false) + count(p.server, "events", true, false)
			server = fmt.Sprintf("%d, %d; %d (%s)", count(p.server, "nodefeatures", false, false), count(p.server, "nodefeatures", true, false), count(p.server, "events", true, false), fmtCounts(p.server))
			rate, perNode = fmt.Sprintf("%.2f", total/secs), fmt.Sprintf("%.2f", float64(w)/n)
		}
		clientTotal := 0
		for _, v := range p.client {
			clientTotal += v
		}
		cpu := "—"
		if !math.IsNaN(p.apiCPU) {
			cpu = fmt.Sprintf("%.1f (%.3f)", p.apiCPU, p.apiCPU/secs)
		}
		t.Logf("| %s | %.0f | %s | %s | %s | %d (%d), %d, %d | %s | %.1f | %d |", p.name, secs, server, rate, perNode,
			clientTotal, p.failed, p.nodeMax, p.peak, cpu, p.etcdCPU, p.etcdRevs)
	}
	objs, size := f.objects(fleetBase - 1)
	total, inUse := f.c.etcdSize()
	f.c.etcdCompact()
	cTotal, cInUse := f.c.etcdSize()
	t.Logf("%d NodeFeature objects, %d bytes of JSON (%d per object); etcd db %.1f MiB (%.1f MiB in use), after compaction and defragmentation %.1f MiB (%.1f MiB in use)",
		objs, size, size/max(objs, 1), total/(1<<20), inUse/(1<<20), cTotal/(1<<20), cInUse/(1<<20))
}

func fmtCounts(m map[string]float64) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s %.0f", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

// checkBudget asserts docs/scale.md's write budget on what the API server counted.
func (f *fleet) checkBudget(rollout, steady, churn, repair phase, comes, losses int, sinceRollout time.Duration) {
	t, n := f.t, len(f.nodes)
	// A start: a read, then a create (or an update, the object being there), and at most one
	// more update once the plugins found at start registered again.
	if w, r := count(rollout.server, "nodefeatures", true, false), count(rollout.server, "nodefeatures", false, false); w > 2*n || r > n {
		t.Errorf("rollout: %d writes and %d reads of NodeFeatures by %d nodes, want at most 2 writes and a read per node", w, r, n)
	}
	// Steady state: the refresh only, at most once per node every 9 minutes
	// (kube.NodeFeatureResync less publish.RefreshJitter's tenth) since its last write, which
	// was in the rollout.
	refresh := kube.NodeFeatureResync - kube.NodeFeatureResync/publish.RefreshJitter
	allowed := n * int((steady.ended.Sub(steady.began)+sinceRollout)/refresh)
	if w, r := count(steady.server, "nodefeatures", true, false), count(steady.server, "nodefeatures", false, false); w > allowed || r > allowed {
		t.Errorf("steady state: %d writes and %d reads of NodeFeatures by %d nodes in %s, want at most %d (a refresh per node every 9 minutes)", w, r, n, steady.ended.Sub(steady.began).Round(time.Second), allowed)
	}
	if w := count(steady.server, "events", true, false); w > 0 {
		t.Errorf("steady state: %d Event writes, want none: Events are for transitions", w)
	}
	// Churn: a write per change at most (each change is its own here: they are half a period
	// apart, past the publisher's coalescing), and one per node for the change the phase
	// ended in; one Event write per loss at most: like losses are a count on one Event.
	if w := count(churn.server, "nodefeatures", true, false); w > comes+losses+n {
		t.Errorf("churn: %d writes of NodeFeatures for %d changes on %d nodes, want at most one per change and node", w, comes+losses, n)
	}
	if w := count(churn.server, "events", true, false); w > losses+n {
		t.Errorf("churn: %d Event writes for %d losses on %d nodes, want at most one per loss and node", w, losses, n)
	}
	// Repair: one write taken per node (what changed while the API server was down, all of it
	// at once), and the read of the object it could not update. A write the API server
	// refuses as it starts (busy, or etcd slow) is tried again after the node's backoff: no
	// storm, at most two more tries per node.
	w, refused, r := count(repair.server, "nodefeatures", true, false), count(repair.server, "nodefeatures", true, true), count(repair.server, "nodefeatures", false, false)
	if w-refused > n+n/50+1 || w > 3*n || r > 3*n {
		t.Errorf("repair: %d writes (%d refused) and %d reads of NodeFeatures by %d nodes, want one write taken per node, and at most 3 tries", w, refused, r, n)
	}
}
