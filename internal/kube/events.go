package kube

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/wasmhost/wasmhost/internal/publish"
)

// EventResource is events.k8s.io/v1's Event.
var EventResource = schema.GroupVersionResource{Group: "events.k8s.io", Version: "v1", Resource: "events"}

// How events are aggregated and rate-limited, as client-go's recorders do: an event like one
// recorded less than SeriesWindow ago (same reason, action, type and note) is not a new Event
// but a count on the first one's series, written at most every SeriesFlush; new Events are
// taken from a bucket of EventBurst refilled one per EventRefill, and past it dropped (and
// counted). An Event's name is made of its node and a hash of what it tells, so that a like
// event after the window, or after the daemon restarts, adds to the series of the Event the
// API server still keeps (an hour, by default) rather than telling the same thing twice.
const (
	SeriesWindow = 6 * time.Minute
	SeriesFlush  = 30 * time.Second
	EventBurst   = 25
	EventRefill  = 10 * time.Second
	// ReportingController is the controller the Events name.
	ReportingController = "wasmhost.dev/wasmhost"
	// maxNote is events.k8s.io/v1's limit on a note.
	maxNote = 1024
)

// Recorder records Events on the Node (events.k8s.io/v1, in namespace default, as the
// kubelet's Node events are), so that `kubectl describe node` and `kubectl events` show what
// happened to the node's plugins and handlers. Record never blocks: the API calls are made
// by Run, and what does not fit its queue is dropped and counted.
type Recorder struct {
	client dynamic.Interface
	node   string
	now    func() time.Time
	log    *slog.Logger
	queue  chan publish.Event
	// Flush is how often the series that grew are written: SeriesFlush unless changed
	// before Run (tests shorten it).
	Flush time.Duration

	mu       sync.Mutex
	stats    publish.EventStats
	series   map[string]*series
	tokens   float64
	refilled time.Time
}

type series struct {
	name         string
	count        int
	lastObserved time.Time
	written      int // count last written
}

// NewRecorder returns a recorder of Events on node. A nil log discards.
func NewRecorder(client dynamic.Interface, node string, log *slog.Logger) *Recorder {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Recorder{client: client, node: node, now: time.Now, log: log, queue: make(chan publish.Event, 256),
		series: map[string]*series{}, tokens: EventBurst, Flush: SeriesFlush}
}

// Record queues e.
func (r *Recorder) Record(e publish.Event) {
	select {
	case r.queue <- e:
	default:
		r.mu.Lock()
		r.stats.Dropped++
		r.mu.Unlock()
	}
}

// Stats returns what was recorded, dropped and failed.
func (r *Recorder) Stats() publish.EventStats {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stats
}

// Run writes the queued events until ctx is done.
func (r *Recorder) Run(ctx context.Context) error {
	flush := time.NewTicker(r.Flush)
	defer flush.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case e := <-r.queue:
			r.record(ctx, e)
		case <-flush.C:
			r.flushSeries(ctx)
		}
	}
}

func eventKey(e publish.Event) string {
	return strconv.FormatBool(e.Warning) + "\x00" + e.Reason + "\x00" + e.Action + "\x00" + e.Note
}

func (r *Recorder) record(ctx context.Context, e publish.Event) {
	now := r.now()
	key := eventKey(e)
	r.mu.Lock()
	if s, ok := r.series[key]; ok && now.Sub(s.lastObserved) < SeriesWindow {
		s.count++
		s.lastObserved = now
		r.stats.Recorded++
		r.mu.Unlock()
		return
	}
	// A new Event: take a token.
	r.tokens = min(EventBurst, r.tokens+now.Sub(r.refilled).Seconds()/EventRefill.Seconds())
	r.refilled = now
	if r.tokens < 1 {
		r.stats.Dropped++
		r.mu.Unlock()
		return
	}
	r.tokens--
	for k, s := range r.series {
		if now.Sub(s.lastObserved) >= SeriesWindow && s.written == s.count {
			delete(r.series, k)
		}
	}
	r.mu.Unlock()
	obj := r.event(e, eventName(r.node, key), now)
	events := r.client.Resource(EventResource).Namespace(metav1.NamespaceDefault)
	_, err := events.Create(ctx, obj, metav1.CreateOptions{FieldManager: FieldManager})
	count := 1
	if apierrors.IsAlreadyExists(err) {
		// The same Event from an earlier run of the daemon on this node (a restart within the
		// Events' hour): it grows by one, rather than a second Event telling the same.
		count, err = r.continueSeries(ctx, obj.GetName(), now)
		if err != nil {
			// Not ours to continue (another writer took the name): a new Event of its own.
			obj.SetName(fmt.Sprintf("%s.%x", eventNamePrefix(r.node), now.UnixNano()))
			count = 1
			_, err = events.Create(ctx, obj, metav1.CreateOptions{FieldManager: FieldManager})
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		r.stats.Failed++
		r.stats.LastError = explain(err, "create", "Event on Node "+r.node, "create and patch of events.events.k8s.io in namespace default, regarding Node "+r.node).Error()
		r.stats.LastErrorAt = now
		return
	}
	r.stats.Recorded++
	r.series[key] = &series{name: obj.GetName(), count: count, written: count, lastObserved: now}
}

// event is the events.k8s.io/v1 Event of e, named name, first seen now.
func (r *Recorder) event(e publish.Event, name string, now time.Time) *unstructured.Unstructured {
	typ := "Normal"
	if e.Warning {
		typ = "Warning"
	}
	note := e.Note
	if len(note) > maxNote {
		note = note[:maxNote-3] + "..."
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "events.k8s.io/v1",
		"kind":       "Event",
		"metadata":   map[string]any{"name": name, "namespace": metav1.NamespaceDefault},
		"eventTime":  now.UTC().Format(microTime),
		"regarding": map[string]any{
			"apiVersion": "v1", "kind": "Node", "name": r.node, "uid": r.node,
		},
		"reportingController": ReportingController,
		"reportingInstance":   truncate(ReportingController+"-"+r.node, 128),
		"action":              truncate(e.Action, 128),
		"reason":              truncate(e.Reason, 128),
		"note":                note,
		"type":                typ,
	}}
}

// microTime is the layout of an Event's eventTime and series.lastObservedTime.
const microTime = "2006-01-02T15:04:05.000000Z07:00"

// eventName names the Event of key on node: the same for the same Event, so that a daemon
// started again finds the Event its previous run recorded, and different for different ones
// (a hash of the key: reason, action, type and note).
func eventName(node, key string) string {
	sum := sha256.Sum256([]byte(key))
	return eventNamePrefix(node) + "." + hex.EncodeToString(sum[:8])
}

// eventNamePrefix is node, cut so that an Event name made of it stays within the 253
// characters of a DNS subdomain.
func eventNamePrefix(node string) string {
	node = truncate(node, 253-1-16)
	return strings.TrimRight(node, ".-")
}

// continueSeries adds one to the series of Event name, recorded by an earlier run, and
// returns the count now written. It reads the Event with a patch that changes nothing (the
// Role grants create and patch, not get), then writes its count.
func (r *Recorder) continueSeries(ctx context.Context, name string, now time.Time) (int, error) {
	events := r.client.Resource(EventResource).Namespace(metav1.NamespaceDefault)
	cur, err := events.Patch(ctx, name, types.MergePatchType, []byte("{}"), metav1.PatchOptions{FieldManager: FieldManager})
	if err != nil {
		return 0, err
	}
	if reg, _, _ := unstructured.NestedString(cur.Object, "regarding", "name"); reg != r.node {
		return 0, fmt.Errorf("event %s is about %q, not Node %s", name, reg, r.node)
	}
	count := 1
	if n, ok, _ := unstructured.NestedInt64(cur.Object, "series", "count"); ok && n > 0 {
		count = int(n)
	}
	count++
	patch, _ := json.Marshal(map[string]any{"series": map[string]any{
		"count": count, "lastObservedTime": now.UTC().Format(microTime),
	}})
	if _, err := events.Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: FieldManager}); err != nil {
		return 0, err
	}
	return count, nil
}

// flushSeries writes the counts of the series that grew.
func (r *Recorder) flushSeries(ctx context.Context) {
	type write struct {
		name  string
		count int
		last  time.Time
		s     *series
	}
	var ws []write
	r.mu.Lock()
	for _, s := range r.series {
		if s.count != s.written {
			ws = append(ws, write{s.name, s.count, s.lastObserved, s})
		}
	}
	r.mu.Unlock()
	for _, w := range ws {
		patch, _ := json.Marshal(map[string]any{"series": map[string]any{
			"count": w.count, "lastObservedTime": w.last.UTC().Format(microTime),
		}})
		_, err := r.client.Resource(EventResource).Namespace(metav1.NamespaceDefault).Patch(ctx, w.name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: FieldManager})
		r.mu.Lock()
		if apierrors.IsNotFound(err) {
			w.s.written = w.count // gone (Events expire): the next one starts a new Event
			w.s.lastObserved = time.Time{}
		} else if err != nil {
			r.stats.Failed++
			r.stats.LastError = explain(err, "patch", "Event "+w.name, "patch of events.events.k8s.io in namespace default").Error()
			r.stats.LastErrorAt = r.now()
		} else {
			w.s.written = w.count
		}
		r.mu.Unlock()
	}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
