package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strconv"
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
// counted).
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
	name := fmt.Sprintf("%s.%x", r.node, now.UnixNano())
	typ := "Normal"
	if e.Warning {
		typ = "Warning"
	}
	note := e.Note
	if len(note) > maxNote {
		note = note[:maxNote-3] + "..."
	}
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "events.k8s.io/v1",
		"kind":       "Event",
		"metadata":   map[string]any{"name": name, "namespace": metav1.NamespaceDefault},
		"eventTime":  now.UTC().Format("2006-01-02T15:04:05.000000Z07:00"),
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
	_, err := r.client.Resource(EventResource).Namespace(metav1.NamespaceDefault).Create(ctx, obj, metav1.CreateOptions{FieldManager: FieldManager})
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		r.stats.Failed++
		r.stats.LastError = explain(err, "create", "Event on Node "+r.node, "create and patch of events.events.k8s.io in namespace default, regarding Node "+r.node).Error()
		r.stats.LastErrorAt = now
		return
	}
	r.stats.Recorded++
	r.series[key] = &series{name: name, count: 1, written: 1, lastObserved: now}
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
			"count": w.count, "lastObservedTime": w.last.UTC().Format("2006-01-02T15:04:05.000000Z07:00"),
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
