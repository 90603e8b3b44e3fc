package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/wasmhost/wasmhost/internal/logtest"
	"github.com/wasmhost/wasmhost/internal/publish"
	"github.com/wasmhost/wasmhost/internal/testwait"
)

func TestNodeFeatureRoundTrip(t *testing.T) {
	n := publish.Empty()
	n.Labels["csi.wasmhost.dev/d"] = "true"
	n.Attributes["csi.wasmhost.dev"] = map[string]string{"d_node_id": "n1"}
	n.Instances["csi.wasmhost.dev"] = []map[string]string{{publish.InstanceName: "d", publish.InstanceSocket: "/r/d.sock"}}
	obj := ToNodeFeature("wasmhost", "node-a", n)
	if obj.GetName() != "node-a" || obj.GetNamespace() != "wasmhost" || obj.GetLabels()[NodeNameLabel] != "node-a" {
		t.Errorf("metadata %v", obj.Object["metadata"])
	}
	// Through JSON, as the API server returns it.
	b, err := obj.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	back := obj.DeepCopy()
	if err := back.UnmarshalJSON(b); err != nil {
		t.Fatal(err)
	}
	if got := FromNodeFeature(back); !got.Equal(n) {
		t.Errorf("read back %+v, want %+v", got, n)
	}
}

// eventsServer stands in for the API server's events.k8s.io/v1: it keeps what is created and
// merges the series patches.
type eventsServer struct {
	mu     sync.Mutex
	events map[string]map[string]any
	writes int  // requests that reached it
	down   bool // every request fails as a connection refused does
}

// RoundTrip serves a request in memory (no network: a test may run in a synctest bubble).
func (s *eventsServer) RoundTrip(req *http.Request) (*http.Response, error) {
	s.mu.Lock()
	down := s.down
	s.mu.Unlock()
	if down {
		return nil, syscall.ECONNREFUSED
	}
	w := httptest.NewRecorder()
	s.ServeHTTP(w, req)
	return w.Result(), nil
}

// state returns how many Events the server holds, the series count of the one with reason
// and note (0 when it has none, -1 when there is no such Event), and how many requests
// reached it.
func (s *eventsServer) state(reason, note string) (events, count, writes int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	count = -1
	for _, e := range s.events {
		if e["reason"] == reason && e["note"] == note {
			count = 0
			if series, ok := e["series"].(map[string]any); ok {
				c, _ := series["count"].(float64)
				count = int(c)
			}
		}
	}
	return len(s.events), count, s.writes
}

func (s *eventsServer) setDown(down bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.down = down
}

func (s *eventsServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	const base = "/apis/events.k8s.io/v1/namespaces/default/events"
	body, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.writes++
	var obj map[string]any
	_ = json.Unmarshal(body, &obj)
	switch {
	case r.Method == http.MethodPost && r.URL.Path == base:
		name := obj["metadata"].(map[string]any)["name"].(string)
		if _, ok := s.events[name]; ok {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusConflict)
			_ = json.NewEncoder(w).Encode(map[string]any{"kind": "Status", "apiVersion": "v1", "status": "Failure",
				"reason": "AlreadyExists", "code": http.StatusConflict, "message": "events " + name + " already exists"})
			return
		}
		s.events[name] = obj
	case r.Method == http.MethodPatch && strings.HasPrefix(r.URL.Path, base+"/"):
		name := strings.TrimPrefix(r.URL.Path, base+"/")
		e, ok := s.events[name]
		if !ok {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		if series, ok := obj["series"]; ok {
			e["series"] = series
		}
		obj = e
	default:
		w.WriteHeader(http.StatusMethodNotAllowed)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(obj)
}

// newEventsServer starts an eventsServer for the test and returns it with a client of it,
// which reaches it in memory.
func newEventsServer(t *testing.T) (*eventsServer, dynamic.Interface) {
	srv := &eventsServer{events: map[string]map[string]any{}}
	client, err := Dynamic(&rest.Config{Host: "http://events.test", Transport: srv, QPS: -1})
	if err != nil {
		t.Fatal(err)
	}
	return srv, client
}

// runRecorder runs r until stop is called, or the test ends.
func runRecorder(t *testing.T, r *Recorder) (stop func()) {
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error)
	go func() { done <- r.Run(ctx) }()
	stop = sync.OnceFunc(func() { cancel(); <-done })
	t.Cleanup(stop)
	return stop
}

// TestRecorderAggregatesAndLimits: like Events are one Event whose series counts them; past
// the burst, new Events wait for the bucket, one a minute, none lost.
func TestRecorderAggregatesAndLimits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv, client := newEventsServer(t)
		r := NewRecorder(client, "node-a", nil)
		runRecorder(t, r)

		lost := publish.Event{Warning: true, Reason: publish.ReasonPluginLost, Action: "Watch", Note: "plugin a lost"}
		for range 10 {
			r.Record(lost)
			time.Sleep(time.Second)
		}
		time.Sleep(SeriesFlush)
		synctest.Wait()
		if n, c, _ := srv.state(lost.Reason, lost.Note); n != 1 || c != 10 {
			t.Fatalf("%d Events, series count %d; want one Event with a series count of 10", n, c)
		}
		srv.mu.Lock()
		for _, e := range srv.events {
			reg := e["regarding"].(map[string]any)
			if e["reason"] != publish.ReasonPluginLost || e["type"] != "Warning" || reg["kind"] != "Node" || reg["name"] != "node-a" ||
				e["reportingController"] != ReportingController || e["action"] != "Watch" || e["note"] != "plugin a lost" {
				t.Errorf("event %v", e)
			}
		}
		srv.mu.Unlock()

		// 40 different Events at once: the rest of the burst is written at once, the others
		// wait, queued, and are written one a minute.
		_, _, before := srv.state("", "")
		for i := range 40 {
			r.Record(publish.Event{Reason: publish.ReasonPluginRejected, Action: "Register", Note: string(rune('a' + i))})
		}
		synctest.Wait()
		n, _, writes := srv.state("", "")
		if burst := EventBurst - before; n != 1+burst || writes-before != burst {
			t.Errorf("at once: %d Events in %d writes, want %d", n-1, writes-before, burst)
		}
		if st := r.Stats(); st.Dropped != 0 || st.Pending != 40-(n-1) {
			t.Errorf("stats %+v, want none dropped and %d pending", st, 40-(n-1))
		}
		for i := 1; r.Stats().Pending > 0; i++ {
			time.Sleep(EventRefill)
			synctest.Wait()
			if _, _, w := srv.state("", ""); w-writes != i {
				t.Fatalf("%d writes %d minutes after the burst, want %d", w-writes, i, i)
			}
		}
		if n, _, _ := srv.state("", ""); n != 41 {
			t.Errorf("%d Events in the end, want 41", n)
		}
		_, _, w := srv.state("", "")
		if st := r.Stats(); st.Recorded != 50 || st.Dropped != 0 || st.Failed != 0 || st.Requests != uint64(w) {
			t.Errorf("stats %+v, want 50 recorded in the %d requests the server saw", st, w)
		}
	})
}

// TestRecorderQueuesThroughOutage: what is recorded while the API server is down waits, like
// events as one entry, in a queue of bounded entries; past the bound events are dropped,
// counted and logged once. When the API server is back, the queue is written, like events as
// one Event with a series.
func TestRecorderQueuesThroughOutage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv, client := newEventsServer(t)
		logs := &logtest.Logs{}
		r := NewRecorder(client, "node-a", logs.Logger())
		runRecorder(t, r)
		srv.setDown(true)
		lost := publish.Event{Warning: true, Reason: publish.ReasonPluginLost, Action: "Watch", Note: "plugin a lost"}
		for range 100 {
			r.Record(lost)
		}
		for i := range MaxPendingEvents + 9 {
			r.Record(publish.Event{Reason: publish.ReasonPluginRejected, Action: "Register", Note: fmt.Sprint("plugin ", i)})
		}
		time.Sleep(5 * time.Minute) // retries, backing off
		synctest.Wait()
		st := r.Stats()
		if st.Pending != MaxPendingEvents || st.Dropped != 10 || st.Failed == 0 || st.Recorded != 0 {
			t.Errorf("while down: %+v; want %d pending, 10 dropped, failures counted", st, MaxPendingEvents)
		}
		if got := logs.Matching(slog.LevelWarn, "Events dropped"); len(got) != 1 {
			t.Errorf("drops logged %d times, want once", len(got))
		}
		if _, _, w := srv.state("", ""); w != 0 {
			t.Errorf("%d writes reached a server that is down", w)
		}

		srv.setDown(false)
		time.Sleep(r.MaxBackoff)
		synctest.Wait()
		if n, c, w := srv.state(lost.Reason, lost.Note); c != 100 || n != EventBurst || w != EventBurst {
			t.Errorf("back: %d Events in %d writes, the lost one's series count %d; want the burst of %d, and 100", n, w, c, EventBurst)
		}
		if st := r.Stats(); st.Pending != MaxPendingEvents-EventBurst {
			t.Errorf("back: %d pending, want %d", st.Pending, MaxPendingEvents-EventBurst)
		}
	})
}

// TestRecorderQueueBytes: the queue is bounded in bytes too: long notes fill it before its
// count of entries.
func TestRecorderQueueBytes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv, client := newEventsServer(t)
		r := NewRecorder(client, "node-a", nil)
		srv.setDown(true)
		for i := range MaxPendingEvents {
			r.Record(publish.Event{Reason: publish.ReasonPluginRejected, Action: "Register", Note: fmt.Sprint(i, strings.Repeat("x", 2*maxNote))})
		}
		st := r.Stats()
		if r.pendingBytes > MaxPendingBytes || st.Pending >= MaxPendingEvents || st.Pending < MaxPendingBytes/(maxNote+pendingOverhead+64) ||
			st.Dropped != uint64(MaxPendingEvents-st.Pending) {
			t.Errorf("%+v, %d bytes queued; want the queue full at %d bytes, the rest dropped", st, r.pendingBytes, MaxPendingBytes)
		}
	})
}

// TestRecorderContinuesAfterRestart: a daemon started again on the node, recording an event
// its previous run recorded while the API server keeps that Event, adds to the Event's series
// rather than creating a second Event that tells the same; a different event is an Event of
// its own.
func TestRecorderContinuesAfterRestart(t *testing.T) {
	srv, client := newEventsServer(t)
	rejected := publish.Event{Warning: true, Reason: publish.ReasonPluginRejected, Action: "Register", Note: "plugin a of type t at /r/a.sock refused by its handler: no"}
	// run is one run of the daemon: it records es and stops once they are recorded.
	run := func(es ...publish.Event) publish.EventStats {
		r := NewRecorder(client, "node-a", nil)
		defer runRecorder(t, r)()
		for _, e := range es {
			r.Record(e)
		}
		testwait.Until(t, "the events recorded", func() bool {
			st := r.Stats()
			return st.Recorded+st.Failed+st.Dropped == uint64(len(es))
		})
		return r.Stats()
	}
	count := func() (events int, series any) {
		srv.mu.Lock()
		defer srv.mu.Unlock()
		for _, e := range srv.events {
			if s, ok := e["series"].(map[string]any); ok {
				series = s["count"]
			}
		}
		return len(srv.events), series
	}
	if st := run(rejected); st.Failed != 0 {
		t.Fatalf("first run: %+v", st)
	}
	if n, c := count(); n != 1 || c != nil {
		t.Fatalf("after the first run: %d Events, series count %v; want 1 Event without a series", n, c)
	}
	for i, want := range []float64{2, 3} {
		if st := run(rejected); st.Failed != 0 {
			t.Fatalf("run %d: %+v", i+2, st)
		}
		if n, c := count(); n != 1 || c != want {
			t.Fatalf("after run %d: %d Events, series count %v; want 1 Event with a series count of %v", i+2, n, c, want)
		}
	}
	lost := publish.Event{Warning: true, Reason: publish.ReasonPluginLost, Action: "Watch", Note: "plugin a lost"}
	if st := run(lost); st.Failed != 0 {
		t.Fatalf("a different event: %+v", st)
	}
	if n, _ := count(); n != 2 {
		t.Errorf("a different event: %d Events, want 2", n)
	}
}

// TestRecorderNameTakenByAnother: an Event of the same name about another node (planted by
// another writer) is not continued: the event becomes an Event of its own.
func TestRecorderNameTakenByAnother(t *testing.T) {
	srv, client := newEventsServer(t)
	e := publish.Event{Warning: true, Reason: publish.ReasonPluginLost, Action: "Watch", Note: "plugin a lost"}
	planted := eventName("node-a", eventKey(e))
	srv.events[planted] = map[string]any{"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": map[string]any{"name": planted}, "regarding": map[string]any{"kind": "Node", "name": "node-b"}}
	r := NewRecorder(client, "node-a", nil)
	runRecorder(t, r)
	r.Record(e)
	testwait.Until(t, "the event recorded", func() bool { st := r.Stats(); return st.Recorded+st.Failed > 0 })
	if st := r.Stats(); st.Recorded != 1 || st.Failed != 0 {
		t.Fatalf("stats %+v", st)
	}
	srv.mu.Lock()
	defer srv.mu.Unlock()
	if len(srv.events) != 2 || srv.events[planted]["series"] != nil {
		t.Errorf("events %v: want the planted one untouched and a new one", srv.events)
	}
	for name, ev := range srv.events {
		if name != planted && ev["regarding"].(map[string]any)["name"] != "node-a" {
			t.Errorf("new Event %s: %v", name, ev)
		}
	}
}

// TestNodeFeatureWithinItsBound: however the plugins answer, the NodeFeature's spec as the API
// server receives it (JSON) is within what publish.Build counted (Node.Cost), so an object
// built within publish.maxBytes is within it on the wire too.
func TestNodeFeatureWithinItsBound(t *testing.T) {
	n := publish.Empty()
	// Characters JSON escapes, in every place a plugin or handler can put text.
	hostile := strings.Repeat(`"<&>\`, 300)
	n.Labels["csi.wasmhost.dev/d"] = "true"
	n.Attributes["csi.wasmhost.dev"] = map[string]string{"d_k": hostile, "d_" + hostile[:100]: "v"}
	n.Instances["csi.wasmhost.dev"] = []map[string]string{{publish.InstanceName: hostile[:256], publish.InstanceVersions: hostile[:256], "k": hostile}}
	n.Instances["dra.wasmhost.dev"] = []map[string]string{{publish.InstanceName: "\u2028\u2029"}}
	spec, err := json.Marshal(ToNodeFeature("wasmhost", "node-a", n).Object["spec"])
	if err != nil {
		t.Fatal(err)
	}
	// The spec's own structure (labels, features, attributes, instances, elements) besides.
	if len(spec) > n.Cost()+256 {
		t.Errorf("spec of %d bytes, counted as %d", len(spec), n.Cost())
	}
}

// nodeFeatureServer stands in for the API server's NodeFeatures of one namespace: it keeps
// the objects by name and logs each request ("GET node-a").
type nodeFeatureServer struct {
	mu       sync.Mutex
	objects  map[string]map[string]any
	requests []string
}

func (s *nodeFeatureServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	const base = "/apis/nfd.k8s-sigs.io/v1alpha1/namespaces/wasmhost/nodefeatures"
	body, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	defer s.mu.Unlock()
	name := strings.TrimPrefix(strings.TrimPrefix(r.URL.Path, base), "/")
	var obj map[string]any
	_ = json.Unmarshal(body, &obj)
	if name == "" && obj != nil {
		name = obj["metadata"].(map[string]any)["name"].(string)
	}
	s.requests = append(s.requests, r.Method+" "+name)
	status := func(code int, reason string) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_ = json.NewEncoder(w).Encode(map[string]any{"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": reason, "code": code,
			"details": map[string]any{"name": name, "group": "nfd.k8s-sigs.io", "kind": "nodefeatures"}})
	}
	cur, ok := s.objects[name]
	switch {
	case r.Method == http.MethodGet && !ok, r.Method == http.MethodPut && !ok:
		status(http.StatusNotFound, "NotFound")
		return
	case r.Method == http.MethodPost && ok:
		status(http.StatusConflict, "AlreadyExists")
		return
	case r.Method == http.MethodGet:
		obj = cur
	case r.Method == http.MethodPost || r.Method == http.MethodPut:
		obj["metadata"].(map[string]any)["resourceVersion"] = "1"
		s.objects[name] = obj
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(obj)
}

func (s *nodeFeatureServer) took() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.requests
	s.requests = nil
	return out
}

// TestNodeFeatureCreateAfterLoad: a node whose Load found no object creates it with one
// request, not a read and a create; one made by someone else since is read and updated.
func TestNodeFeatureCreateAfterLoad(t *testing.T) {
	srv := &nodeFeatureServer{objects: map[string]map[string]any{}}
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	client, err := Dynamic(&rest.Config{Host: ts.URL})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, tc := range []struct {
		node, before string
		want         []string
	}{
		{"node-a", "", []string{"GET node-a", "POST node-a"}},
		{"node-b", "made after the load", []string{"GET node-b", "POST node-b", "GET node-b", "PUT node-b"}},
	} {
		s := &NodeFeature{Client: client, Namespace: "wasmhost", Node: tc.node}
		if _, err := s.Load(ctx); err != nil {
			t.Fatal(err)
		}
		if tc.before != "" {
			srv.mu.Lock()
			srv.objects[tc.node] = ToNodeFeature("wasmhost", tc.node, publish.Empty()).Object
			srv.mu.Unlock()
		}
		if err := s.Write(ctx, publish.Empty()); err != nil {
			t.Fatal(err)
		}
		if got := srv.took(); strings.Join(got, ", ") != strings.Join(tc.want, ", ") {
			t.Errorf("%s (%s): requests %v, want %v", tc.node, tc.before, got, tc.want)
		}
	}
}

// TestRecorderEventExpired: an Event gone from the API server (Events expire after an hour)
// while its series grows is created again with the count it had not written.
func TestRecorderEventExpired(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv, client := newEventsServer(t)
		r := NewRecorder(client, "node-a", nil)
		runRecorder(t, r)
		lost := publish.Event{Warning: true, Reason: publish.ReasonPluginLost, Action: "Watch", Note: "plugin a lost"}
		r.Record(lost)
		synctest.Wait()
		if n, c, _ := srv.state(lost.Reason, lost.Note); n != 1 || c != 0 {
			t.Fatalf("%d Events, series %d; want one without a series", n, c)
		}
		srv.mu.Lock()
		clear(srv.events)
		srv.mu.Unlock()
		r.Record(lost)
		r.Record(lost)
		time.Sleep(SeriesFlush)
		synctest.Wait()
		if n, c, _ := srv.state(lost.Reason, lost.Note); n != 1 || c != 2 {
			t.Errorf("after it expired: %d Events, series %d; want one with the 2 it had not written", n, c)
		}
		if st := r.Stats(); st.Recorded != 3 || st.Pending != 0 || st.Failed != 0 {
			t.Errorf("stats %+v, want 3 recorded", st)
		}
	})
}
